"""A fetch of an Iceberg-mode segment: from a batch position, the segment's batches rebuilt from its rows.

The rows are found through the table's current snapshot (``rsm.iceberg.fetch_plan``): the data files that may
hold the segment's partition and offsets, whichever writer or compaction made them. Of those files only the row
groups whose statistics (``kafka.partition``, ``kafka.offset``, ``kafka.segment_id``, ``kafka.batch_byte_offset``)
can hold the segment's batches at or after the start position are read, one at a time: a broker reading 1 MiB of
a 1 GiB segment reads about that much. A compacted file holds rows of many segments and partitions, sorted by
partition and offset; a segment's own files hold only its rows, one file per day. Row groups are taken in offset
order and a batch is rebuilt once no later row group can hold rows of it.

Rows deleted by SQL leave a gap, as a compacted topic does: a batch comes back without them (its base offset and
lastOffsetDelta kept), and a batch with no row left is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.fetch.lru import TimedLru
from rsm.iceberg.batches import FETCH_COLUMNS, row_positions
from rsm.iceberg.config_keys import SLICE_READERS_DEFAULT
from rsm.iceberg.fetch_plan import SegmentRows
from rsm.iceberg.row_groups import (
    NO_LOW,
    OFFSET_PATH,
    PARTITION_PATH,
    POSITION_PATH,
    RowGroup,
    plan_row_groups,
    selecting_columns,
)
from rsm.iceberg.row_slices import SLICE_ROWS, SliceCursor, SliceCursors, SliceIndex, non_decreasing, slice_rows
from rsm.iceberg.schema import kafka_arrow_type


class RowGroupCache:
    """Row groups already read, as Arrow tables, and the footers of data files, least recently used dropped
    first (two ``TimedLru``, so concurrent fetches of a cold row group read it once). A broker catching up
    fetches a segment 1 MiB at a time from successive positions; each fetch would otherwise read and decode the
    same row group again. A row group shared by several segments (a compacted file) is kept per segment, holding
    only that segment's rows. A data file is never changed in place (a compaction writes new files), so an entry
    never goes stale. Thread-safe."""

    def __init__(
        self,
        max_bytes: int = 64 << 20,
        max_footers: int = 1024,
        max_slice_rows: int = SLICE_ROWS,
        slice_readers: int = SLICE_READERS_DEFAULT,
    ) -> None:
        # A row group over half the budget is served but not kept: it would push everything else out.
        self._groups: TimedLru[Hashable, pa.Table] = TimedLru(
            "iceberg-row-groups", max_bytes, None, lambda t: t.nbytes if t.nbytes <= max_bytes // 2 else max_bytes + 1
        )
        self._footers: TimedLru[str, pq.FileMetaData] = TimedLru("iceberg-footers", max_footers, None)
        # A large row group's rows are read a slice at a time (rsm.iceberg.row_slices); a slice is kept as a
        # row group is, under the group's key and its number.
        self._slice_indexes: TimedLru[Hashable, SliceIndex] = TimedLru(
            "iceberg-slice-indexes", max(max_footers, 16), None
        )
        # max_slice_rows: the most rows a slice holds (fewer for large records); 0: every row group read whole.
        # slice_readers: the cursors kept between fetches (iceberg.mode.fetch.slice.readers).
        self.cursors = SliceCursors(slice_readers)
        self.max_slice_rows = max_slice_rows

    def footer(self, path: str, load: Callable[[], pq.FileMetaData]) -> pq.FileMetaData:
        return self._footers.get_or_load(path, load, None, f"footer of {path}")

    def slice_index(self, key: Hashable, load: Callable[[], SliceIndex]) -> SliceIndex:
        return self._slice_indexes.get_or_load(key, load, None, f"slice index {key}")

    def row_group(self, key: Hashable, load: Callable[[], pa.Table]) -> pa.Table:
        return self._groups.get_or_load(key, load, None, f"row group {key}")

    @property
    def held_bytes(self) -> int:
        """Bytes of row groups held now."""
        return self._groups.weight

    def stats(self) -> dict[str, float]:
        """The row-group cache's counters, with Aiven's cache metric names."""
        return self._groups.stats()


def _open_parquet(file_io: FileIO, path: str, what: str) -> pq.ParquetFile:
    return _opening(file_io, path, what, pq.ParquetFile)


def _close_parquet(parquet: pq.ParquetFile) -> None:
    """Close ``parquet`` and the stream it reads (a ParquetFile given an open stream leaves it open)."""
    parquet.close(force=True)


def _opening(file_io: FileIO, path: str, what: str, wrap: Callable[[Any], Any]) -> Any:
    """``wrap`` of the data file at ``path`` opened for random access (the stream closed again when ``wrap``
    fails); a missing or unreadable file gets the plugin's exceptions."""
    try:
        stream = file_io.new_input(path).open(seekable=True)
        try:
            return wrap(stream)
        except BaseException:
            stream.close()
            raise
    except FileNotFoundError:
        raise RemoteResourceNotFoundException(
            f"{what}: its data file {path} is gone (the table changed since the fetch was planned, or the file "
            "was removed while a snapshot still names it)"
        ) from None
    except OSError as e:
        raise RemoteStorageException(f"{what}: cannot read its data file {path}: {e}") from e


