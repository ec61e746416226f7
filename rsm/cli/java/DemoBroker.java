// `kts demo` on the JVM: plays the broker's RemoteLogManager for the demo's segments. It loads the shim by class
// name (as the broker does from remote.log.storage.manager.class.name), configures it with the rsm.config.* map,
// copies each segment through copyLogSegmentData and fetches it back whole, comparing every byte with the file.
// Run as a single source file: java -cp <shim jar>:<Kafka API jars> DemoBroker.java <spec> -- key=value...
// Spec lines (tab separated): topicId topic partition segmentId start end maxTs size log offsetIdx timeIdx
// txnIdx|- snapshot epochCheckpoint epochs(e:offset,...)

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

public final class DemoBroker {
    private DemoBroker() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, Object> config = new HashMap<>();
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            config.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        String shimClass = "io.kts.shim.PythonRemoteStorageManager";
        RemoteStorageManager rsm = (RemoteStorageManager) Class.forName(shimClass).getDeclaredConstructor()
                .newInstance();
        rsm.configure(config);
        System.out.println("CONFIGURED " + shimClass);
        try {
            for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
                if (line.isBlank()) continue;
                String[] f = line.split("\t");
                TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(f[0]), Integer.parseInt(f[2]), f[1]);
                Map<Integer, Long> epochs = new HashMap<>();
                for (String e : f[14].split(",")) {
                    String[] kv = e.split(":");
                    epochs.put(Integer.parseInt(kv[0]), Long.parseLong(kv[1]));
                }
                RemoteLogSegmentMetadata meta = new RemoteLogSegmentMetadata(
                        new RemoteLogSegmentId(tip, Uuid.fromString(f[3])), Long.parseLong(f[4]),
                        Long.parseLong(f[5]), Long.parseLong(f[6]), 0, 0L, Integer.parseInt(f[7]), epochs);
                Path log = Paths.get(f[8]);
                LogSegmentData data = new LogSegmentData(log, Paths.get(f[9]), Paths.get(f[10]),
                        f[11].equals("-") ? Optional.empty() : Optional.of(Paths.get(f[11])), Paths.get(f[12]),
                        ByteBuffer.wrap(Files.readAllBytes(Paths.get(f[13]))));
                Optional<CustomMetadata> custom = rsm.copyLogSegmentData(meta, data);
                byte[] back;
                try (InputStream in = rsm.fetchLogSegment(meta, 0)) {
                    back = in.readAllBytes();
                }
                if (!Arrays.equals(back, Files.readAllBytes(log))) {
                    System.out.println("MISMATCH " + f[3]);
                    System.exit(1);
                }
                System.out.println("COPIED " + f[3] + " " + back.length + " "
                        + custom.map(c -> HexFormat.of().formatHex(c.value())).orElse("-"));
            }
        } finally {
            rsm.close();
        }
        System.out.println("CLOSED");
    }
}
