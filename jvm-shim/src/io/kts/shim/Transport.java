package io.kts.shim;

import java.io.InputStream;
import java.util.Map;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * One way of reaching the Python RemoteStorageManager. The shim encodes Kafka's metadata once
 * ({@link Wire#encodeMetadata}) so both transports send the same bytes and the Python side has a single decoder.
 */
interface Transport extends AutoCloseable {

    /** Returns the custom metadata bytes, or null for Optional.empty(). */
    byte[] copy(byte[] metadata, String logSegment, String offsetIndex, String timeIndex, String transactionIndex,
                String producerSnapshot, byte[] leaderEpochs) throws RemoteStorageException;

    /**
     * endPosition is -1 for "to the end of the segment". {@code segment} names the segment (its id) so a
     * transport may go on with a stream it kept from the segment's previous fetch.
     */
    InputStream fetch(byte[] metadata, String segment, int startPosition, int endPosition)
            throws RemoteStorageException;

    /** The segment is being copied (again) or deleted: nothing kept from an earlier fetch of it may be served. */
    default void forget(String segment) {
    }

    /** {@code segment} names the segment (its id), as for {@link #fetch}. */
    InputStream fetchIndex(byte[] metadata, String segment, String indexType) throws RemoteStorageException;

    void delete(byte[] metadata) throws RemoteStorageException;

    /** Every metric of the Python registry, as {@link MetricsBeans#parse} reads them. */
    byte[] metrics() throws RemoteStorageException;

    /**
     * Metrics the transport keeps on the JVM side (ObjectName -> attribute -> value), read live on every JMX read:
     * they must stay right while Python is unreachable (a dead sidecar).
     */
    default Map<String, Map<String, Double>> ownMetrics() {
        return Map.of();
    }

    /** A short name for log lines and errors ("sidecar", "in-process"). */
    String name();

    @Override
    void close();
}
