package io.kts.shim;

import java.util.Map;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Implemented in Python (JPype {@code @JImplements}) by {@code kts kafka-server-start} and registered in
 * {@link ShimRegistry}: one {@link PythonSession} per configured shim instance.
 */
public interface PythonBridge {
    PythonSession open(Map<String, String> config) throws RemoteStorageException;
}
