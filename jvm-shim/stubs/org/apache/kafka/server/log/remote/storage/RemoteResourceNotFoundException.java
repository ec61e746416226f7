package org.apache.kafka.server.log.remote.storage;

/** Compile-time/test stub of Kafka's RemoteResourceNotFoundException. */
public class RemoteResourceNotFoundException extends RemoteStorageException {
    private static final long serialVersionUID = 1L;

    public RemoteResourceNotFoundException(final String message) {
        super(message);
    }

    public RemoteResourceNotFoundException(final Throwable cause) {
        super("Requested remote resource was not found", cause);
    }

    public RemoteResourceNotFoundException(final String message, final Throwable cause) {
        super(message, cause);
    }
}
