package io.kts.shim.harness;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

/**
 * Drives the shim the way a broker does: instantiate by class name, configure with a HashMap of Objects, then
 * copy/fetch/fetchIndex/delete from many threads, checking every byte against the original files.
 *
 * <p>Segment spec file: one segment per line, tab separated:
 * topicId topic partition segmentId startOffset endOffset maxTs size log offsetIdx timeIdx txnIdx|- snapshot epochFile
 */
public final class Harness {
    private Harness() {
    }

    /** A segment on disk plus the metadata the broker would build for it. */
    static final class Seg {
        RemoteLogSegmentMetadata meta;
        LogSegmentData data;
        byte[] log;
        byte[] epochs;
        Path offsetIdx;
        Path timeIdx;
        Path txnIdx;
        Path snapshot;
        List<Integer> positions = new ArrayList<>();
    }

    public static RemoteStorageManager create(String className, Map<String, Object> config) throws Exception {
        RemoteStorageManager rsm = (RemoteStorageManager) Class.forName(className).getDeclaredConstructor()
                .newInstance();
        rsm.configure(config);
        return rsm;
    }

    static List<Seg> readSpec(Path spec) throws IOException {
        List<Seg> out = new ArrayList<>();
        for (String line : Files.readAllLines(spec, StandardCharsets.UTF_8)) {
            if (line.isBlank()) continue;
            String[] f = line.split("\t");
            Seg s = new Seg();
            TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(f[0]), Integer.parseInt(f[2]), f[1]);
            Map<Integer, Long> epochs = new HashMap<>();
            epochs.put(0, Long.parseLong(f[4]));
            s.meta = new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tip, Uuid.fromString(f[3])),
                    Long.parseLong(f[4]), Long.parseLong(f[5]), Long.parseLong(f[6]), 0, System.currentTimeMillis(),
                    Integer.parseInt(f[7]), epochs);
            Path log = Paths.get(f[8]);
            s.offsetIdx = Paths.get(f[9]);
            s.timeIdx = Paths.get(f[10]);
            s.txnIdx = f[11].equals("-") ? null : Paths.get(f[11]);
            s.snapshot = Paths.get(f[12]);
            s.epochs = Files.readAllBytes(Paths.get(f[13]));
            s.data = new LogSegmentData(log, s.offsetIdx, s.timeIdx, Optional.ofNullable(s.txnIdx), s.snapshot,
                    ByteBuffer.wrap(s.epochs));
            if (Files.size(log) < 256L * 1024 * 1024) {  // the benchmark's big segment is only streamed
                s.log = Files.readAllBytes(log);
                s.positions = positions(s.log, Files.readAllBytes(s.offsetIdx));
            }
            out.add(s);
        }
        return out;
    }

    /** Positions the broker would start a fetch at: offset-index entries, else batch boundaries. */
    static List<Integer> positions(byte[] log, byte[] offsetIndex) {
        List<Integer> pos = new ArrayList<>();
        ByteBuffer idx = ByteBuffer.wrap(offsetIndex);
        while (idx.remaining() >= 8) {
            idx.getInt();
            int p = idx.getInt();
            if (p == 0 && !pos.isEmpty()) break;  // preallocated zero tail
            pos.add(p);
        }
        if (pos.size() < 4) {
            pos.clear();
            for (int p = 0; p + 12 <= log.length; p += 12 + ByteBuffer.wrap(log, p + 8, 4).getInt()) pos.add(p);
        }
        return pos;
    }

    static int batchEnd(byte[] log, int pos, int batches) {
        int p = pos;
        for (int i = 0; i < batches && p + 12 <= log.length; i++) p += 12 + ByteBuffer.wrap(log, p + 8, 4).getInt();
        return Math.min(p, log.length);
    }

    public static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream bos = new ByteArrayOutputStream();
        byte[] buf = new byte[64 * 1024];
        int n;
        while ((n = in.read(buf, 0, buf.length)) >= 0) bos.write(buf, 0, n);
        return bos.toByteArray();
    }

    /**
     * Microseconds per fetchIndex(LEADER_EPOCH) + drain + close of the spec's first segment, on a fresh Java
     * thread (benchmarks; the segment need not have been copied when the manager answers from memory).
     */
    public static double timeIndex(RemoteStorageManager rsm, String specFile, int n) throws Exception {
        RemoteLogSegmentMetadata meta = readSpec(Paths.get(specFile)).get(0).meta;
        double[] out = new double[1];
        Exception[] err = new Exception[1];
        Thread t = new Thread(() -> {
            try {
                byte[] buf = new byte[65536];
                for (int i = 0; i < n / 10 + 1; i++) drain(rsm.fetchIndex(meta, IndexType.LEADER_EPOCH), 65536);
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    try (InputStream in = rsm.fetchIndex(meta, IndexType.LEADER_EPOCH)) {
                        while (in.read(buf, 0, buf.length) >= 0) {
                            // drain
                        }
                    }
                }
                out[0] = (System.nanoTime() - t0) / 1e3 / n;
            } catch (Exception e) {
                err[0] = e;
            }
        });
        t.start();
        t.join();
        if (err[0] != null) throw err[0];
        return out[0];
    }

    /** Reads to EOF with a buffer of bufSize, returns the byte count (benchmarks). */
    public static long drain(InputStream in, int bufSize) throws IOException {
        byte[] buf = new byte[bufSize];
        long total = 0;
        int n;
        while ((n = in.read(buf, 0, buf.length)) >= 0) total += n;
        in.close();
        return total;
    }

    static byte[] readN(InputStream in, int n) throws IOException {
        byte[] out = new byte[n];
        int off = 0;
        while (off < n) {
            int k = in.read(out, off, n - off);
            if (k < 0) break;
            off += k;
        }
        return off == n ? out : Arrays.copyOf(out, off);
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void expectNotFound(Callable<?> call, String what) throws Exception {
        try {
            Object o = call.call();
            if (o instanceof InputStream) {
                readAll((InputStream) o);
                ((InputStream) o).close();
            }
        } catch (RemoteResourceNotFoundException e) {
            check(e.getMessage() != null && !e.getMessage().isEmpty(), what + ": not-found without a message");
            return;
        }
        throw new AssertionError(what + ": expected RemoteResourceNotFoundException");
    }

    /** The class and message of what {@code call} throws, "returned" when it does not. */
    static String thrown(Callable<?> call) {
        try {
            Object o = call.call();
            if (o instanceof InputStream) {
                readAll((InputStream) o);
                ((InputStream) o).close();
            }
            return "returned";
        } catch (Exception e) {
            return e.getClass().getName() + " (" + e.getMessage() + ")";
        }
    }

    /**
     * Every KIP-405 call on the first segment, each expected to fail (python.manager.class names a manager that
     * fails them): one line per call with the class the broker would catch, and whether this JVM has Kafka's
     * RetriableRemoteStorageException.
     */
    public static String errors(String className, Map<String, Object> config, String specFile) throws Exception {
        Seg s = readSpec(Paths.get(specFile)).get(0);
        RemoteStorageManager rsm = create(className, config);
        try {
            StringBuilder out = new StringBuilder();
            out.append("hasRetriable=").append(io.kts.shim.KafkaErrors.hasRetriable()).append('\n');
            out.append("copy=").append(thrown(() -> rsm.copyLogSegmentData(s.meta, s.data))).append('\n');
            out.append("fetch=").append(thrown(() -> rsm.fetchLogSegment(s.meta, 0))).append('\n');
            out.append("fetchIndex=").append(thrown(() -> rsm.fetchIndex(s.meta, IndexType.OFFSET))).append('\n');
            out.append("delete=").append(thrown(() -> {
                rsm.deleteLogSegmentData(s.meta);
                return null;
            }));
            return out.toString();
        } finally {
            rsm.close();
        }
    }

    static byte[] index(RemoteStorageManager rsm, Seg s, IndexType t) throws Exception {
        try (InputStream in = rsm.fetchIndex(s.meta, t)) {
            return readAll(in);
        }
    }

    /**
     * Streams the broker closes early, kept by the sidecar transport for the segment's next fetch: one early
     * close per segment (more segments than the transport keeps), then a fetch of each segment a little further
     * on, newest first (the kept ones resume, the oldest were cancelled and open anew), a bounded fetch (never
     * resumed), an idle wait past the idle limit, and the same fetches again. Every byte is checked; returns a
     * summary.
     */
    public static String kept(String className, Map<String, Object> config, String specFile, long idleWaitMs)
            throws Exception {
        List<Seg> segs = readSpec(Paths.get(specFile));
        RemoteStorageManager rsm = create(className, config);
        try {
            for (Seg s : segs) rsm.copyLogSegmentData(s.meta, s.data);
            for (Seg s : segs) readAt(rsm, s, 0, 100);
            long keptAfterCloses = diagnostic(rsm, "sidecarStreamsKept");
            long before = diagnostic(rsm, "sidecarStreamsResumed");
            for (int i = segs.size() - 1; i >= 0; i--) readAt(rsm, segs.get(i), 50, 200);  // newest kept first
            long resumed = diagnostic(rsm, "sidecarStreamsResumed") - before;
            try (InputStream in = rsm.fetchLogSegment(segs.get(0).meta, 60, 99)) {  // bounded: a stream of its own
                check(Arrays.equals(readAll(in), Arrays.copyOfRange(segs.get(0).log, 60, 100)), "bounded fetch bytes");
            }
            long resumedBounded = diagnostic(rsm, "sidecarStreamsResumed") - before - resumed;
            Thread.sleep(idleWaitMs);
            long keptAfterIdle = diagnostic(rsm, "sidecarStreamsKept");
            before = diagnostic(rsm, "sidecarStreamsResumed");
            for (Seg s : segs) readAt(rsm, s, 150, 200);
            long resumedAfterIdle = diagnostic(rsm, "sidecarStreamsResumed") - before;
            return "OK kept segments=" + segs.size() + " kept_after_closes=" + keptAfterCloses + " resumed="
                    + resumed + " resumed_bounded=" + resumedBounded + " kept_after_idle=" + keptAfterIdle
                    + " resumed_after_idle=" + resumedAfterIdle + " connections="
                    + diagnostic(rsm, "sidecarConnectionsOpened");
        } finally {
            rsm.close();
        }
    }

    /**
     * Index fetches the way Kafka's remote index cache makes them for a new segment: OFFSET, TIMESTAMP, TRANSACTION.
     * The first brings the other two along and the shim holds them ("held" counts what it holds after each call);
     * every byte and every not-found is checked against the segment's files. Then the first segment's OFFSET is
     * fetched again (the other two held anew) and the segment deleted: its held indexes go with it.
     */
    public static String indexes(String className, Map<String, Object> config, String specFile) throws Exception {
        List<Seg> segs = readSpec(Paths.get(specFile));
        RemoteStorageManager rsm = create(className, config);
        try {
            for (Seg s : segs) rsm.copyLogSegmentData(s.meta, s.data);
            StringBuilder held = new StringBuilder();
            for (Seg s : segs) {
                check(Arrays.equals(index(rsm, s, IndexType.OFFSET), Files.readAllBytes(s.offsetIdx)), "OFFSET");
                held.append(diagnostic(rsm, "sidecarIndexesHeld"));
                check(Arrays.equals(index(rsm, s, IndexType.TIMESTAMP), Files.readAllBytes(s.timeIdx)), "TIMESTAMP");
                held.append(diagnostic(rsm, "sidecarIndexesHeld"));
                if (s.txnIdx == null) {
                    expectNotFound(() -> rsm.fetchIndex(s.meta, IndexType.TRANSACTION), "TRANSACTION");
                } else {
                    check(Arrays.equals(index(rsm, s, IndexType.TRANSACTION), Files.readAllBytes(s.txnIdx)),
                            "TRANSACTION");
                }
                held.append(diagnostic(rsm, "sidecarIndexesHeld")).append(',');
            }
            Seg first = segs.get(0);
            check(Arrays.equals(index(rsm, first, IndexType.OFFSET), Files.readAllBytes(first.offsetIdx)), "again");
            long heldBeforeDelete = diagnostic(rsm, "sidecarIndexesHeld");
            rsm.deleteLogSegmentData(first.meta);
            long heldAfterDelete = diagnostic(rsm, "sidecarIndexesHeld");
            expectNotFound(() -> rsm.fetchIndex(first.meta, IndexType.TIMESTAMP), "TIMESTAMP after delete");
            return "OK indexes segments=" + segs.size() + " held=" + held + " held_before_delete=" + heldBeforeDelete
                    + " held_after_delete=" + heldAfterDelete;
        } finally {
            rsm.close();
        }
    }

    /** An open-ended fetch from {@code pos}, {@code n} bytes read and checked, then closed early. */
    static void readAt(RemoteStorageManager rsm, Seg s, int pos, int n) throws Exception {
        try (InputStream in = rsm.fetchLogSegment(s.meta, pos)) {
            check(Arrays.equals(readN(in, n), Arrays.copyOfRange(s.log, pos, pos + n)),
                    "bytes [" + pos + ", " + (pos + n) + ") of segment " + s.meta.startOffset() + " differ");
        }
    }

    /** The full lifecycle over all segments with `threads` concurrent callers; returns a one-line summary. */
    public static String lifecycle(String className, Map<String, Object> config, String specFile, int threads,
                                   int rounds) throws Exception {
        List<Seg> segs = readSpec(Paths.get(specFile));
        RemoteStorageManager rsm = create(className, config);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        AtomicLong bytes = new AtomicLong();
        AtomicLong calls = new AtomicLong();
        long t0 = System.nanoTime();
        try {
            List<Callable<Object>> copies = new ArrayList<>();
            for (Seg s : segs) {
                copies.add(() -> {
                    Optional<RemoteLogSegmentMetadata.CustomMetadata> c = rsm.copyLogSegmentData(s.meta, s.data);
                    check(c != null, "copy returned null instead of an Optional");
                    calls.incrementAndGet();
                    return null;
                });
            }
            runAll(pool, copies);

            List<Callable<Object>> work = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int seed = t;
                work.add(() -> {
                    Random rnd = new Random(seed);
                    for (int r = 0; r < rounds; r++) {
                        Seg s = segs.get((seed + r) % segs.size());
                        int kind = (seed + r) % 4;
                        if (kind == 0 || kind == 1) {
                            // broker style: start at an index position, read a few batches, close early
                            int pos = s.positions.get(rnd.nextInt(s.positions.size()));
                            int end = batchEnd(s.log, pos, 1 + rnd.nextInt(3));
                            try (InputStream in = rsm.fetchLogSegment(s.meta, pos)) {
                                byte[] got = readN(in, end - pos);
                                check(Arrays.equals(got, Arrays.copyOfRange(s.log, pos, end)),
                                        "partial fetch bytes differ at " + pos);
                                bytes.addAndGet(got.length);
                            }
                        } else if (kind == 2) {
                            int pos = s.positions.get(rnd.nextInt(s.positions.size()));
                            try (InputStream in = rsm.fetchLogSegment(s.meta, pos)) {
                                byte[] got = readAll(in);
                                check(Arrays.equals(got, Arrays.copyOfRange(s.log, pos, s.log.length)),
                                        "fetch-to-EOF bytes differ from " + pos);
                                bytes.addAndGet(got.length);
                            }
                            int a = s.positions.get(rnd.nextInt(s.positions.size()));
                            int b = Math.min(s.log.length - 1, a + rnd.nextInt(200_000));
                            try (InputStream in = rsm.fetchLogSegment(s.meta, a, b)) {
                                byte[] got = readAll(in);
                                check(Arrays.equals(got, Arrays.copyOfRange(s.log, a, b + 1)),
                                        "ranged fetch bytes differ for [" + a + ", " + b + "]");
                            }
                        } else {
                            check(Arrays.equals(index(rsm, s, IndexType.OFFSET), Files.readAllBytes(s.offsetIdx)),
                                    "OFFSET index differs");
                            check(Arrays.equals(index(rsm, s, IndexType.TIMESTAMP), Files.readAllBytes(s.timeIdx)),
                                    "TIMESTAMP index differs");
                            check(Arrays.equals(index(rsm, s, IndexType.PRODUCER_SNAPSHOT),
                                    Files.readAllBytes(s.snapshot)), "PRODUCER_SNAPSHOT differs");
                            check(Arrays.equals(index(rsm, s, IndexType.LEADER_EPOCH), s.epochs),
                                    "LEADER_EPOCH differs");
                            if (s.txnIdx == null) {
                                expectNotFound(() -> rsm.fetchIndex(s.meta, IndexType.TRANSACTION), "TRANSACTION");
                            } else {
                                check(Arrays.equals(index(rsm, s, IndexType.TRANSACTION),
                                        Files.readAllBytes(s.txnIdx)), "TRANSACTION index differs");
                            }
                        }
                        calls.incrementAndGet();
                    }
                    return null;
                });
            }
            runAll(pool, work);

            List<Callable<Object>> deletes = new ArrayList<>();
            for (Seg s : segs) {
                deletes.add(() -> {
                    rsm.deleteLogSegmentData(s.meta);
                    rsm.deleteLogSegmentData(s.meta);  // idempotent: must not throw
                    expectNotFound(() -> rsm.fetchLogSegment(s.meta, 0), "fetch after delete");
                    expectNotFound(() -> rsm.fetchIndex(s.meta, IndexType.OFFSET), "index after delete");
                    return null;
                });
            }
            runAll(pool, deletes);
        } finally {
            pool.shutdownNow();
            rsm.close();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        return String.format("OK lifecycle segments=%d threads=%d calls=%d fetched_bytes=%d seconds=%.2f",
                segs.size(), threads, calls.get(), bytes.get(), secs);
    }

    static void runAll(ExecutorService pool, List<Callable<Object>> tasks) throws Exception {
        List<Future<Object>> fs = new ArrayList<>();
        for (Callable<Object> c : tasks) fs.add(pool.submit(c));
        for (Future<Object> f : fs) {
            try {
                f.get();
            } catch (java.util.concurrent.ExecutionException e) {
                Throwable c = e.getCause();
                if (c instanceof Exception) throw (Exception) c;
                if (c instanceof Error) throw (Error) c;
                throw e;
            }
        }
    }

    /** One of the shim's public diagnostic counters ({@code sidecarPid}, {@code sidecarConnectionsOpened}, ...). */
    static long diagnostic(RemoteStorageManager rsm, String method) throws ReflectiveOperationException {
        return (Long) rsm.getClass().getMethod(method).invoke(rsm);
    }

    static long pid(RemoteStorageManager rsm) throws Exception {
        return diagnostic(rsm, "sidecarPid");
    }

    /**
     * The {@code main} of a driver program: prints the line {@code body} returns (none for null: it printed
     * its own), or an ERROR line (and the stack trace on stderr) when it throws, then exits 0 or 1. Lines are
     * printed under System.out's lock, because a driver's own threads may still be printing.
     */
    static void report(Callable<String> body) {
        int code = 0;
        try {
            String result = body.call();
            if (result != null) {
                synchronized (System.out) {
                    System.out.println(result);
                }
            }
        } catch (Throwable t) {
            synchronized (System.out) {
                System.out.println("ERROR " + t.getClass().getName() + " | " + t.getMessage());
            }
            t.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    /**
     * Benchmark driver (benchmarks/bench_shim.py), run on a fresh Java thread as broker calls are:
     * copy segment 0 once, fetch it sequentially to EOF in 1 MiB reads, then time `indexCalls` tiny fetchIndex
     * calls. Returns "copy_s fetch_s index_us fetched_bytes".
     */
    public static String bench(RemoteStorageManager rsm, String specFile, int indexCalls) throws Exception {
        Seg s = readSpec(Paths.get(specFile)).get(0);
        s.log = null;  // do not hold a GiB in the heap; the benchmark checks the length only
        String[] result = new String[1];
        Exception[] failure = new Exception[1];
        Thread t = new Thread(() -> {
            try {
                long t0 = System.nanoTime();
                rsm.copyLogSegmentData(s.meta, s.data);
                long t1 = System.nanoTime();
                long total = 0;
                byte[] buf = new byte[1 << 20];
                try (InputStream in = rsm.fetchLogSegment(s.meta, 0)) {
                    int n;
                    while ((n = in.read(buf, 0, buf.length)) >= 0) total += n;
                }
                long t2 = System.nanoTime();
                for (int i = 0; i < Math.min(200, indexCalls); i++) index(rsm, s, IndexType.LEADER_EPOCH);  // warm-up
                long t3 = System.nanoTime();
                for (int i = 0; i < indexCalls; i++) {
                    try (InputStream in = rsm.fetchIndex(s.meta, IndexType.LEADER_EPOCH)) {
                        while (in.read(buf, 0, buf.length) >= 0) {
                            // drain
                        }
                    }
                }
                long t4 = System.nanoTime();
                rsm.deleteLogSegmentData(s.meta);
                result[0] = String.format("%.6f %.6f %.3f %d", (t1 - t0) / 1e9, (t2 - t1) / 1e9,
                        (t4 - t3) / 1e3 / Math.max(1, indexCalls), total);
            } catch (Exception e) {
                failure[0] = e;
            }
        }, "bench-caller");
        t.start();
        t.join();
        if (failure[0] != null) throw failure[0];
        return result[0];
    }

    /**
     * Interactive checks for sidecar supervision, driven by the Python test over stdin/stdout:
     * kill -9 mid-fetch, restart, close() stopping the child.
     */
    static void supervise(String className, Map<String, Object> config, String specFile) throws Exception {
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Seg s = readSpec(Paths.get(specFile)).get(0);
        RemoteStorageManager rsm = create(className, config);
        rsm.copyLogSegmentData(s.meta, s.data);
        long pid1 = pid(rsm);
        InputStream in = rsm.fetchLogSegment(s.meta, 0);
        byte[] first = readN(in, 1000);
        check(Arrays.equals(first, Arrays.copyOf(s.log, 1000)), "first bytes differ");
        System.out.println("FETCHING " + pid1);
        System.out.flush();
        stdin.readLine();  // the test kills the sidecar now
        try {
            readAll(in);
            System.out.println("FAIL stream completed after the sidecar was killed");
        } catch (IOException e) {
            Throwable c = e.getCause();
            System.out.println("STREAM-FAILED " + (c == null ? "null" : c.getClass().getName()) + " | "
                    + e.getMessage());
        }
        in.close();
        long t0 = System.nanoTime();
        byte[] all = null;
        for (int attempt = 0; attempt < 50 && all == null; attempt++) {
            try (InputStream again = rsm.fetchLogSegment(s.meta, 0)) {
                all = readAll(again);
            } catch (RemoteStorageException e) {
                System.out.println("RETRY-FAILED " + e.getClass().getName() + " | " + e.getMessage());
                Thread.sleep(100);
            }
        }
        check(all != null && Arrays.equals(all, s.log), "fetch after restart failed or differs");
        long pid2 = pid(rsm);
        System.out.println(String.format("RECOVERED %d %.3f", pid2, (System.nanoTime() - t0) / 1e9));
        System.out.flush();
        stdin.readLine();  // the test may look at the restarted sidecar now (end of input goes straight on)
        rsm.deleteLogSegmentData(s.meta);
        rsm.close();
        System.out.println("CLOSED");
        System.out.flush();
    }

    /**
     * Broker threads interrupted mid-fetch (Kafka cancels a delayed remote fetch by interrupting its reader):
     * each round opens a stream on a fresh thread, reads a little, interrupts the thread and reads on, then
     * clears the interrupt and fetches the segment and an index again on the same thread. Prints
     * {@code INTERRUPTED pid=... failed=... opened=...}, waits for a line on stdin (the test counts the
     * sidecar's sockets), then closes and prints CLOSED.
     */
    static void interrupted(String className, Map<String, Object> config, String specFile, int rounds)
            throws Exception {
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Seg s = readSpec(Paths.get(specFile)).get(0);
        RemoteStorageManager rsm = create(className, config);
        rsm.copyLogSegmentData(s.meta, s.data);
        long pid1 = pid(rsm);
        AtomicInteger failed = new AtomicInteger();
        Exception[] error = new Exception[1];
        for (int r = 0; r < rounds && error[0] == null; r++) {
            Thread t = new Thread(() -> {
                try {
                    try (InputStream in = rsm.fetchLogSegment(s.meta, 0)) {
                        check(Arrays.equals(readN(in, 100), Arrays.copyOf(s.log, 100)), "first bytes differ");
                        Thread.currentThread().interrupt();
                        try {
                            byte[] rest = readAll(in);
                            check(Arrays.equals(rest, Arrays.copyOfRange(s.log, 100, s.log.length)),
                                    "bytes read after the interrupt differ");
                        } catch (IOException e) {
                            failed.incrementAndGet();
                        }
                    } catch (IOException closing) {
                        // closing a stream whose connection the interrupt closed may fail too
                    }
                    Thread.interrupted();  // the broker's thread goes on to its next task
                    try (InputStream again = rsm.fetchLogSegment(s.meta, 0)) {
                        check(Arrays.equals(readAll(again), s.log), "fetch after an interrupted one differs");
                    }
                    check(Arrays.equals(index(rsm, s, IndexType.OFFSET), Files.readAllBytes(s.offsetIdx)),
                            "OFFSET index after an interrupted fetch differs");
                } catch (Exception e) {
                    error[0] = e;
                }
            }, "interrupted-fetch-" + r);
            t.start();
            t.join();
        }
        if (error[0] != null) throw error[0];
        check(pid(rsm) == pid1, "the sidecar was restarted after interrupted fetches");
        System.out.println(String.format("INTERRUPTED pid=%d failed=%d opened=%d", pid1, failed.get(),
                diagnostic(rsm, "sidecarConnectionsOpened")));
        System.out.flush();
        stdin.readLine();
        rsm.deleteLogSegmentData(s.meta);
        rsm.close();
        System.out.println("CLOSED");
        System.out.flush();
    }

    /** A harness program's command line: positional words, then {@code --}, then the shim's {@code key=value} config. */
    static final class Args {
        final List<String> positional = new ArrayList<>();
        final Map<String, Object> config = new HashMap<>();

        Args(String[] args, int from) {
            boolean kv = false;
            for (int i = from; i < args.length; i++) {
                if (args[i].equals("--")) {
                    kv = true;
                } else if (kv) {
                    int eq = args[i].indexOf('=');
                    config.put(args[i].substring(0, eq), args[i].substring(eq + 1));
                } else {
                    positional.add(args[i]);
                }
            }
        }
    }

    /** `java -cp ... Harness <mode> <shimClass> <specFile> [threads rounds] -- key=value...` */
    public static void main(String[] args) {
        String mode = args[0];
        Args parsed = new Args(args, 1);
        Map<String, Object> config = parsed.config;
        List<String> pos = parsed.positional;
        report(() -> {
            switch (mode) {
                case "lifecycle":
                    return lifecycle(pos.get(0), config, pos.get(1), Integer.parseInt(pos.get(2)),
                            Integer.parseInt(pos.get(3)));
                case "kept":
                    return kept(pos.get(0), config, pos.get(1), Long.parseLong(pos.get(2)));
                case "indexes":
                    return indexes(pos.get(0), config, pos.get(1));
                case "errors":
                    return errors(pos.get(0), config, pos.get(1));
                case "supervise":
                    supervise(pos.get(0), config, pos.get(1));
                    return null;
                case "interrupted":
                    interrupted(pos.get(0), config, pos.get(1), Integer.parseInt(pos.get(2)));
                    return null;
                case "configure":
                    RemoteStorageManager rsm = create(pos.get(0), config);
                    System.out.println("CONFIGURED " + pid(rsm));
                    rsm.close();
                    return "CLOSED";
                default:
                    throw new IllegalArgumentException("unknown mode " + mode);
            }
        });
    }
}
