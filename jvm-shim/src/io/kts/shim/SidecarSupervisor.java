package io.kts.shim;

import java.lang.System.Logger.Level;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Keeps one Python sidecar running: starts it, sees it die, and starts the next one with a growing back-off.
 *
 * <p>Each sidecar gets a new generation number; connections carry the generation they were opened to, so the
 * connection pool can tell a dead sidecar's connections from a live one's.
 */
final class SidecarSupervisor {
    private static final System.Logger LOG = System.getLogger("io.kts.shim.sidecar");

    private final Settings settings;
    private final Map<String, String> config;
    private final Consumer<SidecarProcess> onDeath;
    private final Object lock = new Object();
    private final AtomicInteger generations = new AtomicInteger();
    private final AtomicLong starts = new AtomicLong();
    private final AtomicLong restartFailures = new AtomicLong();
    private volatile SidecarProcess current;
    private volatile boolean closed;
    private volatile boolean restarting;
    private volatile String lastStartError = "";
    private long lastStartNanos;
    private volatile long launchedNanos = System.nanoTime();

    /** {@code onDeath} runs when the current sidecar dies, before its restart is scheduled. */
    SidecarSupervisor(Settings settings, Map<String, String> config, Consumer<SidecarProcess> onDeath) {
        this.settings = settings;
        this.config = config;
        this.onDeath = onDeath;
    }

    /** Starts the first sidecar; a failure says what to fix. */
    void start() throws SidecarProcess.SidecarStartException {
        launch();
    }

    private void launch() throws SidecarProcess.SidecarStartException {
        synchronized (lock) {
            lastStartNanos = System.nanoTime();
            SidecarProcess p = SidecarProcess.launch(settings, config, generations.incrementAndGet(),
                    starts.get() + 1, restartFailures.get());
            starts.incrementAndGet();
            launchedNanos = System.nanoTime();
            current = p;
            p.process.onExit().thenRun(() -> onExit(p));
            lock.notifyAll();
        }
    }

    private void onExit(SidecarProcess p) {
        // A killed sidecar (OOM killer, kill -9) could not remove its socket file.
        p.removeSocket();
        if (closed || p != current) return;
        onDeath.accept(p);
        LOG.log(Level.WARNING, "Python sidecar pid {0} died ({1}); restarting it", String.valueOf(p.pid),
                p.exitDescription());
        scheduleRestart(p);
    }

    /** Restarts {@code dead} in the background, unless it was already replaced or a restart is under way. */
    void scheduleRestart(SidecarProcess dead) {
        synchronized (lock) {
            if (closed || restarting || dead != current) return;
            restarting = true;
        }
        Thread t = new Thread(() -> restartLoop(dead), "kts-sidecar-restart");
        t.setDaemon(true);
        t.start();
    }

    private void restartLoop(SidecarProcess dead) {
        long backoff = Math.max(1, settings.restartBackoffMs);
        try {
            while (!closed) {
                long sinceLast;
                synchronized (lock) {
                    sinceLast = (System.nanoTime() - lastStartNanos) / 1_000_000L;
                }
                if (sinceLast < backoff) Thread.sleep(backoff - sinceLast);
                if (closed) return;
                try {
                    launch();
                    LOG.log(Level.INFO, "Python sidecar restarted (pid {0} replaces pid {1})",
                            String.valueOf(current.pid), String.valueOf(dead.pid));
                    lastStartError = "";
                    return;
                } catch (SidecarProcess.SidecarStartException e) {
                    restartFailures.incrementAndGet();
                    lastStartError = e.getMessage();
                    LOG.log(Level.ERROR, "Python sidecar restart failed: {0}", e.getMessage());
                    backoff = Math.min(backoff * 2, 30_000L);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            synchronized (lock) {
                restarting = false;
                lock.notifyAll();
            }
        }
    }

    /** A live sidecar, waiting for a restart in progress (bounded by the startup timeout). */
    SidecarProcess live(String op) throws RemoteStorageException {
        SidecarProcess p = current;
        if (p != null && p.isAlive()) return p;
        if (closed) throw new RemoteStorageException(op + ": the RemoteStorageManager is closed");
        if (p != null) scheduleRestart(p);
        long deadline = System.nanoTime() + settings.startupTimeoutMs * 1_000_000L;
        synchronized (lock) {
            while (!closed) {
                p = current;
                if (p != null && p.isAlive()) return p;
                long left = (deadline - System.nanoTime()) / 1_000_000L;
                if (left <= 0) break;
                try {
                    lock.wait(Math.min(left, 200));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new RemoteStorageException(op + ": interrupted while waiting for the Python sidecar");
                }
            }
        }
        throw new RemoteStorageException(op + ": the Python sidecar is not running"
                + (lastStartError.isEmpty() ? "" : " (last restart failed: " + lastStartError + ")"));
    }

    /** The sidecar now running or being replaced; null before the first start. */
    SidecarProcess current() {
        return current;
    }

    boolean isClosed() {
        return closed;
    }

    long starts() {
        return starts.get();
    }

    long restartFailures() {
        return restartFailures.get();
    }

    /** When the current sidecar was started. */
    long launchedNanos() {
        return launchedNanos;
    }

    boolean up() {
        SidecarProcess p = current;
        return !closed && p != null && p.isAlive();
    }

    /** Stops supervising; false when it had stopped already. The caller then stops {@link #current()}. */
    boolean close() {
        synchronized (lock) {
            if (closed) return false;
            closed = true;
            lock.notifyAll();
            return true;
        }
    }
}
