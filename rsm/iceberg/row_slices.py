"""Large row groups read a slice at a time.

Compaction writes row groups of up to ``COMPACTED_ROW_GROUP_ROWS`` rows (Spark reads their dictionary-encoded
keys faster; docs/benchmarks.md, "The key scan"). A fetch must not read a whole such group to serve 1 MiB of
it: a group holds a few hundred MB of values. It reads the group in slices of up to ``SLICE_ROWS`` rows and
about ``SLICE_BYTES`` instead (``slice_rows``; a copy's 32,768-row groups of large records are sliced too, so
that the row-group cache keeps them):

- a ``SliceIndex``, built from the group's narrow selecting columns (partition, offset, segment id, position),
  says which slices hold which of a segment's offsets and positions, so a fetch skips the slices before its
  start position and knows, for each slice, the lowest offset any later slice can hold;
- a ``SliceCursor`` is pyarrow's streaming reader of one group, left where the last fetch stopped, so a broker
  catching up (fetches from successive positions) decodes each slice once. Parquet cannot skip pages without
  decoding them, so a cursor behind the wanted slice reads forward, and one past it is replaced by a new one.

Slices are exact: slice ``k`` holds the group's rows from ``k * slice_rows`` to the next slice's first row.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rsm.errors import RemoteStorageException
from rsm.iceberg.config_keys import SLICE_BYTES, SLICE_READERS_DEFAULT

SLICE_ROWS = 32768
"""The most rows a fetch reads at a time from a larger row group (the rows per group of a copy's files)."""
MIN_SLICE_ROWS = 1024
CURSOR_BUFFER_BYTES = 256 << 10
"""Read buffer of each column a cursor streams."""
CURSOR_IDLE_S = 60.0
"""A cursor no fetch took for this long is closed."""


def slice_rows(rows: int, uncompressed_bytes: int, most: int = SLICE_ROWS) -> int:
    """Rows per slice of a row group of ``rows`` rows and ``uncompressed_bytes``: at most ``most``, and about
    ``SLICE_BYTES`` of data. A group of no more rows than this is read whole."""
    per_row = max(1, uncompressed_bytes // max(1, rows))
    return max(1, min(most, max(MIN_SLICE_ROWS, SLICE_BYTES // per_row)))


@dataclass(frozen=True)
class SliceSpan:
    """A segment's rows in one slice: the lowest offset and the lowest and highest positions among them."""

    first_offset: int
    low_position: int
    high_position: int


@dataclass(frozen=True)
class SliceIndex:
    """Where a segment's rows lie in a large row group, slice by slice (None: a slice holds none of them).
    ``in_order``: the segment's rows come in offset and position order through the whole group (compaction
    sorts by partition and offset); only then may a fetch read the group a slice at a time."""

    in_order: bool
    spans: tuple[SliceSpan | None, ...]

    @classmethod
    def build(
        cls, offsets: pa.ChunkedArray, positions: pa.ChunkedArray, own: pa.ChunkedArray, slice_rows: int = SLICE_ROWS
    ) -> SliceIndex:
        """From each row's offset, position and whether it is the segment's, in file order."""
        offsets, positions = offsets.filter(own), positions.filter(own)
        in_order = non_decreasing(offsets) and non_decreasing(positions)
        own_before = pc.cumulative_sum(pc.cast(own, pa.int64())) if len(own) else pa.chunked_array([], pa.int64())
        spans: list[SliceSpan | None] = []
        for start in range(0, len(own), slice_rows):
            stop = min(start + slice_rows, len(own))
            lo = int(own_before[start - 1].as_py()) if start else 0
            hi = int(own_before[stop - 1].as_py())
            if hi == lo:
                spans.append(None)
                continue
            span_positions = positions.slice(lo, hi - lo)
            bounds = pc.min_max(span_positions)
            spans.append(
                SliceSpan(
                    int(pc.min(offsets.slice(lo, hi - lo)).as_py()),
                    int(bounds["min"].as_py()),
                    int(bounds["max"].as_py()),
                )
            )
        return cls(in_order, tuple(spans))

    def wanted(self, start: int, end: int | None, after: int | None) -> Iterator[tuple[int, int, int | None]]:
        """``(slice, lowest offset, frontier)`` for each slice holding the segment's rows at positions
        ``start..end``, in order; the frontier is the lowest offset a later slice, or ``after`` (the lowest of
        what follows the group; None: nothing), may hold."""
        held = [(k, s) for k, s in enumerate(self.spans) if s is not None]
        for i, (k, span) in enumerate(held):
            if span.high_position < start:
                continue
            if end is not None and span.low_position > end:
                return
            nxt = held[i + 1][1].first_offset if i + 1 < len(held) else None
            frontier = nxt if after is None else after if nxt is None else min(nxt, after)
            yield k, span.first_offset, frontier


def non_decreasing(a: pa.ChunkedArray) -> bool:
    """Whether each value of ``a`` is at least the one before it."""
    n = len(a)
    return n < 2 or bool(pc.all(pc.greater_equal(a.slice(1), a.slice(0, n - 1))).as_py())


class SliceCursor:
    """pyarrow's streaming reader of one row group's ``columns``, a slice at a time, at ``next_slice``."""

    def __init__(self, source: Any, index: int, columns: list[str], what: str, slice_rows: int = SLICE_ROWS) -> None:
        self._source = source
        self._file = pq.ParquetFile(source, buffer_size=CURSOR_BUFFER_BYTES, pre_buffer=False)
        self._rows = self._file.metadata.row_group(index).num_rows
        self._slice_rows = slice_rows
        self._batches = self._file.iter_batches(batch_size=slice_rows, row_groups=[index], columns=columns)
        self._what = what
        self.next_slice = 0

    def read(self, k: int) -> pa.Table:
        """Slice ``k`` (at or after ``next_slice``); the slices before it are decoded and dropped."""
        if k < self.next_slice:
            raise ValueError(f"slice {k} is behind the cursor ({self.next_slice})")
        while True:
            i = self.next_slice
            batch = next(self._batches, None)
            expected = min(self._slice_rows, self._rows - i * self._slice_rows)
            if batch is None or batch.num_rows != expected:
                got = "none" if batch is None else f"{batch.num_rows} rows"
                raise RemoteStorageException(
                    f"{self._what}: slice {i} of a row group of {self._rows} rows came back with {got} instead "
                    f"of {expected}; the data file may be damaged: read it with pyarrow or Spark to check"
                )
            self.next_slice += 1
            if i == k:
                return pa.Table.from_batches([batch])

    def close(self) -> None:
        self._batches = iter(())
        self._file.close()
        close = getattr(self._source, "close", None)
        if close is not None:
            close()


class SliceCursors:
    """Open cursors between fetches: at most ``max_open`` (as many as the broker's reader threads, so each of them
    catching up keeps its own), the one given back longest ago closed first, and none idle for more than
    ``idle_s``. A cursor is taken by one fetch at a time; two fetches of one group each get their own.
    Thread-safe."""

    def __init__(
        self,
        max_open: int = SLICE_READERS_DEFAULT,
        idle_s: float = CURSOR_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_open = max_open
        self._idle_s = idle_s
        self._clock = clock
        #: (key, serial) -> (key, cursor, when given back), oldest first
        self._idle: OrderedDict[tuple[Hashable, int], tuple[Hashable, SliceCursor, float]] = OrderedDict()
        self._serial = 0
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0

    def _closing(self, now: float) -> list[SliceCursor]:
        """Take out the cursors past ``max_open`` or idle too long, to close outside the lock. Caller holds it."""
        out: list[SliceCursor] = []
        while self._idle:
            _key, cursor, since = next(iter(self._idle.values()))
            if len(self._idle) <= self._max_open and now - since <= self._idle_s:
                break
            self._idle.popitem(last=False)
            out.append(cursor)
        return out

    def take(self, key: Hashable, k: int, open_cursor: Callable[[], SliceCursor]) -> SliceCursor:
        """An idle cursor of ``key`` at or before slice ``k`` (the nearest), or a new one."""
        with self._lock:
            closing = self._closing(self._clock())
            usable = [slot for slot, (owner, c, _) in self._idle.items() if owner == key and c.next_slice <= k]
            found = self._idle.pop(max(usable, key=lambda slot: self._idle[slot][1].next_slice))[1] if usable else None
            self.opened += found is None
        for c in closing:
            c.close()
        return found if found is not None else open_cursor()

    def give_back(self, key: Hashable, cursor: SliceCursor) -> None:
        """Keep ``cursor`` for a later fetch of ``key``."""
        with self._lock:
            self._serial += 1
            now = self._clock()
            if not self._closed:
                self._idle[(key, self._serial)] = (key, cursor, now)
            closing = [cursor] if self._closed else self._closing(now)
        for c in closing:
            c.close()

    def close(self) -> None:
        """Close every idle cursor (the plugin is closing; a cursor taken now is closed when given back)."""
        with self._lock:
            self._closed = True
            closing = [cursor for _key, cursor, _since in self._idle.values()]
            self._idle.clear()
        for c in closing:
            c.close()

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)
