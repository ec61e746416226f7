package io.kts.shim;

import java.lang.reflect.Constructor;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Kafka's exceptions that not every supported broker has. A newer Kafka added
 * {@code RetriableRemoteStorageException} (a subclass of RemoteStorageException): thrown from a copy, it tells the
 * broker the failure is transient, so it neither counts it as a failed copy nor deletes what the attempt uploaded.
 * The shim is built against the 3.6 API, so the class is looked up at run time, in the class loader that gave the
 * shim Kafka's own RemoteStorageException; on a broker without it, the same failure is a RemoteStorageException
 * with the same message, which is what those brokers expect.
 */
public final class KafkaErrors {
    static final String RETRIABLE_CLASS = "org.apache.kafka.server.log.remote.storage.RetriableRemoteStorageException";

    private static final Constructor<? extends RemoteStorageException> WITH_CAUSE;
    private static final Constructor<? extends RemoteStorageException> MESSAGE_ONLY;

    static {
        Class<? extends RemoteStorageException> c = retriableClass();
        WITH_CAUSE = constructor(c, String.class, Throwable.class);
        MESSAGE_ONLY = constructor(c, String.class);
    }

    private KafkaErrors() {
    }

    private static Class<? extends RemoteStorageException> retriableClass() {
        try {
            ClassLoader kafka = RemoteStorageException.class.getClassLoader();
            Class<?> c = Class.forName(RETRIABLE_CLASS, false, kafka);
            return RemoteStorageException.class.isAssignableFrom(c) ? c.asSubclass(RemoteStorageException.class) : null;
        } catch (ClassNotFoundException | LinkageError | SecurityException e) {
            return null;
        }
    }

    private static Constructor<? extends RemoteStorageException> constructor(
            Class<? extends RemoteStorageException> c, Class<?>... params) {
        if (c == null) return null;
        try {
            return c.getConstructor(params);
        } catch (NoSuchMethodException | SecurityException e) {
            return null;
        }
    }

    /** Whether this broker has RetriableRemoteStorageException (with a usable constructor). */
    public static boolean hasRetriable() {
        return WITH_CAUSE != null || MESSAGE_ONLY != null;
    }

    /**
     * A transient failure: Kafka's RetriableRemoteStorageException where the broker has it, else a plain
     * RemoteStorageException. Public for the in-process bridge (rsm/jvm/inprocess.py), which calls it by name.
     */
    public static RemoteStorageException retriable(String message, Throwable cause) {
        try {
            if (WITH_CAUSE != null) return WITH_CAUSE.newInstance(message, cause);
            if (MESSAGE_ONLY != null) {
                RemoteStorageException e = MESSAGE_ONLY.newInstance(message);
                if (cause != null) e.initCause(cause);
                return e;
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            // fall through: the failure must still reach the broker, as the exception every release has
        }
        return new RemoteStorageException(message, cause);
    }

    /** {@link #retriable(String, Throwable)} without a cause. */
    public static RemoteStorageException retriable(String message) {
        return retriable(message, null);
    }
}
