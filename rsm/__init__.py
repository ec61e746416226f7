"""kafka-tiered-storage: Kafka's KIP-405 RemoteStorageManager in Python, compatible with Aiven's format."""

from rsm.errors import (
    ConfigException,
    CorruptDataException,
    KeyRingException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from rsm.manager import RemoteStorageManager
from rsm.metadata import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = [
    "ConfigException",
    "CorruptDataException",
    "IndexType",
    "KeyRingException",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "RemoteResourceNotFoundException",
    "RemoteStorageException",
    "RemoteStorageManager",
    "RetriableRemoteStorageException",
    "TopicIdPartition",
]
