package io.kts.shim;

import java.io.IOException;
import java.io.InputStream;

/**
 * The lazy stream the broker reads a remote segment from: bytes come straight off the socket, or out of the
 * sidecar's shared-memory region, as the broker asks for them. Reading to the end hands the connection back
 * to the pool; closing early keeps the stream for the segment's next fetch, cancels it, or discards the
 * connection (see {@link #close}).
 */
final class SidecarInputStream extends InputStream {
    private final SidecarTransport transport;
    private final String op;
    private final long timeoutMs;
    /** The segment of an open-ended fetchLogSegment, whose stream may be kept for the next fetch; else null. */
    private final String segment;
    private Conn conn;
    private int chunkLeft;
    private int sharedPos;
    private int sharedLeft;
    /** Segment position of the next byte read. */
    private int position;
    /** The current shared-memory piece: where it starts in the segment and in the region, and its length. */
    private int pieceStart = -1;
    private int pieceRegion;
    private int pieceLength;
    /** A finished shared-memory piece not yet acknowledged: sent before the next frame is read, so a read
     *  that copied its bytes always returns them even if the connection fails right after. */
    private boolean ackPending;
    /** A shared-memory piece was received and is not acknowledged yet (finished or not). */
    private boolean holding;
    /** {@link IndexesAhead#mark} when this stream was opened or resumed: for the indexes of a next-segment frame. */
    private final long aheadMark;
    private boolean eof;
    private boolean closed;

    SidecarInputStream(SidecarTransport transport, Conn conn, String op, long timeoutMs, String segment,
                       int position) {
        this.transport = transport;
        this.conn = conn;
        this.op = op;
        this.timeoutMs = timeoutMs;
        this.segment = segment;
        this.position = position;
        this.aheadMark = transport.aheadMark();
    }

    /**
     * Where a stream the broker closed inside a shared-memory piece stands, kept for the segment's next fetch;
     * or, with {@code holding} false and no piece, a stream that went on into the next segment, before its first
     * piece (see {@link SidecarTransport#nextSegment}).
     */
    static final class Kept {
        private final Conn conn;
        private final String segment;
        private final int pieceStart;
        private final int pieceRegion;
        private final int pieceLength;
        private final long sinceNanos;
        private final boolean holding;

        Kept(Conn conn, String segment, int pieceStart, int pieceRegion, int pieceLength, long sinceNanos,
             boolean holding) {
            this.conn = conn;
            this.segment = segment;
            this.pieceStart = pieceStart;
            this.pieceRegion = pieceRegion;
            this.pieceLength = pieceLength;
            this.sinceNanos = sinceNanos;
            this.holding = holding;
        }

        Conn conn() {
            return conn;
        }

        String segment() {
            return segment;
        }

        long sinceNanos() {
            return sinceNanos;
        }

        /** A fetch from {@code start} can go on with this stream: start lies in the piece, or just after it. */
        boolean covers(String seg, int start) {
            return segment.equals(seg) && pieceStart <= start && start <= pieceStart + pieceLength;
        }

