package io.kts.shim;

import java.lang.System.Logger.Level;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.JMException;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.ReflectionException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * The Python registry's metrics as DynamicMBeans in the platform MBean server, under the ObjectNames Python
 * gives them (Aiven's: {@code aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics,topic=...}).
 *
 * <p>Values come from one snapshot of the whole registry, kept for {@link #MAX_AGE_NANOS}: a JMX client that
 * reads every attribute of every bean costs one request to Python. A background refresh every
 * {@link #DISCOVERY_SECONDS} registers beans that appeared since (a new topic, a backend's first request), so a
 * client that only lists names sees them too. Everything is unregistered on {@link #close()}.
 *
 * <p>Beans the JVM side keeps itself ({@link Transport#ownMetrics}: the sidecar's starts and liveness) are read
 * live on every access and never cost a request to Python, so they stay right while Python is unreachable.
 */
final class MetricsBeans implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.kts.shim.MetricsBeans");
    static final long MAX_AGE_NANOS = TimeUnit.SECONDS.toNanos(1);
    static final long DISCOVERY_SECONDS = 5;

    /** One call to Python: {@code objectName TAB attribute TAB value} lines (rsm.metrics.snapshot.to_lines). */
    @FunctionalInterface
    interface Source {
        byte[] snapshot() throws RemoteStorageException;
    }

    private final Source source;
    private final Supplier<Map<String, Map<String, Double>>> own;
    private final MBeanServer server = ManagementFactory.getPlatformMBeanServer();
    private final Set<ObjectName> registered = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService discovery;
    private final Object lock = new Object();
    private Map<String, Map<String, Double>> values = Map.of();
    private long takenAt;
    private boolean warned;
    private volatile boolean closed;
    private volatile long requests;

    MetricsBeans(Source source, Supplier<Map<String, Map<String, Double>>> own) {
        this.source = source;
        this.own = own;
        this.discovery = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "kts-metrics-discovery");
            t.setDaemon(true);
            return t;
        });
        for (String name : own.get().keySet()) register(name);
        refresh();
        // current() asks Python only when the snapshot is stale, so discovery never adds a request to a read burst.
        discovery.scheduleWithFixedDelay(this::current, DISCOVERY_SECONDS, DISCOVERY_SECONDS, TimeUnit.SECONDS);
    }

    /**
     * After a copy or delete (which may create beans for a new topic, partition or object type): refresh on the
     * discovery thread, never on the caller's, so the new beans are listed within moments.
     */
    void discoverSoon() {
        if (closed) return;
        try {
            discovery.execute(() -> {
                synchronized (lock) {
                    takenAt = System.nanoTime() - MAX_AGE_NANOS - 1;
                }
                current();
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // closed meanwhile
        }
    }

    /** Snapshots taken from Python so far: for tests of the one-request-per-burst promise. */
    long requests() {
        return requests;
    }

    private Map<String, Map<String, Double>> current() {
        synchronized (lock) {
            if (System.nanoTime() - takenAt > MAX_AGE_NANOS) refresh();
            return values;
        }
    }

    private void refresh() {
        if (closed) return;
        Map<String, Map<String, Double>> fresh;
        synchronized (lock) {
            try {
                fresh = parse(source.snapshot());
                requests++;
                warned = false;
            } catch (RemoteStorageException | RuntimeException e) {
                if (!warned) {
                    LOG.log(Level.WARNING, "cannot read the metrics from Python (keeping the last values): {0}",
                            Wire.describe(e));
                    warned = true;
                }
                takenAt = System.nanoTime();
                return;
            }
            values = fresh;
            takenAt = System.nanoTime();
        }
        for (String name : fresh.keySet()) register(name);
    }

    static Map<String, Map<String, Double>> parse(byte[] text) {
        Map<String, Map<String, Double>> out = new LinkedHashMap<>();
        for (String line : new String(text, StandardCharsets.UTF_8).split("\n")) {
            if (line.isEmpty()) continue;
            String[] f = line.split("\t");
            if (f.length != 3) throw new IllegalArgumentException("malformed metrics line from Python: " + line);
            out.computeIfAbsent(f[0], k -> new HashMap<>()).put(f[1], Double.valueOf(f[2]));
        }
        return out;
    }

    private void register(String name) {
        if (closed) return;
        try {
            ObjectName on = new ObjectName(name);
            if (registered.contains(on)) return;
            if (server.isRegistered(on)) {
                LOG.log(Level.DEBUG, "{0} is already registered (another shim instance in this JVM)", name);
                return;
            }
            server.registerMBean(new Bean(name), on);
            registered.add(on);
            // close() may have run since the check above (discovery is not stopped mid-task) and unregistered
            // only what it saw: a bean left now would stay in the JVM with a dead instance's values, and hide
            // the next instance's bean of the same name.
            if (closed) unregister(on);
        } catch (JMException e) {
            LOG.log(Level.WARNING, "cannot register the MBean {0}: {1}", name, Wire.describe(e));
        }
    }

    @Override
    public void close() {
        closed = true;
        discovery.shutdownNow();
        for (ObjectName on : new ArrayList<>(registered)) unregister(on);
    }

    private void unregister(ObjectName on) {
        try {
            server.unregisterMBean(on);
        } catch (JMException e) {  // the other of close() and a late register() took it already
            LOG.log(Level.DEBUG, "unregistering {0}: {1}", on, Wire.describe(e));
        }
        registered.remove(on);
    }

    /** One bean: its attributes are whatever the latest snapshot holds for its ObjectName. */
    private final class Bean implements DynamicMBean {
        private final String name;

        Bean(String name) {
            this.name = name;
        }

        private Map<String, Double> attributes() {
            Map<String, Double> kept = own.get().get(name);
            return kept != null ? kept : current().getOrDefault(name, Map.of());
        }

        @Override
        public Object getAttribute(String attribute) throws AttributeNotFoundException {
            Double v = attributes().get(attribute);
            if (v == null) throw new AttributeNotFoundException(name + " has no attribute " + attribute);
            return v;
        }

        @Override
        public void setAttribute(Attribute attribute) throws AttributeNotFoundException {
            throw new AttributeNotFoundException("the metrics of " + name + " are read-only");
        }

        @Override
        public AttributeList getAttributes(String[] names) {
            Map<String, Double> all = attributes();
            AttributeList out = new AttributeList();
            for (String n : names) {
                Double v = all.get(n);
                if (v != null) out.add(new Attribute(n, v));
            }
            return out;
        }

        @Override
        public AttributeList setAttributes(AttributeList attributes) {
            return new AttributeList();
        }

        @Override
        public Object invoke(String actionName, Object[] params, String[] signature) throws ReflectionException {
            throw new ReflectionException(new NoSuchMethodException(actionName), name + " has no operations");
        }

        @Override
        public MBeanInfo getMBeanInfo() {
            List<MBeanAttributeInfo> infos = new ArrayList<>();
            for (String n : new java.util.TreeSet<>(attributes().keySet())) {
                infos.add(new MBeanAttributeInfo(n, "double", n, true, false, false));
            }
            return new MBeanInfo(Bean.class.getName(), "kafka-tiered-storage metrics " + name,
                    infos.toArray(new MBeanAttributeInfo[0]), null, null, null);
        }
    }
}
