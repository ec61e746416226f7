"""Planning a read: which segments, which offsets of each, cut into slices that executors read independently.

Everything here runs once, on the driver (or in the bare reader), and touches only manifests and the small
offset/time/transaction indexes; no ``.log`` byte is read. The result is a list of :class:`SegmentSlice`,
plain picklable values that name a segment, a byte range starting at a batch boundary and the offsets to keep.

Overlapping segments (after a leader change, the old leader may have tiered offsets the new leader also
tiered, with different contents past the divergence point): for each partition, segments are ranked by the
highest leader epoch they contain, then by the broker's event time; walking that ranking, each segment keeps
only the offsets no higher-ranked segment covers. The later leader's copy of an offset therefore always wins,
and every offset is read from exactly one segment (docs/spark.md, "Overlapping segments").
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from rsm.core.catalog import TieredSegment
from rsm.core.manager import RemoteStorageManager
from rsm.errors import CorruptDataException
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.indexes import OffsetIndex, TimeIndex, decode_producer_snapshot, decode_txn_index
from rsm.kafka.records import CorruptRecordBatch
from rsm.metadata import IndexType, RemoteLogSegmentMetadata
from rsm.spark.options import TieredReadOptions

__all__ = ["PushedBounds", "SegmentSlice", "plan_slices", "resolve_overlaps"]

_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class PushedBounds:
    """Bounds from Spark filters on ``partition``, ``offset`` and ``timestamp`` (milliseconds, end exclusive)."""

    partitions: frozenset[int] | None = None
    first_offset: int = 0
    last_offset: int = _MAX
    min_timestamp: int | None = None
    end_timestamp: int | None = None


@dataclass(frozen=True)
class SegmentSlice:
    """One unit of work: batches of ``segment`` starting in ``[start_position, end_position)``, rows within
    ``first_offset..last_offset`` (inclusive). ``aborted`` lists ``(producer_id, first, last)`` of aborted
    transactions touching those offsets, for read_committed."""

    segment: TieredSegment
    start_position: int
    end_position: int | None
    first_offset: int
    last_offset: int
    aborted: tuple[tuple[int, int, int], ...] = ()

    @property
    def topic(self) -> str:
        return self.segment.topic

    @property
    def partition(self) -> int:
        return self.segment.partition

    def describe(self) -> str:
        end = "end" if self.end_position is None else str(self.end_position)
        return f"{self.segment.describe()}, bytes {self.start_position}..{end}"


@dataclass(frozen=True)
class _Candidate:
    segment: TieredSegment
    meta: RemoteLogSegmentMetadata

    @property
    def rank(self) -> tuple[int, int, str]:
        epochs = self.meta.segment_leader_epochs
        return (max(epochs) if epochs else -1, self.meta.event_timestamp_ms, self.segment.segment_id)


def _subtract(lo: int, hi: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of ``[lo, hi]`` not covered by the sorted, disjoint intervals ``taken``."""
    free: list[tuple[int, int]] = []
    cur = lo
    for a, b in taken:
        if b < cur:
            continue
        if a > hi:
            break
        if a > cur:
            free.append((cur, a - 1))
        cur = max(cur, b + 1)
        if cur > hi:
            break
    if cur <= hi:
        free.append((cur, hi))
    return free


def resolve_overlaps(
    candidates: Iterable[tuple[TieredSegment, RemoteLogSegmentMetadata]],
) -> list[tuple[TieredSegment, RemoteLogSegmentMetadata, int, int]]:
    """``(segment, meta, first, last)`` ranges of one partition such that each offset appears once, taken
    from the segment with the highest leader epoch (then the latest event time) that holds it."""
    ranked = sorted((_Candidate(s, m) for s, m in candidates), key=lambda c: c.rank, reverse=True)
    taken: list[tuple[int, int]] = []
    out: list[tuple[TieredSegment, RemoteLogSegmentMetadata, int, int]] = []
    for c in ranked:
        if c.meta.end_offset < c.meta.start_offset:
            continue  # an empty segment holds no offsets
        for lo, hi in _subtract(c.meta.start_offset, c.meta.end_offset, taken):
            out.append((c.segment, c.meta, lo, hi))
        bisect.insort(taken, (c.meta.start_offset, c.meta.end_offset))
        taken = _merge(taken)
    return sorted(out, key=lambda r: r[2])


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in intervals:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _latest_topic_id(metas: list[tuple[TieredSegment, RemoteLogSegmentMetadata]]) -> str:
    """A re-created topic has segments under several ids; the current one is the most recently tiered."""
    best: dict[str, int] = {}
    for seg, meta in metas:
        best[seg.topic_id] = max(best.get(seg.topic_id, -1), meta.event_timestamp_ms)
    return max(best, key=lambda t: (best[t], t))


