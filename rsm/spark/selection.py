"""Which of one partition's segments a plan reads the manifests of, walking down from an offset bound."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain

from rsm.core.catalog import TieredSegment
from rsm.core.manifest_reader import SegmentSummary

LOOK_BEHIND = 2
"""Segments starting below an offset bound that are read at once: in a partition without overlaps, the one
holding the bound and the one before it, which ends before the bound and so closes the walk."""
PROBE_GROWTH = 16
"""How much further back each listing probe for segments below a lower bound starts than the previous one."""


class Selection:
    """Which of one partition's segments have their manifests read, decided on the keys' start offsets.

    Segments starting past the last wanted offset hold nothing wanted: never listed far nor read (unless
    read_committed, where a later segment may hold the ABORT marker of a wanted record). Segments starting in the
    wanted range are read. Below the first wanted offset the walk goes down from the nearest start and stops at the
    first segment that ends before that offset: a partition's segments follow each other, so nothing earlier
    reaches into the range, while a segment that overlaps its successors (an old leader's copy after a leader
    change) is read and ranked. ``below`` may be only the nearest few segments; ``rest_below`` then lists all of
    them, for the rare walk that goes further.
    """

    def __init__(
        self,
        first: int,
        below: list[TieredSegment],
        wanted: Iterable[TieredSegment],
        rest_below: Callable[[], list[TieredSegment]] | None,
    ) -> None:
        self.first = first
        self.below = below  # nearest first
        self.rest_below = rest_below
        self.taken_below = 0
        self.pending: Iterable[TieredSegment] | None = wanted
        self.read: list[SegmentSummary] = []
        self.closed = not self.below and rest_below is None

    def next_reads(self) -> Iterable[TieredSegment] | None:
        """The segments to read in the next round, the wanted ones possibly still being listed (None: nothing is
        left to read)."""
        parts: list[Iterable[TieredSegment]] = []
        if self.pending is not None:
            parts.append(self.pending)
            self.pending = None
        if not self.closed:
            if self.taken_below >= len(self.below) and self.rest_below is not None:
                self.below, self.rest_below = self.rest_below(), None
            round_below = self.below[self.taken_below : self.taken_below + LOOK_BEHIND]
            if round_below:
                parts.append(round_below)
            else:
                self.closed = True
        return chain.from_iterable(parts) if parts else None

    def took(self, got: dict[TieredSegment, SegmentSummary]) -> None:
        """Record a round's summaries; the walk below the bound closes at a segment ending before it."""
        self.read.extend(got.values())
        if self.closed:
            return
        round_below = self.below[self.taken_below : self.taken_below + LOOK_BEHIND]
        self.taken_below += len(round_below)
        for seg in round_below:
            summary = got.get(seg)
            if summary is None or summary.end_offset < self.first:
                self.closed = True  # a failed read closes it too: the plan fails on that failure anyway
                return
        if self.taken_below >= len(self.below) and self.rest_below is None:
            self.closed = True
