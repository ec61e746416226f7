package io.kts.shim.harness;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

/**
 * The soak driver: {@code threads} broker threads run a random mix of copy, fetch (at random byte positions, to
 * EOF, early-closed or ranged), fetchIndex and delete against one shim for {@code seconds}, while the Python test
 * SIGKILLs the sidecar now and then and a proxy breaks S3 requests.
 *
 * <p>What counts: a call may fail only with the KIP-405 family (RemoteStorageException, or an IOException from a
 * stream whose cause is one); every byte a stream delivers is compared with the source file at the same
 * position (also the bytes delivered before a failure); every call is watched, and one running longer than
 * {@code hangLimitMs} is reported as a hang with its stack. A segment id is never fetched while being deleted
 * (as in a broker, where retention only deletes what readers no longer see).
 *
 * <p>Protocol with the test, one line each on stdout: {@code STARTED <pid>} once the first segments are copied;
 * {@code COPY-FAILED <segment uuid>} for a copy the plugin itself refused (the request reached Python and came back
 * as an error, so no manifest may be visible); {@code DRAINING} when the timed phase ends (the test stops
 * killing); {@code SAMPLE ...} every second (the JVM's own direct and mapped buffer pools and thread count);
 * {@code HANG ...} for a watched call over the limit; finally {@code RESULT {json}}. On stdin the test writes
 * {@code KILLED <pid>} after each kill: the driver measures how long until the first call started after the
 * kill succeeds (the shim must recover by itself).
 *
 * <p>{@code java -cp ... Soak <shimClass> <specFile> <threads> <seconds> <hangLimitMs> -- key=value...}
 */
public final class Soak {
    static final String[] OPS = {"copy", "fetch", "fetch_index", "delete"};
    static final int MIN_LIVE = 3;  // deletes leave at least this many copied segments to read
    static final int MAX_LIVE = 12;  // copies stop above this many (the store stays bounded)
    static final int MAX_PARTIAL = 512 * 1024;  // an early-closed fetch reads at most this much

    private Soak() {
    }

    /** A copied segment id and the source it must read back as. */
    static final class Live {
        final Harness.Seg src;
        final RemoteLogSegmentMetadata meta;
        final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
        boolean deleted;

        Live(Harness.Seg src, RemoteLogSegmentMetadata meta) {
            this.src = src;
            this.meta = meta;
        }
    }

    /** Everything the run counts; every field is thread-safe. */
    static final class Stats {
        final Map<String, AtomicLong> ok = new ConcurrentHashMap<>();
        final Map<String, AtomicLong> failed = new ConcurrentHashMap<>();  // "op:ExceptionType"
        final Map<String, List<Long>> latencyNanos = new ConcurrentHashMap<>();
        final AtomicLong bytesVerified = new AtomicLong();
        final AtomicLong wrongBytes = new AtomicLong();
        final AtomicLong shortReads = new AtomicLong();
        final AtomicLong unexpected = new AtomicLong();
        final AtomicLong hangs = new AtomicLong();
        final AtomicLong resurrected = new AtomicLong();
        final AtomicLong definiteCopyFailures = new AtomicLong();
        final AtomicLong uncertainCopyFailures = new AtomicLong();
        final ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
        /** The first failures not caused by a kill: what the storage faults did past the retries. */
        final ConcurrentLinkedQueue<String> storageFailures = new ConcurrentLinkedQueue<>();

        Stats() {
            for (String op : OPS) {
                ok.put(op, new AtomicLong());
                latencyNanos.put(op, Collections.synchronizedList(new ArrayList<>()));
            }
        }

        void problem(String what) {
            if (problems.size() < 20) problems.add(what);
        }
    }

    static final class State {
        final List<Harness.Seg> sources;
        final Map<Harness.Seg, byte[][]> indexes = new HashMap<>();  // OFFSET, TIMESTAMP, SNAPSHOT, TXN|null
        final List<Live> live = new ArrayList<>();  // guarded by itself
        final ConcurrentLinkedQueue<RemoteLogSegmentMetadata> toDelete = new ConcurrentLinkedQueue<>();
        final RemoteStorageManager rsm;
        final Stats st = new Stats();
        /** Per worker: System.nanoTime() when its current call began, 0 when idle. */
        final AtomicLongArray callStart;
        final String[] callName;
        final Thread[] workers;
        final List<long[]> kills = Collections.synchronizedList(new ArrayList<>());  // {killNanos, recoveredNanos}

