package io.kts.shim;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/**
 * Runs the broker's main class for {@code kts kafka-server-start} (rsm/jvm/launcher.py) on the calling thread,
 * which is Python's main thread.
 *
 * <p>When main ends while the JVM shuts down (a shutdown interrupts this thread, so main usually ends by an
 * exception then), this thread stays here until the JVM halts instead of returning into Python. Returning would
 * make JPype convert the exception while it tears its type system down, and JPype crashes the process (SIGSEGV)
 * when it meets a Java class it has not wrapped for Python yet at that point.
 */
public final class BrokerMain {
    private BrokerMain() {
    }

    /** Calls {@code mainClass.main(args)}; returns or throws as main does, unless the JVM is shutting down. */
    public static void run(String mainClass, String[] args) throws Throwable {
        Method main = Class.forName(mainClass).getMethod("main", String[].class);
        try {
            main.invoke(null, (Object) args);
        } catch (InvocationTargetException e) {
            if (shuttingDown()) waitForHalt();
            throw e.getCause() == null ? e : e.getCause();
        }
        if (shuttingDown()) waitForHalt();
    }

    /** Whether the JVM has begun to shut down (it then refuses new shutdown hooks). */
    public static boolean shuttingDown() {
        Thread probe = new Thread(() -> { }, "kts-shutdown-probe");
        try {
            Runtime.getRuntime().addShutdownHook(probe);
        } catch (IllegalStateException e) {
            return true;
        }
        Runtime.getRuntime().removeShutdownHook(probe);
        return false;
    }

    private static void waitForHalt() {
        while (true) {
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException e) {
                // the shutdown interrupts every thread; the JVM's halt ends this one
            }
        }
    }
}
