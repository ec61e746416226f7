package io.kts.shim;

import java.nio.ByteBuffer;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A Python stream handed to Java without copying: each {@link #next()} is a direct ByteBuffer over the memory
 * Python decoded the chunk into. That memory is reused after the following call to {@code next()} or
 * {@code close()}, so the reader copies out of a piece before it asks for the next one.
 */
public interface PythonChunks {
    /** The next piece (position 0, limit = its length), or null at the end of the stream. */
    ByteBuffer next() throws RemoteStorageException;

    void close();
}
