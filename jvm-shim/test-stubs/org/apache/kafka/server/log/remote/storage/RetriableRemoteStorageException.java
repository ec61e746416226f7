package org.apache.kafka.server.log.remote.storage;

/**
 * Test only, never packaged (build.sh puts it in build/retriable-stub.jar): stands in for the class newer Kafka
 * releases have, with the same superclass and constructors, so a test can run the shim in a JVM where it
 * exists and in one where it does not (tests/jvm/test_shim_retriable.py).
 */
public class RetriableRemoteStorageException extends RemoteStorageException {
    private static final long serialVersionUID = 1L;

    public RetriableRemoteStorageException(String message) {
        super(message);
    }

    public RetriableRemoteStorageException(String message, Throwable cause) {
        super(message, cause);
    }

    public RetriableRemoteStorageException(Throwable cause) {
        super(cause);
    }
}
