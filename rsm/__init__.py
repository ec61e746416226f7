"""kafka-tiered-storage: Kafka's KIP-405 RemoteStorageManager in Python, compatible with Aiven's format.

The package root is the public API (``from rsm import RemoteStorageManager, ...``): the manager, Kafka's
metadata types and the exception family. Its subpackages, one per concern, from the top down:

- ``rsm.cli``: the ``kts`` commands and the demo; may import everything.
- ``rsm.spark``: the PySpark data source over tiered segments.
- ``rsm.jvm``: the Python half of the JVM shim (sidecar, in-process bridge, launcher).
- ``rsm.formats``: the segment formats plugged in beside the classic one (Iceberg mode); the root plugs them in.
- ``rsm.core``: the plugin itself: manager, config, manifest, object keys, the classic format, copy pipeline.
- ``rsm.iceberg``: Iceberg mode's tables, rows and fetches, which ``rsm.formats.iceberg`` drives.
- ``rsm.fetch``: the read path below the manager: segment streams (and caches, prefetch, coalescing).
- ``rsm.kafka``: Kafka's on-disk formats (record batches, indexes, snapshots) and a segment writer.
- ``rsm.errors``, ``rsm.metadata``: the exceptions and Kafka's types that every layer above shares.

Below ``rsm`` sit ``chunking`` (chunk index, transforms, buffers), ``encryption`` (AES-GCM, RSA key ring) and
``backends`` (object stores, and the config-declaration tool every layer uses). A layer imports only the ones
below it; the import-linter contracts in pyproject.toml enforce this (``make lint``).
"""

from rsm.core.manager import RemoteStorageManager
from rsm.errors import (
    ConfigException,
    CorruptDataException,
    KeyRingException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from rsm.formats import plug_all as _plug_formats
from rsm.metadata import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

_plug_formats()  # every manager, however imported, reads and writes the formats of rsm.formats

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
