package io.kts.shim;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;

/**
 * One connection to the sidecar (a Unix socket, or loopback TCP before Java 16: {@link SidecarSockets}) with its own read buffer. Blocking channels have no read timeout,
 * so a watchdog closes the channel when {@link #deadlineNanos} passes; the blocked read then fails.
 */
final class Conn implements Wire.FrameSource {
    private static final int BUFFER_SIZE = 256 * 1024;

    final SocketChannel channel;
    final int generation;
    /** The sidecar's region when this connection told it so (see Wire.OP_SHARED_MEMORY_MAPPED), else null. */
    final ByteBuffer sharedMemory;
    /*
     * Heap buffers, not direct ones: a connection lives only as long as one stream when the broker closes it early,
     * and a direct buffer's native memory is returned only when a GC happens to collect its owner. Under a soak
     * every early close left 256 KiB of native memory waiting for an old-generation collection (+60 MiB a minute,
     * bounded only by MaxDirectMemorySize, i.e. the heap size). The JDK reads a socket into a heap buffer through
     * its per-thread cached direct buffer, so the native memory stays bounded by the broker's threads; fetched
     * bytes mostly arrive through the shared-memory region anyway, and only frames and inline pieces pass here.
     */
    private final ByteBuffer in = ByteBuffer.allocate(BUFFER_SIZE);
    private final ByteBuffer ack = ByteBuffer.allocate(1);
    volatile long deadlineNanos;
    volatile boolean timedOut;
    /** A stream on this connection was cancelled: its remaining frames must be read before the next request. */
    boolean draining;
    /** Bytes of a next-segment frame that draining has still to skip (it may be bigger than the buffer). */
    private int skipping;
    long drainingSinceNanos;

    Conn(SocketChannel channel, int generation, ByteBuffer sharedMemory) {
        this.channel = channel;
        this.generation = generation;
        this.sharedMemory = sharedMemory;
        in.limit(0);
    }

    static Conn open(SidecarProcess p) throws IOException {
        SocketChannel ch = p.tcpPort > 0 ? SidecarSockets.connectTcp(p.tcpPort, p.token)
                : SidecarSockets.connectUnix(p.socket);
        try {
            Conn c = new Conn(ch, p.generation, p.sharedMemory);
            if (c.sharedMemory != null) {
                c.send(ByteBuffer.allocate(5).putInt(1).put(Wire.OP_SHARED_MEMORY_MAPPED).flip());
            }
            return c;
        } catch (IOException e) {
            ch.close();
            throw e;
        }
    }

    /** Stops the stream in progress (see Wire.OP_CANCEL_STREAM); the connection is then {@link #draining}. */
    void cancelStream() throws IOException {
        send(ByteBuffer.allocate(5).putInt(1).put(Wire.OP_CANCEL_STREAM).flip());
        draining = true;
        drainingSinceNanos = System.nanoTime();
    }

    /** Result of {@link #drain}. */
    static final int DRAINED = 1, DRAIN_PENDING = 0, DRAIN_FAILED = -1;

    /**
     * Reads what a cancelled stream still sent, without blocking: {@link #DRAINED} once its end (or error)
     * frame is in, {@link #DRAIN_PENDING} when the sidecar has not answered the cancel yet (it may be finishing
     * a chunk load), {@link #DRAIN_FAILED} when the connection is broken or the stream went on with inline bytes
     * (not worth reading through: the connection is closed instead).
     */
    int drain() {
        try {
            channel.configureBlocking(false);
            try {
                while (true) {
                    int r = skipFrames();
                    if (r != DRAIN_PENDING) {
                        draining = r != DRAINED;
                        return r;
                    }
                    in.compact();
                    int n;
                    try {
                        n = channel.read(in);
                    } finally {
                        in.flip();
                    }
                    if (n < 0) return DRAIN_FAILED;
                    if (n == 0) return DRAIN_PENDING;
                }
            } finally {
                channel.configureBlocking(true);
            }
        } catch (IOException e) {
            return DRAIN_FAILED;
        }
    }

