package kts.bench;

import java.io.FileWriter;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/**
 * bench_broker_catchup's stopwatch around any RemoteStorageManager (``--plugin-time``): the time the broker spends
 * inside the plugin, measured the same way for Kafka's LocalTieredStorage and for ours. Each fetch is timed from
 * the call to the close of its stream (so the broker's reading of the bytes is included, as it is for both), and
 * written to {@code timed.events} at broker exit as "kind nanoseconds". Configured with {@code timed.delegate},
 * the class it wraps; every other key goes to that class unchanged.
 */
public final class TimedRemoteStorageManager implements RemoteStorageManager {
    private final ConcurrentLinkedQueue<String> events = new ConcurrentLinkedQueue<>();
    private RemoteStorageManager delegate;

    @Override
    public void configure(Map<String, ?> configs) {
        Map<String, Object> rest = new HashMap<>(configs);
        String delegateClass = String.valueOf(rest.remove("timed.delegate"));
        String eventsFile = String.valueOf(rest.remove("timed.events"));
        try {
            delegate = (RemoteStorageManager) Class.forName(delegateClass, true, getClass().getClassLoader())
                    .getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException e) {
            throw new IllegalArgumentException("timed.delegate " + delegateClass + ": " + e, e);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try (PrintWriter w = new PrintWriter(new FileWriter(eventsFile))) {
                events.forEach(w::println);
            } catch (IOException e) {
                System.err.println("timed.events " + eventsFile + ": " + e);
            }
        }));
        delegate.configure(rest);
    }

    private InputStream timed(String kind, long started, InputStream in) {
        return new FilterInputStream(in) {
            private boolean closed;

            @Override
            public void close() throws IOException {
                super.close();
                if (!closed) events.add(kind + " " + (System.nanoTime() - started));
                closed = true;
            }
        };
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition)
            throws RemoteStorageException {
        long t0 = System.nanoTime();
        return timed("segment", t0, delegate.fetchLogSegment(metadata, startPosition));
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition, int endPosition)
            throws RemoteStorageException {
        long t0 = System.nanoTime();
        return timed("segment", t0, delegate.fetchLogSegment(metadata, startPosition, endPosition));
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType)
            throws RemoteStorageException {
        long t0 = System.nanoTime();
        try {
            return timed("index", t0, delegate.fetchIndex(metadata, indexType));
        } catch (RemoteStorageException e) {  // LocalTieredStorage has no file for an empty transaction index
            events.add("index " + (System.nanoTime() - t0));
            throw e;
        }
    }

    @Override
    public Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(
            RemoteLogSegmentMetadata metadata, LogSegmentData data) throws RemoteStorageException {
        return delegate.copyLogSegmentData(metadata, data);
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) throws RemoteStorageException {
        delegate.deleteLogSegmentData(metadata);
    }

    @Override
    public void close() throws IOException {
        delegate.close();
    }
}
