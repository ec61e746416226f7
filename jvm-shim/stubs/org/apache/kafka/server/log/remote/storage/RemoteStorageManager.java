package org.apache.kafka.server.log.remote.storage;

import java.io.Closeable;
import java.io.InputStream;
import java.util.Optional;
import org.apache.kafka.common.Configurable;

/** Compile-time stub of Kafka's KIP-405 RemoteStorageManager (3.6+ descriptors). Never packaged. */
public interface RemoteStorageManager extends Configurable, Closeable {

    /** The index files a segment carries; names match the broker's enum. */
    enum IndexType {
        OFFSET,
        TIMESTAMP,
        PRODUCER_SNAPSHOT,
        TRANSACTION,
        LEADER_EPOCH
    }

    Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata remoteLogSegmentMetadata,
                                                                        LogSegmentData logSegmentData)
            throws RemoteStorageException;

    InputStream fetchLogSegment(RemoteLogSegmentMetadata remoteLogSegmentMetadata,
                                int startPosition) throws RemoteStorageException;

    InputStream fetchLogSegment(RemoteLogSegmentMetadata remoteLogSegmentMetadata,
                                int startPosition,
                                int endPosition) throws RemoteStorageException;

    InputStream fetchIndex(RemoteLogSegmentMetadata remoteLogSegmentMetadata,
                           IndexType indexType) throws RemoteStorageException;

    void deleteLogSegmentData(RemoteLogSegmentMetadata remoteLogSegmentMetadata) throws RemoteStorageException;
}
