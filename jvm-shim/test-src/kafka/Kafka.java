package kafka;

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/**
 * Test stand-in for the broker's main class (never shipped): reads server.properties, registers a shutdown hook
 * first (as kafka.Kafka does), creates the RSM by reflection, configures it with rsm.config. stripped, calls
 * it, and exits with System.exit like the real broker, so `kts kafka-server-start` is exercised end to end.
 */
public final class Kafka {
    private Kafka() {
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        System.out.println("FAKE-KAFKA start maxHeapMB=" + Runtime.getRuntime().maxMemory() / (1024 * 1024)
                + " logs.dir=" + System.getProperty("kafka.logs.dir")
                + " marker=" + System.getProperty("kts.test.marker"));
        final RemoteStorageManager[] holder = new RemoteStorageManager[1];
        Thread hook = new Thread(() -> {
            try {
                probe(holder[0], "hook");
                holder[0].close();
                System.out.println("FAKE-KAFKA hook-closed");
            } catch (Throwable t) {
                System.out.println("FAKE-KAFKA hook-failed " + t);
            }
            System.out.flush();
        }, "kafka-shutdown-hook");
        Runtime.getRuntime().addShutdownHook(hook);
        ClassLoader loader = Thread.currentThread().getContextClassLoader();
        RemoteStorageManager rsm = (RemoteStorageManager) Class.forName(
                props.getProperty("remote.log.storage.manager.class.name"), true, loader)
                .getDeclaredConstructor().newInstance();
        Map<String, Object> cfg = new HashMap<>();
        for (String k : props.stringPropertyNames()) {
            if (k.startsWith("rsm.config.")) cfg.put(k.substring("rsm.config.".length()), props.getProperty(k));
        }
        rsm.configure(cfg);
        holder[0] = rsm;
        System.out.println("FAKE-KAFKA transport=" + rsm.getClass().getMethod("transportName").invoke(rsm));
        probe(rsm, "main");
        if (Boolean.parseBoolean(props.getProperty("fake.kafka.stuck.reader"))) startStuckReader(rsm);
        System.out.flush();
        String wait = props.getProperty("fake.kafka.wait.ms");
        if (wait != null) Thread.sleep(Long.parseLong(wait));
        System.exit(0);
    }

    /**
     * A reader thread whose fetchIndex of topic "stuck" is still running in the plugin when the shutdown hooks
     * have finished, as a fetch from a store that stopped answering would be.
     */
    private static void startStuckReader(RemoteStorageManager rsm) {
        Thread reader = new Thread(() -> {
            try {
                probe(rsm, "stuck-reader", "stuck");
            } catch (Throwable t) {
                System.out.println("FAKE-KAFKA stuck-reader failed " + t);
            }
        }, "fake-remote-reader");
        // Said before the start: the reader's fetch is the line the test sends SIGTERM on, and the halt may come
        // before this thread prints anything after it.
        System.out.println("FAKE-KAFKA stuck-reader started");
        System.out.flush();
        reader.start();
    }

    private static void probe(RemoteStorageManager rsm, String where) throws Exception {
        probe(rsm, where, "probe");
    }

    private static void probe(RemoteStorageManager rsm, String where, String topic) throws Exception {
        TopicIdPartition tip = new TopicIdPartition(Uuid.randomUuid(), 0, topic);
        Map<Integer, Long> epochs = new HashMap<>();
        epochs.put(0, 0L);
        RemoteLogSegmentMetadata meta = new RemoteLogSegmentMetadata(
                new RemoteLogSegmentId(tip, Uuid.randomUuid()), 0, 10, 0, 0, 0, 100, epochs);
        try {
            rsm.fetchIndex(meta, RemoteStorageManager.IndexType.OFFSET).close();
            System.out.println("FAKE-KAFKA " + where + "-probe unexpected success");
        } catch (RemoteResourceNotFoundException e) {
            System.out.println("FAKE-KAFKA " + where + "-probe not-found: " + e.getMessage());
        }
    }
}
