import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consumers catching up together: one consumer (and thread) per partition 0..N-1 of a topic, each assigned its
 * partition, reading it from the start to the end offset it had when all started. Each prints
 * {@code partition=P bytes=B records=R seconds=S} (key and value bytes; from the common start to its last record).
 *
 * <p>java -cp classes:libs/* CatchUpConsumers BOOTSTRAP TOPIC N
 */
public final class CatchUpConsumers {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int n = Integer.parseInt(args[2]);
        CountDownLatch ready = new CountDownLatch(n);
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        String[] results = new String[n];
        Throwable[] errors = new Throwable[n];
        for (int i = 0; i < n; i++) {
            final int p = i;
            Thread t = new Thread(() -> {
                try {
                    results[p] = consume(bootstrap, new TopicPartition(topic, p), ready, go);
                } catch (Throwable e) {
                    errors[p] = e;
                    ready.countDown();
                }
            }, "consumer-" + p);
            threads.add(t);
            t.start();
        }
        ready.await();
        go.countDown();
        for (Thread t : threads) {
            t.join();
        }
        for (int i = 0; i < n; i++) {
            if (errors[i] != null) {
                System.err.println("partition " + i + ": " + errors[i]);
                System.exit(1);
            }
            System.out.println(results[i]);
        }
    }

    private static String consume(String bootstrap, TopicPartition tp, CountDownLatch ready, CountDownLatch go)
            throws InterruptedException {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.auto.commit", "false");
        props.put("client.id", "catch-up-" + tp.partition());
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(tp));
            Map<TopicPartition, Long> ends = consumer.endOffsets(List.of(tp));
            long end = ends.get(tp);
            consumer.seekToBeginning(List.of(tp));
            consumer.position(tp);
            ready.countDown();
            go.await();
            long started = System.nanoTime();
            long last = started;
            long bytes = 0;
            long records = 0;
            long deadline = started + Duration.ofMinutes(15).toNanos();
            while (consumer.position(tp) < end) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(tp + ": not at offset " + end + " after 15 minutes");
                }
                ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : polled) {
                    bytes += Math.max(0, r.serializedKeySize()) + Math.max(0, r.serializedValueSize());
                    records++;
                }
                if (!polled.isEmpty()) {
                    last = System.nanoTime();
                }
            }
            return String.format("partition=%d bytes=%d records=%d seconds=%.3f",
                    tp.partition(), bytes, records, (last - started) / 1e9);
        }
    }
}
