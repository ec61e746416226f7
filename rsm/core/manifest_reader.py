"""The few facts of many segments, read from their manifests through a bounded pool (planning, ``kts ls``).

A tool that walks a topic needs, per segment, its offsets, times, leader epochs, sizes, chunk size, codec and key
pair: a few numbers of a manifest whose chunk index and per-chunk checksums are tens of KiB once parsed. So each
manifest is read (one GET), boiled down to a :class:`SegmentSummary` and dropped: 50,000 segments stay within a
few tens of MiB on a Spark driver. The data key stays wrapped: summaries need no private key and cost no RSA
unwrap (the manager unwraps when a segment's bytes are read).

Manifests are read ``concurrency`` at a time (``rsm.core.parallel``), so a topic costs N / concurrency round trips
instead of N. A manifest that cannot be read or parsed is a :class:`SegmentFailure` naming its segment; the
others are read all the same, and :func:`raise_failures` reports every failed segment in one exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from backends.base import KeyNotFound, StorageBackendException
from rsm.core.catalog import TieredSegment
from rsm.core.manager import RemoteStorageManager
from rsm.core.manifest import MAX_MANIFEST_SIZE, SegmentManifest, metadata_from_json
from rsm.core.object_keys import mask
from rsm.core.parallel import DEFAULT_CONCURRENCY, ordered_map
from rsm.errors import CorruptDataException, RemoteResourceNotFoundException, RemoteStorageException
from rsm.metadata import IndexType

__all__ = [
    "SegmentFailure",
    "SegmentSummary",
    "raise_failures",
    "read_summaries",
    "read_summary",
    "summaries_or_raise",
]

FAILURES_NAMED = 20
"""At most this many failed segments are spelled out in one exception; the rest are counted."""


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What tools and planners need of one segment. ``end_offset`` is inclusive; index sizes are None when the
    manifest lists no such index. The names match ``RemoteLogSegmentMetadata``'s, so code ranking segments
    takes either."""

    segment: TieredSegment
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    stored_size: int
    chunk_size: int
    chunk_count: int
    compression: bool
    key_pair_id: str | None
    transaction_index_size: int | None
    producer_snapshot_size: int | None

    @property
    def segment_leader_epochs(self) -> dict[int, int]:
        return dict(self.leader_epochs)

    @property
    def max_leader_epoch(self) -> int:
        return max((epoch for epoch, _ in self.leader_epochs), default=-1)

    def describe(self) -> str:
        return self.segment.describe()


@dataclass(frozen=True)
class SegmentFailure:
    """A segment whose manifest (or index) could not be read or made sense of, and why."""

    segment: TieredSegment
    error: Exception

    def describe(self) -> str:
        text = f"{type(self.error).__name__}: {self.error}"
        return text if self.segment.segment_id in text else f"{self.segment.describe()}: {text}"


def _show(manager: RemoteStorageManager, key: str) -> str:
    config = manager.config
    return mask(key, config["key.prefix"], config["key.prefix.mask"])


READ_PIECE = 64 * 1024
"""Manifests are read in pieces of this size: ``read(MAX_MANIFEST_SIZE + 1)`` at once would allocate the whole
32 MiB bound up front for every manifest in flight (a file object sizes its buffer by the request)."""


def _read_bounded(f: BinaryIO) -> bytes:
    """The object's bytes, stopping once past ``MAX_MANIFEST_SIZE`` (the parser then refuses it by size)."""
    parts: list[bytes] = []
    total = 0
    while total <= MAX_MANIFEST_SIZE and (piece := f.read(READ_PIECE)):
        parts.append(piece)
        total += len(piece)
    return b"".join(parts)


def _fetch(manager: RemoteStorageManager, segment: TieredSegment, what: str) -> bytes:
    try:
        with manager.backend.fetch(segment.keys.manifest) as f:
            return _read_bounded(f)
    except KeyNotFound:
        raise RemoteResourceNotFoundException(
            f"{what} is gone (deleted since the listing?); list again with kts ls"
        ) from None
    except StorageBackendException as e:
        raise RemoteStorageException(f"cannot read {what}: {e}") from e


def _parse(manager: RemoteStorageManager, segment: TieredSegment, what: str) -> SegmentManifest:
    raw = _fetch(manager, segment, what)
    try:
        return SegmentManifest.from_json_bytes(raw, what)
    except CorruptDataException:
        # A body cut short in transit whose Content-Length was rewritten to match parses as a corrupt manifest;
        # a second read tells that apart from a stored object that really is corrupt (as the manager does).
        again = _fetch(manager, segment, what)
        if again == raw:
            raise
        return SegmentManifest.from_json_bytes(again, what)


