package org.apache.kafka.server.log.remote.storage;

import java.util.Arrays;
import java.util.Collections;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.kafka.common.TopicIdPartition;

/**
 * Test only, never packaged (build.sh puts it in build/kafka-4x-metadata-stub.jar, ahead of the 3.6-shaped stubs on
 * a test's class path): RemoteLogSegmentMetadata as Kafka 4.0 has it, with txnIdxEmpty, so a test can run the
 * shim's reflective lookup of the getter where it exists (tests/jvm/test_shim_txn_index.py).
 */
public class RemoteLogSegmentMetadata extends RemoteLogMetadata {
    private final RemoteLogSegmentId remoteLogSegmentId;
    private final long startOffset;
    private final long endOffset;
    private final NavigableMap<Integer, Long> segmentLeaderEpochs;
    private final int segmentSizeInBytes;
    private final Optional<CustomMetadata> customMetadata;
    private final RemoteLogSegmentState state;
    private final long maxTimestampMs;
    private final boolean txnIdxEmpty;

    public RemoteLogSegmentMetadata(RemoteLogSegmentId remoteLogSegmentId, long startOffset, long endOffset,
                                    long maxTimestampMs, int brokerId, long eventTimestampMs,
                                    int segmentSizeInBytes, Optional<CustomMetadata> customMetadata,
                                    RemoteLogSegmentState state, Map<Integer, Long> segmentLeaderEpochs,
                                    boolean txnIdxEmpty) {
        super(brokerId, eventTimestampMs);
        this.txnIdxEmpty = txnIdxEmpty;
        this.remoteLogSegmentId = Objects.requireNonNull(remoteLogSegmentId, "remoteLogSegmentId can not be null");
        this.state = Objects.requireNonNull(state, "state can not be null");
        this.startOffset = startOffset;
        this.endOffset = endOffset;
        this.maxTimestampMs = maxTimestampMs;
        this.segmentSizeInBytes = segmentSizeInBytes;
        this.customMetadata = Objects.requireNonNull(customMetadata, "customMetadata can not be null");
        if (segmentLeaderEpochs == null || segmentLeaderEpochs.isEmpty()) {
            throw new IllegalArgumentException("segmentLeaderEpochs can not be null or empty");
        }
        this.segmentLeaderEpochs = Collections.unmodifiableNavigableMap(new TreeMap<>(segmentLeaderEpochs));
    }

    public RemoteLogSegmentMetadata(RemoteLogSegmentId remoteLogSegmentId, long startOffset, long endOffset,
                                    long maxTimestampMs, int brokerId, long eventTimestampMs,
                                    int segmentSizeInBytes, Optional<CustomMetadata> customMetadata,
                                    RemoteLogSegmentState state, Map<Integer, Long> segmentLeaderEpochs) {
        this(remoteLogSegmentId, startOffset, endOffset, maxTimestampMs, brokerId, eventTimestampMs,
             segmentSizeInBytes, customMetadata, state, segmentLeaderEpochs, false);
    }

    public RemoteLogSegmentMetadata(RemoteLogSegmentId remoteLogSegmentId, long startOffset, long endOffset,
                                    long maxTimestampMs, int brokerId, long eventTimestampMs,
                                    int segmentSizeInBytes, Map<Integer, Long> segmentLeaderEpochs,
                                    boolean txnIdxEmpty) {
        this(remoteLogSegmentId, startOffset, endOffset, maxTimestampMs, brokerId, eventTimestampMs,
             segmentSizeInBytes, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_STARTED, segmentLeaderEpochs,
             txnIdxEmpty);
    }

    public RemoteLogSegmentMetadata(RemoteLogSegmentId remoteLogSegmentId, long startOffset, long endOffset,
                                    long maxTimestampMs, int brokerId, long eventTimestampMs,
                                    int segmentSizeInBytes, Map<Integer, Long> segmentLeaderEpochs) {
        this(remoteLogSegmentId, startOffset, endOffset, maxTimestampMs, brokerId, eventTimestampMs,
             segmentSizeInBytes, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_STARTED, segmentLeaderEpochs);
    }

    public RemoteLogSegmentId remoteLogSegmentId() {
        return remoteLogSegmentId;
    }

    public long startOffset() {
        return startOffset;
    }

    public long endOffset() {
        return endOffset;
    }

    public int segmentSizeInBytes() {
        return segmentSizeInBytes;
    }

    public long maxTimestampMs() {
        return maxTimestampMs;
    }

    public NavigableMap<Integer, Long> segmentLeaderEpochs() {
        return segmentLeaderEpochs;
    }

    public Optional<CustomMetadata> customMetadata() {
        return customMetadata;
    }

    public RemoteLogSegmentState state() {
        return state;
    }

    public boolean isTxnIdxEmpty() {
        return txnIdxEmpty;
    }

    @Override
    public TopicIdPartition topicIdPartition() {
        return remoteLogSegmentId.topicIdPartition();
    }

    /** Opaque bytes a plugin returns from copyLogSegmentData; the broker stores them with the segment. */
    public static class CustomMetadata {
        private final byte[] value;

        public CustomMetadata(byte[] value) {
            this.value = value;
        }

        public byte[] value() {
            return value;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof CustomMetadata && Arrays.equals(value, ((CustomMetadata) o).value);
        }

        @Override
        public int hashCode() {
            return Arrays.hashCode(value);
        }
    }
}
