package org.apache.kafka.common;

import java.io.Serializable;
import java.util.Objects;

/** Compile-time/test stub of kafka-clients' TopicPartition. */
public final class TopicPartition implements Serializable {
    private final int partition;
    private final String topic;

    public TopicPartition(String topic, int partition) {
        this.partition = partition;
        this.topic = topic;
    }

    public int partition() {
        return partition;
    }

    public String topic() {
        return topic;
    }

    @Override
    public boolean equals(Object obj) {
        if (!(obj instanceof TopicPartition)) return false;
        TopicPartition o = (TopicPartition) obj;
        return partition == o.partition && Objects.equals(topic, o.topic);
    }

    @Override
    public int hashCode() {
        return Objects.hash(topic, partition);
    }

    @Override
    public String toString() {
        return topic + "-" + partition;
    }
}
