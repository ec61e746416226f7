package org.apache.kafka.server.log.remote.storage;

import java.util.Objects;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;

/** Compile-time/test stub of Kafka's RemoteLogSegmentId. */
public class RemoteLogSegmentId {
    private final TopicIdPartition topicIdPartition;
    private final Uuid id;

    public RemoteLogSegmentId(TopicIdPartition topicIdPartition, Uuid id) {
        this.topicIdPartition = Objects.requireNonNull(topicIdPartition, "topicIdPartition can not be null");
        this.id = Objects.requireNonNull(id, "id can not be null");
    }

    public static RemoteLogSegmentId generateNew(TopicIdPartition topicIdPartition) {
        return new RemoteLogSegmentId(topicIdPartition, Uuid.randomUuid());
    }

    public TopicIdPartition topicIdPartition() {
        return topicIdPartition;
    }

    public Uuid id() {
        return id;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof RemoteLogSegmentId)) return false;
        RemoteLogSegmentId that = (RemoteLogSegmentId) o;
        return topicIdPartition.equals(that.topicIdPartition) && id.equals(that.id);
    }

    @Override
    public int hashCode() {
        return Objects.hash(topicIdPartition, id);
    }

    @Override
    public String toString() {
        return "RemoteLogSegmentId{topicIdPartition=" + topicIdPartition + ", id=" + id + "}";
    }
}
