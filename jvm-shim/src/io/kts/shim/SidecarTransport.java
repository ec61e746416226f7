package io.kts.shim;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.System.Logger.Level;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Talks to a supervised {@code python -m rsm.jvm.sidecar} over a Unix domain socket.
 *
 * <p>Frames (every op code and frame kind is in {@link Wire}): request {@code u32 len | u8 op | payload};
 * response {@code u8 status | ...}; status 1/2 carry {@code u16 type | u32 message}. After status OK a fetch's
 * stream is a sequence of frames, each an {@code i32 n} saying what follows: {@code n > 0} an inline piece of n
 * bytes; {@link Wire#PIECE_SHARED} a piece in the shared-memory region ({@code i64 offset | i32 length}), which
 * the shim acknowledges ({@link Wire#PIECE_ACK}), resumes ({@link Wire#STREAM_RESUMED}) or cancels
 * ({@link Wire#OP_CANCEL_STREAM}); {@link Wire#STREAM_NEXT_SEGMENT} the partition's next segment follows;
 * {@link Wire#STREAM_END} the end; {@link Wire#STREAM_ERROR} an error, which ends the stream too.
 *
 * <p>A dead sidecar is restarted in the background; calls that were using it fail at once with
 * RemoteStorageException (the kernel closes their sockets), and a watchdog bounds every wait so nothing can hang
 * the broker's threads.
 */
final class SidecarTransport implements Transport {
    private static final System.Logger LOG = System.getLogger("io.kts.shim.sidecar");
    /** The bean of {@link #ownMetrics}; rsm/metrics/catalog.py declares it (SIDECAR_TYPE) for the docs. */
    static final String METRICS_DOMAIN = "aiven.kafka.server.tieredstorage";
    static final String SIDECAR_BEAN_TYPE = "sidecar-metrics";

    private final Settings settings;
    private final Map<String, String> config;
    private final Object lock = new Object();
    private final ConcurrentLinkedDeque<Conn> idle = new ConcurrentLinkedDeque<>();
    private final Set<Conn> inUse = ConcurrentHashMap.newKeySet();
    private final AtomicInteger generations = new AtomicInteger();
    private final AtomicLong connectionsOpened = new AtomicLong();
    /** Streams the broker closed inside a shared-memory piece, oldest first (see SidecarInputStream#close). */
    private final ArrayDeque<SidecarInputStream.Kept> kept = new ArrayDeque<>();
    private final AtomicLong streamsResumed = new AtomicLong();
    private final AtomicLong streamsIntoNextSegment = new AtomicLong();
    private final IndexesAhead ahead = new IndexesAhead();
    private final ScheduledExecutorService watchdog;
    private volatile SidecarProcess current;
    private volatile boolean closed;
    private volatile boolean restarting;
    private volatile String lastStartError = "";
    private long lastStartNanos;
    /** Sidecars started (the first and every restart), restart attempts that failed, the last answer's time. */
    private final AtomicLong starts = new AtomicLong();
    private final AtomicLong restartFailures = new AtomicLong();
    private volatile long lastReplyNanos = System.nanoTime();

    SidecarTransport(Settings settings, Map<String, String> config) {
        this.settings = settings;
        this.config = config;
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
            launch();
        } catch (SidecarProcess.SidecarStartException e) {
            watchdog.shutdownNow();
            throw new IllegalStateException("kafka-tiered-storage: " + e.getMessage());
        }
        watchdog.scheduleWithFixedDelay(() -> {
            expireDeadlines();
            long idle = settings.keptStreamIdleMs * 1_000_000L;
            long now = System.nanoTime();
            cancelKept(k -> now - k.sinceNanos() > idle);
            ahead.expire(now);
        }, 100, 100, TimeUnit.MILLISECONDS);
    }

    private void launch() throws SidecarProcess.SidecarStartException {
        synchronized (lock) {
            lastStartNanos = System.nanoTime();
            SidecarProcess p = SidecarProcess.launch(settings, config, generations.incrementAndGet(),
                    starts.get() + 1, restartFailures.get());
            starts.incrementAndGet();
            lastReplyNanos = System.nanoTime();
            current = p;
            p.process.onExit().thenRun(() -> onExit(p));
            lock.notifyAll();
        }
    }

    private void onExit(SidecarProcess p) {
        // A sidecar that was killed (OOM killer, kill -9) could not remove its socket file: without this, every
        // death would leave one behind in the socket directory for the life of the broker.
        p.removeSocket();
        if (closed || p != current) return;
        // Idle connections to the dead sidecar are useless; closing them now also drops their references to its
        // shared-memory mapping, so a GC can unmap it (tmpfs pages stay allocated while anything maps them).
        Conn c;
        while ((c = idle.pollFirst()) != null) c.close();
        for (SidecarInputStream.Kept k : takeKept(k -> k.conn().generation == p.generation, Integer.MAX_VALUE)) {
            k.conn().close();
        }
        LOG.log(Level.WARNING, "Python sidecar pid {0} died ({1}); restarting it", String.valueOf(p.pid), p.exitDescription());
        scheduleRestart(p);
    }

    private void scheduleRestart(SidecarProcess dead) {
        synchronized (lock) {
            if (closed || restarting || dead != current) return;
            restarting = true;
        }
        Thread t = new Thread(() -> restartLoop(dead), "kts-sidecar-restart");
        t.setDaemon(true);
        t.start();
    }

    private void restartLoop(SidecarProcess dead) {
        long backoff = Math.max(1, settings.restartBackoffMs);
        try {
            while (!closed) {
                long sinceLast;
                synchronized (lock) {
                    sinceLast = (System.nanoTime() - lastStartNanos) / 1_000_000L;
                }
                if (sinceLast < backoff) Thread.sleep(backoff - sinceLast);
                if (closed) return;
                try {
                    launch();
                    LOG.log(Level.INFO, "Python sidecar restarted (pid {0} replaces pid {1})", String.valueOf(current.pid), String.valueOf(dead.pid));
                    lastStartError = "";
                    return;
                } catch (SidecarProcess.SidecarStartException e) {
                    restartFailures.incrementAndGet();
                    lastStartError = e.getMessage();
                    LOG.log(Level.ERROR, "Python sidecar restart failed: {0}", e.getMessage());
                    backoff = Math.min(backoff * 2, 30_000L);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            synchronized (lock) {
                restarting = false;
                lock.notifyAll();
            }
        }
    }

    private void expireDeadlines() {
        long now = System.nanoTime();
        for (Conn c : inUse) {
            long d = c.deadlineNanos;
            if (d != 0 && now - d > 0) {
                c.timedOut = true;
                c.close();
            }
        }
    }

    /** A live sidecar, waiting for a restart in progress (bounded by the startup timeout). */
    private SidecarProcess live(String op) throws RemoteStorageException {
        SidecarProcess p = current;
        if (p != null && p.isAlive()) return p;
        if (closed) throw new RemoteStorageException(op + ": the RemoteStorageManager is closed");
        if (p != null) scheduleRestart(p);
        long deadline = System.nanoTime() + settings.startupTimeoutMs * 1_000_000L;
        synchronized (lock) {
            while (!closed) {
                p = current;
                if (p != null && p.isAlive()) return p;
                long left = (deadline - System.nanoTime()) / 1_000_000L;
                if (left <= 0) break;
                try {
                    lock.wait(Math.min(left, 200));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new RemoteStorageException(op + ": interrupted while waiting for the Python sidecar");
                }
            }
        }
        throw new RemoteStorageException(op + ": the Python sidecar is not running"
                + (lastStartError.isEmpty() ? "" : " (last restart failed: " + lastStartError + ")"));
    }

    private Conn acquire(String op) throws RemoteStorageException {
        SidecarProcess p = live(op);
        Conn c;
        List<Conn> answering = null;  // cancelled streams the sidecar is still ending
        while ((c = idle.pollFirst()) != null) {
            if (c.generation == p.generation && c.isOpen()) {
                int drained = c.draining ? c.drain() : Conn.DRAINED;
                if (drained == Conn.DRAINED) break;
                boolean overdue = System.nanoTime() - c.drainingSinceNanos > settings.requestTimeoutMs * 1_000_000L;
                if (drained == Conn.DRAIN_PENDING && !overdue) {  // a sidecar stuck on a load must not keep a slot
                    if (answering == null) answering = new ArrayList<>(2);
                    answering.add(c);
                    continue;
                }
            }
            c.close();
        }
        if (answering != null) {
            for (Conn a : answering) idle.offerLast(a);
        }
        if (c == null) {
            try {
                c = Conn.open(p);
                connectionsOpened.incrementAndGet();
            } catch (IOException e) {
                throw failure(op, null, p, e);
            }
        }
        c.timedOut = false;
        inUse.add(c);
        return c;
    }

    /** Returns a connection whose frames are complete, or whose cancelled stream is draining, for reuse. */
    void release(Conn c) {
        c.disarm();
        inUse.remove(c);
        SidecarProcess p = current;
        if (closed || p == null || c.generation != p.generation || !c.isOpen() || idle.size() >= settings.poolSize) {
            c.close();
        } else {
            idle.offerFirst(c);
        }
    }

    /** Drops a connection that may be mid-frame: closing it is the only safe way to resynchronise. */
    void discard(Conn c) {
        c.disarm();
        inUse.remove(c);
        c.close();
    }

    /** Turns a broken connection into a RemoteStorageException that says what happened to the sidecar. */
    RemoteStorageException failure(String op, Conn c, SidecarProcess p, IOException e) {
        if (c != null && c.timedOut) {
            return new RemoteStorageException(op + ": timed out waiting for the Python sidecar (pid " + p.pid
                    + "); the connection was closed", e);
        }
        if (closed) return new RemoteStorageException(op + ": the RemoteStorageManager was closed", e);
        try {
            // A dying child closes its sockets before it is reaped. waitFor, not onExit().get(): each onExit()
            // is an async stage, and on a 2-core host (common pool parallelism 1) every async stage is a new
            // thread, so a sidecar kill made every failing broker call start one (the soak saw +13 threads).
            p.process.waitFor(300, TimeUnit.MILLISECONDS);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();  // report what we know; the caller's thread keeps its interrupt
        }
        if (!p.isAlive()) {
            scheduleRestart(p);
            return new RemoteStorageException(op + ": the Python sidecar (pid " + p.pid + ") died ("
                    + p.exitDescription() + "); it is being restarted", e);
        }
        return new RemoteStorageException(op + ": connection to the Python sidecar (pid " + p.pid + ") failed: "
                + Wire.describe(e), e);
    }

    /** The sidecar a connection belonged to; a restart only replaces current once the new one is ready. */
    private SidecarProcess processOf(Conn c) {
        return current;
    }

    static RemoteStorageException remoteError(String op, byte status, Wire.FrameSource c) throws IOException {
        String type = c.readStr16();
        String message = c.readStr32();
        String text = Wire.pythonError(type, message);
        if (status == Wire.STATUS_NOT_FOUND) return new RemoteResourceNotFoundException(text);
        if (status == Wire.STATUS_RETRIABLE) return KafkaErrors.retriable(text);
        return new RemoteStorageException(text);
    }

    /**
     * An index entry of a fetchIndex reply or of a next-segment frame: the index's bytes, or, for one the segment
     * does not have, the not-found message to throw when the broker asks for it.
     */
    static final class IndexEntry {
        private final String type;
        private final byte[] data;
        private final String notFound;

        IndexEntry(String type, byte[] data, String notFound) {
            this.type = type;
            this.data = data;
            this.notFound = notFound;
        }

        String type() {
            return type;
        }

        byte[] data() {
            return data;
        }

        String notFound() {
            return notFound;
        }
    }

    static IndexEntry readIndexEntry(Wire.FrameSource in) throws IOException {
        String type = in.readStr16();
        int n = in.readInt();
        if (n >= 0) return new IndexEntry(type, in.readBytes(n), null);
        if (n == -1) {
            return new IndexEntry(type, null, remoteError("fetchIndex(" + type + ")", in.readByte(), in).getMessage());
        }
        throw new IOException("protocol error: index entry " + type + " has length " + n);
    }

    private static ByteBuffer frame(byte op, Writer body) {
        try {
            ByteArrayOutputStream bos = new ByteArrayOutputStream(256);
            DataOutputStream out = new DataOutputStream(bos);
            out.writeInt(0);
            out.writeByte(op);
            body.write(out);
            out.flush();
            ByteBuffer buf = ByteBuffer.wrap(bos.toByteArray());
            buf.putInt(0, buf.capacity() - 4);
            return buf;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @FunctionalInterface
    private interface Writer {
        void write(DataOutputStream out) throws IOException;
    }

    @Override
    public byte[] copy(byte[] metadata, String logSegment, String offsetIndex, String timeIndex,
                       String transactionIndex, String producerSnapshot, byte[] leaderEpochs)
            throws RemoteStorageException {
        String op = "copyLogSegmentData";
        ByteBuffer req = frame(Wire.OP_COPY, out -> {
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
            throw cancelCopy(metadata, failure(op, c, processOf(c), e));
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
            release(exchange(op, frame(Wire.OP_CANCEL_COPY, out -> {
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
        ByteBuffer req = frame(Wire.OP_FETCH, out -> {
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
        SidecarProcess p = current;
        List<SidecarInputStream.Kept> found = takeKept(k -> k.covers(segment, start), 1);
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
        c.timedOut = false;
        inUse.add(c);
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
        int n = c.readInt();
        if (!Wire.isNextSegmentFrameLength(n)) {
            throw new IOException("protocol error: a next-segment frame of " + n + " bytes");
        }
        ByteBuffer b = ByteBuffer.wrap(c.readBytes(n));
        Wire.FrameSource frame = Wire.frameOf(b);
        String next;
        List<IndexEntry> entries = new ArrayList<>(3);
        try {
            next = frame.readStr16();
            int count = frame.readByte() & 0xFF;
            for (int i = 0; i < count; i++) entries.add(readIndexEntry(frame));
        } catch (BufferUnderflowException | NegativeArraySizeException e) {
            throw new IOException("protocol error: a next-segment frame shorter than its contents", e);
        }
        if (b.hasRemaining()) {
            throw new IOException("protocol error: " + b.remaining() + " bytes left in a next-segment frame");
        }
        for (IndexEntry e : entries) ahead.hold(mark, next, e.type(), e.data(), e.notFound());
        streamsIntoNextSegment.incrementAndGet();
        keep(new SidecarInputStream.Kept(c, next, 0, 0, 0, System.nanoTime(), false));
    }

    long aheadMark() {
        return ahead.mark();
    }

    /** Keeps a stream the broker closed early for the segment's next fetch; the oldest go when there are too many. */
    void keep(SidecarInputStream.Kept k) {
        Conn c = k.conn();
        c.disarm();
        inUse.remove(c);
        List<SidecarInputStream.Kept> over = new ArrayList<>(1);
        synchronized (kept) {
            if (closed || settings.keptStreams == 0) {
                over.add(k);
            } else {
                kept.addLast(k);
                while (kept.size() > settings.keptStreams) over.add(kept.pollFirst());
            }
        }
        for (SidecarInputStream.Kept x : over) cancel(x.conn());
    }

    long indexesHeld() {
        return ahead.size();
    }

    @Override
    public void forget(String segment) {
        ahead.forget(segment);
        cancelKept(k -> k.segment().equals(segment));
    }

    private void cancelKept(Predicate<SidecarInputStream.Kept> which) {
        for (SidecarInputStream.Kept k : takeKept(which, Integer.MAX_VALUE)) cancel(k.conn());
    }

    /** Removes up to {@code max} kept streams that match, oldest first, for the caller to resume or stop. */
    private List<SidecarInputStream.Kept> takeKept(Predicate<SidecarInputStream.Kept> which, int max) {
        List<SidecarInputStream.Kept> out = new ArrayList<>(0);
        synchronized (kept) {
            for (var it = kept.iterator(); it.hasNext() && out.size() < max; ) {
                SidecarInputStream.Kept k = it.next();
                if (which.test(k)) {
                    it.remove();
                    out.add(k);
                }
            }
        }
        return out;
    }

    /**
     * Stops the stream on a connection between shared-memory pieces: the connection is pooled while the sidecar
     * ends it, or discarded when the cancel cannot be sent (it is broken anyway).
     */
    void cancel(Conn c) {
        try {
            c.cancelStream();
            release(c);
        } catch (IOException e) {
            discard(c);
        }
    }

    @Override
    public InputStream fetchIndex(byte[] metadata, String segment, String indexType) throws RemoteStorageException {
        String op = "fetchIndex(" + indexType + ")";
        InputStream held = ahead.take(segment, indexType);
        if (held != null) return held;
        long mark = ahead.mark();
        ByteBuffer req = frame(Wire.OP_FETCH_INDEX, out -> {
            Wire.writeBlob(out, metadata);
            Wire.writeStr(out, indexType);
        });
        Conn c = exchange(op, req, settings.requestTimeoutMs);
        try {
            int count = c.readByte() & 0xFF;
            byte[] asked = null;
            for (int i = 0; i < count; i++) {
                IndexEntry e = readIndexEntry(c);
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
            throw failure(op, c, processOf(c), e);
        }
    }

    /**
     * Sends a request and reads its status. On OK the connection comes back still armed with the timeout, for
     * the caller to read the body; a remote error releases it (the frame was read whole), an I/O error discards it.
     */
    private Conn exchange(String op, ByteBuffer req, long timeoutMs) throws RemoteStorageException {
        Conn c = acquire(op);
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
            throw failure(op, c, processOf(c), e);
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
        RemoteStorageException r = failure(op, c, processOf(c), e);
        return new IOException(Wire.describe(r), r);
    }

    @Override
    public void delete(byte[] metadata) throws RemoteStorageException {
        simple("deleteLogSegmentData", frame(Wire.OP_DELETE, out -> Wire.writeBlob(out, metadata)));
    }

    @Override
    public byte[] metrics() throws RemoteStorageException {
        String op = "metrics";
        Conn c = exchange(op, frame(Wire.OP_METRICS, out -> { }), settings.requestTimeoutMs);
        try {
            byte[] lines = c.readBytes(c.readInt());
            release(c);
            return lines;
        } catch (IOException e) {
            discard(c);
            throw failure(op, c, processOf(c), e);
        }
    }

    /** A round trip that does no storage work: used by the benchmark and for health checks. */
    void ping() throws RemoteStorageException {
        simple("ping", frame(Wire.OP_PING, out -> { }));
    }

    private void simple(String op, ByteBuffer req) throws RemoteStorageException {
        release(exchange(op, req, settings.requestTimeoutMs));
    }

    /** Connections opened to sidecars so far: early-closed streams should not add to it (tests, diagnostics). */
    long connectionsOpened() {
        return connectionsOpened.get();
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
        synchronized (kept) {
            return kept.size();
        }
    }

    /**
     * The sidecar's starts and liveness, on a bean of their own ({@code ...:type=sidecar-metrics}): the shim is the
     * one that sees a sidecar die and starts the next, and these values must stay right while it is dead.
     */
    @Override
    public Map<String, Map<String, Double>> ownMetrics() {
        SidecarProcess p = current;
        Map<String, Double> values = new java.util.HashMap<>();
        long n = starts.get();
        values.put("starts-total", (double) n);
        values.put("restarts-total", (double) Math.max(0, n - 1));
        values.put("restart-failures-total", (double) restartFailures.get());
        values.put("up", !closed && p != null && p.isAlive() ? 1.0 : 0.0);
        values.put("last-reply-age-seconds", (System.nanoTime() - lastReplyNanos) / 1e9);
        String type = ":type=" + SIDECAR_BEAN_TYPE;
        if (settings.metricsMirrorDomain.isEmpty()) return Map.of(METRICS_DOMAIN + type, values);
        return Map.of(METRICS_DOMAIN + type, values, settings.metricsMirrorDomain + type, values);
    }

    /** pid of the running sidecar, or -1: for tests and operators' diagnostics. */
    long sidecarPid() {
        SidecarProcess p = current;
        return p == null ? -1 : p.pid;
    }

    @Override
    public void close() {
        SidecarProcess p;
        synchronized (lock) {
            if (closed) return;
            closed = true;
            p = current;
            lock.notifyAll();
        }
        Conn c;
        while ((c = idle.pollFirst()) != null) c.close();
        for (SidecarInputStream.Kept k : takeKept(k -> true, Integer.MAX_VALUE)) k.conn().close();
        watchdog.shutdownNow();
        if (p != null) {
            p.stop(settings.shutdownTimeoutMs);
            LOG.log(Level.INFO, "Python sidecar pid {0} stopped ({1})", String.valueOf(p.pid), p.exitDescription());
        }
        for (Conn x : inUse) x.close();
    }
}