    /** Consumes whole stream frames from the buffer up to the stream's end; a partial frame is left in place. */
    private int skipFrames() {
        while (true) {
            if (skipping > 0) {
                int k = Math.min(skipping, in.remaining());
                in.position(in.position() + k);
                skipping -= k;
                if (skipping > 0) return DRAIN_PENDING;
            }
            int start = in.position();
            if (in.remaining() < 4) return DRAIN_PENDING;
            int n = in.getInt();
            if (n == Wire.STREAM_NEXT_SEGMENT) {  // the stream went on into the next segment: skip the frame
                if (incomplete(4, start)) return DRAIN_PENDING;
                skipping = in.getInt();
                if (!Wire.isNextSegmentFrameLength(skipping)) return DRAIN_FAILED;
            } else if (n == Wire.PIECE_SHARED) {
                if (incomplete(12, start)) return DRAIN_PENDING;
                in.position(in.position() + 12);
            } else if (n == Wire.STREAM_END) {
                return DRAINED;
            } else if (n == Wire.STREAM_ERROR) {  // an error ended the stream: u8 status, u16 + type, i32 + message
                if (incomplete(3, start)) return DRAIN_PENDING;
                in.get();
                int typeLength = in.getShort() & 0xFFFF;
                if (incomplete(typeLength + 4, start)) return DRAIN_PENDING;
                in.position(in.position() + typeLength);
                int messageLength = Math.max(0, in.getInt());
                if (11 + typeLength + messageLength > in.capacity()) return DRAIN_FAILED;
                if (incomplete(messageLength, start)) return DRAIN_PENDING;
                in.position(in.position() + messageLength);
                return DRAINED;
            } else {
                return DRAIN_FAILED;
            }
        }
    }

    /** Fewer than {@code n} bytes left of a frame that began at {@code start}: rewinds to it, to wait for more. */
    private boolean incomplete(int n, int start) {
        if (in.remaining() >= n) return false;
        in.position(start);
        return true;
    }

    /** Tells the sidecar a shared-memory piece has been copied out, so it may reuse that buffer. */
    void acknowledgePiece() throws IOException {
        ack.clear();
        ack.put(Wire.PIECE_ACK).flip();
        send(ack);
    }

    void arm(long timeoutMs) {
        deadlineNanos = timeoutMs <= 0 ? 0 : System.nanoTime() + timeoutMs * 1_000_000L;
        if (deadlineNanos == 0 && timeoutMs > 0) deadlineNanos = 1;
    }

    void disarm() {
        deadlineNanos = 0;
    }

    boolean isOpen() {
        return channel.isOpen();
    }

    void close() {
        try {
            channel.close();
        } catch (IOException e) {
            // nothing to do
        }
    }

    void send(ByteBuffer request) throws IOException {
        while (request.hasRemaining()) channel.write(request);
    }

    /** Bytes already received and not yet consumed. */
    int buffered() {
        return in.remaining();
    }

    private void need(int n) throws IOException {
        if (in.remaining() >= n) return;
        in.compact();
        try {
            while (in.position() < n) {
                if (channel.read(in) < 0) throw new EOFException("the Python sidecar closed the connection");
            }
        } finally {
            in.flip();
        }
    }

    @Override
    public byte readByte() throws IOException {
        need(1);
        return in.get();
    }

    @Override
    public int readInt() throws IOException {
        need(4);
        return in.getInt();
    }

    long readLong() throws IOException {
        need(8);
        return in.getLong();
    }

    @Override
    public byte[] readBytes(int n) throws IOException {
        byte[] out = new byte[n];
        int off = 0;
        while (off < n) off += readSome(out, off, n - off);
        return out;
    }

    @Override
    public String readStr16() throws IOException {
        need(2);
        int n = in.getShort() & 0xFFFF;
        return new String(readBytes(n), StandardCharsets.UTF_8);
    }

    @Override
    public String readStr32() throws IOException {
        int n = readInt();
        return n < 0 ? null : new String(readBytes(n), StandardCharsets.UTF_8);
    }

    /** Reads 1..len bytes, filling the buffer from the socket only when it is empty. */
    int readSome(byte[] dst, int off, int len) throws IOException {
        if (!in.hasRemaining()) need(1);
        int k = Math.min(len, in.remaining());
        in.get(dst, off, k);
        return k;
    }
}
