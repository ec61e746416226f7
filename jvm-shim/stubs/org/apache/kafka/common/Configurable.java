package org.apache.kafka.common;

import java.util.Map;

/** Compile-time stub of kafka-clients' Configurable. Never packaged: the broker provides the real class. */
public interface Configurable {
    void configure(Map<String, ?> configs);
}
