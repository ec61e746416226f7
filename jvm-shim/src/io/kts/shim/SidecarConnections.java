package io.kts.shim;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * The connections to the running sidecar: idle ones for reuse, and the ones in use, whose deadlines the
 * watchdog enforces. A connection to a sidecar that has since been replaced is never reused.
 */
final class SidecarConnections {
    private final Settings settings;
    private final SidecarSupervisor supervisor;
    private final ConcurrentLinkedDeque<Conn> idle = new ConcurrentLinkedDeque<>();
    private final Set<Conn> inUse = ConcurrentHashMap.newKeySet();
    private final AtomicLong opened = new AtomicLong();

    SidecarConnections(Settings settings, SidecarSupervisor supervisor) {
        this.settings = settings;
        this.supervisor = supervisor;
    }

    /** An idle connection to the live sidecar, or a new one. */
    Conn acquire(String op) throws RemoteStorageException {
        SidecarProcess p = supervisor.live(op);
        Conn c;
        List<Conn> answering = null;  // cancelled streams the sidecar is still ending
        while ((c = idle.pollFirst()) != null) {
            if (c.generation == p.generation && c.isOpen()) {
                int drained = c.draining ? c.drain() : Conn.DRAINED;
                if (drained == Conn.DRAINED) break;
                boolean overdue = System.nanoTime() - c.drainingSinceNanos > settings.requestTimeoutMs * 1_000_000L;
                if (drained == Conn.DRAIN_PENDING && !overdue) {  // a sidecar stuck on a load must not keep a slot
                    if (answering == null) answering = new ArrayList<>(2);
                    answering.add(c);
                    continue;
                }
            }
            c.close();
        }
        if (answering != null) {
            for (Conn a : answering) idle.offerLast(a);
        }
        if (c == null) {
            try {
                c = Conn.open(p);
                opened.incrementAndGet();
            } catch (IOException e) {
                throw failure(op, null, p, e);
            }
        }
        adopt(c);
        return c;
    }

    /** Counts a connection as in use again (a kept stream the broker resumes). */
    void adopt(Conn c) {
        c.timedOut = false;
        inUse.add(c);
    }

    /** Stops counting a connection as in use without closing it (a stream kept for the next fetch). */
    void disown(Conn c) {
        c.disarm();
        inUse.remove(c);
    }

    /** Returns a connection whose frames are complete, or whose cancelled stream is draining, for reuse. */
    void release(Conn c) {
        disown(c);
        SidecarProcess p = supervisor.current();
        if (supervisor.isClosed() || p == null || c.generation != p.generation || !c.isOpen()
                || idle.size() >= settings.poolSize) {
            c.close();
        } else {
            idle.offerFirst(c);
        }
    }

    /** Drops a connection that may be mid-frame: closing it is the only safe way to resynchronise. */
    void discard(Conn c) {
        disown(c);
        c.close();
    }

    /**
     * Stops the stream on a connection between shared-memory pieces: the connection is pooled while the sidecar
     * ends it, or discarded when the cancel cannot be sent (it is broken anyway).
     */
    void cancelStream(Conn c) {
        try {
            c.cancelStream();
            release(c);
        } catch (IOException e) {
            discard(c);
        }
    }

    /** Closes the connections in use whose deadline passed; their callers then fail with a timeout. */
    void expireDeadlines() {
        long now = System.nanoTime();
        for (Conn c : inUse) {
            long d = c.deadlineNanos;
            if (d != 0 && now - d > 0) {
                c.timedOut = true;
                c.close();
            }
        }
    }

    /** Closes the idle connections (their sidecar died, or the plugin closes). */
    void closeIdle() {
        Conn c;
        while ((c = idle.pollFirst()) != null) c.close();
    }

    void closeInUse() {
        for (Conn c : inUse) c.close();
    }

    long opened() {
        return opened.get();
    }

    /** Turns a broken connection into a RemoteStorageException that says what happened to the sidecar. */
    RemoteStorageException failure(String op, Conn c, IOException e) {
        return failure(op, c, supervisor.current(), e);
    }

    private RemoteStorageException failure(String op, Conn c, SidecarProcess p, IOException e) {
        if (c != null && c.timedOut) {
            return new RemoteStorageException(op + ": timed out waiting for the Python sidecar (pid " + p.pid
                    + "); the connection was closed", e);
        }
        if (supervisor.isClosed()) return new RemoteStorageException(op + ": the RemoteStorageManager was closed", e);
        try {
            // A dying child closes its sockets before it is reaped. waitFor, not onExit().get(): every onExit()
            // stage may start a thread of the common pool.
            p.process.waitFor(300, TimeUnit.MILLISECONDS);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();  // report what we know; the caller's thread keeps its interrupt
        }
        if (!p.isAlive()) {
            supervisor.scheduleRestart(p);
            return new RemoteStorageException(op + ": the Python sidecar (pid " + p.pid + ") died ("
                    + p.exitDescription() + "); it is being restarted", e);
        }
        return new RemoteStorageException(op + ": connection to the Python sidecar (pid " + p.pid + ") failed: "
                + Wire.describe(e), e);
    }
}