        State(List<Harness.Seg> sources, RemoteStorageManager rsm, int threads) throws IOException {
            this.sources = sources;
            this.rsm = rsm;
            this.callStart = new AtomicLongArray(threads);
            this.callName = new String[threads];
            this.workers = new Thread[threads];
            for (Harness.Seg s : sources) {
                indexes.put(s, new byte[][] {Files.readAllBytes(s.offsetIdx), Files.readAllBytes(s.timeIdx),
                        Files.readAllBytes(s.snapshot), s.txnIdx == null ? null : Files.readAllBytes(s.txnIdx)});
            }
        }
    }

    // ------------------------------------------------------------------------------------------------------------

    static RemoteLogSegmentMetadata freshId(Harness.Seg src) {
        RemoteLogSegmentMetadata m = src.meta;
        RemoteLogSegmentId id = new RemoteLogSegmentId(m.topicIdPartition(), org.apache.kafka.common.Uuid.randomUuid());
        return new RemoteLogSegmentMetadata(id, m.startOffset(), m.endOffset(), m.maxTimestampMs(), 0,
                System.currentTimeMillis(), m.segmentSizeInBytes(), m.segmentLeaderEpochs());
    }

    static RemoteLogSegmentMetadata finished(RemoteLogSegmentMetadata started, Optional<CustomMetadata> custom) {
        return new RemoteLogSegmentMetadata(started.remoteLogSegmentId(), started.startOffset(), started.endOffset(),
                started.maxTimestampMs(), 0, System.currentTimeMillis(), started.segmentSizeInBytes(), custom,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, started.segmentLeaderEpochs());
    }

    /** Is this a failure the KIP-405 contract allows (and so a broker handles)? */
    static boolean documented(Throwable t) {
        if (t instanceof RemoteStorageException) return true;
        return t instanceof IOException && t.getCause() instanceof RemoteStorageException;
    }

    /** The exception type, and whether the sidecar was gone (a kill) or the storage failed (faults past retries). */
    static String typeOf(Throwable t) {
        String type = t.getClass().getSimpleName();
        if (t instanceof IOException && t.getCause() instanceof RemoteStorageException) {
            type = "IOException(" + t.getCause().getClass().getSimpleName() + ")";
        }
        if (!documented(t)) return type;
        String text = String.valueOf(t.getMessage()) + " " + (t.getCause() == null ? "" : t.getCause().getMessage());
        if (text.contains("timed out waiting for the Python sidecar")) return type + "[timeout]";
        boolean sidecar = text.contains("Python sidecar") || text.contains("closed the connection");
        return type + (sidecar ? "[sidecar]" : "[storage]");
    }

    /** Reads a stream to its end or to {@code limit} bytes, comparing every byte delivered with {@code want}. */
    static long readAndVerify(InputStream in, byte[] want, int pos, int limit, Stats st, String what)
            throws IOException {
        byte[] buf = new byte[64 * 1024];
        long got = 0;
        while (got < limit) {
            int n = in.read(buf, 0, (int) Math.min(buf.length, limit - got));
            if (n < 0) break;
            int at = pos + (int) got;
            long wrong = 0;
            for (int i = 0; i < n; i++) {
                if (at + i >= want.length || buf[i] != want[at + i]) wrong++;
            }
            if (wrong > 0) {
                st.wrongBytes.addAndGet(wrong);
                st.problem(what + ": " + wrong + " wrong bytes in [" + at + ", " + (at + n) + ")");
            }
            st.bytesVerified.addAndGet(n - wrong);
            got += n;
        }
        return got;
    }

    // ------------------------------------------------------------------------------------------------------------
    // The operations; each returns normally on success and throws what the plugin threw
    // ------------------------------------------------------------------------------------------------------------

    static Live pickLive(State s, Random rnd) {
        synchronized (s.live) {
            if (s.live.isEmpty()) return null;
            return s.live.get(rnd.nextInt(s.live.size()));
        }
    }

