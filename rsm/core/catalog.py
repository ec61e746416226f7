"""What is tiered: segments found by listing manifests, named by Aiven's key layout.

The broker knows its segments from Kafka's metadata topic; tools, prefetch across segments and the Spark
reader do not. They list ``.rsm-manifest`` keys instead: the key itself carries topic, topic id, partition,
start offset and segment id (``<prefix><topic>-<topicId>/<partition>/<20-digit offset>-<segmentId>``), and the
manifest carries the rest of the segment's metadata. A manifest is uploaded last, so a listed one is complete.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from backends.base import BackendCapabilities, KeyNotFound, StorageBackend, StorageBackendException
from rsm.core.manifest import SegmentManifest, read_bounded
from rsm.core.object_keys import SegmentKeys, Suffix
from rsm.errors import CorruptDataException, RemoteResourceNotFoundException, RemoteStorageException
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
    """Lists the tiered segments under a key prefix (listing downloads nothing) and reads a listed segment's
    manifest on request (one GET, no data key unwrapped)."""

    def __init__(self, backend: StorageBackend, prefix: str = "", show: Callable[[str], str] | None = None) -> None:
        self._backend = backend
        self._prefix = prefix
        self.show = show or (lambda key: key)  # key.prefix.mask, for the keys errors name
        self._ranges = BackendCapabilities.of(backend).range_listing

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

    def iter_segments(self, topic: str | None = None, partition: int | None = None) -> Iterator[TieredSegment]:
        """``segments(topic, partition)``, in the same order, listed lazily partition by partition where the backend
        lists directories: a caller reads the first segments' manifests while later pages are still being listed.
        A plain listing otherwise."""
        tips = self.partitions(topic)
        if tips is None:
            yield from self.segments(topic, partition)
            return
        groups: dict[tuple[str, int], list[TopicIdPartition]] = {}
        for tip in tips:
            if partition is None or tip.partition == partition:
                groups.setdefault((tip.topic, tip.partition), []).append(tip)
        for key in sorted(groups):  # a re-created topic's ids merge by start offset, as segments() sorts them
            yield from heapq.merge(*(self.segments_from(tip, 0) for tip in groups[key]))

    def partition_segments(self, tip: TopicIdPartition) -> list[TieredSegment]:
        """Segments of one partition of one topic id, by start offset (a cheap, narrow listing)."""
        return sorted(self._list(f"{tip.topic}-{tip.topic_id}/{tip.partition}/"))

    def partitions(self, topic: str | None = None) -> list[TopicIdPartition] | None:
        """Every tiered (topic id, partition) of ``topic`` (or of all topics), from the key layout's directories
        alone: a few short listings, however many segments there are. None when the backend cannot list
        directories (``backends.base.RangeListable``); then only a full listing tells."""
        if self._ranges is None:
            return None
        found: list[TopicIdPartition] = []
        for topic_dir in self._ranges.list_dirs(self._prefix + ("" if topic is None else f"{topic}-")):
            name = topic_dir[len(self._prefix) : -1]
            if len(name) < _UUID_LEN + 2 or name[-_UUID_LEN - 1] != "-" or not is_kafka_uuid(name[-_UUID_LEN:]):
                continue  # a foreign directory
            topic_name, topic_id = name[: -_UUID_LEN - 1], name[-_UUID_LEN:]
            if topic is not None and topic_name != topic:
                continue  # "orders-" also lists "orders-eu-<id>/"
            for partition_dir in self._ranges.list_dirs(topic_dir):
                partition = partition_dir[len(topic_dir) : -1]
                if partition.isdigit():
                    found.append(TopicIdPartition(topic_id, topic_name, int(partition)))
        return sorted(found, key=lambda t: (t.topic, t.partition, t.topic_id))

    def segments_from(self, tip: TopicIdPartition, offset: int) -> Iterator[TieredSegment]:
        """The partition's segments starting at ``offset`` or later, in offset order, lazily. Keys sort by their
        20-digit start offsets, so where the backend can start a listing after a key (``list_after``) nothing
        before ``offset`` is listed; a caller that stops early lists no further either."""
        sub = f"{tip.topic}-{tip.topic_id}/{tip.partition}/"
        if self._ranges is None or offset <= 0:
            keys = self._backend.list(self._prefix + sub)
        else:
            keys = self._ranges.list_after(self._prefix + sub, f"{self._prefix}{sub}{offset:020d}")
        for key in keys:
            seg = parse_manifest_key(key, self._prefix)
            if seg is not None and seg.start_offset >= offset:
                yield seg

    def _manifest_bytes(self, segment: TieredSegment) -> bytes:
        key = segment.keys.manifest
        try:
            with self._backend.fetch(key) as f:
                return read_bounded(f)
        except KeyNotFound:
            raise RemoteResourceNotFoundException(
                f"{segment.describe()} is gone: its manifest {self.show(key)} was deleted since it was listed"
            ) from None
        except StorageBackendException as e:
            raise RemoteStorageException(
                f"cannot read the manifest {self.show(key)} of {segment.describe()}: {e}"
            ) from e

    def manifest(self, segment: TieredSegment) -> SegmentManifest:
        """A listed segment's manifest, parsed, its data key still wrapped: the manifest is not encrypted, so
        listing and inspecting need no private key and cost no RSA unwrap per segment. Safe to call from many
        threads at once (planning and ``kts ls`` read through a pool)."""
        what = f"manifest {self.show(segment.keys.manifest)} of {segment.describe()}"
        raw = self._manifest_bytes(segment)
        try:
            return SegmentManifest.from_json_bytes(raw, what)
        except CorruptDataException:
            # A body cut short in transit whose Content-Length was rewritten to match parses as a corrupt
            # manifest; a second read tells that apart from a stored object that really is corrupt (as the
            # manager's ManifestStore does).
            again = self._manifest_bytes(segment)
            if again == raw:
                raise
            return SegmentManifest.from_json_bytes(again, what)

    def metadata(self, segment: TieredSegment) -> tuple[SegmentManifest, RemoteLogSegmentMetadata]:
        """The manifest and the broker's metadata it records (offsets, timestamps, epochs), without the data key."""
        manifest = self.manifest(segment)
        return manifest, manifest.recorded_metadata(f"manifest {self.show(segment.keys.manifest)}")

    def topics(self) -> dict[str, list[str]]:
        """Topic name -> the topic ids it has tiered segments under (a re-created topic has several)."""
        out: dict[str, set[str]] = {}
        for s in self._list(""):
            out.setdefault(s.topic, set()).add(s.topic_id)
        return {t: sorted(ids) for t, ids in sorted(out.items())}
