package io.kts.shim;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.System.Logger.Level;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One running {@code python -m rsm.jvm.sidecar}. The child gets its configuration on stdin and keeps stdin open:
 * when the broker JVM goes away for any reason (even kill -9) the pipe closes and the sidecar exits.
 */
final class SidecarProcess {
    private static final System.Logger LOG = System.getLogger("io.kts.shim.sidecar");
    private static final AtomicLong COUNTER = new AtomicLong();

    /**
     * Run with python -c so that a broken environment reports which import failed, and so that the broker's
     * working directory (sys.path[0] == '') cannot shadow the installed package.
     */
    static final String BOOTSTRAP = String.join("\n",
            "import sys",
            "if sys.path and sys.path[0] in ('', '.'): del sys.path[0]",
            "if sys.version_info < (3, 11):",
            "    print('IMPORT-ERROR %s is Python %d.%d.%d; kafka-tiered-storage needs Python 3.11+'"
                    + " % ((sys.executable,) + tuple(sys.version_info[:3])), flush=True)",
            "    sys.exit(3)",
            "try:",
            "    from rsm.jvm import sidecar",
            "except BaseException as e:",
            "    msg = ('%s: %s' % (type(e).__name__, e)).replace('\\n', ' | ')",
            "    print('IMPORT-ERROR %s (Python %s) could not import rsm.jvm.sidecar: %s'"
                    + " % (sys.executable, sys.version.split()[0], msg), flush=True)",
            "    sys.exit(3)",
            "sys.exit(sidecar.main(sys.argv[1:]))",
            "");

    final Process process;
    final Path socket;
    /** The loopback port the sidecar listens on instead of {@link #socket} ({@link SidecarSockets}), or 0. */
    int tcpPort;
    /** The secret a TCP connection sends first (null over a Unix socket). */
    final byte[] token;
    final int generation;
    final long pid;
    /** The sidecar's shared-memory region, mapped read-only, or null (fetched bytes then come over the socket). */
    ByteBuffer sharedMemory;
    private final ArrayDeque<String> stderrTail = new ArrayDeque<>();
    private final CompletableFuture<String> ready = new CompletableFuture<>();

    private SidecarProcess(Process process, Path socket, byte[] token, int generation) {
        this.process = process;
        this.socket = socket;
        this.token = token;
        this.generation = generation;
        this.pid = process.pid();
    }

    boolean isAlive() {
        return process.isAlive();
    }

    String exitDescription() {
        if (process.isAlive()) return "still running";
        int code = process.exitValue();
        return code > 128 ? "exit code " + code + " (signal " + (code - 128) + ")" : "exit code " + code;
    }

    static Path socketPath(Settings s, int generation) {
        String dir = s.socketDir.isEmpty() ? System.getProperty("java.io.tmpdir", "/tmp") : s.socketDir;
        String name = "kts-rsm-" + ProcessHandle.current().pid() + "-" + COUNTER.incrementAndGet() + "-g"
                + generation + ".sock";
        Path p = Paths.get(dir).toAbsolutePath().resolve(name);
        // sun_path is 108 bytes on Linux; fall back to /tmp rather than fail on deep directories.
        if (p.toString().getBytes(StandardCharsets.UTF_8).length > 100) p = Paths.get("/tmp", name);
        return p;
    }