def _own_rows(t: pa.Table, rows: SegmentRows) -> pa.Table:
    """The rows of ``t`` that are the segment's: its partition and offsets, and its segment id where set."""
    return t.filter(_own_mask(t, rows))


def _own_mask(t: pa.Table, rows: SegmentRows) -> pa.ChunkedArray:
    """Whether each row of ``t`` is the segment's (never null)."""
    kafka = t.column("kafka")
    offsets = pc.struct_field(kafka, "offset")
    mask = pc.and_kleene(
        pc.equal(pc.struct_field(kafka, "partition"), rows.partition),
        pc.and_kleene(pc.greater_equal(offsets, rows.first_offset), pc.less_equal(offsets, rows.last_offset)),
    )
    if rows.segment_id is not None and "segment_id" in {f.name for f in kafka.type}:
        ids = pc.struct_field(kafka, "segment_id")
        mask = pc.and_kleene(mask, pc.or_kleene(pc.is_null(ids), pc.equal(ids, rows.segment_id)))
    return pc.fill_null(mask, False)


def _count(mask: pa.ChunkedArray) -> int:
    return int(pc.sum(mask).as_py() or 0)


def _batch_last_offsets(rows: pa.Table) -> pa.ChunkedArray:
    """Each row's batch's last offset (base offset + lastOffsetDelta)."""
    kafka = rows.column("kafka")
    return pc.add(
        pc.struct_field(kafka, "batch_base_offset"),
        pc.cast(pc.struct_field(kafka, "batch_last_offset_delta"), pa.int64()),
    )


def _split(rows: pa.Table, start: int, end: int | None, frontier: int | None) -> tuple[pa.Table, list[pa.Table]]:
    """The rows to encode now (position in ``[start, end]``, their batch complete: its last offset before
    ``frontier``), sorted by position and offset; and the rows to hold for later."""
    pos = row_positions(rows)
    n = rows.num_rows
    if non_decreasing(pos) and non_decreasing(pc.struct_field(rows.column("kafka"), "offset")):
        # Rows in segment order (the usual case): slices, no copies.
        cut = n if frontier is None else _count(pc.less(_batch_last_offsets(rows), frontier))
        lo = _count(pc.less(pos, start))
        hi = cut if end is None else min(cut, _count(pc.less_equal(pos, end)))
        return rows.slice(lo, max(0, hi - lo)), ([rows.slice(cut)] if cut < n else [])
    keep = pc.greater_equal(pos, start)
    if end is not None:
        keep = pc.and_(keep, pc.less_equal(pos, end))
    held: list[pa.Table] = []
    if frontier is not None:
        complete = pc.less(_batch_last_offsets(rows), frontier)
        held = [rows.filter(pc.and_(pc.invert(complete), keep))]
        keep = pc.and_(keep, complete)
    ready = rows.filter(keep)
    order = pc.sort_indices(
        pa.table({"p": row_positions(ready), "o": pc.struct_field(ready.column("kafka"), "offset")}),
        sort_keys=[("p", "ascending"), ("o", "ascending")],
    )
    return ready.take(order), held


#: The fields of ``kafka`` that select a segment's rows and order its batches (always read).
_SELECTING_FIELDS = (
    "partition",
    "offset",
    "segment_id",
    "batch_byte_offset",
    "batch_base_offset",
    "batch_last_offset_delta",
)


def _with_kafka_fields(t: pa.Table, fields: tuple[str, ...] | None) -> pa.Table:
    """``t`` with its ``kafka`` struct made of ``fields`` in this order (null where ``t`` has none); unchanged
    for None. Data files of one table may differ (older ones lack later fields, writers order them their way)."""
    if fields is None:
        return t
    kafka = t.column("kafka")
    present = {f.name: f.type for f in kafka.type}
    types = kafka_arrow_type()
    chunks = []
    for chunk in kafka.chunks or [pa.array([], kafka.type)]:
        arrays = [chunk.field(f) if f in present else pa.nulls(len(chunk), types.field(f).type) for f in fields]
        chunks.append(pa.StructArray.from_arrays(arrays, names=list(fields)))
    return t.set_column(t.schema.get_field_index("kafka"), "kafka", pa.chunked_array(chunks, chunks[0].type))


