package io.kts.shim;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Drives {@link Conn#drain} over a real Unix socket, with this class writing what a sidecar writes after a cancel:
 * the frames of a stream that went on into the next segment, in pieces that arrive one write at a time. Drain must
 * skip a next-segment frame larger than its 256 KiB read buffer, stop exactly at the end frame (leaving the next
 * reply's bytes unread) and give up on a frame that claims an impossible size. Prints one "ok NAME" line per
 * scenario; any failure throws, so the JVM exits non-zero. Run by tests/jvm/test_shim_drain.py.
 */
public final class ConnDrainCheck {
    private static final int NEXT_REPLY = 0x5EED1E55;

    public static void main(String[] args) throws Exception {
        Path dir = Files.createTempDirectory("kts-drain");
        try {
            bigFrameArrivingInSteps(dir.resolve("a.sock"));
            headerSplitAcrossWrites(dir.resolve("b.sock"));
            impossibleFrameSize(dir.resolve("c.sock"));
        } finally {
            try (java.util.stream.Stream<Path> files = Files.list(dir)) {
                for (Path p : (Iterable<Path>) files::iterator) Files.deleteIfExists(p);
            }
            Files.deleteIfExists(dir);
        }
    }

    /**
     * A piece, a 600 KiB next-segment frame, a piece of the next segment, the end frame, then the next reply's first
     * bytes, arriving 64 KiB at a time (a socket buffer holds less than the frame, so it cannot come at once).
     */
    private static void bigFrameArrivingInSteps(Path socket) throws IOException {
        try (SocketPeer pair = cancelled(socket)) {
            Conn conn = pair.conn;
            int body = 600 * 1024;
            ByteBuffer all = ByteBuffer.allocate(16 + 8 + body + 16 + 4 + 4);
            all.putInt(Wire.PIECE_SHARED).putLong(0).putInt(4096);
            all.putInt(Wire.STREAM_NEXT_SEGMENT).putInt(body).position(all.position() + body);
            all.putInt(Wire.PIECE_SHARED).putLong(8192).putInt(4096);
            all.putInt(0).putInt(NEXT_REPLY).flip();
            int writes = 0;
            while (all.hasRemaining()) {
                ByteBuffer step = (ByteBuffer) all.duplicate().limit(all.position() + Math.min(64 * 1024, all.remaining()));
                all.position(all.position() + step.remaining());
                pair.write(step);
                writes++;
                int wanted = all.hasRemaining() ? Conn.DRAIN_PENDING : Conn.DRAINED;
                expect("after write " + writes + " (" + all.remaining() + " bytes to come)", conn.drain(), wanted);
            }
            if (conn.draining) throw new AssertionError("a drained connection still says it is draining");
            expect("the first bytes after the end frame", conn.readInt(), NEXT_REPLY);
            System.out.println("ok big-frame-in-steps " + writes);
        }
    }

    /** The frame's tag arrives without its length; drain must wait for the length, not misread the frame. */
    private static void headerSplitAcrossWrites(Path socket) throws IOException {
        try (SocketPeer pair = cancelled(socket)) {
            Conn conn = pair.conn;
            pair.write(ByteBuffer.allocate(6).putInt(Wire.STREAM_NEXT_SEGMENT).put((byte) 0).put((byte) 0).flip());
            expect("with half the frame's length", conn.drain(), Conn.DRAIN_PENDING);
            pair.write(ByteBuffer.allocate(2 + 10 + 4 + 4).put((byte) 0).put((byte) 10).put(new byte[10])
                    .putInt(0).putInt(NEXT_REPLY).flip());
            expect("once the end frame is in", conn.drain(), Conn.DRAINED);
            expect("the first bytes after the end frame", conn.readInt(), NEXT_REPLY);
            System.out.println("ok header-split");
        }
    }

    /** A next-segment frame larger than any the sidecar sends is a broken stream: the connection is given up. */
    private static void impossibleFrameSize(Path socket) throws IOException {
        try (SocketPeer pair = cancelled(socket)) {
            pair.write(ByteBuffer.allocate(8).putInt(Wire.STREAM_NEXT_SEGMENT)
                    .putInt(Wire.NEXT_SEGMENT_MAX_BYTES + 1).flip());
            expect("a frame over the limit", pair.conn.drain(), Conn.DRAIN_FAILED);
            if (!pair.conn.draining) throw new AssertionError("a failed drain must leave the connection unusable");
            System.out.println("ok impossible-size");
        }
    }

    private static void expect(String when, int got, int wanted) {
        if (got != wanted) throw new AssertionError(when + ": got " + got + ", wanted " + wanted);
    }

    /** A connection marked as draining a cancel, the cancel frame it sent already read by the far end. */
    private static SocketPeer cancelled(Path socket) throws IOException {
        SocketPeer pair = SocketPeer.open(socket);
        pair.conn.cancelStream();
        pair.readOp();
        return pair;
    }
}