    static void copy(State s, Random rnd) throws Exception {
        Harness.Seg src = s.sources.get(rnd.nextInt(s.sources.size()));
        RemoteLogSegmentMetadata started = freshId(src);
        Optional<CustomMetadata> custom;
        try {
            custom = s.rsm.copyLogSegmentData(started, src.data);
        } catch (RemoteStorageException e) {
            if (e.getCause() instanceof IOException) {
                // the connection broke (a kill): Python may or may not have finished; like the broker, delete the
                // failed segment id later
                s.st.uncertainCopyFailures.incrementAndGet();
                s.toDelete.add(started);
            } else {
                s.st.definiteCopyFailures.incrementAndGet();
                synchronized (System.out) {
                    System.out.println("COPY-FAILED " + started.remoteLogSegmentId().id() + " "
                            + e.getMessage().replace('\n', ' '));
                    System.out.flush();
                }
            }
            throw e;
        }
        if (custom == null) throw new AssertionError("copyLogSegmentData returned null instead of an Optional");
        synchronized (s.live) {
            s.live.add(new Live(src, finished(started, custom)));
        }
    }

    static void fetch(State s, Random rnd, Live l) throws Exception {
        byte[] log = l.src.log;
        int size = log.length;
        int kind = rnd.nextInt(3);
        int start = rnd.nextInt(size);
        String what = "segment " + l.meta.remoteLogSegmentId().id() + " from " + start;
        if (kind == 0) {  // broker style: read a little from a random position, close early
            int limit = 1 + rnd.nextInt(Math.min(MAX_PARTIAL, size - start));
            try (InputStream in = s.rsm.fetchLogSegment(l.meta, start)) {
                long got = readAndVerify(in, log, start, limit, s.st, what);
                if (got != limit) shortRead(s, what, got, limit);
            }
        } else if (kind == 1) {  // to EOF
            try (InputStream in = s.rsm.fetchLogSegment(l.meta, start)) {
                long got = readAndVerify(in, log, start, Integer.MAX_VALUE, s.st, what);
                if (got != size - start) shortRead(s, what, got, size - start);
            }
        } else {  // a closed range [start, end]
            int end = Math.min(size - 1, start + rnd.nextInt(MAX_PARTIAL));
            try (InputStream in = s.rsm.fetchLogSegment(l.meta, start, end)) {
                long got = readAndVerify(in, log, start, Integer.MAX_VALUE, s.st, what + " to " + end);
                if (got != end - start + 1) shortRead(s, what + " to " + end, got, end - start + 1);
            }
        }
    }

    static void shortRead(State s, String what, long got, long want) {
        s.st.shortReads.incrementAndGet();
        s.st.problem(what + ": the stream ended after " + got + " of " + want + " bytes without an exception");
    }

    static void fetchIndex(State s, Random rnd, Live l) throws Exception {
        IndexType[] types = IndexType.values();
        IndexType t = types[rnd.nextInt(types.length)];
        byte[] want;
        byte[][] idx = s.indexes.get(l.src);
        switch (t) {
            case OFFSET:
                want = idx[0];
                break;
            case TIMESTAMP:
                want = idx[1];
                break;
            case PRODUCER_SNAPSHOT:
                want = idx[2];
                break;
            case TRANSACTION:
                want = idx[3];
                break;
            case LEADER_EPOCH:
                want = l.src.epochs;
                break;
            default:
                throw new AssertionError("unknown index type " + t);
        }
        String what = "segment " + l.meta.remoteLogSegmentId().id() + " " + t + " index";
        if (want == null) {  // no .txnindex: not found is the answer
            try (InputStream in = s.rsm.fetchIndex(l.meta, t)) {
                s.st.unexpected.incrementAndGet();
                s.st.problem(what + ": expected RemoteResourceNotFoundException, got a stream");
            } catch (RemoteResourceNotFoundException e) {
                return;
            }
            return;
        }
        try (InputStream in = s.rsm.fetchIndex(l.meta, t)) {
            long got = readAndVerify(in, want, 0, Integer.MAX_VALUE, s.st, what);
            if (got != want.length) shortRead(s, what, got, want.length);
        }
    }

