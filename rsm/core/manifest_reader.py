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

from rsm.core.catalog import SegmentCatalog, TieredSegment
from rsm.core.manager import RemoteStorageManager
from rsm.core.parallel import DEFAULT_CONCURRENCY, ordered_map
from rsm.errors import CorruptDataException, RemoteStorageException
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
    kind: str = "classic"
    """``classic``, or the format of the manifest's section (``iceberg``: rows of the topic's table;
    ``stored_size`` is then the size of the data files the copy wrote)."""

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


def read_summary(catalog: SegmentCatalog, segment: TieredSegment) -> SegmentSummary:
    """The summary of one listed segment (``catalog.manifest``, the data key left wrapped); raises the plugin's
    exceptions, naming the manifest and the segment."""
    manifest = catalog.manifest(segment)
    what = f"manifest {catalog.show(segment.keys.manifest)} of {segment.describe()}"
    meta = manifest.recorded_metadata(what)
    named = (meta.topic_id_partition.topic_id, meta.remote_log_segment_id.id, meta.start_offset)
    if named != (segment.topic_id, segment.segment_id, segment.start_offset):
        raise CorruptDataException(
            f"{what} records segment {named[1]} of topic id {named[0]} at offset {named[2]}, not the segment its key "
            f"names: the object was copied or renamed by hand; restore it from the segment's own copy or delete it"
        )
    index = manifest.chunk_index
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
        stored_size=index.transformed_file_size if manifest.section is None else manifest.section.stored_size,
        chunk_size=index.original_chunk_size,
        chunk_count=index.chunk_count,
        compression=manifest.compression,
        key_pair_id=manifest.encryption.key_pair_id if manifest.encryption is not None else None,
        transaction_index_size=None if txn is None else txn.size,
        producer_snapshot_size=None if snapshot is None else snapshot.size,
        kind=manifest.kind,
    )


def read_summaries(
    manager: RemoteStorageManager, segments: Iterable[TieredSegment], concurrency: int = DEFAULT_CONCURRENCY
) -> Iterator[SegmentSummary | SegmentFailure]:
    """Summaries of ``segments`` in their order, read ``concurrency`` at a time; a failure is a value."""
    catalog = manager.catalog()
    for outcome in ordered_map(lambda s: read_summary(catalog, s), segments, concurrency, "kts-manifests"):
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
