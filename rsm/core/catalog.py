"""What is tiered: segments found by listing manifests, named by Aiven's key layout.

The broker knows its segments from Kafka's metadata topic; tools, prefetch across segments and the Spark
reader do not. They list ``.rsm-manifest`` keys instead: the key itself carries topic, topic id, partition,
start offset and segment id (``<prefix><topic>-<topicId>/<partition>/<20-digit offset>-<segmentId>``), and the
manifest carries the rest of the segment's metadata. A manifest is uploaded last, so a listed one is complete.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from backends.base import KeyNotFound, StorageBackend, StorageBackendException
from rsm.core.manifest import MAX_MANIFEST_SIZE, SegmentManifest
from rsm.core.object_keys import SegmentKeys, Suffix
from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition, is_kafka_uuid

MANIFEST_SUFFIX = "." + Suffix.MANIFEST.value
_UUID_LEN = 22  # Kafka's Uuid in URL-safe base64 without padding
_SEGMENT = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})$")


@dataclass(frozen=True, order=True)
class TieredSegment:
    """One tiered segment as its manifest key names it; sorts by topic, partition, start offset."""

    topic: str
    partition: int
    start_offset: int
    topic_id: str
    segment_id: str
    prefix: str

    @property
    def keys(self) -> SegmentKeys:
        main = f"{self.topic}-{self.topic_id}/{self.partition}/{self.start_offset:020d}-{self.segment_id}"
        return SegmentKeys(self.prefix, main)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)

    def metadata_stub(self) -> RemoteLogSegmentMetadata:
        """Metadata with what the key tells (no end offset, sizes or epochs): enough to address the segment's
        objects through the manager; the manifest's copy of the broker's metadata has the rest."""
        seg_id = RemoteLogSegmentId(self.topic_id_partition, self.segment_id)
        return RemoteLogSegmentMetadata(seg_id, self.start_offset, self.start_offset, -1, -1, -1, 0)

    def describe(self) -> str:
        return f"segment {self.segment_id} of {self.topic}-{self.partition} at offset {self.start_offset}"


def parse_manifest_key(key: str, prefix: str = "") -> TieredSegment | None:
    """The segment a manifest key names, or None for any other key (foreign objects are ignored, not errors)."""
    if not key.startswith(prefix) or not key.endswith(MANIFEST_SUFFIX):
        return None
    parts = key[len(prefix) : -len(MANIFEST_SUFFIX)].split("/")
    if len(parts) != 3:
        return None
    topic_dir, partition, segment = parts
    if len(topic_dir) < _UUID_LEN + 2 or topic_dir[-_UUID_LEN - 1] != "-":
        return None
    topic, topic_id = topic_dir[: -_UUID_LEN - 1], topic_dir[-_UUID_LEN:]
    m = _SEGMENT.match(segment)
    if not m or not partition.isdigit() or not is_kafka_uuid(topic_id) or not is_kafka_uuid(m.group(2)):
        return None
    return TieredSegment(topic, int(partition), int(m.group(1)), topic_id, m.group(2), prefix)


class SegmentCatalog:
    """Lists the tiered segments under a key prefix. Listing is the only cost: nothing is downloaded."""

    def __init__(self, backend: StorageBackend, prefix: str = "") -> None:
        self._backend = backend
        self._prefix = prefix

    def _list(self, sub: str) -> Iterator[TieredSegment]:
        for key in self._backend.list(self._prefix + sub):
            seg = parse_manifest_key(key, self._prefix)
            if seg is not None:
                yield seg

    def segments(self, topic: str | None = None, partition: int | None = None) -> list[TieredSegment]:
        """Segments of one topic (every topic id it ever had) or of all topics, optionally one partition."""
        found = self._list("" if topic is None else f"{topic}-")
        return sorted(
            s for s in found if (topic is None or s.topic == topic) and (partition is None or s.partition == partition)
        )

    def partition_segments(self, tip: TopicIdPartition) -> list[TieredSegment]:
        """Segments of one partition of one topic id, by start offset (a cheap, narrow listing)."""
        return sorted(self._list(f"{tip.topic}-{tip.topic_id}/{tip.partition}/"))

    def manifest(self, segment: TieredSegment) -> SegmentManifest:
        """A listed segment's manifest, parsed, its data key still wrapped: the manifest is not encrypted, so
        listing and inspecting need no private key and cost no RSA unwrap per segment."""
        key = segment.keys.manifest
        try:
            with self._backend.fetch(key) as f:
                raw = f.read(MAX_MANIFEST_SIZE + 1)
        except KeyNotFound:
            raise RemoteResourceNotFoundException(
                f"{segment.describe()} is gone: its manifest {key} was deleted since it was listed"
            ) from None
        except StorageBackendException as e:
            raise RemoteStorageException(f"cannot read the manifest {key} of {segment.describe()}: {e}") from e
        return SegmentManifest.from_json_bytes(raw, f"manifest {key}")

    def metadata(self, segment: TieredSegment) -> tuple[SegmentManifest, RemoteLogSegmentMetadata]:
        """The manifest and the broker's metadata it records (offsets, timestamps, epochs), without the data key."""
        manifest = self.manifest(segment)
        return manifest, manifest.recorded_metadata(f"manifest {segment.keys.manifest}")

    def topics(self) -> dict[str, list[str]]:
        """Topic name -> the topic ids it has tiered segments under (a re-created topic has several)."""
        out: dict[str, set[str]] = {}
        for s in self._list(""):
            out.setdefault(s.topic, set()).add(s.topic_id)
        return {t: sorted(ids) for t, ids in sorted(out.items())}
