"""A fetch of an Iceberg-mode segment: from a batch position, the segment's batches rebuilt from its rows.

Only the data files the segment's manifest lists are read (never the catalog: a fetch works while the catalog
is down), and of them only the row groups that can hold batches at or after the start position (Parquet's
min/max statistics of ``kafka.batch_byte_offset``), one row group at a time: a broker reading 1 MiB of a
1 GiB segment reads about that much. Rows of one batch may lie in several files (a segment spans days, and the
table is partitioned by day), so rows are merged by position before they become batches.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from rsm.errors import CorruptDataException, RemoteResourceNotFoundException, RemoteStorageException
from rsm.iceberg.batches import FETCH_COLUMNS, encode_row_batches
from rsm.iceberg.section import IcebergSection

_POSITION_PATH = "kafka.batch_byte_offset"


@dataclass(frozen=True)
class _RowGroup:
    low: int
    high: int
    file: int
    index: int


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


def _row_groups(files: list[pq.ParquetFile], start: int, end: int | None) -> list[_RowGroup]:
    out: list[_RowGroup] = []
    for f_index, f in enumerate(files):
        meta = f.metadata
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


def _positions(t: pa.Table) -> pa.Array:
    return pc.struct_field(t.column("kafka"), "batch_byte_offset")


def iter_segment_batches(
    file_io: FileIO, section: IcebergSection, start: int, end: int | None, what: str
) -> Iterator[bytes]:
    """The batches of the segment whose original position is in ``[start, end]`` (``end`` None: to the end)."""
    files = [_open_parquet(file_io, f.path, what) for f in section.files]
    groups = _row_groups(files, start, end)
    held: list[pa.Table] = []
    g = 0
    while g < len(groups) or held:
        if g < len(groups):
            group = groups[g]
            t = files[group.file].read_row_group(group.index, columns=FETCH_COLUMNS)
            held.append(t)
            g += 1
            # Batches before the next row group's lowest position are complete: no later row group holds them.
            frontier = groups[g].low if g < len(groups) else None
            if frontier is not None and frontier <= group.low:
                continue
        else:
            frontier = None
        rows = pa.concat_tables(held)
        pos = _positions(rows)
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
            kafka = ready.column("kafka")
            order = pc.sort_indices(
                pa.table(
                    {
                        "p": pc.struct_field(kafka, "batch_byte_offset"),
                        "o": pc.struct_field(kafka, "offset"),
                    }
                ),
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


def open_segment_stream(
    file_io: FileIO, section: IcebergSection, start: int, end: int | None, what: str
) -> io.BufferedReader:
    """The stream of a fetch; the first batch is built before it returns, so a missing file fails the call."""
    if start < 0:
        raise RemoteStorageException(f"{what}: start position {start} is negative")
    batches = iter_segment_batches(file_io, section, start, end, what)
    try:
        first = next(batches, None)
    except CorruptDataException:
        raise

    def chained() -> Iterator[bytes]:
        if first is not None:
            yield first
            yield from batches

    return io.BufferedReader(BatchStream(chained()), buffer_size=1 << 20)
