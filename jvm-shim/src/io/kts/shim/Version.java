package io.kts.shim;

/**
 * The jar's release version (its manifest's Implementation-Version, written from rsm/_version.py) and the
 * start-up handshake with Python: the jar hands its version to Python with the configuration, and a sidecar
 * names its own in its READY line. Both must be the same release.
 */
final class Version {
    /** The configuration key the jar's version travels under (declared in rsm/jvm/config.py). */
    static final String KEY = "jvm.shim.version";
    static final String JAR = jarVersion();

    private Version() {
    }

    private static String jarVersion() {
        String v = Version.class.getPackage() == null ? null : Version.class.getPackage().getImplementationVersion();
        return v == null ? "unknown" : v;
    }

    /** The {@code version=X} token of a sidecar's READY line, or null (a Python package older than 0.2.0). */
    static String ofReadyLine(String line) {
        for (String token : line.split(" ")) {
            if (token.startsWith("version=")) return token.substring(8);
        }
        return null;
    }

    /** Why a Python package of {@code python} does not fit this jar, or null when it does. */
    static String skew(String python) {
        if (JAR.equals(python)) return null;
        String pythonText = python == null ? "older than 0.2.0 (its sidecar names no version)" : "version " + python;
        return "version skew: the shim jar is version " + JAR + ", the Python package kafka-tiered-storage is "
                + pythonText + "; they must be the same release. Either `pip install kafka-tiered-storage=="
                + JAR + "` into rsm.config.python.executable, or replace the jar with the one of that package"
                + " (rsm/_jars/kafka-tiered-storage-shim.jar)";
    }
}
