package org.apache.kafka.common;

import java.util.Objects;

/** Compile-time/test stub of kafka-clients' TopicIdPartition. */
public class TopicIdPartition {
    private final Uuid topicId;
    private final TopicPartition topicPartition;

    public TopicIdPartition(Uuid topicId, TopicPartition topicPartition) {
        this.topicId = Objects.requireNonNull(topicId, "topicId can not be null");
        this.topicPartition = Objects.requireNonNull(topicPartition, "topicPartition can not be null");
    }

    public TopicIdPartition(Uuid topicId, int partition, String topic) {
        this(topicId, new TopicPartition(topic, partition));
    }

    public Uuid topicId() {
        return topicId;
    }

    public String topic() {
        return topicPartition.topic();
    }

    public int partition() {
        return topicPartition.partition();
    }

    public TopicPartition topicPartition() {
        return topicPartition;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof TopicIdPartition)) return false;
        TopicIdPartition t = (TopicIdPartition) o;
        return topicId.equals(t.topicId) && topicPartition.equals(t.topicPartition);
    }

    @Override
    public int hashCode() {
        return Objects.hash(topicId, topicPartition);
    }

    @Override
    public String toString() {
        return topicId + ":" + topic() + "-" + partition();
    }
}
