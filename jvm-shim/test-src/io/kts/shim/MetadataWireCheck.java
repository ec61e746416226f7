package io.kts.shim;

import java.lang.reflect.Constructor;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;

/**
 * Prints, in hex, the metadata record the shim sends to Python ({@link Wire#encodeMetadata}) for one segment's
 * metadata, built as the broker on this class path would: with Kafka 4.0's constructor that takes txnIdxEmpty
 * (true) where the class has it, else with the 3.x one. Then a line saying which. Run by
 * tests/jvm/test_shim_txn_index.py on the jars of 3.x and 4.x releases.
 */
public final class MetadataWireCheck {
    private MetadataWireCheck() {
    }

    public static void main(String[] args) throws Exception {
        TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(args[0]), Integer.parseInt(args[2]), args[1]);
        RemoteLogSegmentId id = new RemoteLogSegmentId(tip, Uuid.fromString(args[3]));
        Map<Integer, Long> epochs = new HashMap<>();
        epochs.put(0, 0L);
        epochs.put(3, 500L);
        RemoteLogSegmentMetadata meta;
        String shape;
        try {
            Constructor<RemoteLogSegmentMetadata> with = RemoteLogSegmentMetadata.class.getConstructor(
                    RemoteLogSegmentId.class, long.class, long.class, long.class, int.class, long.class, int.class,
                    Map.class, boolean.class);
            meta = with.newInstance(id, 0L, 999L, 1_700_000_000_000L, 1, 1_700_000_000_001L, 4096, epochs, true);
            shape = "4.0";
        } catch (NoSuchMethodException e) {
            meta = new RemoteLogSegmentMetadata(id, 0L, 999L, 1_700_000_000_000L, 1, 1_700_000_000_001L, 4096, epochs);
            shape = "3.x";
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : Wire.encodeMetadata(meta)) hex.append(String.format("%02x", b & 0xFF));
        System.out.println(hex);
        System.out.println(shape);
    }
}