class _Planner:
    def __init__(self, manager: RemoteStorageManager, opts: TieredReadOptions, pushed: PushedBounds) -> None:
        self.m = manager
        self.opts = opts
        self.pushed = pushed

    def topics(self) -> list[str]:
        catalog = self.m.catalog()
        if self.opts.topic_pattern is not None:
            return [t for t in catalog.topics() if self.opts.matches_topic(t)]
        return list(self.opts.topics)

    def slices(self) -> list[SegmentSlice]:
        out: list[SegmentSlice] = []
        catalog = self.m.catalog()
        for topic in self.topics():
            wanted = [
                s
                for s in catalog.segments(topic)
                if (self.opts.partitions is None or s.partition in self.opts.partitions)
                and (self.pushed.partitions is None or s.partition in self.pushed.partitions)
            ]
            if not wanted:
                continue
            metas = [(s, self.m.segment_metadata(s)) for s in wanted]
            topic_id = _latest_topic_id(metas)
            by_partition: dict[int, list[tuple[TieredSegment, RemoteLogSegmentMetadata]]] = defaultdict(list)
            for seg, meta in metas:
                if seg.topic_id == topic_id:
                    by_partition[seg.partition].append((seg, meta))
            for partition in sorted(by_partition):
                out.extend(self._partition(topic, partition, by_partition[partition]))
        return out

    def _partition(
        self, topic: str, partition: int, segs: list[tuple[TieredSegment, RemoteLogSegmentMetadata]]
    ) -> list[SegmentSlice]:
        first, last = self.opts.offset_range(topic, partition)
        ranges = resolve_overlaps(segs)
        # startingTimestamp/endingTimestamp become offsets, as in Spark's Kafka source (and take precedence
        # over startingOffsets/endingOffsets there too); only pushed filters on `timestamp` filter rows.
        if self.opts.starting_timestamp is not None:
            found = self._offset_for_time(ranges, self.opts.starting_timestamp)
            if found is None:
                return []  # no tiered record that recent: the start is the end of the tiered data
            first = found
        if self.opts.ending_timestamp is not None:
            found = self._offset_for_time(ranges, self.opts.ending_timestamp)
            if found is not None:
                last = found - 1  # exclusive; no match means up to the end of the tiered data
        first = max(first, self.pushed.first_offset)
        last = min(last, self.pushed.last_offset)
        ts_lo = self.pushed.min_timestamp
        aborted: list[tuple[int, int, int]] = []
        if self.opts.read_committed and ranges:
            aborted = self._aborted(segs)
            stable = self._last_stable_offset(ranges[-1][0])
            if stable is not None:
                last = min(last, stable - 1)  # undecided transactions: nothing from their first offset on
        out: list[SegmentSlice] = []
        for seg, meta, lo, hi in ranges:
            lo, hi = max(lo, first), min(hi, last)
            if lo > hi:
                continue  # outside the asked offsets: skipped on manifest metadata alone
            if ts_lo is not None and 0 <= meta.max_timestamp_ms < ts_lo:
                continue  # every record is older than the lower time bound
            spans = tuple(a for a in aborted if a[2] >= lo and a[1] <= hi)
            out.extend(self._cut(seg, meta, lo, hi, ts_lo, spans))
        return out

    def _aborted(self, segs: list[tuple[TieredSegment, RemoteLogSegmentMetadata]]) -> list[tuple[int, int, int]]:
        """Aborted transactions of the whole partition: a transaction's records and its ABORT marker may sit
        in different segments, so each slice is checked against every tiered transaction index."""
        spans: list[tuple[int, int, int]] = []
        for seg, _meta in segs:
            entry = self.m.fetch_manifest(seg.metadata_stub()).segment_indexes.get(IndexType.TRANSACTION)
            if entry is None or entry.size == 0:
                continue
            with self.m.fetch_index(seg.metadata_stub(), IndexType.TRANSACTION) as f:
                spans.extend((t.producer_id, t.first_offset, t.last_offset) for t in decode_txn_index(f.read()))
        return spans

    def _last_stable_offset(self, last_segment: TieredSegment) -> int | None:
        """The first offset of the earliest transaction still open at the end of the tiered data, if any.

        A transaction whose COMMIT or ABORT marker is not tiered yet is undecided here, and a read_committed
        consumer never reads past the last stable offset (the first offset of the earliest open transaction),
        so neither do we. The producer snapshot tiered with the partition's last segment is the producer state
        at its end: its ``currentTxnFirstOffset`` fields name exactly the transactions without a tiered marker.
        """
        stub = last_segment.metadata_stub()
        entry = self.m.fetch_manifest(stub).segment_indexes.get(IndexType.PRODUCER_SNAPSHOT)
        if entry is None or entry.size == 0:
            return None  # no producer state tiered (KIP-405 requires it): no transaction is known to be open
        with self.m.fetch_index(stub, IndexType.PRODUCER_SNAPSHOT) as f:
            firsts = [e.current_txn_first_offset for e in decode_producer_snapshot(f.read())]
        open_firsts = [o for o in firsts if o >= 0]
        return min(open_firsts) if open_firsts else None

    def _offset_for_time(
        self, ranges: list[tuple[TieredSegment, RemoteLogSegmentMetadata, int, int]], timestamp: int
    ) -> int | None:
        """Kafka's ``offsetsForTimes`` over the tiered data: the earliest offset whose timestamp is >= ``timestamp``.

        Segments are walked in offset order; one whose max timestamp is below the target is skipped on its
        manifest, and the first that may hold it is searched from its time index on (the scan reads only the
        chunks from there to the first match).
        """
        for seg, meta, lo, hi in ranges:
            if 0 <= meta.max_timestamp_ms < timestamp:
                continue
            found = self._first_offset_at(seg, lo, hi, timestamp)
            if found is not None:
                return found
        return None

    def _first_offset_at(self, seg: TieredSegment, lo: int, hi: int, timestamp: int) -> int | None:
        stub = seg.metadata_stub()
        with self.m.fetch_index(stub, IndexType.TIMESTAMP) as f:
            # Strictly below the target: every record up to that entry's offset is older than the target.
            from_offset = TimeIndex.from_bytes(f.read(), seg.start_offset).lookup(timestamp - 1).offset
        start = self._offset_index(seg).lookup(max(lo, from_offset)).position
        decoder = LogBatchDecoder(
            ReadBounds(lo, hi, timestamp, None),
            fail_on_corruption=self.opts.fail_on_corruption,
            max_decompressed=self.opts.max_batch_bytes,
        )
        out = decoder.new_columns()
        try:
            with self.m.fetch_log_segment(stub, start) as f:
                for position, entry in iter_log_entries(f, start, None):
                    more = decoder.feed(position, entry, out)
                    if len(out):
                        return out.offsets[0]
                    if not more:
                        break
        except CorruptRecordBatch as exc:
            raise CorruptDataException(
                f"{seg.describe()}: corrupt record batch at byte position {exc.position} while looking up the "
                f"offset for timestamp {timestamp}: {exc.reason}. Re-tier the segment from a replica, or read "
                f"with failOnCorruption=false to skip damaged batches"
            ) from None
        return None

    def _offset_index(self, seg: TieredSegment) -> OffsetIndex:
        with self.m.fetch_index(seg.metadata_stub(), IndexType.OFFSET) as f:
            return OffsetIndex.from_bytes(f.read(), seg.start_offset)

    def _cut(
        self,
        seg: TieredSegment,
        meta: RemoteLogSegmentMetadata,
        lo: int,
        hi: int,
        ts_lo: int | None,
        spans: tuple[tuple[int, int, int], ...],
    ) -> list[SegmentSlice]:
        size = meta.segment_size_in_bytes
        limit = self.opts.max_slice_bytes
        needs_index = lo > meta.start_offset or ts_lo is not None or size > limit
        if not needs_index:
            return [SegmentSlice(seg, 0, None, lo, hi, spans)]
        index = self._offset_index(seg)
        start = index.lookup(lo).position
        if ts_lo is not None:
            with self.m.fetch_index(seg.metadata_stub(), IndexType.TIMESTAMP) as f:
                # ts_lo - 1: an entry equal to the bound may follow older records that also equal it
                ts_offset = TimeIndex.from_bytes(f.read(), seg.start_offset).lookup(ts_lo - 1).offset
            start = max(start, index.lookup(ts_offset).position)
        if hi < meta.end_offset:
            # Entries pair a batch's *last* offset with its start: the first entry past hi may still hold hi,
            # but every batch after it starts past hi, so the entry after that one bounds the read.
            nxt = bisect.bisect_right(index.entries, hi, key=lambda e: e.offset) + 1
            stop = index.entries[nxt].position if nxt < len(index.entries) else size
        else:
            stop = size
        if stop - start <= limit:
            return [SegmentSlice(seg, start, None if stop == size else stop, lo, hi, spans)]
        chunk = self.m.fetch_manifest(seg.metadata_stub()).chunk_index.original_chunk_size
        step = max(chunk, -(-limit // chunk) * chunk)  # whole chunks, so slices rarely share one
        positions = [e.position for e in index.entries]
        cuts = [start]
        target = (start // chunk) * chunk + step
        while target < stop:
            i = bisect.bisect_left(positions, target)
            if i >= len(positions) or positions[i] >= stop:
                break
            if positions[i] > cuts[-1]:
                cuts.append(positions[i])
            target = max(target + step, (positions[i] // chunk) * chunk + step)
        bounds = [*cuts, stop]
        return [
            SegmentSlice(seg, a, None if b == size else b, lo, hi, spans)
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]


def plan_slices(
    manager: RemoteStorageManager, opts: TieredReadOptions, pushed: PushedBounds | None = None
) -> list[SegmentSlice]:
    """The slices to read for ``opts`` (narrowed by pushed-down filters), in topic/partition/offset order."""
    return _Planner(manager, opts, pushed or PushedBounds()).slices()
