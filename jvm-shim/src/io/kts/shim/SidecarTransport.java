package io.kts.shim;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.System.Logger.Level;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * The client side of the sidecar transport: turns the broker's calls into requests to the Python sidecar.
 * {@link SidecarSupervisor} keeps the sidecar running, {@link SidecarConnections} holds the connections to it,
 * and {@link KeptStreams} the streams kept for a segment's next fetch.
 *
 * <p>Frames (every op code and frame kind is in {@link Wire}): request {@code u32 len | u8 op | payload};
 * response {@code u8 status | ...}; status 1/2 carry {@code u16 type | u32 message}. After status OK a fetch's
 * stream is a sequence of frames, each an {@code i32 n} saying what follows: {@code n > 0} an inline piece of n
 * bytes; {@link Wire#PIECE_SHARED} a piece in the shared-memory region ({@code i64 offset | i32 length}), which
 * the shim acknowledges ({@link Wire#PIECE_ACK}), resumes ({@link Wire#STREAM_RESUMED}) or cancels
 * ({@link Wire#OP_CANCEL_STREAM}); {@link Wire#STREAM_NEXT_SEGMENT} the partition's next segment follows;
 * {@link Wire#STREAM_END} the end; {@link Wire#STREAM_ERROR} an error, which ends the stream too.
 *
 * <p>Calls using a sidecar that dies fail at once with RemoteStorageException (the kernel closes their sockets);
 * a watchdog bounds every wait, so nothing can hang the broker's threads.
 */
final class SidecarTransport implements Transport {
    private static final System.Logger LOG = System.getLogger("io.kts.shim.sidecar");
    /** The bean of {@link #ownMetrics}; rsm/metrics/catalog.py declares it (SIDECAR_TYPE) for the docs. */
    static final String METRICS_DOMAIN = "aiven.kafka.server.tieredstorage";
    static final String SIDECAR_BEAN_TYPE = "sidecar-metrics";

    private final Settings settings;
    private final SidecarSupervisor supervisor;
    private final SidecarConnections connections;
    private final KeptStreams kept;
    private final AtomicLong streamsResumed = new AtomicLong();
    private final AtomicLong streamsIntoNextSegment = new AtomicLong();
    private final IndexesAhead ahead = new IndexesAhead();
    private final ScheduledExecutorService watchdog;
    private volatile long lastReplyNanos = System.nanoTime();

    SidecarTransport(Settings settings, Map<String, String> config) {
        this.settings = settings;
        this.supervisor = new SidecarSupervisor(settings, config, this::onDeath);
        this.connections = new SidecarConnections(settings, supervisor);
        this.kept = new KeptStreams(settings, connections);
        this.watchdog = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "kts-sidecar-watchdog");
            t.setDaemon(true);
            return t;
        });
    }

    @Override
    public String name() {
        return "sidecar";
    }

    /** Called from configure(): a failure here fails the broker's startup with a message saying what to fix. */
    void start() {
        try {
            supervisor.start();
        } catch (SidecarProcess.SidecarStartException e) {
            watchdog.shutdownNow();
            throw new IllegalStateException("kafka-tiered-storage: " + e.getMessage());
        }
        watchdog.scheduleWithFixedDelay(() -> {
            connections.expireDeadlines();
            long idle = settings.keptStreamIdleMs * 1_000_000L;
            long now = System.nanoTime();
            kept.cancel(k -> now - k.sinceNanos() > idle);
            ahead.expire(now);
        }, 100, 100, TimeUnit.MILLISECONDS);
    }

    /** The sidecar died: its connections are useless, and closing them lets a GC unmap its shared memory. */
    private void onDeath(SidecarProcess dead) {
        connections.closeIdle();
        kept.close(k -> k.conn().generation == dead.generation);
    }

    void release(Conn c) {
        connections.release(c);
    }

    void discard(Conn c) {
        connections.discard(c);
    }

    void cancel(Conn c) {
        connections.cancelStream(c);
    }

    static RemoteStorageException remoteError(String op, byte status, Wire.FrameSource c) throws IOException {
        String type = c.readStr16();
        String message = c.readStr32();
        String text = Wire.pythonError(type, message);
        if (status == Wire.STATUS_NOT_FOUND) return new RemoteResourceNotFoundException(text);
        if (status == Wire.STATUS_RETRIABLE) return KafkaErrors.retriable(text);
        return new RemoteStorageException(text);
    }

    @Override
    public byte[] copy(byte[] metadata, String logSegment, String offsetIndex, String timeIndex,
                       String transactionIndex, String producerSnapshot, byte[] leaderEpochs)
            throws RemoteStorageException {
        String op = "copyLogSegmentData";
        ByteBuffer req = Wire.request(Wire.OP_COPY, out -> {
            Wire.writeBlob(out, metadata);
            Wire.writeStr(out, logSegment);
            Wire.writeStr(out, offsetIndex);
            Wire.writeStr(out, timeIndex);
            Wire.writeStr(out, transactionIndex == null ? "" : transactionIndex);
            Wire.writeStr(out, producerSnapshot);
            Wire.writeBlob(out, leaderEpochs);
        });
        Conn c;
        try {
            c = exchange(op, req, settings.copyTimeoutMs);
        } catch (RemoteStorageException e) {
            if (!(e.getCause() instanceof IOException)) throw e;  // failed in Python, which removed its objects
            throw cancelCopy(metadata, e);
        }
        try {
            int n = c.readInt();
            byte[] custom = n < 0 ? null : c.readBytes(n);
            release(c);
            return custom;
        } catch (IOException e) {
            discard(c);
            throw cancelCopy(metadata, connections.failure(op, c, e));
        }
    }

    /**
     * The broker is about to hear that a copy failed while the sidecar may still be running it: tells the sidecar
     * to cancel it and waits (bounded by jvm.sidecar.request.timeout.ms) until it confirms that the copy stopped
     * and the segment's objects are gone, so no complete segment outlives a copy the broker thinks failed.
     * Returns {@code failure}, with the outcome of the cancel attached.
     */
    private RemoteStorageException cancelCopy(byte[] metadata, RemoteStorageException failure) {
        long waitMs = settings.requestTimeoutMs;
        int sidecarWaitMs = (int) Math.min(Integer.MAX_VALUE, waitMs / 2);
        String op = "cancel of copyLogSegmentData";
        try {
            release(exchange(op, Wire.request(Wire.OP_CANCEL_COPY, out -> {
                Wire.writeBlob(out, metadata);
                out.writeInt(sidecarWaitMs);
            }), waitMs));
            LOG.log(Level.WARNING, "copyLogSegmentData failed ({0}); the copy was cancelled in the Python sidecar"
                    + " and its objects removed", failure.getMessage());
            failure.addSuppressed(new RemoteStorageException("the copy was cancelled in the sidecar and its"
                    + " objects removed"));
        } catch (RemoteStorageException e) {
            LOG.log(Level.ERROR, "copyLogSegmentData failed ({0}) and cancelling it in the Python sidecar failed"
                    + " too ({1}); `kts gc` lists what it left", failure.getMessage(), e.getMessage());
            failure.addSuppressed(e);
        }
        return failure;
    }

    @Override
    public InputStream fetch(byte[] metadata, String segment, int startPosition, int endPosition)
            throws RemoteStorageException {
        String op = "fetchLogSegment";
        boolean openEnded = endPosition < 0;  // a bounded stream ends early: it can neither be kept nor go on
        if (openEnded) {
            InputStream resumed = resume(op, segment, startPosition);
            if (resumed != null) return resumed;
        }
        ByteBuffer req = Wire.request(Wire.OP_FETCH, out -> {
            Wire.writeBlob(out, metadata);
            out.writeInt(startPosition);
            out.writeInt(endPosition);
        });
        return openStream(op, req, openEnded ? segment : null, startPosition);
    }

    /**
     * The stream kept from this segment's previous fetch, placed at {@code start}, when that lies in its current
     * shared-memory piece; null otherwise. The sidecar learns of it from a notice sent like an acknowledgement,
     * with no reply to wait for: this fetch costs the broker no round trip and the sidecar no work but a count.
     */
    private InputStream resume(String op, String segment, int start) {
        SidecarProcess p = supervisor.current();
        List<SidecarInputStream.Kept> found = kept.take(k -> k.covers(segment, start), 1);
        if (found.isEmpty()) return null;
        SidecarInputStream.Kept k = found.get(0);
        Conn c = k.conn();
        if (p == null || c.generation != p.generation || !c.isOpen()) {
            c.close();
            return null;
        }
        try {
            c.send(ByteBuffer.allocate(5).put(Wire.STREAM_RESUMED).putInt(start).flip());
        } catch (IOException e) {
            c.close();  // the sidecar is gone or the stream broke: a new request says which
            return null;
        }
        connections.adopt(c);
        streamsResumed.incrementAndGet();
        return k.resume(this, op, settings.requestTimeoutMs, start);
    }

    /**
     * A stream of segment N reached N's end, and the sidecar went on into the partition's next segment: reads the
     * next-segment frame, holds the indexes it brings (the broker fetches them before its first read there), and
     * keeps the connection for the broker's first fetch of that segment, from position 0. A broker catching up
     * then crosses a segment border with no round trip to the sidecar, as it reads within a segment.
     */
    void nextSegment(Conn c, long mark) throws IOException {
        NextSegmentFrame next = NextSegmentFrame.read(c);
        for (IndexEntry e : next.indexes) ahead.hold(mark, next.segment, e.type(), e.data(), e.notFound());
        streamsIntoNextSegment.incrementAndGet();
        keep(new SidecarInputStream.Kept(c, next.segment, 0, 0, 0, System.nanoTime(), false));
    }

    long aheadMark() {
        return ahead.mark();
    }

    /** Keeps a stream the broker closed early for the segment's next fetch. */
    void keep(SidecarInputStream.Kept k) {
        kept.keep(k, supervisor.isClosed());
    }

    long indexesHeld() {
        return ahead.size();
    }

    @Override
    public void forget(String segment) {
        ahead.forget(segment);
        kept.cancel(k -> k.segment().equals(segment));
    }

    @Override
    public InputStream fetchIndex(byte[] metadata, String segment, String indexType) throws RemoteStorageException {
        String op = "fetchIndex(" + indexType + ")";
        InputStream held = ahead.take(segment, indexType);
        if (held != null) return held;
        long mark = ahead.mark();
        ByteBuffer req = Wire.request(Wire.OP_FETCH_INDEX, out -> {
            Wire.writeBlob(out, metadata);
            Wire.writeStr(out, indexType);
        });
        Conn c = exchange(op, req, settings.requestTimeoutMs);
        try {
            int count = c.readByte() & 0xFF;
            byte[] asked = null;
            for (int i = 0; i < count; i++) {
                IndexEntry e = IndexEntry.read(c);
                if (i == 0) {
                    asked = e.data();  // the index asked for, if missing, comes as an error status instead
                } else {
                    ahead.hold(mark, segment, e.type(), e.data(), e.notFound());
                }
            }
            if (asked == null) throw new IOException("protocol error: a fetchIndex reply without the index asked for");
            release(c);
            return new ByteArrayInputStream(asked);
        } catch (IOException e) {
            discard(c);
            throw connections.failure(op, c, e);
        }
    }

    /**
     * Sends a request and reads its status. On OK the connection comes back still armed with the timeout, for
     * the caller to read the body; a remote error releases it (the frame was read whole), an I/O error discards it.
     */
    private Conn exchange(String op, ByteBuffer req, long timeoutMs) throws RemoteStorageException {
        Conn c = connections.acquire(op);
        try {
            c.arm(timeoutMs);
            c.send(req);
            byte st = c.readByte();
            lastReplyNanos = System.nanoTime();
            if (st != Wire.STATUS_OK) {
                RemoteStorageException ex = remoteError(op, st, c);
                release(c);
                throw ex;
            }
            return c;
        } catch (IOException e) {
            discard(c);
            throw connections.failure(op, c, e);
        }
    }

    /** {@code segment}: the segment whose stream may be kept for its next fetch, or null. */
    private InputStream openStream(String op, ByteBuffer req, String segment, int position)
            throws RemoteStorageException {
        Conn c = exchange(op, req, settings.requestTimeoutMs);
        c.disarm();
        return new SidecarInputStream(this, c, op, settings.requestTimeoutMs, segment, position);
    }

    IOException streamFailure(String op, Conn c, IOException e) {
        RemoteStorageException r = connections.failure(op, c, e);
        return new IOException(Wire.describe(r), r);
    }

    @Override
    public void delete(byte[] metadata) throws RemoteStorageException {
        simple("deleteLogSegmentData", Wire.request(Wire.OP_DELETE, out -> Wire.writeBlob(out, metadata)));
    }

    @Override
    public byte[] metrics() throws RemoteStorageException {
        String op = "metrics";
        Conn c = exchange(op, Wire.request(Wire.OP_METRICS, out -> { }), settings.requestTimeoutMs);
        try {
            byte[] lines = c.readBytes(c.readInt());
            release(c);
            return lines;
        } catch (IOException e) {
            discard(c);
            throw connections.failure(op, c, e);
        }
    }

    /** A round trip that does no storage work: used by the benchmark and for health checks. */
    void ping() throws RemoteStorageException {
        simple("ping", Wire.request(Wire.OP_PING, out -> { }));
    }

    private void simple(String op, ByteBuffer req) throws RemoteStorageException {
        release(exchange(op, req, settings.requestTimeoutMs));
    }

    /** Connections opened to sidecars so far: early-closed streams should not add to it (tests, diagnostics). */
    long connectionsOpened() {
        return connections.opened();
    }

    /** Broker fetches that went on with a kept stream (no request to the sidecar): tests, diagnostics. */
    long streamsResumed() {
        return streamsResumed.get();
    }

    /** Streams that went on into the partition's next segment (see {@link #nextSegment}): tests, diagnostics. */
    long streamsIntoNextSegment() {
        return streamsIntoNextSegment.get();
    }

    /** Streams kept for a next fetch right now. */
    int streamsKept() {
        return kept.size();
    }

    /**
     * The sidecar's starts and liveness, on a bean of their own ({@code ...:type=sidecar-metrics}): the shim is the
     * one that sees a sidecar die and starts the next, and these values must stay right while it is dead.
     */
    @Override
    public Map<String, Map<String, Double>> ownMetrics() {
        Map<String, Double> values = new java.util.HashMap<>();
        long n = supervisor.starts();
        values.put("starts-total", (double) n);
        values.put("restarts-total", (double) Math.max(0, n - 1));
        values.put("restart-failures-total", (double) supervisor.restartFailures());
        values.put("up", supervisor.up() ? 1.0 : 0.0);
        long last = lastReplyNanos;
        long launched = supervisor.launchedNanos();
        if (launched - last > 0) last = launched;  // a new sidecar starts with a fresh age
        values.put("last-reply-age-seconds", (System.nanoTime() - last) / 1e9);
        String type = ":type=" + SIDECAR_BEAN_TYPE;
        if (settings.metricsMirrorDomain.isEmpty()) return Map.of(METRICS_DOMAIN + type, values);
        return Map.of(METRICS_DOMAIN + type, values, settings.metricsMirrorDomain + type, values);
    }

    /** pid of the running sidecar, or -1: for tests and operators' diagnostics. */
    long sidecarPid() {
        SidecarProcess p = supervisor.current();
        return p == null ? -1 : p.pid;
    }

    @Override
    public void close() {
        if (!supervisor.close()) return;
        SidecarProcess p = supervisor.current();
        connections.closeIdle();
        kept.close(k -> true);
        watchdog.shutdownNow();
        if (p != null) {
            p.stop(settings.shutdownTimeoutMs);
            LOG.log(Level.INFO, "Python sidecar pid {0} stopped ({1})", String.valueOf(p.pid), p.exitDescription());
        }
        connections.closeInUse();
    }
}
