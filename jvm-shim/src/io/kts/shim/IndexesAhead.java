package io.kts.shim;

import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;

/**
 * Indexes the sidecar sent along with the one the broker asked for (see {@link Wire#OP_FETCH_INDEX}). Kafka's
 * remote index cache asks for a new segment's offset, time and transaction indexes one after the other; with
 * these held here, the second and third call cost the broker's reader thread no round trip to Python. Each is
 * handed out once (the broker keeps its own copy); what nobody asked for within {@link #HOLD_MS} is dropped,
 * and so is everything held for a segment that is copied again or deleted.
 */
final class IndexesAhead {
    /** The broker asks for the three indexes within milliseconds; anything older was not going to be asked for. */
    static final long HOLD_MS = 10_000;
    /** Segments whose indexes are held at most (the sidecar sends none over 1 MiB along: INDEX_AHEAD_MAX_BYTES). */
    static final int MAX_SEGMENTS = 8;

    /** An index's bytes, or, for one the segment does not have, the not-found message to throw. */
    private static final class Held {
        private final byte[] data;
        private final String notFound;
        private final long sinceNanos;

        Held(byte[] data, String notFound, long sinceNanos) {
            this.data = data;
            this.notFound = notFound;
            this.sinceNanos = sinceNanos;
        }

        byte[] data() {
            return data;
        }

        String notFound() {
            return notFound;
        }

        long sinceNanos() {
            return sinceNanos;
        }
    }

    private final LinkedHashMap<String, Map<String, Held>> bySegment = new LinkedHashMap<>();
    /** Counts {@link #forget} calls: a reply that was in flight across one is not held. */
    private long forgets;

    /** Taken before a request is sent, and given back to {@link #hold} with its reply. */
    synchronized long mark() {
        return forgets;
    }

    /** Holds an index that came with another one's reply; {@code data} null means the segment has none. */
    synchronized void hold(long mark, String segment, String type, byte[] data, String notFound) {
        if (mark != forgets) return;  // the segment may have been copied again or deleted meanwhile
        bySegment.computeIfAbsent(segment, s -> new HashMap<>(4))
                .put(type, new Held(data, notFound, System.nanoTime()));
        Iterator<String> oldest = bySegment.keySet().iterator();
        while (bySegment.size() > MAX_SEGMENTS) {
            oldest.next();
            oldest.remove();
        }
    }

    /**
     * The held index of that type, given out once; null when none is held. An index the segment does not have
     * is thrown as the RemoteResourceNotFoundException the sidecar would have answered.
     */
    InputStream take(String segment, String type) throws RemoteResourceNotFoundException {
        Held h;
        synchronized (this) {
            Map<String, Held> held = bySegment.get(segment);
            if (held == null) return null;
            h = held.remove(type);
            if (held.isEmpty()) bySegment.remove(segment);
        }
        if (h == null) return null;
        if (h.data() == null) throw new RemoteResourceNotFoundException(h.notFound());
        return new ByteArrayInputStream(h.data());
    }

    synchronized void forget(String segment) {
        forgets++;
        bySegment.remove(segment);
    }

    /** Drops what was held longer than {@link #HOLD_MS} (called by the transport's watchdog). */
    synchronized void expire(long nowNanos) {
        long hold = HOLD_MS * 1_000_000L;
        for (Iterator<Map<String, Held>> it = bySegment.values().iterator(); it.hasNext(); ) {
            Map<String, Held> held = it.next();
            held.values().removeIf(h -> nowNanos - h.sinceNanos() > hold);
            if (held.isEmpty()) it.remove();
        }
    }

    /** Indexes held right now: for tests and diagnostics. */
    synchronized int size() {
        int n = 0;
        for (Map<String, Held> held : bySegment.values()) n += held.size();
        return n;
    }
}