def iter_segment_rows(
    rows: SegmentRows,
    start: int,
    end: int | None,
    what: str,
    cache: RowGroupCache | None = None,
    columns: Sequence[str] = FETCH_COLUMNS,
    kafka_fields: Sequence[str] | None = None,
) -> Generator[pa.Table, None, None]:
    """The rows of the segment's batches whose original position is in ``[start, end]`` (``end`` None: to the
    end), whole batches at a time, sorted by position and offset: ``columns`` of the table (``kafka`` always).
    ``kafka_fields``: only these fields of ``kafka`` (and those that select the rows), in this order, null where
    a data file has none; None: the whole struct, as the file has it. The files the fetch opened are closed when
    it ends: read to the end, failed, or closed by its consumer."""
    fetch = _SegmentFetch(rows, start, end, what, cache, columns, kafka_fields)
    try:
        yield from fetch.tables()
    finally:
        fetch.close()


class _SegmentFetch:
    """One fetch of a segment's rows: the data files it opened (until ``close``), their footers, and how each row
    group that may hold rows wanted is read (whole, or a slice at a time through the cache's cursors)."""

    def __init__(
        self,
        rows: SegmentRows,
        start: int,
        end: int | None,
        what: str,
        cache: RowGroupCache | None,
        columns: Sequence[str],
        kafka_fields: Sequence[str] | None,
    ) -> None:
        self.rows, self.start, self.end, self.what = rows, start, end, what
        self.cache = cache if cache is not None else RowGroupCache(0, 0)
        self.wanted = ["kafka", *(c for c in FETCH_COLUMNS if c != "kafka" and c in columns)]
        self.fields = None if kafka_fields is None else tuple(dict.fromkeys((*_SELECTING_FIELDS, *kafka_fields)))
        # The broker's fetches read every fetch column; another choice is cached apart.
        self.variant: tuple[object, ...] = (
            () if self.wanted == FETCH_COLUMNS and self.fields is None else (tuple(self.wanted), self.fields)
        )
        self.selection = (rows.partition, rows.first_offset, rows.last_offset, rows.segment_id)
        self.plain = [p for p in rows.files if p not in rows.merge_on_read]
        self.whole = list(rows.merge_on_read.items())
        self.footers: list[pq.FileMetaData] = []
        self._opened: dict[str, pq.ParquetFile] = {}

    def close(self) -> None:
        """Close the data files this fetch opened (the cursors it gave back stay with the cache)."""
        opened, self._opened = self._opened, {}
        for parquet in opened.values():
            _close_parquet(parquet)

    def parquet(self, path: str) -> pq.ParquetFile:
        if path not in self._opened:
            self._opened[path] = _open_parquet(self.rows.io, path, self.what)
        return self._opened[path]

    def tables(self) -> Iterator[pa.Table]:
        """The rows wanted, ready batch by batch: each piece read in offset order is held until no later piece can
        hold rows of its batches."""
        groups = self._plan()
        held: list[pa.Table] = []
        for g, group in enumerate(groups):
            after = groups[g + 1].low if g + 1 < len(groups) else None
            for t, low, frontier in self._pieces(group, after):
                if t.num_rows:
                    held.append(t)
                if not held or (frontier is not None and frontier <= low):
                    continue  # nothing new is complete before the next piece
                ready, held = _split(pa.concat_tables(held), self.start, self.end, frontier)
                if ready.num_rows:
                    yield ready
        if held:
            ready, _ = _split(pa.concat_tables(held), self.start, self.end, None)
            if ready.num_rows:
                yield ready

    def _plan(self) -> list[RowGroup]:
        """The row groups to read, in offset order; files with delete files first, read whole (pyiceberg applies
        the deletes)."""
        self.footers = [self.cache.footer(p, lambda p=p: self.parquet(p).metadata) for p in self.plain]  # type: ignore[misc]
        groups = plan_row_groups(self.footers, self.rows, self.start, self.end)
        return [RowGroup(NO_LOW, -1 - i, -1, False) for i in range(len(self.whole))] + groups

    def _pieces(self, group: RowGroup, after: int | None) -> Iterator[tuple[pa.Table, int, int | None]]:
        """``(rows, lowest offset, frontier)``: the group whole, or the slices of it that hold rows wanted."""
        n = self._rows_per_slice(group)
        index = None if n is None else self._slice_index(group, n)
        if n is None or index is None:
            yield self._load(group), group.low, after
            return
        for k, low, frontier in index.wanted(self.start, self.end, after):
            yield self._load_slice(group, k, n), low, frontier

    def _read_columns(self, f_index: int) -> tuple[list[str], Callable[[pa.Table], pa.Table]]:
        """The columns to read of a file, and what makes the rows read of them the rows wanted."""
        fields = self.fields
        if fields is None:
            return self.wanted, lambda t: t
        meta = self.footers[f_index]
        have = {meta.schema.column(i).path for i in range(meta.num_columns)}
        leaves = [f"kafka.{f}" for f in fields if f"kafka.{f}" in have]
        return [*leaves, *self.wanted[1:]], lambda t: _with_kafka_fields(t, fields)

    def _read_group(self, f_index: int, index: int) -> pa.Table:
        columns, finish = self._read_columns(f_index)
        return finish(self.parquet(self.plain[f_index]).read_row_group(index, columns=columns))

    def _load(self, group: RowGroup) -> pa.Table:
        """A row group whole (a file with delete files: the file whole), the segment's rows of it."""
        rows, variant = self.rows, self.variant
        if group.index < 0:
            path, read = self.whole[-1 - group.file]
            return self.cache.row_group(
                (path, -1, self.selection, rows.snapshot_id, *variant),
                lambda: _own_rows(_with_kafka_fields(read().select(self.wanted), self.fields), rows),
            )
        path = self.plain[group.file]
        if group.own:
            return self.cache.row_group(
                (path, group.index, *variant), lambda: self._read_group(group.file, group.index)
            )
        return self.cache.row_group(
            (path, group.index, self.selection, *variant),
            lambda: _own_rows(self._read_group(group.file, group.index), rows),
        )

    def _rows_per_slice(self, group: RowGroup) -> int | None:
        """Rows per slice of the group; None: it is small enough to read whole."""
        if group.index < 0 or self.cache.max_slice_rows <= 0:
            return None
        rg = self.footers[group.file].row_group(group.index)
        n = slice_rows(rg.num_rows, rg.total_byte_size, self.cache.max_slice_rows)
        return n if rg.num_rows > n else None

    def _slice_index(self, group: RowGroup, n: int) -> SliceIndex | None:
        """The index of the group's slices of ``n`` rows when it holds the selecting columns and its rows of the
        segment come in order; None: read it whole."""
        path = self.plain[group.file]
        cols = selecting_columns(self.footers[group.file])

        def narrow() -> pa.Table:
            return self.parquet(path).read_row_group(group.index, columns=list(cols))

        def build() -> SliceIndex:
            if not {PARTITION_PATH, OFFSET_PATH, POSITION_PATH} <= cols.keys():
                return SliceIndex(False, ())
            if group.own:
                t = narrow()
                own = pa.chunked_array([pa.repeat(True, t.num_rows)])
            else:  # the segments of a compacted file share its selecting columns
                t = self.cache.row_group((path, group.index, "selecting columns"), narrow)
                own = _own_mask(t, self.rows)
            kafka = t.column("kafka")
            return SliceIndex.build(pc.struct_field(kafka, "offset"), row_positions(t), own, n)

        key = (path, group.index, *(() if group.own else (self.selection,)))
        index = self.cache.slice_index(key, build)
        return index if index.in_order else None

    def _load_slice(self, group: RowGroup, k: int, n: int) -> pa.Table:
        """Slice ``k`` (of ``n`` rows) of a large row group, the segment's rows of it. The slice as the file holds
        it is kept apart from a segment's rows of it: the segments of a compacted file share it, so the next
        segment's first fetch finds it instead of reading the group from its start."""
        path = self.plain[group.file]
        whole = (path, group.index, k, *self.variant)
        if group.own:
            return self.cache.row_group(whole, lambda: self._read_slice(group, k, n))
        return self.cache.row_group(
            (path, group.index, k, self.selection, *self.variant),
            lambda: _own_rows(self.cache.row_group(whole, lambda: self._read_slice(group, k, n)), self.rows),
        )

    def _read_slice(self, group: RowGroup, k: int, n: int) -> pa.Table:
        """Slice ``k`` read through a cursor of the cache's (given back for the next fetch; closed on failure)."""
        path = self.plain[group.file]
        columns, finish = self._read_columns(group.file)

        def open_cursor() -> SliceCursor:
            named = f"{self.what}, data file {path}"
            return _opening(self.rows.io, path, self.what, lambda src: SliceCursor(src, group.index, columns, named, n))

        key = (path, group.index, tuple(columns))
        cursor = self.cache.cursors.take(key, k, open_cursor)
        try:
            t = cursor.read(k)
        except BaseException:
            cursor.close()
            raise
        self.cache.cursors.give_back(key, cursor)
        return finish(t)
