package io.kts.shim;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * The sidecar transport's parts alone, with no sidecar: the next-segment frame parser, the kept streams over a
 * real Unix socket whose far end this class plays, and the connection pool of a supervisor that is not running.
 * Prints one "ok NAME" line per scenario; any failure throws, so the JVM exits non-zero. Run by
 * tests/jvm/test_shim_parts.py.
 */
public final class SidecarPartsCheck {
    public static void main(String[] args) throws Exception {
        nextSegmentFrames();
        Path dir = Files.createTempDirectory("kts-parts");
        try {
            keptStreams(dir);
        } finally {
            try (java.util.stream.Stream<Path> files = Files.list(dir)) {
                for (Path p : (Iterable<Path>) files::iterator) Files.deleteIfExists(p);
            }
            Files.deleteIfExists(dir);
        }
        poolWithoutSidecar();
    }

    private static void nextSegmentFrames() throws IOException {
        byte[] name = "orders-0/00000000000000000100-abc".getBytes(StandardCharsets.UTF_8);
        ByteBuffer body = ByteBuffer.allocate(2 + name.length + 1 + 2 + 6 + 4 + 3);
        body.putShort((short) name.length).put(name).put((byte) 1);
        body.putShort((short) 6).put("OFFSET".getBytes(StandardCharsets.US_ASCII)).putInt(3).put(new byte[] {1, 2, 3});
        NextSegmentFrame f = NextSegmentFrame.read(source(body.array(), body.capacity()));
        expect("segment", f.segment, "orders-0/00000000000000000100-abc");
        expect("index type", f.indexes.get(0).type(), "OFFSET");
        expect("index bytes", f.indexes.get(0).data().length, 3);
        expectFails("a frame shorter than its contents", () -> NextSegmentFrame.read(source(body.array(), body.capacity() - 2)),
                "shorter than its contents");
        byte[] longer = java.util.Arrays.copyOf(body.array(), body.capacity() + 2);
        expectFails("bytes after the contents", () -> NextSegmentFrame.read(source(longer, longer.length)), "2 bytes left");
        expectFails("an impossible length", () -> NextSegmentFrame.read(source(new byte[0], -7)), "a next-segment frame of -7");
        System.out.println("ok next-segment-frames");
    }

    /** A frame source holding {@code length} then {@code bytes}: what a connection reads. */
    private static Wire.FrameSource source(byte[] bytes, int length) {
        ByteBuffer b = ByteBuffer.allocate(4 + Math.max(0, Math.min(length, bytes.length)));
        b.putInt(length).put(bytes, 0, Math.max(0, Math.min(length, bytes.length))).flip();
        return Wire.frameOf(b);
    }

    private static void keptStreams(Path dir) throws IOException {
        Settings settings = new Settings(Map.of("jvm.sidecar.kept.streams", "2"));
        SidecarSupervisor supervisor = new SidecarSupervisor(settings, Map.of(), p -> { });
        SidecarConnections connections = new SidecarConnections(settings, supervisor);
        KeptStreams kept = new KeptStreams(settings, connections);
        List<SocketPeer> peers = new ArrayList<>();
        try {
            for (String segment : new String[] {"a", "b", "c"}) {
                SocketPeer peer = SocketPeer.open(dir.resolve(segment + ".sock"));
                peers.add(peer);
                kept.keep(new SidecarInputStream.Kept(peer.conn, segment, 0, 0, 0, System.nanoTime(), false), false);
            }
            expect("kept streams", kept.size(), 2);
            expect("the oldest was cancelled", peers.get(0).readOp(), (int) Wire.OP_CANCEL_STREAM);
            expect("and its connection closed (no live sidecar to pool it for)", peers.get(0).conn.isOpen(), false);
            List<SidecarInputStream.Kept> b = kept.take(k -> k.segment().equals("b"), 1);
            expect("taken by segment", b.size() == 1 && b.get(0).conn() == peers.get(1).conn, true);
            expect("left after the take", kept.size(), 1);
            kept.close(k -> true);
            expect("closed without a cancel", peers.get(2).conn.isOpen(), false);
            SocketPeer late = SocketPeer.open(dir.resolve("d.sock"));
            peers.add(late);
            kept.keep(new SidecarInputStream.Kept(late.conn, "d", 0, 0, 0, System.nanoTime(), false), true);
            expect("kept while the transport closes", kept.size(), 0);
            expect("cancelled at once", late.readOp(), (int) Wire.OP_CANCEL_STREAM);
        } finally {
            for (SocketPeer p : peers) p.close();
        }
        System.out.println("ok kept-streams");
    }

    private static void poolWithoutSidecar() {
        Settings settings = new Settings(Map.of("jvm.sidecar.startup.timeout.ms", "200"));
        SidecarSupervisor supervisor = new SidecarSupervisor(settings, Map.of(), p -> { });
        SidecarConnections connections = new SidecarConnections(settings, supervisor);
        expectFails("no sidecar yet", () -> connections.acquire("fetchLogSegment"), "the Python sidecar is not running");
        supervisor.close();
        expectFails("closed", () -> connections.acquire("fetchLogSegment"), "the RemoteStorageManager is closed");
        expect("nothing opened", connections.opened(), 0L);
        System.out.println("ok pool-without-sidecar");
    }

    private interface Call {
        void run() throws Exception;
    }

    private static void expectFails(String what, Call call, String message) {
        try {
            call.run();
        } catch (IOException | RemoteStorageException e) {
            if (!String.valueOf(e.getMessage()).contains(message)) {
                throw new AssertionError(what + ": expected \"" + message + "\", got \"" + e.getMessage() + "\"");
            }
            return;
        } catch (Exception e) {
            throw new AssertionError(what + ": unexpected " + e, e);
        }
        throw new AssertionError(what + ": no error");
    }

    private static void expect(String what, Object got, Object want) {
        if (!want.equals(got)) throw new AssertionError(what + ": got " + got + ", want " + want);
    }
}
