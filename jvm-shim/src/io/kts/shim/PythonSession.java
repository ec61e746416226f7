package io.kts.shim;

import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A configured Python RemoteStorageManager seen from Java. Only JDK types cross, so the shim can call it by
 * reflection even when the broker loaded the shim in a separate (child-first) plugin class loader.
 */
public interface PythonSession {
    byte[] copy(byte[] metadata, String logSegment, String offsetIndex, String timeIndex, String transactionIndex,
                String producerSnapshot, byte[] leaderEpochs) throws RemoteStorageException;

    /**
     * A {@link PythonChunks} for a lazy stream, or a direct {@link java.nio.ByteBuffer} holding all the bytes when
     * Python already has them in memory (indexes; a byte[] when small): one crossing instead of four. null
     * means empty.
     */
    Object fetch(byte[] metadata, int startPosition, int endPosition) throws RemoteStorageException;

    /** Same contract as {@link #fetch}. */
    Object fetchIndex(byte[] metadata, String indexType) throws RemoteStorageException;

    void delete(byte[] metadata) throws RemoteStorageException;

    void close() throws RemoteStorageException;
}
