"""Overlapping segments of one partition (after a leader change, the old leader may have tiered offsets the new
leader also tiered, with different contents past the divergence point): segments are ranked by the highest leader
epoch they contain, then by the broker's event time; walking that ranking, each segment keeps only the offsets no
higher-ranked segment covers. The later leader's copy of an offset therefore always wins, and every offset is read
from exactly one segment (docs/spark.md, "Overlapping segments")."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Protocol, TypeVar

from rsm.core.catalog import TieredSegment

__all__ = ["resolve_overlaps"]


class _Ranked(Protocol):
    """What ranking needs of a segment: a ``SegmentSummary`` or a ``RemoteLogSegmentMetadata``."""

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def event_timestamp_ms(self) -> int: ...
    @property
    def segment_leader_epochs(self) -> dict[int, int]: ...


M = TypeVar("M", bound=_Ranked)


def _rank(segment: TieredSegment, meta: _Ranked) -> tuple[int, int, str]:
    epochs = meta.segment_leader_epochs
    return (max(epochs) if epochs else -1, meta.event_timestamp_ms, segment.segment_id)


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


def resolve_overlaps(candidates: Iterable[tuple[TieredSegment, M]]) -> list[tuple[TieredSegment, M, int, int]]:
    """``(segment, meta, first, last)`` ranges of one partition such that each offset appears once, taken
    from the segment with the highest leader epoch (then the latest event time) that holds it."""
    ranked = sorted(candidates, key=lambda c: _rank(c[0], c[1]), reverse=True)
    taken: list[tuple[int, int]] = []
    out: list[tuple[TieredSegment, M, int, int]] = []
    for segment, meta in ranked:
        if meta.end_offset < meta.start_offset:
            continue  # an empty segment holds no offsets
        for lo, hi in _subtract(meta.start_offset, meta.end_offset, taken):
            out.append((segment, meta, lo, hi))
        bisect.insort(taken, (meta.start_offset, meta.end_offset))
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
