package io.kts.shim.harness;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
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
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

/**
 * Plays the broker's RemoteLogManager against a plugin, over a partition directory laid out like a broker's
 * ({@code <20-digit base>.log/.index/.timeindex[/.txnindex]}, {@code <base>.snapshot}, {@code leader-epoch-checkpoint};
 * the last segment is the active one and is never tiered):
 *
 * <ol>
 *   <li>copy (RLMCopyTask): every rolled segment in offset order, one at a time, with the metadata and
 *       {@link LogSegmentData} the broker builds (end offset = next base - 1, producer snapshot at the next base,
 *       leader-epoch checkpoint truncated to the segment end, segmentLeaderEpochs within the segment, max timestamp
 *       from the batch headers); the returned custom metadata is kept in the COPY_SEGMENT_FINISHED metadata used by
 *       every later call, as the broker's metadata cache does;</li>
 *   <li>fetch (RemoteLogReader, {@code threads} threads, serving each segment as soon as it is tiered, while the
 *       copier goes on with the next one): offset fetches (offset index lookup, fetchLogSegment from
 *       the position, read batches until the target's batch, then up to maxBytes, close early) and ListOffsets
 *       by timestamp (time index, offset index, scan to the first batch with maxTimestamp &gt;= ts); every byte
 *       read is compared with the local .log at the same position and the batch found with a local scan;</li>
 *   <li>fetchIndex of every type for every segment (once tiered) against the local files (TRANSACTION: not found when the
 *       segment had no .txnindex);</li>
 *   <li>retention: delete every copied segment (twice: delete must be idempotent), then expect
 *       RemoteResourceNotFoundException from fetchLogSegment and fetchIndex.</li>
 * </ol>
 * Any mismatch is an AssertionError with a precise message.
 */
public final class BrokerSim {
    static final int LOG_OVERHEAD = 12;  // baseOffset int64 + length int32
    static final int BATCH_HEADER = 61;
    static final int MAX_BYTES = 1 << 20;  // max.partition.fetch.bytes default
    static final int[] FETCH_MAX_BYTES = {1, 16 * 1024, MAX_BYTES};  // 1: only the first batch (minOneMessage)
    static final int CUSTOM_METADATA_MAX_BYTES = 128;  // remote.log.metadata.custom.metadata.max.bytes default
    static final int BROKER_ID = 1;

    private BrokerSim() {
    }

    /** One segment of the local log, with its batches scanned. */
    static final class Segment {
        long base;
        long end;  // inclusive: next segment's base - 1
        Path log;
        Path offsetIdx;
        Path timeIdx;
        Path txnIdx;  // null when the segment has no .txnindex
        Path snapshot;
        byte[] bytes;
        byte[] epochBytes;
        long maxTimestamp = -1;
        int[] batchPos;
        long[] batchLast;
        long[] batchMaxTs;
        volatile RemoteLogSegmentMetadata meta;
    }

    static final class Epoch {
        private final int epoch;
        private final long start;

        Epoch(int epoch, long start) {
            this.epoch = epoch;
            this.start = start;
        }

        int epoch() {
            return epoch;
        }

        long start() {
            return start;
        }
    }

    // ------------------------------------------------------------------------------------------------------------
    // Local log
    // ------------------------------------------------------------------------------------------------------------

    static String name(long offset, String suffix) {
        return String.format("%020d%s", offset, suffix);
    }

