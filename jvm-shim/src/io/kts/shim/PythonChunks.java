package io.kts.shim;

import java.nio.ByteBuffer;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A Python stream handed to Java without copying: {@link #buffer()} is a direct ByteBuffer over a Python
 * bytearray, and each {@link #fill()} reads the next chunk into that same memory.
 */
public interface PythonChunks {
    ByteBuffer buffer();

    /** Bytes now in the buffer, or -1 at end of stream. */
    int fill() throws RemoteStorageException;

    void close();
}
