"""A fetch of an Iceberg-mode segment: from a batch position, the segment's batches rebuilt from its rows.

Only the data files the segment's manifest lists are read (never the catalog: a fetch works while the catalog
is down), and of them only the row groups that can hold batches at or after the start position (Parquet's
min/max statistics of ``kafka.batch_byte_offset``), one row group at a time: a broker reading 1 MiB of a
1 GiB segment reads about that much. Rows of one batch may lie in several files (a segment spans days, and the
table is partitioned by day), so rows are merged by position before they become batches.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.fetch.lru import TimedLru
from rsm.iceberg.batches import FETCH_COLUMNS, encode_row_batches, row_positions
from rsm.iceberg.section import IcebergSection

_POSITION_PATH = "kafka.batch_byte_offset"


@dataclass(frozen=True)
class _RowGroup:
    low: int
    high: int
    file: int
    index: int


class RowGroupCache:
    """Row groups already read, as Arrow tables, and the footers of data files, least recently used dropped
    first (two ``TimedLru``, so concurrent fetches of a cold row group read it once). A broker catching up
    fetches a segment 1 MiB at a time from successive positions; each fetch would otherwise read and decode the
    same row group again. Data files are never rewritten (a commit that replaces rows writes new files), so an
    entry never goes stale. Thread-safe."""

    def __init__(self, max_bytes: int = 64 << 20, max_footers: int = 1024) -> None:
        # A row group over half the budget is served but not kept: it would push everything else out.
        self._groups: TimedLru[tuple[str, int], pa.Table] = TimedLru(
            "iceberg-row-groups", max_bytes, None, lambda t: t.nbytes if t.nbytes <= max_bytes // 2 else max_bytes + 1
        )
        self._footers: TimedLru[str, pq.FileMetaData] = TimedLru("iceberg-footers", max_footers, None)

    def footer(self, path: str, load: Callable[[], pq.FileMetaData]) -> pq.FileMetaData:
        return self._footers.get_or_load(path, load, None, f"footer of {path}")

    def row_group(self, path: str, index: int, load: Callable[[], pa.Table]) -> pa.Table:
        return self._groups.get_or_load((path, index), load, None, f"row group {index} of {path}")

    @property
    def held_bytes(self) -> int:
        """Bytes of row groups held now."""
        return self._groups.weight

    def stats(self) -> dict[str, float]:
        """The row-group cache's counters, with Aiven's cache metric names."""
        return self._groups.stats()


def _open_parquet(file_io: FileIO, path: str, what: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(file_io.new_input(path).open(seekable=True))
    except FileNotFoundError:
        raise RemoteResourceNotFoundException(
            f"{what}: its data file {path} is gone (snapshot expiry or orphan-file removal must keep the data "
            f"files of segments Kafka still has)"
        ) from None
    except OSError as e:
        raise RemoteStorageException(f"{what}: cannot read its data file {path}: {e}") from e


def _row_groups(footers: list[pq.FileMetaData], start: int, end: int | None) -> list[_RowGroup]:
    out: list[_RowGroup] = []
    for f_index, meta in enumerate(footers):
        column = next(
            (i for i in range(meta.num_columns) if meta.schema.column(i).path == _POSITION_PATH),
            None,
        )
        for rg in range(meta.num_row_groups):
            stats = meta.row_group(rg).column(column).statistics if column is not None else None
            if stats is None or not stats.has_min_max:
                low, high = 0, (1 << 31) - 1
            else:
                low, high = int(stats.min), int(stats.max)
            if high < start or (end is not None and low > end):
                continue
            out.append(_RowGroup(low, high, f_index, rg))
    out.sort(key=lambda g: (g.low, g.file, g.index))
    return out


def _non_decreasing(a: pa.ChunkedArray) -> bool:
    n = len(a)
    return n < 2 or bool(pc.all(pc.greater_equal(a.slice(1), a.slice(0, n - 1))).as_py())


def _count(mask: pa.ChunkedArray) -> int:
    return int(pc.sum(mask).as_py() or 0)


def _sorted_split(
    rows: pa.Table, start: int, end: int | None, frontier: int | None
) -> tuple[pa.Table, list[pa.Table]] | None:
    """For rows already sorted by position and offset: the rows to encode now (position in ``[start, end]`` and
    before ``frontier``) and the rows to hold for later (at or after ``frontier``), as slices. None when the rows
    are not sorted (rows of several data files interleave)."""
    pos = row_positions(rows)
    if not (_non_decreasing(pos) and _non_decreasing(pc.struct_field(rows.column("kafka"), "offset"))):
        return None
    n = rows.num_rows
    lo = _count(pc.less(pos, start))
    cut = n if frontier is None else _count(pc.less(pos, frontier))
    hi = cut if end is None else min(cut, _count(pc.less_equal(pos, end)))
    held = [rows.slice(cut)] if cut < n else []
    return rows.slice(lo, max(0, hi - lo)), held


def iter_segment_batches(
    file_io: FileIO,
    section: IcebergSection,
    start: int,
    end: int | None,
    what: str,
    cache: RowGroupCache | None = None,
) -> Iterator[bytes]:
    """The batches of the segment whose original position is in ``[start, end]`` (``end`` None: to the end)."""
    cache = cache if cache is not None else RowGroupCache(0, 0)
    opened: dict[str, pq.ParquetFile] = {}

    def parquet(path: str) -> pq.ParquetFile:
        if path not in opened:
            opened[path] = _open_parquet(file_io, path, what)
        return opened[path]

    paths = [f.path for f in section.files]
    footers = [cache.footer(p, lambda p=p: parquet(p).metadata) for p in paths]  # type: ignore[misc]
    groups = _row_groups(footers, start, end)
    held: list[pa.Table] = []
    g = 0
    while g < len(groups) or held:
        if g < len(groups):
            group = groups[g]
            path = paths[group.file]
            t = cache.row_group(
                path,
                group.index,
                lambda path=path, index=group.index: parquet(path).read_row_group(index, columns=FETCH_COLUMNS),  # type: ignore[misc]
            )
            held.append(t)
            g += 1
            # Batches before the next row group's lowest position are complete: no later row group holds them.
            frontier = groups[g].low if g < len(groups) else None
            if frontier is not None and frontier <= group.low:
                continue
        else:
            frontier = None
        rows = pa.concat_tables(held)
        split = _sorted_split(rows, start, end, frontier)
        if split is not None:  # rows in segment order (one data file's): slices, no copies
            ready, held = split
            for _position, batch in encode_row_batches(ready, what):
                yield batch
            continue
        pos = row_positions(rows)
        keep = pc.greater_equal(pos, start)
        if end is not None:
            keep = pc.and_(keep, pc.less_equal(pos, end))
        if frontier is not None:
            ready_mask = pc.less(pos, frontier)
            ready = rows.filter(pc.and_(keep, ready_mask))
            held = [rows.filter(pc.invert(ready_mask))]
        else:
            ready = rows.filter(keep)
            held = []
        if ready.num_rows:
            order = pc.sort_indices(
                pa.table({"p": row_positions(ready), "o": pc.struct_field(ready.column("kafka"), "offset")}),
                sort_keys=[("p", "ascending"), ("o", "ascending")],
            )
            for _position, batch in encode_row_batches(ready.take(order), what):
                yield batch


class BatchStream(io.RawIOBase):
    """A lazy byte stream over rebuilt batches (what ``fetch_log_segment`` returns for an Iceberg segment)."""

    def __init__(self, batches: Iterator[bytes]) -> None:
        self._batches = batches
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("read of a closed stream")
        while not self._current:
            nxt = next(self._batches, None)
            if nxt is None:
                return 0
            self._current = memoryview(nxt)
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            close = getattr(self._batches, "close", None)
            if close is not None:
                close()
        super().close()


class _BatchReader(io.BufferedReader):
    """``readinto`` gives what is ready (at most a batch or two), as ``readinto1`` does, instead of filling the
    caller's buffer: the transports read 1 MiB pieces, and a fetch's first bytes should not wait for a whole
    MiB of batches to be rebuilt, nor should batches the broker never reads be rebuilt after it closed."""

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        return self.readinto1(buffer)


def open_segment_stream(
    file_io: FileIO,
    section: IcebergSection,
    start: int,
    end: int | None,
    what: str,
    cache: RowGroupCache | None = None,
) -> io.BufferedReader:
    """The stream of a fetch; the first batch is built before it returns, so a missing file fails the call."""
    if start < 0:
        raise RemoteStorageException(f"{what}: start position {start} is negative")
    batches = iter_segment_batches(file_io, section, start, end, what, cache)
    first = next(batches, None)

    def chained() -> Iterator[bytes]:
        if first is not None:
            yield first
            yield from batches

    return _BatchReader(BatchStream(chained()), buffer_size=256 << 10)
