package io.kts.shim;

import java.io.InputStream;
import java.lang.System.Logger.Level;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/**
 * The class a Kafka broker loads ({@code remote.log.storage.manager.class.name}). It forwards every KIP-405 call
 * to kafka-tiered-storage's Python RemoteStorageManager, either in a supervised sidecar process (default) or
 * in this very process when the broker was started by {@code kts kafka-server-start}.
 *
 * <p>Transport choice ({@code rsm.config.jvm.transport}): {@code sidecar}, {@code inprocess}, or {@code auto}
 * (the default: in-process when a Python bridge is registered, otherwise sidecar). All configuration keys,
 * including the shim's own, are passed to Python untouched.
 */
public class PythonRemoteStorageManager implements RemoteStorageManager {
    private static final System.Logger LOG = System.getLogger("io.kts.shim.PythonRemoteStorageManager");

    private volatile Transport transport;
    private volatile MetricsBeans beans;

    /** Kafka instantiates plugins through the no-arg constructor. */
    public PythonRemoteStorageManager() {
    }

    @Override
    public void configure(Map<String, ?> configs) {
        Map<String, String> config = Wire.stringify(configs);
        config.put(Version.KEY, Version.JAR);  // Python refuses a jar of another release
        Settings settings = new Settings(config);
        Object bridge = settings.transport.equals("sidecar") ? null : ShimRegistry.lookup();
        if (settings.transport.equals("inprocess") && bridge == null) {
            throw new IllegalStateException("kafka-tiered-storage: rsm.config.jvm.transport=inprocess but no Python"
                    + " bridge is registered in this JVM; start the broker with `kts kafka-server-start"
                    + " config/server.properties`, or use jvm.transport=sidecar");
        }
        Transport old = transport;
        Transport t;
        if (bridge != null) {
            t = InProcessTransport.open(bridge, config);
        } else {
            SidecarTransport s = new SidecarTransport(settings, config);
            s.start();
            t = s;
        }
        transport = t;
        MetricsBeans oldBeans = beans;
        if (oldBeans != null) oldBeans.close();
        beans = new MetricsBeans(t::metrics, t::ownMetrics);
        if (old != null) old.close();
        LOG.log(Level.INFO, "kafka-tiered-storage RemoteStorageManager configured ({0} transport)", t.name());
    }

    private Transport transport(String op) throws RemoteStorageException {
        Transport t = transport;
        if (t == null) throw new RemoteStorageException(op + ": the RemoteStorageManager is not configured");
        return t;
    }

    /** A segment's id: the broker gives every copy attempt a new one, so equal ids mean the same bytes. */
    private static String segmentOf(RemoteLogSegmentMetadata meta) {
        return meta.remoteLogSegmentId().id().toString();
    }

    private static String path(Path p) {
        return p.toAbsolutePath().toString();
    }

    /** Any RuntimeException (a bug, a bridge failure) still reaches Kafka as a declared, described exception. */
    private static RemoteStorageException unexpected(String op, RuntimeException e) {
        return new RemoteStorageException(op + " failed: " + Wire.describe(e), e);
    }

