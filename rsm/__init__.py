"""kafka-tiered-storage: Kafka's KIP-405 RemoteStorageManager in Python, compatible with Aiven's format."""

from rsm.errors import (
    ConfigException,
    CorruptDataException,
    KeyRingException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from rsm.metadata import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)


def __getattr__(name: str) -> object:
    # Imported lazily: the manager pulls in every layer (chunking, encryption, backends), and those layers import
    # rsm.errors; an eager import here would make that a cycle.
    if name == "RemoteStorageManager":
        from rsm.manager import RemoteStorageManager

        return RemoteStorageManager
    raise AttributeError(f"module 'rsm' has no attribute {name!r}")


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
