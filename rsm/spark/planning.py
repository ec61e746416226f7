"""Planning a read: which segments, which offsets of each, cut into slices that executors read independently.

Everything here runs once, on the driver (or in the bare reader), and touches only manifests and the small
offset/time/transaction indexes; no ``.log`` byte is read. The result is a list of :class:`SegmentSlice`,
plain picklable values that name a segment, a byte range starting at a batch boundary and the offsets to keep.

Overlapping segments are resolved per partition (``rsm.spark.overlaps``): every offset is read from exactly
one segment, the later leader's copy.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain, takewhile

from rsm.core.catalog import TieredSegment
from rsm.core.manager import RemoteStorageManager
from rsm.core.manifest_reader import SegmentFailure, SegmentSummary, raise_failures, read_summaries
from rsm.core.parallel import ordered_map
from rsm.errors import CorruptDataException
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.indexes import OffsetIndex, TimeIndex, decode_producer_snapshot, decode_txn_index
from rsm.kafka.records import CorruptRecordBatch
from rsm.metadata import IndexType, TopicIdPartition
from rsm.spark.options import TieredReadOptions
from rsm.spark.overlaps import resolve_overlaps
from rsm.spark.selection import LOOK_BEHIND, PROBE_GROWTH, Selection

__all__ = ["PushedBounds", "SegmentSlice", "plan_slices"]

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
    #: An Iceberg-mode segment (rows of a table): read as rows, not as rebuilt batches.
    iceberg: bool = False

    @property
    def topic(self) -> str:
        return self.segment.topic

    @property
    def partition(self) -> int:
        return self.segment.partition

    def describe(self) -> str:
        end = "end" if self.end_position is None else str(self.end_position)
        return f"{self.segment.describe()}, bytes {self.start_position}..{end}"


def _latest_topic_id(summaries: Iterable[SegmentSummary]) -> str:
    """A re-created topic has segments under several ids; the current one is the most recently tiered."""
    best: dict[str, int] = {}
    for s in summaries:
        best[s.segment.topic_id] = max(best.get(s.segment.topic_id, -1), s.event_timestamp_ms)
    return max(best, key=lambda t: (best[t], t))


class _Planner:
    def __init__(self, manager: RemoteStorageManager, opts: TieredReadOptions, pushed: PushedBounds) -> None:
        self.m = manager
        self.catalog = manager.catalog()
        self.opts = opts
        self.pushed = pushed
        self.concurrency = opts.planning_concurrency
        self.failures: list[SegmentFailure] = []
        self.tried = 0

    def _wanted_partition(self, topic: str, partition: int) -> bool:
        return self.opts.wants_partition(topic, partition) and (
            self.pushed.partitions is None or partition in self.pushed.partitions
        )

    def _topics(self) -> list[str] | None:
        """The topics to read (None: only a full listing can tell, for a pattern on a backend without directory
        listings)."""
        if self.opts.topic_pattern is None:
            return list(self.opts.topics)
        tips = self.catalog.partitions()
        if tips is None:
            return None
        return sorted({t.topic for t in tips if self.opts.matches_topic(t.topic)})

    def _read(self, segments: Iterable[TieredSegment]) -> dict[TieredSegment, SegmentSummary]:
        got: dict[TieredSegment, SegmentSummary] = {}
        for summary in read_summaries(self.m, segments, self.concurrency):
            self.tried += 1
            if isinstance(summary, SegmentFailure):
                self.failures.append(summary)
            else:
                got[summary.segment] = summary
        return got

    def _time_bound(self) -> bool:
        """Whether the plan depends on segments' max timestamps (only their manifests have them)."""
        return (
            self.opts.starting_timestamp is not None
            or self.opts.ending_timestamp is not None
            or self.pushed.min_timestamp is not None
        )

    def _bounds(self, topic: str, partition: int) -> tuple[int, int]:
        first, last = self.opts.offset_range(topic, partition)
        return max(first, self.pushed.first_offset), min(last, self.pushed.last_offset)

    def summaries(self) -> dict[str, dict[int, list[SegmentSummary]]]:
        """Topic -> partition -> the summaries planning needs (see :class:`Selection`); every segment of a topic
        when a time bound needs their max timestamps or the topic was re-created (several topic ids)."""
        topics = self._topics()
        if topics is None:
            listed = [s for s in self.catalog.segments() if self.opts.matches_topic(s.topic)]
            return {
                t: self._topic_from_listing(t, [s for s in listed if s.topic == t]) for t in {s.topic for s in listed}
            }
        out: dict[str, dict[int, list[SegmentSummary]]] = {}
        for topic in topics:
            tips = self.catalog.partitions(topic)
            if tips is None or self._time_bound() or len({t.topic_id for t in tips}) > 1:
                out[topic] = self._topic_from_listing(topic, self.catalog.segments(topic))
            else:
                out[topic] = self._select(
                    {t.partition: self._window(t) for t in tips if self._wanted_partition(topic, t.partition)}
                )
        return out

    def _topic_from_listing(self, topic: str, listed: list[TieredSegment]) -> dict[int, list[SegmentSummary]]:
        """Planning from a listing of the whole topic (no directory listing, a time bound, several topic ids)."""
        listed = [s for s in listed if self._wanted_partition(topic, s.partition)]
        if len({s.topic_id for s in listed}) > 1 or self._time_bound():
            every = self._read(listed)
            current = _latest_topic_id(every.values()) if every else None
            by_partition: dict[int, list[SegmentSummary]] = defaultdict(list)
            for s in every.values():
                if s.segment.topic_id == current:
                    by_partition[s.segment.partition].append(s)
            return by_partition
        groups: dict[int, list[TieredSegment]] = defaultdict(list)
        for s in sorted(listed):
            groups[s.partition].append(s)
        selections = {}
        for partition, segs in groups.items():
            first, last = self._bounds(topic, partition)
            to_end = self.opts.read_committed
            below = [s for s in segs if s.start_offset < first][::-1]
            wanted = [s for s in segs if s.start_offset >= first and (to_end or s.start_offset <= last)]
            selections[partition] = Selection(first, below, wanted, None)
        return self._select(selections)

    def _window(self, tip: TopicIdPartition) -> Selection:
        """A partition's selection from listings that start at or near the lower bound and stop past the upper one.

        The wanted segments are listed from the lower bound on. The segments just below it are found by a probe
        that starts as far below as ``LOOK_BEHIND + 1`` segments span at the wanted ones' spacing (or one range
        width); one that finds fewer starts ``PROBE_GROWTH`` times further back, down to the partition's start."""
        first, last = self._bounds(tip.topic, tip.partition)
        listing = self.catalog.segments_from(tip, first)
        if not self.opts.read_committed:  # past the upper bound, the listing goes no further
            listing = takewhile(lambda s: s.start_offset <= last, listing)
        if first <= 0:
            # Nothing below to look at: the manifests are read while the listing's later pages still arrive.
            return Selection(first, [], listing, None)
        wanted = list(listing)
        if len(wanted) >= 2:
            spacing = (wanted[-1].start_offset - wanted[0].start_offset) // (len(wanted) - 1)
            reach = max(1, spacing) * (LOOK_BEHIND + 1)
        else:
            reach = max(1, min(last - first + 1, first))
        while True:
            start = max(0, first - reach)
            below = list(takewhile(lambda s: s.start_offset < first, self.catalog.segments_from(tip, start)))
            if len(below) >= LOOK_BEHIND or start == 0:
                break
            reach *= PROBE_GROWTH
        rest = None if start == 0 else (lambda: self._all_below(tip, first))
        return Selection(first, below[::-1], wanted, rest)

    def _all_below(self, tip: TopicIdPartition, first: int) -> list[TieredSegment]:
        """Every segment of the partition starting below ``first``, nearest first (a walk that went far down)."""
        return list(takewhile(lambda s: s.start_offset < first, self.catalog.segments_from(tip, 0)))[::-1]

    def _select(self, selections: dict[int, Selection]) -> dict[int, list[SegmentSummary]]:
        """Read, round by round, what the partitions' selections ask for (all partitions at once)."""
        while True:
            rounds = {p: reads for p, sel in selections.items() if (reads := sel.next_reads()) is not None}
            if not rounds:
                break
            by_partition: dict[int, dict[TieredSegment, SegmentSummary]] = defaultdict(dict)
            for seg, summary in self._read(chain.from_iterable(rounds.values())).items():
                by_partition[seg.partition][seg] = summary
            for p in rounds:
                selections[p].took(by_partition[p])
        return {p: sel.read for p, sel in selections.items()}

    def slices(self) -> list[SegmentSlice]:
        per_topic = self.summaries()
        raise_failures(self.failures, self.tried)
        out: list[SegmentSlice] = []
        for topic, by_partition in sorted(per_topic.items()):
            for partition in sorted(by_partition):
                out.extend(self._partition(topic, partition, by_partition[partition]))
        return out

    def _partition(self, topic: str, partition: int, segs: list[SegmentSummary]) -> list[SegmentSlice]:
        first, last = self.opts.offset_range(topic, partition)
        ranges = resolve_overlaps((s.segment, s) for s in segs)
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
            stable = self._last_stable_offset(ranges[-1][1])
            if stable is not None:
                last = min(last, stable - 1)  # undecided transactions: nothing from their first offset on
        wanted: list[tuple[SegmentSummary, int, int, tuple[tuple[int, int, int], ...]]] = []
        for _seg, summary, lo, hi in ranges:
            lo, hi = max(lo, first), min(hi, last)
            if lo > hi:
                continue  # outside the asked offsets: skipped on manifest metadata alone
            if ts_lo is not None and 0 <= summary.max_timestamp_ms < ts_lo:
                continue  # every record is older than the lower time bound
            spans = tuple(a for a in aborted if a[2] >= lo and a[1] <= hi)
            wanted.append((summary, lo, hi, spans))
        return self._cut_all(wanted, ts_lo)

    def _cut_all(
        self, wanted: list[tuple[SegmentSummary, int, int, tuple[tuple[int, int, int], ...]]], ts_lo: int | None
    ) -> list[SegmentSlice]:
        """Every wanted range as slices; the ones that need a segment's indexes read them through the pool."""
        out: list[SegmentSlice] = []
        failures: list[SegmentFailure] = []
        jobs = ordered_map(lambda w: self._cut(*w, ts_lo), wanted, self.concurrency, "kts-plan-indexes")
        for outcome in jobs:
            if outcome.error is not None:
                failures.append(SegmentFailure(outcome.item[0].segment, outcome.error))
            elif not failures:
                assert outcome.result is not None
                out.extend(outcome.result)
        raise_failures(failures, len(wanted), "segments' indexes")
        return out

    def _aborted(self, segs: list[SegmentSummary]) -> list[tuple[int, int, int]]:
        """Aborted transactions of the partition from the first wanted segment on: a transaction's records and its
        ABORT marker may sit in different segments, so each slice is checked against every later transaction
        index (a marker comes after its records, so no earlier index can name a wanted record)."""
        with_txns = [s for s in segs if s.transaction_index_size]
        failures: list[SegmentFailure] = []
        spans: list[tuple[int, int, int]] = []
        for outcome in ordered_map(self._txn_spans, with_txns, self.concurrency, "kts-plan-txns"):
            if outcome.error is not None:
                failures.append(SegmentFailure(outcome.item.segment, outcome.error))
            else:
                spans.extend(outcome.result or ())
        raise_failures(failures, len(with_txns), "transaction indexes")
        return spans

    def _txn_spans(self, summary: SegmentSummary) -> list[tuple[int, int, int]]:
        with self.m.fetch_index(summary.segment.metadata_stub(), IndexType.TRANSACTION) as f:
            return [(t.producer_id, t.first_offset, t.last_offset) for t in decode_txn_index(f.read())]

    def _last_stable_offset(self, last_segment: SegmentSummary) -> int | None:
        """The first offset of the earliest transaction still open at the end of the tiered data, if any.

        A transaction whose COMMIT or ABORT marker is not tiered yet is undecided here, and a read_committed
        consumer never reads past the last stable offset (the first offset of the earliest open transaction),
        so neither do we. The producer snapshot tiered with the partition's last segment is the producer state
        at its end: its ``currentTxnFirstOffset`` fields name exactly the transactions without a tiered marker.
        """
        if not last_segment.producer_snapshot_size:
            return None  # no producer state tiered (KIP-405 requires it): no transaction is known to be open
        with self.m.fetch_index(last_segment.segment.metadata_stub(), IndexType.PRODUCER_SNAPSHOT) as f:
            firsts = [e.current_txn_first_offset for e in decode_producer_snapshot(f.read())]
        open_firsts = [o for o in firsts if o >= 0]
        return min(open_firsts) if open_firsts else None

    def _offset_for_time(
        self, ranges: list[tuple[TieredSegment, SegmentSummary, int, int]], timestamp: int
    ) -> int | None:
        """Kafka's ``offsetsForTimes`` over the tiered data: the earliest offset whose timestamp is >= ``timestamp``.

        Segments are walked in offset order; one whose max timestamp is below the target is skipped on its
        manifest, and the first that may hold it is searched from its time index on (the scan reads only the
        chunks from there to the first match).
        """
        for seg, summary, lo, hi in ranges:
            if 0 <= summary.max_timestamp_ms < timestamp:
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
        summary: SegmentSummary,
        lo: int,
        hi: int,
        spans: tuple[tuple[int, int, int], ...],
        ts_lo: int | None,
    ) -> list[SegmentSlice]:
        seg = summary.segment
        size = summary.segment_size_in_bytes
        limit = self.opts.max_slice_bytes
        iceberg = summary.kind == "iceberg"
        needs_index = lo > summary.start_offset or ts_lo is not None or size > limit
        if not needs_index:
            return [SegmentSlice(seg, 0, None, lo, hi, spans, iceberg)]
        index = self._offset_index(seg)
        start = index.lookup(lo).position
        if ts_lo is not None:
            with self.m.fetch_index(seg.metadata_stub(), IndexType.TIMESTAMP) as f:
                # ts_lo - 1: an entry equal to the bound may follow older records that also equal it
                ts_offset = TimeIndex.from_bytes(f.read(), seg.start_offset).lookup(ts_lo - 1).offset
            start = max(start, index.lookup(ts_offset).position)
        if hi < summary.end_offset:
            # Entries pair a batch's *last* offset with its start: the first entry past hi may still hold hi,
            # but every batch after it starts past hi, so the entry after that one bounds the read.
            nxt = bisect.bisect_right(index.entries, hi, key=lambda e: e.offset) + 1
            stop = index.entries[nxt].position if nxt < len(index.entries) else size
        else:
            stop = size
        if stop - start <= limit:
            return [SegmentSlice(seg, start, None if stop == size else stop, lo, hi, spans, iceberg)]
        chunk = summary.chunk_size
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
            SegmentSlice(seg, a, None if b == size else b, lo, hi, spans, iceberg)
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]


def plan_slices(
    manager: RemoteStorageManager, opts: TieredReadOptions, pushed: PushedBounds | None = None
) -> list[SegmentSlice]:
    """The slices to read for ``opts`` (narrowed by pushed-down filters), in topic/partition/offset order.

    Manifests are read ``opts.planning_concurrency`` at a time, and only those of segments that can hold wanted
    offsets; a manifest or index that cannot be read fails the plan with one exception naming every such segment.
    """
    return _Planner(manager, opts, pushed or PushedBounds()).slices()