    /**
     * {@code starts}: the sidecars started so far, this one included if it comes up; {@code restartFailures}: the
     * failed restarts so far. The sidecar shows both on its Prometheus endpoint (rsm.metrics.sidecar_health).
     */
    static SidecarProcess launch(Settings s, Map<String, String> config, int generation, long starts,
                                 long restartFailures) throws SidecarStartException {
        Path socket = socketPath(s, generation);
        List<String> cmd = new ArrayList<>();
        cmd.add(s.pythonExecutable);
        cmd.add("-c");
        cmd.add(BOOTSTRAP);
        cmd.add("--socket");
        cmd.add(socket.toString());
        cmd.add("--parent-pid");
        cmd.add(Long.toString(ProcessHandle.current().pid()));
        cmd.add("--starts");
        cmd.add(Long.toString(starts));
        cmd.add("--restart-failures");
        cmd.add(Long.toString(restartFailures));
        byte[] token = s.useTcp() ? SidecarSockets.newToken() : null;
        if (token != null) cmd.add("--tcp");
        ProcessBuilder pb = new ProcessBuilder(cmd);
        Map<String, String> env = pb.environment();
        env.put("PYTHONUNBUFFERED", "1");
        if (token != null) env.put(SidecarSockets.TOKEN_ENV, SidecarSockets.hex(token));
        if (!s.pythonPath.isEmpty()) {
            String old = env.get("PYTHONPATH");
            env.put("PYTHONPATH", old == null || old.isEmpty() ? s.pythonPath : s.pythonPath + ":" + old);
        }
        Process proc;
        try {
            proc = pb.start();
        } catch (IOException e) {
            throw new SidecarStartException("cannot run the Python interpreter '" + s.pythonExecutable
                    + "' (rsm.config.python.executable): " + Wire.describe(e));
        }
        SidecarProcess sp = new SidecarProcess(proc, socket, token, generation);
        sp.startPumps();
        try {
            OutputStream stdin = proc.getOutputStream();
            stdin.write(Wire.encodeConfig(config));
            stdin.flush();  // stdin stays open: its EOF is the sidecar's "the broker is gone" signal
        } catch (IOException e) {
            // The child died before reading its config; the reason is in its output, handled below.
        }
        proc.onExit().thenRun(() -> sp.ready.complete("EXIT"));
        String line;
        try {
            line = sp.ready.get(s.startupTimeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            sp.kill();
            throw new SidecarStartException("the Python sidecar (" + s.pythonExecutable + ", pid " + sp.pid
                    + ") did not become ready within " + s.startupTimeoutMs
                    + " ms (rsm.config.jvm.sidecar.startup.timeout.ms)" + sp.tail());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            sp.kill();
            throw new SidecarStartException("interrupted while starting the Python sidecar");
        } catch (ExecutionException e) {
            sp.kill();
            throw new SidecarStartException("the Python sidecar failed to start: " + Wire.describe(e.getCause()));
        }
        if (line.startsWith("READY")) {
            sp.mapSharedMemory(line);  // first: it also removes the region's name, which nothing else would
            String skew = Version.skew(Version.ofReadyLine(line));
            if (skew != null) {
                sp.kill();
                throw new SidecarStartException(skew);
            }
            if (token != null) {
                sp.tcpPort = readyPort(line);
                if (sp.tcpPort <= 0) {
                    sp.kill();
                    throw new SidecarStartException("the Python sidecar was asked to listen on loopback TCP but its"
                            + " READY line names no port (a Python package older than the shim jar?): " + line);
                }
            }
            LOG.log(Level.INFO, "Python sidecar started: pid {0}, interpreter {1}, socket {2}, shared memory {3}",
                    String.valueOf(sp.pid), s.pythonExecutable, SidecarSockets.describe(socket, sp.tcpPort),
                    sp.sharedMemory == null ? "off" : sp.sharedMemory.capacity() >= (1 << 20)
                            ? (sp.sharedMemory.capacity() >> 20) + " MiB" : (sp.sharedMemory.capacity() >> 10) + " KiB");
            return sp;
        }
        sp.kill();
        if (line.startsWith("IMPORT-ERROR ")) {
            throw new SidecarStartException("the Python environment is broken: " + line.substring(13)
                    + ". Install kafka-tiered-storage into that interpreter (pip install kafka-tiered-storage)"
                    + " or point rsm.config.python.executable at one that has it.");
        }
        if (line.startsWith("CONFIG-ERROR ")) {
            throw new SidecarStartException("the Python RemoteStorageManager rejected its configuration: "
                    + line.substring(13));
        }
        waitQuietly(proc, 2000);
        throw new SidecarStartException("the Python sidecar (" + s.pythonExecutable + ", pid " + sp.pid
                + ") exited before it was ready (" + sp.exitDescription() + ")" + sp.tail());
    }

    private static void waitQuietly(Process p, long ms) {
        try {
            p.waitFor(ms, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private String tail() {
        synchronized (stderrTail) {
            if (stderrTail.isEmpty()) return "";
            return "; last output: " + String.join(" | ", stderrTail);
        }
    }

    private void startPumps() {
        Thread out = new Thread(() -> pump(process.getInputStream(), true), "kts-sidecar-stdout-" + pid);
        Thread err = new Thread(() -> pump(process.getErrorStream(), false), "kts-sidecar-stderr-" + pid);
        out.setDaemon(true);
        err.setDaemon(true);
        out.start();
        err.start();
    }

    /** The {@code tcp=PORT} token of a READY line, or 0. */
    static int readyPort(String readyLine) {
        for (String token : readyLine.split(" ")) {
            if (!token.startsWith("tcp=")) continue;
            try {
                return Integer.parseInt(token.substring(4));
            } catch (NumberFormatException e) {
                return 0;
            }
        }
        return 0;
    }

    /**
     * Maps the region announced as {@code shm=PATH} in the READY line and removes its name: from then on only
     * the two mappings keep it, so nothing is left behind on /dev/shm whichever process dies first. A failure
     * only costs speed (the sidecar sends inline pieces to connections that did not report the mapping).
     */
    private void mapSharedMemory(String readyLine) {
        for (String token : readyLine.split(" ")) {
            if (!token.startsWith("shm=")) continue;
            Path path = Paths.get(token.substring(4));
            try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
                sharedMemory = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
            } catch (IOException | RuntimeException e) {
                LOG.log(Level.WARNING, "cannot map the sidecar''s shared memory {0}, fetches go over the socket: {1}",
                        path, Wire.describe(e));
            } finally {
                try {
                    Files.deleteIfExists(path);
                } catch (IOException e) {
                    LOG.log(Level.WARNING, "cannot remove {0}: {1}", path, Wire.describe(e));
                }
            }
        }
    }

    /** Forwards the sidecar's output to the broker's log, so its problems show up where operators look. */
    private void pump(InputStream in, boolean isStdout) {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (isStdout && !ready.isDone()
                        && (line.startsWith("READY") || line.startsWith("IMPORT-ERROR ")
                        || line.startsWith("CONFIG-ERROR "))) {
                    ready.complete(line);
                    continue;
                }
                synchronized (stderrTail) {
                    stderrTail.addLast(line);
                    while (stderrTail.size() > 12) stderrTail.removeFirst();
                }
                Level level = line.startsWith("ERROR") || line.startsWith("CRITICAL") || line.startsWith("Traceback")
                        ? Level.ERROR : line.startsWith("WARNING") ? Level.WARNING : Level.INFO;
                LOG.log(level, "[kts-sidecar pid {0}] {1}", String.valueOf(pid), line);
            }
        } catch (IOException e) {
            // stream closed: the process is gone
        }
    }

    /** Asks the sidecar to finish (stdin EOF), then escalates; SIGTERM is ignored by design, so SIGKILL. */
    void stop(long timeoutMs) {
        try {
            process.getOutputStream().close();
        } catch (IOException e) {
            // already gone
        }
        waitQuietly(process, timeoutMs);
        if (process.isAlive()) {
            LOG.log(Level.WARNING, "Python sidecar pid {0} did not exit within {1} ms of stdin EOF; killing it",
                    String.valueOf(pid), String.valueOf(timeoutMs));
            kill();
        }
        removeSocket();
    }

    void kill() {
        process.destroyForcibly();
        waitQuietly(process, 5000);
        removeSocket();
    }

    /** Deletes the socket file; the listening process is gone or going, so nothing can connect to it any more. */
    void removeSocket() {
        try {
            Files.deleteIfExists(socket);
        } catch (IOException e) {
            LOG.log(Level.WARNING, "cannot remove the sidecar socket {0}: {1}", socket, Wire.describe(e));
        }
    }

    /** configure() failures: the message already says what to fix. */
    static final class SidecarStartException extends Exception {
        private static final long serialVersionUID = 1L;

        SidecarStartException(String message) {
            super(message);
        }
    }
}