    @Override
    public Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(
            RemoteLogSegmentMetadata remoteLogSegmentMetadata, LogSegmentData logSegmentData)
            throws RemoteStorageException {
        String op = "copyLogSegmentData";
        try {
            byte[] meta = Wire.encodeMetadata(remoteLogSegmentMetadata);
            Transport t = transport(op);
            t.forget(segmentOf(remoteLogSegmentMetadata));
            String txn = logSegmentData.transactionIndex().map(PythonRemoteStorageManager::path).orElse(null);
            byte[] custom = t.copy(meta, path(logSegmentData.logSegment()),
                    path(logSegmentData.offsetIndex()), path(logSegmentData.timeIndex()), txn,
                    path(logSegmentData.producerSnapshotIndex()), Wire.bytesOf(logSegmentData.leaderEpochIndex()));
            discoverBeans();
            return custom == null ? Optional.empty() : Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(custom));
        } catch (RuntimeException e) {
            throw unexpected(op, e);
        }
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata remoteLogSegmentMetadata, int startPosition)
            throws RemoteStorageException {
        return fetch(remoteLogSegmentMetadata, startPosition, -1);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata remoteLogSegmentMetadata, int startPosition,
                                       int endPosition) throws RemoteStorageException {
        if (endPosition < 0) {
            throw new RemoteStorageException("fetchLogSegment: endPosition " + endPosition + " is negative");
        }
        return fetch(remoteLogSegmentMetadata, startPosition, endPosition);
    }

    private InputStream fetch(RemoteLogSegmentMetadata meta, int start, int end) throws RemoteStorageException {
        String op = "fetchLogSegment";
        if (start < 0) throw new RemoteStorageException(op + ": startPosition " + start + " is negative");
        if (end >= 0 && end < start) {
            throw new RemoteStorageException(op + ": endPosition " + end + " is before startPosition " + start);
        }
        try {
            return transport(op).fetch(Wire.encodeMetadata(meta), segmentOf(meta), start, end);
        } catch (RuntimeException e) {
            throw unexpected(op, e);
        }
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata remoteLogSegmentMetadata, IndexType indexType)
            throws RemoteStorageException {
        String op = "fetchIndex";
        try {
            return transport(op).fetchIndex(Wire.encodeMetadata(remoteLogSegmentMetadata),
                    segmentOf(remoteLogSegmentMetadata), indexType.name());
        } catch (RuntimeException e) {
            throw unexpected(op, e);
        }
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata remoteLogSegmentMetadata) throws RemoteStorageException {
        String op = "deleteLogSegmentData";
        try {
            Transport t = transport(op);
            String segment = segmentOf(remoteLogSegmentMetadata);
            t.forget(segment);
            try {
                t.delete(Wire.encodeMetadata(remoteLogSegmentMetadata));
            } finally {
                // Again after: an index that came along with a read still in flight while the delete ran (a
                // stream going on into this segment) is not held past it, so no fetchIndex answers afterwards.
                t.forget(segment);
            }
            discoverBeans();
        } catch (RuntimeException e) {
            throw unexpected(op, e);
        }
    }

    private void discoverBeans() {
        MetricsBeans b = beans;
        if (b != null) b.discoverSoon();
    }

    @Override
    public void close() {
        MetricsBeans b = beans;
        beans = null;
        if (b != null) b.close();
        Transport t = transport;
        transport = null;
        if (t != null) t.close();
    }

    /** The transport in use ("sidecar", "in-process"), or null before configure(): for tests and diagnostics. */
    public String transportName() {
        Transport t = transport;
        return t == null ? null : t.name();
    }

    /** pid of the sidecar process, or -1 (in-process or not configured): for tests and diagnostics. */
    public long sidecarPid() {
        return ofSidecar(SidecarTransport::sidecarPid);
    }

    /** Connections the shim opened to its sidecar so far, or -1 (in-process): for tests and diagnostics. */
    public long sidecarConnectionsOpened() {
        return ofSidecar(SidecarTransport::connectionsOpened);
    }

    /** Broker fetches that went on with a stream kept from the segment's previous fetch, or -1 (in-process). */
    public long sidecarStreamsResumed() {
        return ofSidecar(SidecarTransport::streamsResumed);
    }

    /** Streams that went on into the partition's next segment at a segment's end, or -1 (in-process). */
    public long sidecarStreamsIntoNextSegment() {
        return ofSidecar(SidecarTransport::streamsIntoNextSegment);
    }

    /** Indexes the sidecar sent ahead of the broker's call for them, held right now, or -1 (in-process). */
    public long sidecarIndexesHeld() {
        return ofSidecar(SidecarTransport::indexesHeld);
    }

    /** Streams kept for a next fetch right now, or -1 (in-process): for tests and diagnostics. */
    public long sidecarStreamsKept() {
        return ofSidecar(SidecarTransport::streamsKept);
    }

    private long ofSidecar(java.util.function.ToLongFunction<SidecarTransport> counter) {
        Transport t = transport;
        return t instanceof SidecarTransport ? counter.applyAsLong((SidecarTransport) t) : -1;
    }

    /** Metrics snapshots taken from Python so far (-1 before configure()): for tests and diagnostics. */
    public long metricsRequests() {
        MetricsBeans b = beans;
        return b == null ? -1 : b.requests();
    }

    /** One protocol round trip with no storage work (sidecar only): for the benchmark. */
    public void ping() throws RemoteStorageException {
        Transport t = transport("ping");
        if (t instanceof SidecarTransport) ((SidecarTransport) t).ping();
    }
}
