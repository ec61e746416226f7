package io.kts.shim;

import java.lang.reflect.Method;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Where {@code kts kafka-server-start} leaves the Python bridge before it runs kafka.Kafka.
 *
 * <p>Kafka may load the shim through a child-first plugin loader while JPype registered the bridge with the
 * copy of this class on the system class path; {@link #lookup()} therefore also asks the system loader's copy.
 */
public final class ShimRegistry {
    private static final AtomicReference<Object> BRIDGE = new AtomicReference<>();

    private ShimRegistry() {
    }

    public static void register(Object bridge) {
        BRIDGE.set(bridge);
    }

    public static Object get() {
        return BRIDGE.get();
    }

    public static void clear() {
        BRIDGE.set(null);
    }

    static Object lookup() {
        Object b = BRIDGE.get();
        if (b != null) return b;
        for (ClassLoader cl : new ClassLoader[] {ClassLoader.getSystemClassLoader(),
                Thread.currentThread().getContextClassLoader()}) {
            if (cl == null || cl == ShimRegistry.class.getClassLoader()) continue;
            try {
                Class<?> other = Class.forName(ShimRegistry.class.getName(), true, cl);
                if (other == ShimRegistry.class) continue;
                Method get = other.getMethod("get");
                b = get.invoke(null);
                if (b != null) return b;
            } catch (ReflectiveOperationException | LinkageError e) {
                // not there: no bridge
            }
        }
        return null;
    }
}
