package io.kts.shim;

import java.util.Map;

/**
 * The shim's own keys (declared for docs in rsm/sidecar_config.py). They are read here but still passed to
 * Python untouched, together with every other key.
 */
final class Settings {
    final String transport;
    final String pythonExecutable;
    final String pythonPath;
    final String socketDir;
    /** jvm.sidecar.socket: auto (Unix socket on Java 16+, loopback TCP before), unix or tcp. */
    final String socketKind;
    final long startupTimeoutMs;
    final long requestTimeoutMs;
    final long copyTimeoutMs;
    final long shutdownTimeoutMs;
    final int poolSize;
    final long restartBackoffMs;
    final int keptStreams;
    final long keptStreamIdleMs;
    /** metrics.jmx.mirror.domain: the beans kept here are shown under it too, as Python's are. */
    final String metricsMirrorDomain;

    Settings(Map<String, String> c) {
        transport = c.getOrDefault("jvm.transport", "auto").trim().toLowerCase(java.util.Locale.ROOT);
        pythonExecutable = c.getOrDefault("python.executable", "python3").trim();
        pythonPath = c.getOrDefault("python.path", "").trim();
        socketDir = c.getOrDefault("jvm.sidecar.socket.dir", "").trim();
        socketKind = c.getOrDefault("jvm.sidecar.socket", "auto").trim().toLowerCase(java.util.Locale.ROOT);
        startupTimeoutMs = longOf(c, "jvm.sidecar.startup.timeout.ms", 60_000L);
        requestTimeoutMs = longOf(c, "jvm.sidecar.request.timeout.ms", 120_000L);
        copyTimeoutMs = longOf(c, "jvm.sidecar.copy.timeout.ms", 2_100_000L);
        shutdownTimeoutMs = longOf(c, "jvm.sidecar.shutdown.timeout.ms", 10_000L);
        poolSize = (int) longOf(c, "jvm.sidecar.pool.size", 16L);
        restartBackoffMs = longOf(c, "jvm.sidecar.restart.backoff.ms", 1_000L);
        keptStreams = (int) Math.min(longOf(c, "jvm.sidecar.kept.streams", 8L), 4096L);
        keptStreamIdleMs = longOf(c, "jvm.sidecar.kept.stream.idle.ms", 5_000L);
        metricsMirrorDomain = c.getOrDefault("metrics.jmx.mirror.domain", "").trim();
        if (!transport.equals("auto") && !transport.equals("sidecar") && !transport.equals("inprocess")) {
            throw new IllegalArgumentException("Invalid value " + transport
                    + " for configuration jvm.transport: expected auto, sidecar or inprocess");
        }
        if (!socketKind.equals("auto") && !socketKind.equals("unix") && !socketKind.equals("tcp")) {
            throw new IllegalArgumentException("Invalid value " + socketKind
                    + " for configuration jvm.sidecar.socket: expected auto, unix or tcp");
        }
        if (socketKind.equals("unix") && !SidecarSockets.unixSupported()) {
            throw new IllegalArgumentException("jvm.sidecar.socket=unix needs Java 16 or newer (this is Java "
                    + System.getProperty("java.specification.version") + "); use auto or tcp");
        }
        if (pythonExecutable.isEmpty()) {
            throw new IllegalArgumentException("Invalid empty value for configuration python.executable");
        }
    }

    /** Whether the sidecar listens on loopback TCP rather than a Unix socket. */
    boolean useTcp() {
        return socketKind.equals("tcp") || (socketKind.equals("auto") && !SidecarSockets.unixSupported());
    }

    private static long longOf(Map<String, String> c, String key, long dflt) {
        String v = c.get(key);
        if (v == null || v.trim().isEmpty()) return dflt;
        try {
            long x = Long.parseLong(v.trim());
            if (x < 0) throw new NumberFormatException("negative");
            return x;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("Invalid value " + v + " for configuration " + key
                    + ": expected a non-negative integer");
        }
    }
}