        /** The stream a new fetch from {@code start} reads, placed in the kept piece. */
        SidecarInputStream resume(SidecarTransport transport, String op, long timeoutMs, int start) {
            SidecarInputStream s = new SidecarInputStream(transport, conn, op, timeoutMs, segment, start);
            s.pieceStart = pieceStart;
            s.pieceRegion = pieceRegion;
            s.pieceLength = pieceLength;
            s.sharedPos = pieceRegion + (start - pieceStart);
            s.sharedLeft = pieceStart + pieceLength - start;
            s.holding = holding;
            s.ackPending = holding && s.sharedLeft == 0;  // the piece was never acknowledged: the sidecar holds it
            return s;
        }
    }

    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        int n = read(one, 0, 1);
        return n < 0 ? -1 : one[0] & 0xFF;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
        if (closed) throw new IOException(op + ": stream is closed");
        java.util.Objects.checkFromIndexSize(off, len, b.length);
        if (eof) return -1;
        if (len == 0) return 0;
        Conn c = conn;
        try {
            c.arm(timeoutMs);
            while (chunkLeft == 0 && sharedLeft == 0) {
                if (ackPending) {
                    ackPending = false;
                    holding = false;
                    c.acknowledgePiece();
                }
                int n = c.readInt();
                if (n > 0) {
                    chunkLeft = n;
                } else if (n == Wire.PIECE_SHARED) {
                    sharedPiece(c, c.readLong(), c.readInt());
                    pieceStart = position;
                } else if (n == Wire.STREAM_END) {
                    eof = true;
                    conn = null;
                    transport.release(c);
                    return -1;
                } else if (n == Wire.STREAM_NEXT_SEGMENT && segment != null && c.sharedMemory != null) {
                    transport.nextSegment(c, aheadMark);  // the connection now belongs to a kept stream
                    eof = true;
                    conn = null;
                    return -1;
                } else if (n == Wire.STREAM_ERROR) {
                    byte st = c.readByte();
                    Exception remote = SidecarTransport.remoteError(op, st, c);
                    eof = true;
                    conn = null;
                    transport.release(c);
                    throw new IOException(Wire.describe(remote), remote);
                } else {
                    throw new IOException("protocol error: unexpected stream frame " + n + " from the sidecar");
                }
            }
            if (sharedLeft > 0) {
                int k = Math.min(len, sharedLeft);
                // a duplicate's own position: the absolute bulk get(int, byte[], int, int) is Java 13+
                c.sharedMemory.duplicate().position(sharedPos).get(b, off, k);
                sharedPos += k;
                sharedLeft -= k;
                ackPending = sharedLeft == 0;
                position += k;
                c.disarm();
                return k;
            }
            int k = c.readSome(b, off, Math.min(len, chunkLeft));
            chunkLeft -= k;
            pieceStart = -1;  // inline bytes: no piece to go on with
            position += k;
            c.disarm();
            return k;
        } catch (IOException e) {
            if (conn == null) throw e;  // a remote error, already framed
            conn = null;
            eof = true;
            transport.discard(c);
            throw transport.streamFailure(op, c, e);
        }
    }

    /** A piece the sidecar decoded into the shared region: validated here, copied out by read(). */
    private void sharedPiece(Conn c, long offset, int length) throws IOException {
        java.nio.ByteBuffer shm = c.sharedMemory;
        if (shm == null) throw new IOException("protocol error: shared-memory piece on a connection without the region");
        if (offset < 0 || length < 0 || offset + length > shm.capacity()) {
            throw new IOException("protocol error: shared-memory piece [" + offset + ", +" + length
                    + ") outside the " + shm.capacity() + "-byte region");
        }
        sharedPos = (int) offset;
        sharedLeft = length;
        ackPending = length == 0;
        holding = true;
        pieceRegion = (int) offset;
        pieceLength = length;
    }

    @Override
    public int available() {
        Conn c = conn;
        if (c == null || closed) return 0;
        return sharedLeft > 0 ? sharedLeft : Math.min(chunkLeft, c.buffered());
    }

    /**
     * The broker closes after about 1 MiB, mid-stream. Inside (or at the end of) a shared-memory piece of an
     * open-ended segment fetch, the stream is kept as it is for the segment's next fetch, which usually starts
     * in the same piece (the transport cancels it later if not). Otherwise, between shared-memory pieces, it is
     * cancelled and the connection pooled (its remaining frames are tiny and read before its next use); in the
     * middle of an inline piece, or without the region, closing the connection is the only way to stop the
     * sidecar.
     */
    @Override
    public void close() {
        if (closed) return;
        closed = true;
        Conn c = conn;
        conn = null;
        if (c == null) return;
        if (segment != null && c.sharedMemory != null && chunkLeft == 0 && pieceStart >= 0) {
            transport.keep(new Kept(c, segment, pieceStart, pieceRegion, pieceLength, System.nanoTime(), holding));
            return;
        }
        if (c.sharedMemory != null && chunkLeft == 0) {
            transport.cancel(c);
        } else {
            transport.discard(c);
        }
    }
}
