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
     * A {@link PythonChunks} for a lazy stream; when Python already holds all the bytes (indexes), a direct
     * {@link java.nio.ByteBuffer} over them, or for small ones a {@link Long} (id &lt;&lt; 32 | n): the bytes are
     * the first n of this thread's {@link #scratch()} buffer whose id (the big-endian long in its last 8 bytes)
     * is id, valid until this thread's next call. null means empty.
     */
    Object fetch(byte[] metadata, int startPosition, int endPosition) throws RemoteStorageException;

    /**
     * Same contract as {@link #fetch}. One argument on purpose (each argument costs the bridge ~1 us): u8 n,
     * the index type's name in n ASCII bytes, then the metadata record.
     */
    Object fetchIndex(byte[] request) throws RemoteStorageException;

    void delete(byte[] metadata) throws RemoteStorageException;

    /** The calling thread's scratch buffer (a direct buffer over Python memory, the same on every call). */
    java.nio.ByteBuffer scratch();

    /** The registry's snapshot as lines {@code objectName TAB attribute TAB value}. */
    byte[] metrics() throws RemoteStorageException;

    void close() throws RemoteStorageException;
}