    /** Removes a live segment (waiting for its readers), deletes it, and checks it is gone. */
    static void delete(State s, Random rnd) throws Exception {
        RemoteLogSegmentMetadata meta = s.toDelete.poll();  // a failed delete or copy is retried first
        if (meta == null) {
            Live l;
            synchronized (s.live) {
                if (s.live.size() <= MIN_LIVE) return;
                l = s.live.remove(rnd.nextInt(s.live.size()));
            }
            l.lock.writeLock().lock();
            l.deleted = true;
            l.lock.writeLock().unlock();
            meta = l.meta;
        }
        try {
            s.rsm.deleteLogSegmentData(meta);
        } catch (Exception e) {
            s.toDelete.add(meta);
            throw e;
        }
        try (InputStream in = s.rsm.fetchIndex(meta, IndexType.OFFSET)) {
            s.st.resurrected.incrementAndGet();
            s.st.problem("segment " + meta.remoteLogSegmentId().id() + ": fetchIndex after delete returned a stream");
        } catch (RemoteResourceNotFoundException e) {
            // gone, as it must be
        } catch (RemoteStorageException e) {
            // a fault or a kill: the check could not run, the delete itself succeeded
        }
    }

    // ------------------------------------------------------------------------------------------------------------

    static void worker(State s, int id, long deadline) {
        Random rnd = new Random(1000 + id);
        while (System.nanoTime() - deadline < 0) {
            int r = rnd.nextInt(100);
            int size;
            synchronized (s.live) {
                size = s.live.size();
            }
            String op;
            if (r < 12) op = size < MAX_LIVE ? "copy" : "fetch";
            else if (r < 22) op = size > MIN_LIVE || !s.toDelete.isEmpty() ? "delete" : "fetch";
            else if (r < 45) op = "fetch_index";
            else op = "fetch";
            Live l = null;
            if (op.equals("fetch") || op.equals("fetch_index")) {
                l = pickLive(s, rnd);
                if (l == null) {
                    op = "copy";
                } else if (!l.lock.readLock().tryLock()) {
                    continue;  // being deleted
                } else if (l.deleted) {
                    l.lock.readLock().unlock();
                    continue;
                }
            }
            s.callName[id] = op;
            long t0 = System.nanoTime();
            s.callStart.set(id, t0);
            try {
                switch (op) {
                    case "copy":
                        copy(s, rnd);
                        break;
                    case "fetch":
                        fetch(s, rnd, l);
                        break;
                    case "fetch_index":
                        fetchIndex(s, rnd, l);
                        break;
                    default:
                        delete(s, rnd);
                }
                long dt = System.nanoTime() - t0;
                s.st.ok.get(op).incrementAndGet();
                s.st.latencyNanos.get(op).add(dt);
                recovered(s, t0);
            } catch (Throwable t) {
                String type = typeOf(t);
                s.st.failed.computeIfAbsent(op + ":" + type, k -> new AtomicLong()).incrementAndGet();
                if (!type.endsWith("[sidecar]") && s.st.storageFailures.size() < 10) {
                    s.st.storageFailures.add(op + ": " + t.getMessage()
                            + (t.getCause() == null ? "" : " (cause " + t.getCause().getMessage() + ")"));
                }
                if (!documented(t) || t instanceof RemoteResourceNotFoundException) {
                    // not-found for a segment that is copied and not deleted is a wrong answer too
                    s.st.unexpected.incrementAndGet();
                    s.st.problem(op + ": " + t + (t.getCause() == null ? "" : " (cause " + t.getCause() + ")"));
                }
            } finally {
                s.callStart.set(id, 0);
                if (l != null) l.lock.readLock().unlock();
            }
        }
    }

    /** A call that started after a kill succeeded: that kill is recovered from. */
    static void recovered(State s, long callStarted) {
        synchronized (s.kills) {
            for (long[] k : s.kills) {
                if (k[1] == 0 && callStarted - k[0] > 0) k[1] = System.nanoTime();
            }
        }
    }

    static void watch(State s, long hangLimitNanos) {
        boolean[] reported = new boolean[s.workers.length];
        while (true) {
            try {
                Thread.sleep(250);
            } catch (InterruptedException e) {
                return;
            }
            long now = System.nanoTime();
            for (int i = 0; i < s.workers.length; i++) {
                long t0 = s.callStart.get(i);
                if (t0 == 0) {
                    reported[i] = false;
                } else if (!reported[i] && now - t0 > hangLimitNanos) {
                    reported[i] = true;
                    s.st.hangs.incrementAndGet();
                    StringBuilder sb = new StringBuilder();
                    for (StackTraceElement e : s.workers[i].getStackTrace()) sb.append(" | at ").append(e);
                    String line = "HANG worker " + i + " " + s.callName[i] + " running for "
                            + (now - t0) / 1_000_000 + " ms" + sb;
                    s.st.problem(line);
                    synchronized (System.out) {
                        System.out.println(line);
                        System.out.flush();
                    }
                }
            }
        }
    }

