package org.apache.kafka.server.log.remote.storage;

import org.apache.kafka.common.TopicIdPartition;

/** Compile-time/test stub of Kafka's RemoteLogMetadata. */
public abstract class RemoteLogMetadata {
    private final int brokerId;
    private final long eventTimestampMs;

    protected RemoteLogMetadata(int brokerId, long eventTimestampMs) {
        this.brokerId = brokerId;
        this.eventTimestampMs = eventTimestampMs;
    }

    public long eventTimestampMs() {
        return eventTimestampMs;
    }

    public int brokerId() {
        return brokerId;
    }

    public abstract TopicIdPartition topicIdPartition();
}