    static List<Segment> readLog(Path dir) throws IOException {
        List<Long> bases = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*.log")) {
            for (Path p : ds) {
                String n = p.getFileName().toString();
                bases.add(Long.parseLong(n.substring(0, n.length() - 4)));
            }
        }
        bases.sort(null);
        check(bases.size() >= 2, "log dir " + dir + " needs at least one rolled segment and the active one, has "
                + bases.size() + " .log files");
        List<Segment> out = new ArrayList<>();
        for (int i = 0; i < bases.size(); i++) {
            Segment s = new Segment();
            s.base = bases.get(i);
            s.end = i + 1 < bases.size() ? bases.get(i + 1) - 1 : Long.MAX_VALUE;
            s.log = dir.resolve(name(s.base, ".log"));
            s.offsetIdx = dir.resolve(name(s.base, ".index"));
            s.timeIdx = dir.resolve(name(s.base, ".timeindex"));
            Path txn = dir.resolve(name(s.base, ".txnindex"));
            s.txnIdx = Files.exists(txn) ? txn : null;
            s.snapshot = i + 1 < bases.size() ? dir.resolve(name(bases.get(i + 1), ".snapshot")) : null;
            s.bytes = Files.readAllBytes(s.log);
            scanBatches(s);
            out.add(s);
        }
        return out;
    }

    static void scanBatches(Segment s) {
        List<int[]> pos = new ArrayList<>();
        List<long[]> info = new ArrayList<>();
        ByteBuffer b = ByteBuffer.wrap(s.bytes);
        int p = 0;
        long prevLast = s.base - 1;
        while (p + LOG_OVERHEAD <= s.bytes.length) {
            long base = b.getLong(p);
            int size = LOG_OVERHEAD + b.getInt(p + 8);
            String at = s.log.getFileName() + " position " + p;
            check(p + size <= s.bytes.length, at + ": batch of " + size + " bytes runs past the end of the file");
            check(size >= BATCH_HEADER && b.get(p + 16) == 2, at + ": not a v2 record batch");
            long last = base + b.getInt(p + 23);
            long maxTs = b.getLong(p + 35);
            check(base > prevLast && last >= base, at + ": offsets " + base + ".." + last + " after " + prevLast);
            pos.add(new int[] {p});
            info.add(new long[] {base, last, maxTs});
            s.maxTimestamp = Math.max(s.maxTimestamp, maxTs);
            prevLast = last;
            p += size;
        }
        check(p == s.bytes.length, s.log + ": " + (s.bytes.length - p) + " trailing bytes after the last batch");
        check(!pos.isEmpty(), s.log + ": no batches");
        int n = pos.size();
        s.batchPos = new int[n];
        s.batchLast = new long[n];
        s.batchMaxTs = new long[n];
        for (int i = 0; i < n; i++) {
            s.batchPos[i] = pos.get(i)[0];
            s.batchLast[i] = info.get(i)[1];
            s.batchMaxTs[i] = info.get(i)[2];
        }
    }

    /** Parses {@code leader-epoch-checkpoint}: version 0, a count, then "epoch startOffset" lines. */
    static List<Epoch> readCheckpoint(Path file) throws IOException {
        List<String> lines = new ArrayList<>();
        for (String l : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            if (!l.isBlank()) lines.add(l.trim());
        }
        check(lines.size() >= 2 && lines.get(0).equals("0"), file + ": not a version-0 checkpoint");
        int n = Integer.parseInt(lines.get(1));
        check(lines.size() == n + 2, file + ": says " + n + " entries, has " + (lines.size() - 2));
        List<Epoch> out = new ArrayList<>();
        for (String l : lines.subList(2, lines.size())) {
            String[] f = l.split("\\s+");
            out.add(new Epoch(Integer.parseInt(f[0]), Long.parseLong(f[1])));
        }
        return out;
    }

    /** What RemoteLogManager hands the plugin: the checkpoint truncated to epochs that start at or before end. */
    static byte[] checkpointUpTo(List<Epoch> epochs, long end) {
        List<Epoch> kept = new ArrayList<>();
        for (Epoch e : epochs) {
            if (e.start() <= end) kept.add(e);
        }
        StringBuilder sb = new StringBuilder("0\n").append(kept.size()).append('\n');
        for (Epoch e : kept) sb.append(e.epoch()).append(' ').append(e.start()).append('\n');
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    /** LeaderEpochFileCache.epochEntriesInRange: epoch -> first offset within [base, end]. */
    static Map<Integer, Long> segmentEpochs(List<Epoch> epochs, long base, long end) {
        Map<Integer, Long> out = new TreeMap<>();
        for (int i = 0; i < epochs.size(); i++) {
            Epoch e = epochs.get(i);
            Long next = i + 1 < epochs.size() ? epochs.get(i + 1).start() : null;
            if (e.start() > end) break;
            if (next != null && next <= base) continue;
            out.put(e.epoch(), Math.max(e.start(), base));
        }
        check(!out.isEmpty(), "no leader epoch covers offsets " + base + ".." + end);
        return out;
    }

    // ------------------------------------------------------------------------------------------------------------
    // Index lookups (over the bytes the plugin returned)
    // ------------------------------------------------------------------------------------------------------------

    /** OffsetIndex.lookup: position of the largest entry with offset <= target, else 0. */
    static int lookupOffset(byte[] idx, long base, long target) {
        check(idx.length % 8 == 0, "offset index of " + idx.length + " bytes is not a multiple of 8");
        ByteBuffer b = ByteBuffer.wrap(idx);
        int pos = 0;
        for (int i = 0; i + 8 <= idx.length; i += 8) {
            int rel = b.getInt(i);
            int p = b.getInt(i + 4);
            if (i > 0 && rel == 0 && p == 0) break;  // preallocated zero tail
            if (base + rel > target) break;
            pos = p;
        }
        return pos;
    }

    /** TimeIndex.lookup: offset of the largest entry with timestamp <= ts, else the base offset. */
    static long lookupTimestamp(byte[] idx, long base, long ts) {
        check(idx.length % 12 == 0, "time index of " + idx.length + " bytes is not a multiple of 12");
        ByteBuffer b = ByteBuffer.wrap(idx);
        long offset = base;
        for (int i = 0; i + 12 <= idx.length; i += 12) {
            long t = b.getLong(i);
            int rel = b.getInt(i + 8);
            if (i > 0 && t == 0 && rel == 0) break;
            if (t > ts) break;
            offset = base + rel;
        }
        return offset;
    }

    // ------------------------------------------------------------------------------------------------------------
    // Streams
    // ------------------------------------------------------------------------------------------------------------

    static byte[] readAll(InputStream in) throws IOException {
        return in.readAllBytes();
    }

    static byte[] index(RemoteStorageManager rsm, Segment s, IndexType t) throws RemoteStorageException, IOException {
        try (InputStream in = rsm.fetchIndex(s.meta, t)) {
            check(in != null, "fetchIndex(" + t + ") returned null for segment " + s.base);
            return readAll(in);
        }
    }

    /** Compares bytes read at segment position pos with the local file. */
    static void same(Segment s, int pos, byte[] got, String what) {
        int end = pos + got.length;
        if (end > s.bytes.length || !Arrays.equals(got, 0, got.length, s.bytes, pos, end)) {
            int i = 0;
            while (i < got.length && pos + i < s.bytes.length && got[i] == s.bytes[pos + i]) i++;
            throw new AssertionError(what + ": segment " + s.base + " bytes [" + pos + ", " + end
                    + ") differ from the local .log at position " + (pos + i) + " (local size " + s.bytes.length + ")");
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    // ------------------------------------------------------------------------------------------------------------
    // The broker
    // ------------------------------------------------------------------------------------------------------------

    static final class Stats {
        final AtomicLong fetches = new AtomicLong();
        final AtomicLong timestampLookups = new AtomicLong();
        final AtomicLong bytes = new AtomicLong();
        final AtomicLong earlyCloses = new AtomicLong();
        final AtomicLong indexChecks = new AtomicLong();
    }

    /** RemoteLogReader.read for one offset: returns the segment position where the read stopped. */
    static int fetchOffset(RemoteStorageManager rsm, List<Segment> segs, long target, int maxBytes, Stats st)
            throws Exception {
        Segment s = floor(segs, target);
        String what = "fetch offset " + target + " (segment " + s.base + ", maxBytes " + maxBytes + ")";
        int start = lookupOffset(index(rsm, s, IndexType.OFFSET), s.base, target);
        int expected = firstBatchWithLast(s, target);
        check(expected >= 0, what + ": no local batch holds the target");
        check(start <= s.batchPos[expected], what + ": offset index gave position " + start
                + " past the target's batch at " + s.batchPos[expected]);
        long verified = 0;
        int p = start;
        try (InputStream in = rsm.fetchLogSegment(s.meta, start)) {
            check(in != null, what + ": fetchLogSegment returned null");
            int firstSize = -1;
            while (firstSize < 0) {  // RemoteLogInputStream + findFirstBatch
                byte[] head = Harness.readN(in, 17);
                same(s, p, head, what);
                check(head.length == 17, what + ": stream ended at position " + (p + head.length)
                        + " before the batch holding the target");
                ByteBuffer hb = ByteBuffer.wrap(head);
                int size = LOG_OVERHEAD + hb.getInt(8);
                byte[] rest = Harness.readN(in, size - 17);
                check(rest.length == size - 17, what + ": batch at " + p + " truncated to "
                        + (17 + rest.length) + " of " + size + " bytes");
                same(s, p + 17, rest, what);
                verified += size;
                long last = hb.getLong(0) + ByteBuffer.wrap(rest).getInt(23 - 17);
                if (last >= target) {
                    check(p == s.batchPos[expected], what + ": first batch with lastOffset >= target is at "
                            + p + ", a local scan says " + s.batchPos[expected]);
                    firstSize = size;
                }
                p += size;
            }
            // FetchDataInfo: the first batch whole (minOneMessage), then raw bytes up to maxBytes
            int remaining = Math.max(maxBytes, firstSize) - firstSize;
            if (remaining > 0) {
                byte[] more = Harness.readN(in, remaining);
                same(s, p, more, what);
                check(more.length == Math.min(remaining, s.bytes.length - p), what + ": got " + more.length
                        + " bytes after the first batch, expected " + Math.min(remaining, s.bytes.length - p));
                verified += more.length;
                p += more.length;
            }
            if (p < s.bytes.length) st.earlyCloses.incrementAndGet();
        }  // closed before EOF unless the segment ended: the broker never drains the stream
        st.fetches.incrementAndGet();
        st.bytes.addAndGet(verified);
        return p;
    }

    /**
     * A lagging consumer reading segment {@code s} front to back, {@code maxBytes} per fetch: each fetch asks for
     * the offset after the last whole batch the previous one returned, as a consumer's position moves. Returns
     * the number of fetches.
     */
    static int catchUp(RemoteStorageManager rsm, List<Segment> segs, Segment s, int maxBytes, Stats st)
            throws Exception {
        long target = s.base;
        int fetches = 0;
        long last = s.batchLast[s.batchLast.length - 1];
        while (target <= last) {
            int stop = fetchOffset(rsm, segs, target, maxBytes, st);
            fetches++;
            int i = s.batchPos.length - 1;
            while (i > 0 && s.batchPos[i] + batchSize(s, i) > stop) i--;  // the last batch returned whole
            check(s.batchLast[i] >= target, "catch-up of segment " + s.base + " stalled at offset " + target);
            target = s.batchLast[i] + 1;
        }
        return fetches;
    }

    static int batchSize(Segment s, int i) {
        return (i + 1 < s.batchPos.length ? s.batchPos[i + 1] : s.bytes.length) - s.batchPos[i];
    }

    /** RemoteLogManager.findOffsetByTimestamp down to the batch: the first batch with maxTimestamp >= ts. */
    static void fetchTimestamp(RemoteStorageManager rsm, List<Segment> segs, long ts, Stats st) throws Exception {
        Segment s = null;
        for (Segment c : segs) {
            RemoteLogSegmentMetadata m = c.meta;
            if (m == null) break;  // not tiered yet
            if (m.maxTimestampMs() >= ts) {
                s = c;
                break;
            }
        }
        String what = "ListOffsets timestamp " + ts;
        check(s != null, what + ": no copied segment has maxTimestamp >= ts");
        what += " (segment " + s.base + ")";
        long offset = lookupTimestamp(index(rsm, s, IndexType.TIMESTAMP), s.base, ts);
        int start = lookupOffset(index(rsm, s, IndexType.OFFSET), s.base, offset);
        int expected = -1;
        for (int i = 0; i < s.batchPos.length && expected < 0; i++) {
            if (s.batchMaxTs[i] >= ts) expected = i;
        }
        check(expected >= 0 && start <= s.batchPos[expected], what + ": indexes gave position " + start
                + ", past the first batch with maxTimestamp >= ts");
        long verified = 0;
        try (InputStream in = rsm.fetchLogSegment(s.meta, start)) {
            int p = start;
            while (true) {
                byte[] head = Harness.readN(in, BATCH_HEADER);
                same(s, p, head, what);
                check(head.length == BATCH_HEADER, what + ": stream ended at " + (p + head.length));
                ByteBuffer hb = ByteBuffer.wrap(head);
                int size = LOG_OVERHEAD + hb.getInt(8);
                byte[] rest = Harness.readN(in, size - BATCH_HEADER);
                same(s, p + BATCH_HEADER, rest, what);
                check(rest.length == size - BATCH_HEADER, what + ": batch at " + p + " truncated");
                verified += size;
                if (hb.getLong(35) >= ts) {
                    check(p == s.batchPos[expected], what + ": found the batch at " + p + ", a local scan says "
                            + s.batchPos[expected]);
                    break;
                }
                p += size;
            }
        }
        st.timestampLookups.incrementAndGet();
        st.bytes.addAndGet(verified);
    }

    static int firstSegmentWithMaxTs(List<Segment> segs, long ts) {
        for (int i = 0; i < segs.size(); i++) {
            if (segs.get(i).maxTimestamp >= ts) return i;
        }
        throw new AssertionError("no segment has a timestamp >= " + ts);
    }

    static Segment floor(List<Segment> segs, long offset) {
        Segment found = null;
        for (Segment s : segs) {
            if (s.base <= offset) found = s;
        }
        check(found != null && offset <= found.end, "offset " + offset + " is not in the copied range");
        return found;
    }

    static int firstBatchWithLast(Segment s, long target) {
        int lo = 0;
        int hi = s.batchLast.length - 1;
        int ans = -1;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            if (s.batchLast[mid] >= target) {
                ans = mid;
                hi = mid - 1;
            } else {
                lo = mid + 1;
            }
        }
        return ans;
    }

    static void checkIndexes(RemoteStorageManager rsm, Segment s, Stats st) throws Exception {
        String seg = "segment " + s.base + ": ";
        check(Arrays.equals(index(rsm, s, IndexType.OFFSET), Files.readAllBytes(s.offsetIdx)),
                seg + "OFFSET index differs from " + s.offsetIdx.getFileName());
        check(Arrays.equals(index(rsm, s, IndexType.TIMESTAMP), Files.readAllBytes(s.timeIdx)),
                seg + "TIMESTAMP index differs from " + s.timeIdx.getFileName());
        check(Arrays.equals(index(rsm, s, IndexType.PRODUCER_SNAPSHOT), Files.readAllBytes(s.snapshot)),
                seg + "PRODUCER_SNAPSHOT differs from " + s.snapshot.getFileName());
        byte[] epochs = index(rsm, s, IndexType.LEADER_EPOCH);
        check(Arrays.equals(epochs, s.epochBytes), seg + "LEADER_EPOCH differs from the bytes given at copy: "
                + new String(epochs, StandardCharsets.UTF_8).replace("\n", "\\n") + " vs "
                + new String(s.epochBytes, StandardCharsets.UTF_8).replace("\n", "\\n"));
        if (s.txnIdx != null && Files.size(s.txnIdx) == 0) {
            // an existing but empty .txnindex: empty bytes or not-found both mean "no aborted transactions" to
            // the broker's RemoteIndexCache
            try (InputStream in = rsm.fetchIndex(s.meta, IndexType.TRANSACTION)) {
                int n = readAll(in).length;
                check(n == 0, seg + "TRANSACTION index of an empty .txnindex has " + n + " bytes");
            } catch (RemoteResourceNotFoundException e) {
                // fine
            }
        } else if (s.txnIdx != null) {
            check(Arrays.equals(index(rsm, s, IndexType.TRANSACTION), Files.readAllBytes(s.txnIdx)),
                    seg + "TRANSACTION index differs from " + s.txnIdx.getFileName());
        } else {
            expectNotFound(() -> rsm.fetchIndex(s.meta, IndexType.TRANSACTION),
                    seg + "fetchIndex(TRANSACTION) without a .txnindex");
        }
        st.indexChecks.addAndGet(5);
    }

    /** The call must throw RemoteResourceNotFoundException itself (not later from the stream, not a parent type). */
    static void expectNotFound(Callable<InputStream> call, String what) throws Exception {
        InputStream in;
        try {
            in = call.call();
        } catch (RemoteResourceNotFoundException e) {
            return;
        } catch (RemoteStorageException e) {
            throw new AssertionError(what + ": expected RemoteResourceNotFoundException, got "
                    + e.getClass().getName() + ": " + e.getMessage() + " (cause " + e.getCause() + ")", e);
        }
        try (InputStream stream = in) {
            byte[] got = readAll(stream);
            throw new AssertionError(what + ": expected RemoteResourceNotFoundException, the call returned a stream of "
                    + got.length + " bytes");
        } catch (IOException e) {
            throw new AssertionError(what + ": expected RemoteResourceNotFoundException from the call, it returned a"
                    + " stream that failed on read with " + e + " (cause " + e.getCause() + ")", e);
        }
    }

    static void awaitAll(List<Future<Object>> fs) throws Exception {
        try {
            for (Future<Object> f : fs) {
                try {
                    f.get();
                } catch (ExecutionException e) {
                    Throwable c = e.getCause();
                    if (c instanceof Exception) throw (Exception) c;
                    if (c instanceof Error) throw (Error) c;
                    throw e;
                }
            }
        } finally {
            for (Future<Object> f : fs) f.cancel(true);
        }
    }

    /**
     * Copies the rolled segments of {@code logDir}, serves {@code fetches} fetches from {@code threads} reader
     * threads, checks every index, deletes everything; returns a one-line summary or throws AssertionError.
     */
    public static String run(String className, Map<String, Object> config, String logDir, String topicId, String topic,
                             int partition, int fetches, int threads) throws Exception {
        long t0 = System.nanoTime();
        Path dir = Paths.get(logDir);
        List<Segment> all = readLog(dir);
        List<Segment> segs = all.subList(0, all.size() - 1);  // the active segment is never copied
        List<Epoch> epochs = readCheckpoint(dir.resolve("leader-epoch-checkpoint"));
        TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(topicId), partition, topic);
        Stats st = new Stats();
        int customCount = 0;
        int customBytes = 0;
        long connections;
        int catchUpFetches = 0;
        long catchUpResumed;
        long catchUpIntoNext;
        RemoteStorageManager rsm = Harness.create(className, config);
        ExecutorService pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "remote-log-reader");
            t.setDaemon(true);
            return t;
        });
        try {
            // --- the reads, planned up front (deterministic): offset fetches and ListOffsets-by-timestamp ----------
            long lo = segs.get(0).base;
            long hi = segs.get(segs.size() - 1).end;
            long tsLo = segs.get(0).batchMaxTs[0];
            long tsHi = Long.MIN_VALUE;
            for (Segment s : segs) tsHi = Math.max(tsHi, s.maxTimestamp);
            Random rnd = new Random(405);
            List<Long> targets = new ArrayList<>();
            for (Segment s : segs) {  // edges first: each segment's first and last offset
                targets.add(s.base);
                targets.add(s.end);
            }
            while (targets.size() < fetches) targets.add(lo + (long) (rnd.nextDouble() * (hi - lo + 1)));
            List<List<Callable<Object>>> readsOf = new ArrayList<>();  // by the segment that must be tiered first
            for (int i = 0; i < segs.size(); i++) readsOf.add(new ArrayList<>());
            for (int i = 0; i < targets.size(); i++) {
                final long target = targets.get(i);
                final int maxBytes = FETCH_MAX_BYTES[i % FETCH_MAX_BYTES.length];
                final long ts = tsLo + (long) (rnd.nextDouble() * (tsHi - tsLo + 1));
                if (i % 8 == 7) {
                    readsOf.get(firstSegmentWithMaxTs(segs, ts)).add(() -> {
                        fetchTimestamp(rsm, segs, ts, st);
                        return null;
                    });
                } else {
                    readsOf.get(segs.indexOf(floor(segs, target))).add(() -> {
                        fetchOffset(rsm, segs, target, maxBytes, st);
                        return null;
                    });
                }
            }

            // --- copy (RLMCopyTask: one segment at a time, in offset order) while the RemoteLogReader threads
            // --- already serve the segments tiered so far -----------------------------------------------------------
            List<Future<Object>> reads = new ArrayList<>();
            for (int i = 0; i < segs.size(); i++) {
                Segment s = segs.get(i);
                check(s.batchLast[s.batchLast.length - 1] <= s.end, "segment " + s.base + " holds offset "
                        + s.batchLast[s.batchLast.length - 1] + " at or past the next segment's base " + (s.end + 1));
                check(Files.exists(s.snapshot), "no producer snapshot " + s.snapshot);
                s.epochBytes = checkpointUpTo(epochs, s.end);
                Map<Integer, Long> segEpochs = segmentEpochs(epochs, s.base, s.end);
                RemoteLogSegmentId id = new RemoteLogSegmentId(tip, Uuid.randomUuid());
                RemoteLogSegmentMetadata started = new RemoteLogSegmentMetadata(id, s.base, s.end, s.maxTimestamp,
                        BROKER_ID, System.currentTimeMillis(), s.bytes.length, segEpochs);
                LogSegmentData data = new LogSegmentData(s.log, s.offsetIdx, s.timeIdx, Optional.ofNullable(s.txnIdx),
                        s.snapshot, ByteBuffer.wrap(s.epochBytes));
                Optional<CustomMetadata> custom = rsm.copyLogSegmentData(started, data);
                check(custom != null, "copyLogSegmentData returned null instead of an Optional");
                if (custom.isPresent()) {
                    int n = custom.get().value().length;
                    check(n <= CUSTOM_METADATA_MAX_BYTES, "segment " + s.base + ": custom metadata of " + n
                            + " bytes exceeds remote.log.metadata.custom.metadata.max.bytes "
                            + CUSTOM_METADATA_MAX_BYTES + "; the broker would fail the copy");
                    customCount++;
                    customBytes += n;
                }
                // the COPY_SEGMENT_FINISHED update carries the custom metadata; later calls see the merged record
                s.meta = new RemoteLogSegmentMetadata(id, s.base, s.end, s.maxTimestamp, BROKER_ID,
                        System.currentTimeMillis(), s.bytes.length, custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                        segEpochs);
                for (Callable<Object> c : readsOf.get(i)) reads.add(pool.submit(c));
                reads.add(pool.submit(() -> {
                    checkIndexes(rsm, s, st);
                    return null;
                }));
            }
            awaitAll(reads);

            // --- a lagging consumer catching up, alone: front to back, 16 KiB per fetch (several per chunk) -------
            long resumedBefore = Harness.diagnostic(rsm, "sidecarStreamsResumed");
            long intoNextBefore = Harness.diagnostic(rsm, "sidecarStreamsIntoNextSegment");
            for (Segment s : segs) catchUpFetches += catchUp(rsm, segs, s, 16 * 1024, st);
            catchUpResumed = Harness.diagnostic(rsm, "sidecarStreamsResumed") - resumedBefore;
            catchUpIntoNext = Harness.diagnostic(rsm, "sidecarStreamsIntoNextSegment") - intoNextBefore;

            // --- retention: delete oldest first, then nothing is left to read -------------------------------------
            for (Segment s : segs) {
                try (InputStream in = rsm.fetchLogSegment(s.meta, 0)) {  // a stream closed early: kept, maybe
                    check(Harness.readN(in, 1).length == 1, "segment " + s.base + ": empty at position 0");
                }
                rsm.deleteLogSegmentData(s.meta);
                rsm.deleteLogSegmentData(s.meta);  // retried deletes must not fail
                expectNotFound(() -> rsm.fetchLogSegment(s.meta, 0), "segment " + s.base + ": fetch after delete");
                expectNotFound(() -> rsm.fetchIndex(s.meta, IndexType.OFFSET),
                        "segment " + s.base + ": fetchIndex(OFFSET) after delete");
            }
            connections = Harness.diagnostic(rsm, "sidecarConnectionsOpened");  // -1 in-process
        } finally {
            pool.shutdownNow();
            rsm.close();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        return String.format("OK brokersim segments_copied=%d offsets=%d-%d custom_metadata=%d custom_bytes=%d"
                        + " fetches=%d timestamp_lookups=%d early_closes=%d threads=%d bytes_verified=%d"
                        + " index_checks=%d deleted=%d connections=%d catchup_fetches=%d catchup_resumed=%d"
                        + " catchup_into_next=%d seconds=%.2f",
                segs.size(), segs.get(0).base, segs.get(segs.size() - 1).end, customCount, customBytes,
                st.fetches.get(), st.timestampLookups.get(), st.earlyCloses.get(), threads, st.bytes.get(),
                st.indexChecks.get(), segs.size(), connections, catchUpFetches, catchUpResumed, catchUpIntoNext,
                secs);
    }

    /** {@code java -cp ... BrokerSim <shimClass> <logDir> <topicId> <topic> <partition> <fetches> <threads> -- k=v...} */
    public static void main(String[] args) {
        Harness.Args parsed = new Harness.Args(args, 0);
        List<String> pos = parsed.positional;
        Harness.report(() -> run(pos.get(0), parsed.config, pos.get(1), pos.get(2), pos.get(3),
                Integer.parseInt(pos.get(4)), Integer.parseInt(pos.get(5)), Integer.parseInt(pos.get(6))));
    }
}
