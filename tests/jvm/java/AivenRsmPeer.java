import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

/**
 * Drives Aiven's own RemoteStorageManager (io.aiven.kafka.tieredstorage.RemoteStorageManager, built from its
 * source by jvm-shim/aiven/build.sh) as a broker would, for the compatibility tests.
 *
 * copy CONFIG SPEC          : copies every segment of SPEC
 * fetch CONFIG SPEC OUTDIR  : writes OUTDIR/log.N (the whole segment), range.N (bytes [size/3, 2*size/3]) and
 *                             OFFSET.N, TIMESTAMP.N, PRODUCER_SNAPSHOT.N, LEADER_EPOCH.N, TRANSACTION.N (absent
 *                             when the plugin answers RemoteResourceNotFoundException)
 *
 * CONFIG is a properties file of the plugin's configuration; SPEC is the harness's tab-separated segment list
 * (tests/support/jvm_testing.py write_spec). A failure prints "FAILED <class>: <message>" for each cause to stderr
 * and exits with 3.
 */
public final class AivenRsmPeer {
    private static final class Seg {
        RemoteLogSegmentMetadata meta;
        LogSegmentData data;
    }

    private static List<Seg> readSpec(Path spec) throws Exception {
        List<Seg> out = new ArrayList<>();
        for (String line : Files.readAllLines(spec)) {
            if (line.isEmpty()) continue;
            String[] f = line.split("\t");
            TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(f[0]),
                    new TopicPartition(f[1], Integer.parseInt(f[2])));
            Map<Integer, Long> epochs = new HashMap<>();
            epochs.put(0, Long.parseLong(f[4]));
            Seg s = new Seg();
            s.meta = new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tip, Uuid.fromString(f[3])),
                    Long.parseLong(f[4]), Long.parseLong(f[5]), Long.parseLong(f[6]), 0, 0L,
                    Integer.parseInt(f[7]), epochs);
            Optional<Path> txn = f[11].equals("-") ? Optional.empty() : Optional.of(Paths.get(f[11]));
            s.data = new LogSegmentData(Paths.get(f[8]), Paths.get(f[9]), Paths.get(f[10]), txn, Paths.get(f[12]),
                    ByteBuffer.wrap(Files.readAllBytes(Paths.get(f[13]))));
            out.add(s);
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[1])) {
            props.load(in);
        }
        Map<String, Object> configs = new HashMap<>();
        props.forEach((k, v) -> configs.put((String) k, v));
        List<Seg> segs = readSpec(Paths.get(args[2]));
        io.aiven.kafka.tieredstorage.RemoteStorageManager rsm = new io.aiven.kafka.tieredstorage.RemoteStorageManager();
        try {
            rsm.configure(configs);
            for (int i = 0; i < segs.size(); i++) {
                Seg s = segs.get(i);
                if (args[0].equals("copy")) {
                    rsm.copyLogSegmentData(s.meta, s.data);
                    continue;
                }
                Path dir = Paths.get(args[3]);
                try (InputStream in = rsm.fetchLogSegment(s.meta, 0)) {
                    Files.write(dir.resolve("log." + i), in.readAllBytes());
                }
                int size = s.meta.segmentSizeInBytes();
                try (InputStream in = rsm.fetchLogSegment(s.meta, size / 3, 2 * size / 3)) {
                    Files.write(dir.resolve("range." + i), in.readAllBytes());
                }
                for (IndexType type : IndexType.values()) {
                    try (InputStream in = rsm.fetchIndex(s.meta, type)) {
                        Files.write(dir.resolve(type.name() + "." + i), in.readAllBytes());
                    } catch (RemoteResourceNotFoundException e) {
                        // No such index stored: the test checks which ones exist.
                    }
                }
            }
        } catch (Exception e) {
            for (Throwable t = e; t != null; t = t.getCause()) {
                System.err.println("FAILED " + t.getClass().getName() + ": " + t.getMessage());
            }
            System.exit(3);
        } finally {
            rsm.close();
        }
    }
}
