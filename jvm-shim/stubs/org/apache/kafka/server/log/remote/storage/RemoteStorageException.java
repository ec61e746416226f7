package org.apache.kafka.server.log.remote.storage;

/** Compile-time/test stub of Kafka's RemoteStorageException (checked). */
public class RemoteStorageException extends Exception {
    private static final long serialVersionUID = 1L;

    public RemoteStorageException(final String message) {
        super(message);
    }

    public RemoteStorageException(final String message, final Throwable cause) {
        super(message, cause);
    }

    public RemoteStorageException(Throwable cause) {
        super(cause);
    }
}