def read_summary(manager: RemoteStorageManager, segment: TieredSegment) -> SegmentSummary:
    """The summary of one listed segment; raises the plugin's exceptions, naming the manifest and the segment."""
    what = f"manifest {_show(manager, segment.keys.manifest)} of {segment.describe()}"
    manifest = _parse(manager, segment, what)
    recorded = manifest.remote_log_segment_metadata
    if recorded is None:
        raise CorruptDataException(
            f"{what} carries no remoteLogSegmentMetadata; it was not written by a plugin that records it, so the "
            f"segment's offsets are unknown"
        )
    index = manifest.chunk_index
    try:
        meta = metadata_from_json(recorded, index.original_file_size)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptDataException(
            f"{what} has a malformed remoteLogSegmentMetadata: {type(e).__name__}: {e}"
        ) from None
    named = (meta.topic_id_partition.topic_id, meta.remote_log_segment_id.id, meta.start_offset)
    if named != (segment.topic_id, segment.segment_id, segment.start_offset):
        raise CorruptDataException(
            f"{what} records segment {named[1]} of topic id {named[0]} at offset {named[2]}, not the segment its key "
            f"names: the object was copied or renamed by hand; restore it from the segment's own copy or delete it"
        )
    txn = manifest.segment_indexes.get(IndexType.TRANSACTION)
    snapshot = manifest.segment_indexes.get(IndexType.PRODUCER_SNAPSHOT)
    return SegmentSummary(
        segment=segment,
        start_offset=meta.start_offset,
        end_offset=meta.end_offset,
        max_timestamp_ms=meta.max_timestamp_ms,
        event_timestamp_ms=meta.event_timestamp_ms,
        leader_epochs=tuple(sorted(meta.segment_leader_epochs.items())),
        segment_size_in_bytes=index.original_file_size,
        stored_size=index.transformed_file_size,
        chunk_size=index.original_chunk_size,
        chunk_count=index.chunk_count,
        compression=manifest.compression,
        key_pair_id=manifest.encryption.key_pair_id if manifest.encryption is not None else None,
        transaction_index_size=None if txn is None else txn.size,
        producer_snapshot_size=None if snapshot is None else snapshot.size,
    )


def read_summaries(
    manager: RemoteStorageManager, segments: Iterable[TieredSegment], concurrency: int = DEFAULT_CONCURRENCY
) -> Iterator[SegmentSummary | SegmentFailure]:
    """Summaries of ``segments`` in their order, read ``concurrency`` at a time; a failure is a value."""
    for outcome in ordered_map(lambda s: read_summary(manager, s), segments, concurrency, "kts-manifests"):
        if outcome.error is not None:
            yield SegmentFailure(outcome.item, outcome.error)
        else:
            assert outcome.result is not None
            yield outcome.result


def raise_failures(failures: Sequence[SegmentFailure], total: int, what: str = "manifests") -> None:
    """Nothing when ``failures`` is empty; else one exception naming every failed segment (the first
    ``FAILURES_NAMED`` of them spelled out), of the failures' own class when they share one. ``what`` names the
    objects that were read (``total`` of them)."""
    if not failures:
        return
    if len(failures) == 1 and failures[0].segment.segment_id in str(failures[0].error):
        raise failures[0].error
    kinds = {type(f.error) for f in failures}
    cls = kinds.pop() if len(kinds) == 1 else RemoteStorageException
    if not issubclass(cls, RemoteStorageException):
        cls = RemoteStorageException
    named = "; ".join(f.describe() for f in failures[:FAILURES_NAMED])
    more = len(failures) - FAILURES_NAMED
    raise cls(
        f"{len(failures)} of {total} {what} could not be read: {named}"
        + (f"; and {more} more (kts verify lists them all)" if more > 0 else "")
    )


def summaries_or_raise(
    manager: RemoteStorageManager, segments: Sequence[TieredSegment], concurrency: int = DEFAULT_CONCURRENCY
) -> list[SegmentSummary]:
    """Every summary, or (after all were tried) one exception naming every segment whose manifest failed."""
    summaries: list[SegmentSummary] = []
    failures: list[SegmentFailure] = []
    for got in read_summaries(manager, segments, concurrency):
        (failures if isinstance(got, SegmentFailure) else summaries).append(got)  # type: ignore[arg-type]
    raise_failures(failures, len(segments))
    return summaries