    static void sample(long t0) {
        long directN = 0, directB = 0, mappedN = 0, mappedB = 0;
        for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (b.getName().equals("direct")) {
                directN = b.getCount();
                directB = b.getMemoryUsed();
            } else if (b.getName().equals("mapped")) {
                mappedN = b.getCount();
                mappedB = b.getMemoryUsed();
            }
        }
        synchronized (System.out) {
            System.out.printf("SAMPLE t=%.1f threads=%d direct_buffers=%d direct_bytes=%d mapped_buffers=%d"
                            + " mapped_bytes=%d%n", (System.nanoTime() - t0) / 1e9, Thread.activeCount(), directN,
                    directB, mappedN, mappedB);
            System.out.flush();
        }
    }

    static void listenForKills(State s) {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.startsWith("KILLED")) s.kills.add(new long[] {System.nanoTime(), 0});
            }
        } catch (IOException e) {
            // the test went away: nothing more to hear
        }
    }

    static String percentiles(List<Long> nanos) {
        List<Long> v;
        synchronized (nanos) {
            v = new ArrayList<>(nanos);
        }
        if (v.isEmpty()) return "{\"n\": 0}";
        Collections.sort(v);
        return String.format("{\"n\": %d, \"p50_ms\": %.1f, \"p99_ms\": %.1f, \"max_ms\": %.1f}", v.size(),
                at(v, 0.50), at(v, 0.99), v.get(v.size() - 1) / 1e6);
    }

    /** Nearest-rank percentile, in milliseconds. */
    static double at(List<Long> sorted, double p) {
        int rank = (int) Math.ceil(p * sorted.size());
        return sorted.get(Math.max(0, rank - 1)) / 1e6;
    }

    static String json(Map<String, ?> m) {
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, ?> e : new TreeMap<>(m).entrySet()) {
            if (sb.length() > 1) sb.append(", ");
            sb.append('"').append(e.getKey()).append("\": ");
            Object v = e.getValue();
            if (v instanceof AtomicLong) sb.append(((AtomicLong) v).get());
            else if (v instanceof Number) sb.append(v);
            else if (v instanceof String && (((String) v).startsWith("{") || ((String) v).startsWith("["))) sb.append(v);
            else sb.append('"').append(String.valueOf(v).replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
        }
        return sb.append('}').toString();
    }

    public static String run(String className, Map<String, Object> config, String specFile, int threads,
                             double seconds, long hangLimitMs) throws Exception {
        long t0 = System.nanoTime();
        List<Harness.Seg> sources = Harness.readSpec(Paths.get(specFile));
        RemoteStorageManager rsm = Harness.create(className, config);
        State s = new State(sources, rsm, threads);
        Thread sampler = new Thread(() -> {
            while (true) {
                sample(t0);
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "soak-sampler");
        sampler.setDaemon(true);
        sampler.start();
        Thread listener = new Thread(() -> listenForKills(s), "soak-kill-listener");
        listener.setDaemon(true);
        listener.start();
        Thread watcher = new Thread(() -> watch(s, hangLimitMs * 1_000_000L), "soak-watchdog");
        watcher.setDaemon(true);
        try {
            // one live copy of every source before the clock starts (retried: the proxy is already faulty)
            Random seedRnd = new Random(12);
            for (Harness.Seg src : sources) {
                Exception last = null;
                for (int attempt = 0; attempt < 10; attempt++) {
                    try {
                        RemoteLogSegmentMetadata started = freshId(src);
                        Optional<CustomMetadata> custom = rsm.copyLogSegmentData(started, src.data);
                        synchronized (s.live) {
                            s.live.add(new Live(src, finished(started, custom)));
                        }
                        last = null;
                        break;
                    } catch (RemoteStorageException e) {
                        last = e;
                    }
                }
                if (last != null) throw new AssertionError("the initial copy failed 10 times: " + last, last);
            }
            System.out.println("STARTED " + Harness.pid(rsm));
            System.out.flush();

            long deadline = System.nanoTime() + (long) (seconds * 1e9);
            watcher.start();
            for (int i = 0; i < threads; i++) {
                final int id = i;
                s.workers[i] = new Thread(() -> worker(s, id, deadline), "soak-worker-" + i);
                s.workers[i].setDaemon(true);
                s.workers[i].start();
            }
            long joinBy = deadline + hangLimitMs * 1_000_000L * 2;
            for (Thread w : s.workers) w.join(Math.max(1, (joinBy - System.nanoTime()) / 1_000_000L));
            int stuck = 0;
            for (Thread w : s.workers) stuck += w.isAlive() ? 1 : 0;
            System.out.println("DRAINING");
            System.out.flush();
            if (stuck > 0) throw new AssertionError(stuck + " worker(s) still inside a call well past the deadline");

            // retention of what is left, and the broker's cleanup of failed copies, retried as the broker would
            synchronized (s.live) {
                for (Live l : s.live) s.toDelete.add(l.meta);
                s.live.clear();
            }
            int cleanupFailures = 0;
            RemoteLogSegmentMetadata m;
            while ((m = s.toDelete.poll()) != null) {
                Exception last = null;
                for (int attempt = 0; attempt < 20; attempt++) {
                    try {
                        long c0 = System.nanoTime();
                        rsm.deleteLogSegmentData(m);
                        recovered(s, c0);
                        last = null;
                        break;
                    } catch (RemoteStorageException e) {
                        last = e;
                        Thread.sleep(250);
                    }
                }
                if (last != null) {
                    cleanupFailures++;
                    s.st.problem("cleanup delete of " + m.remoteLogSegmentId().id() + " failed 20 times: " + last);
                }
            }
            watcher.interrupt();
            sampler.interrupt();
            sample(t0);

            Map<String, Object> out = new HashMap<>();
            out.put("threads", threads);
            out.put("seconds", String.format("%.1f", seconds));
            for (String op : OPS) {
                out.put("ok_" + op, s.st.ok.get(op));
                out.put("latency_" + op, percentiles(s.st.latencyNanos.get(op)));
            }
            Map<String, Object> failed = new HashMap<>(s.st.failed);
            out.put("failed", json(failed));
            out.put("bytes_verified", s.st.bytesVerified);
            out.put("wrong_bytes", s.st.wrongBytes);
            out.put("short_reads", s.st.shortReads);
            out.put("unexpected", s.st.unexpected);
            out.put("hangs", s.st.hangs);
            out.put("resurrected", s.st.resurrected);
            out.put("copy_failed_definite", s.st.definiteCopyFailures);
            out.put("copy_failed_uncertain", s.st.uncertainCopyFailures);
            out.put("cleanup_failures", cleanupFailures);
            long worstRecovery = 0;
            int unrecovered = 0;
            List<String> recoveries = new ArrayList<>();  // per kill, in kill order
            synchronized (s.kills) {
                for (long[] k : s.kills) {
                    if (k[1] == 0) {
                        unrecovered++;
                    } else {
                        worstRecovery = Math.max(worstRecovery, k[1] - k[0]);
                        recoveries.add(String.valueOf((k[1] - k[0]) / 1_000_000));
                    }
                }
                out.put("kills_heard", s.kills.size());
            }
            out.put("kills_unrecovered", unrecovered);
            out.put("recovery_max_ms", worstRecovery / 1_000_000);
            out.put("recovery_ms", "[" + String.join(", ", recoveries) + "]");
            out.put("final_sidecar_pid", Harness.pid(rsm));
            out.put("problems", String.join(" || ", s.st.problems));
            out.put("storage_failures", String.join(" || ", s.st.storageFailures).replace('\n', ' '));
            out.put("wall_seconds", String.format("%.1f", (System.nanoTime() - t0) / 1e9));
            return "RESULT " + json(out);
        } finally {
            watcher.interrupt();
            sampler.interrupt();
            rsm.close();
        }
    }

    public static void main(String[] args) {
        Harness.Args parsed = new Harness.Args(args, 0);
        List<String> pos = parsed.positional;
        Harness.report(() -> run(pos.get(0), parsed.config, pos.get(1), Integer.parseInt(pos.get(2)),
                Double.parseDouble(pos.get(3)), Long.parseLong(pos.get(4))));
    }
}
