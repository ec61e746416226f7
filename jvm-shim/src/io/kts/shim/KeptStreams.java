package io.kts.shim;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;

/**
 * Streams the broker closed inside a shared-memory piece, kept for the segment's next fetch, oldest first.
 * At most {@code jvm.sidecar.kept.streams} are kept; the oldest are cancelled when there are more.
 */
final class KeptStreams {
    private final Settings settings;
    private final SidecarConnections connections;
    private final ArrayDeque<SidecarInputStream.Kept> kept = new ArrayDeque<>();

    KeptStreams(Settings settings, SidecarConnections connections) {
        this.settings = settings;
        this.connections = connections;
    }

    /** Keeps a stream for its segment's next fetch; with {@code closing} set, cancels it instead. */
    void keep(SidecarInputStream.Kept k, boolean closing) {
        connections.disown(k.conn());
        List<SidecarInputStream.Kept> over = new ArrayList<>(1);
        synchronized (kept) {
            if (closing || settings.keptStreams == 0) {
                over.add(k);
            } else {
                kept.addLast(k);
                while (kept.size() > settings.keptStreams) over.add(kept.pollFirst());
            }
        }
        for (SidecarInputStream.Kept x : over) connections.cancelStream(x.conn());
    }

    /** Removes up to {@code max} kept streams that match, oldest first, for the caller to resume or stop. */
    List<SidecarInputStream.Kept> take(Predicate<SidecarInputStream.Kept> which, int max) {
        List<SidecarInputStream.Kept> out = new ArrayList<>(0);
        synchronized (kept) {
            for (var it = kept.iterator(); it.hasNext() && out.size() < max; ) {
                SidecarInputStream.Kept k = it.next();
                if (which.test(k)) {
                    it.remove();
                    out.add(k);
                }
            }
        }
        return out;
    }

    /** Cancels the kept streams that match. */
    void cancel(Predicate<SidecarInputStream.Kept> which) {
        for (SidecarInputStream.Kept k : take(which, Integer.MAX_VALUE)) connections.cancelStream(k.conn());
    }

    /** Closes the connections of the kept streams that match, without a word to the sidecar. */
    void close(Predicate<SidecarInputStream.Kept> which) {
        for (SidecarInputStream.Kept k : take(which, Integer.MAX_VALUE)) k.conn().close();
    }

    int size() {
        synchronized (kept) {
            return kept.size();
        }
    }
}
