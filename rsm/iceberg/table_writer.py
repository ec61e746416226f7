"""One segment into its topic's table: rows -> Parquet data files -> one commit that replaces the segment's
offset range in that partition.

The data files are written as the segment is walked (through pyiceberg's FileIO, into the table's location),
hold only this segment's rows and carry bounds of ``kafka.partition`` and ``kafka.offset``. Then one commit
removes whatever rows the table already holds for the partition's offsets ``first..last`` (a retried copy, an
overlapping segment from a new leader) and adds the new files: the files that may hold such rows are found by
their bounds, without reading data files; a file inside the range is dropped whole, one that also holds other
rows is rewritten without them. Another writer committing first (other partitions of the topic, other brokers)
makes the commit fail; it is then retried on the fresh table state with the same files, up to
``iceberg.mode.commit.retries`` times. A copy that cannot commit deletes the files it wrote.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    TableAlreadyExistsError,
    ValidationException,
)
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThanOrEqual
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType

from rsm.errors import RemoteStorageException
from rsm.iceberg.catalog import CatalogHandle
from rsm.iceberg.rows import NotRepresentable, RowOrigin, SegmentSummary, segment_row_tables
from rsm.iceberg.schema import KAFKA_FIELDS, arrow_schema, iceberg_schema, partition_spec
from rsm.iceberg.section import DataFileRef, IcebergSection
from rsm.iceberg.value_hook import ValueColumn
from rsm.kafka.indexes import AbortedTxn

log = logging.getLogger(__name__)

__all__ = ["NotRepresentable", "TableWriter", "offset_range_filter"]

_RETRY_PAUSE_S = 0.05
TABLE_CODEC = "snappy"
"""Parquet codec of the tables this writer creates. Spark reads snappy data files faster than zstd ones (see
docs/benchmarks.md, "Iceberg mode"); zstd files are smaller. The table property is read at every write, so an
operator may set ``write.parquet.compression-codec`` on a table to change it."""
ROW_GROUP_ROWS = 32768
"""Rows per Parquet row group of the tables this writer creates: a fetch reads whole row groups, so this bounds
what it reads past the broker's start position."""
PAGE_ROWS = 1024
"""``write.parquet.page-row-limit`` of the tables this writer creates. pyarrow writes this many values at a time
and closes a page once it passes 1 MiB: with Iceberg's default of 20000 rows, pages of 370-byte values grew to
7 MiB, and Spark read them about 10% slower than pages of 1 MiB."""
DICTIONARY_BYTES = 1
"""``write.parquet.dict-size-bytes`` of the tables this writer creates: dictionary pages of at most one byte, so
every column falls back to plain encoding after its first 1024 values. In four paired runs Spark read
``count(distinct key)`` faster that way in three (by 9-32%; 5% slower in the fourth) and ``sum(length(value))``
about as fast (docs/benchmarks.md, "Iceberg mode"); pyarrow writes the rows in a quarter less time, and the files
are no larger (snappy compresses the repeated fields as well)."""
SPLIT_BYTES = 128 << 20
"""``read.split.target-size`` of the tables this writer creates (with adaptive split sizing off): Spark's and
Iceberg's default, one task per 128 MiB of data files."""
SMALL_SPLIT_BYTES = 64 << 20
"""The split size instead when the first segment is smaller than ``SMALL_SEGMENT_BYTES``: its data files are then
a few tens of MiB, and 128 MiB splits would put a small table in one task however many cores read it."""
SMALL_SEGMENT_BYTES = 32 << 20
"""First segments below this size give a table ``SMALL_SPLIT_BYTES``."""


def split_bytes(segment_bytes: int) -> int:
    """The split size of a new table whose first segment has ``segment_bytes``."""
    return SMALL_SPLIT_BYTES if segment_bytes < SMALL_SEGMENT_BYTES else SPLIT_BYTES


def _stale_files(table: Table, partition: int, first: int, last: int) -> tuple[list[DataFile], list[DataFile]]:
    """What replacing ``partition``'s offsets ``first..last`` takes: (the table's data files to remove, files
    written to take the place of those that also hold other rows).

    The files that may hold such rows are found by their bounds (metadata only; a copy that overlaps nothing,
    the usual case, reads no data file). A file whose bounds lie inside the range goes whole; any other is read
    and rewritten without those rows, unless it holds none of them.
    """
    if table.current_snapshot() is None:
        return [], []
    schema = table.schema()
    ids = (schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id)
    removed: list[DataFile] = []
    rewritten: list[DataFile] = []
    write_uuid = uuid.uuid4()
    counter = itertools.count(0)
    for task in table.scan(row_filter=offset_range_filter(partition, first, last)).plan_files():
        f = task.file
        if _within(f, ids, partition, first, last):
            removed.append(f)
            continue
        rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(tasks=[task])
        kafka = rows.column("kafka")
        offsets = pc.struct_field(kafka, "offset")
        hit = pc.and_kleene(
            pc.equal(pc.struct_field(kafka, "partition"), partition),
            pc.and_kleene(pc.greater_equal(offsets, first), pc.less_equal(offsets, last)),
        )
        kept = rows.filter(pc.invert(pc.fill_null(hit, False)))
        if kept.num_rows == rows.num_rows:
            continue
        removed.append(f)
        if kept.num_rows:
            try:
                new = list(
                    _dataframe_to_data_files(
                        table_metadata=table.metadata, df=kept, io=table.io, write_uuid=write_uuid, counter=counter
                    )
                )
            except BaseException:
                for done in rewritten:
                    table.io.delete(done.file_path)
                raise
            _add_kafka_bounds(table, kept, new)
            rewritten += new
    return removed, rewritten


def _within(f: DataFile, ids: tuple[int, int], partition: int, first: int, last: int) -> bool:
    """Whether the file's bounds say every row is of ``partition`` with an offset in ``first..last``."""
    partition_id, offset_id = ids
    lower, upper, nulls = f.lower_bounds or {}, f.upper_bounds or {}, f.null_value_counts or {}
    if any(i not in lower or i not in upper or nulls.get(i) != 0 for i in ids):
        return False
    return (
        from_bytes(IntegerType(), lower[partition_id]) == partition == from_bytes(IntegerType(), upper[partition_id])
        and from_bytes(LongType(), lower[offset_id]) >= first
        and from_bytes(LongType(), upper[offset_id]) <= last
    )


def _add_kafka_bounds(table: Table, chunk: pa.Table, files: list[DataFile]) -> None:
    """Give each data file the lower and upper bounds of its ``kafka.partition`` and ``kafka.offset``.

    pyiceberg keeps no bounds for fields inside a struct, so without these every commit's replace of an offset
    range would read every data file of the table. Rows go to files by day: a file that is its chunk's only
    file of that day gets the day's exact bounds; files that share a day (a chunk past the target file size)
    get none, and are read by a replace as before.
    """
    schema = table.schema()
    spec = table.spec()
    if len(spec.fields) != 1 or spec.fields[0] != partition_spec(schema).fields[0]:
        return  # not the plugin's day(kafka.timestamp) spec (changed by someone): no bounds, replaces read files
    kafka = chunk.column("kafka")
    days = pc.cast(pc.struct_field(kafka, "timestamp"), pa.date32()).cast(pa.int32())
    grouped = (
        pa.table(
            {"day": days, "partition": pc.struct_field(kafka, "partition"), "offset": pc.struct_field(kafka, "offset")}
        )
        .group_by("day")
        .aggregate([("partition", "min_max"), ("offset", "min_max")])
    )
    bounds = {row["day"]: (row["partition_min_max"], row["offset_min_max"]) for row in grouped.to_pylist()}
    per_day: dict[object, int] = {}
    for f in files:
        per_day[f.partition[0]] = per_day.get(f.partition[0], 0) + 1
    ids = {name: schema.find_field(f"kafka.{name}").field_id for name in ("partition", "offset")}
    types = {"partition": IntegerType(), "offset": LongType()}
    for f in files:
        day = f.partition[0]
        if per_day[day] != 1 or day not in bounds:
            continue
        for name, min_max in zip(("partition", "offset"), bounds[day], strict=True):
            if min_max["min"] is None:
                continue
            f.lower_bounds[ids[name]] = to_bytes(types[name], min_max["min"])
            f.upper_bounds[ids[name]] = to_bytes(types[name], min_max["max"])


def offset_range_filter(partition: int, first: int, last: int) -> BooleanExpression:
    """The rows of ``partition`` with offsets ``first..last`` (what a segment's commit replaces)."""
    return And(
        EqualTo("kafka.partition", partition),
        And(GreaterThanOrEqual("kafka.offset", first), LessThanOrEqual("kafka.offset", last)),
    )


def _missing_columns(table: Table, value_column: ValueColumn | None) -> bool:
    """Whether the table lacks a ``kafka`` field of ``KAFKA_FIELDS`` or the ``value`` column the hook gives."""
    schema = table.schema()
    have = {f.name for f in schema.find_type("kafka").fields}  # type: ignore[union-attr]
    if any(name not in have for name, _, _ in KAFKA_FIELDS):
        return True
    return value_column is not None and "value" not in {f.name for f in schema.fields}


@dataclass(frozen=True)
class SegmentToWrite:
    topic: str
    topic_id: str
    partition: int
    segment_id: str
    log_path: Path
    aborted: Sequence[AbortedTxn]


class TableWriter:
    """Writes segments into their topics' tables; thread-safe (each call loads the table it commits to)."""

    def __init__(
        self, handle: CatalogHandle, write_batch_bytes: int, commit_retries: int, value_column_for: object
    ) -> None:
        self.handle = handle
        self.write_batch_bytes = write_batch_bytes
        self.commit_retries = commit_retries
        self.value_column_for = value_column_for

    # --- the table ---------------------------------------------------------------------------------------------

    def table(self, topic: str, value_column: ValueColumn | None = None, segment_bytes: int = 1 << 30) -> Table:
        """The topic's table, created (partitioned by day) when missing, its read splits sized for segments of
        ``segment_bytes``; a ``value`` column the hook now gives, and ``kafka`` fields added since the table was
        made (old rows read them as null), are added to an existing table."""
        catalog = self.handle.catalog
        ident = self.handle.table_identifier(topic)
        try:
            table = catalog.load_table(ident)
        except NoSuchTableError:
            schema = iceberg_schema()
            try:
                table = catalog.create_table(
                    ident,
                    schema=schema,
                    partition_spec=partition_spec(schema),
                    properties={
                        "kafka.topic": topic,
                        "write.parquet.compression-codec": TABLE_CODEC,
                        "write.parquet.row-group-limit": str(ROW_GROUP_ROWS),
                        "write.parquet.page-row-limit": str(PAGE_ROWS),
                        "write.parquet.dict-size-bytes": str(DICTIONARY_BYTES),
                        # Java Iceberg's default: an append merges small manifests once 100 pile up, so
                        # planning a scan (and a commit's search by bounds) reads a bounded number of them.
                        "commit.manifest-merge.enabled": "true",
                        # Spark's Iceberg reader sizes splits by the bytes of the columns a query reads: a narrow
                        # query (keys only) got 16 MiB splits, several tasks per core, and ran at a third of the
                        # speed of the same files read as plain Parquet. Fixed splits instead, sized from the
                        # first segment (docs/benchmarks.md, "Iceberg mode").
                        "read.split.adaptive-size.enabled": "false",
                        "read.split.target-size": str(split_bytes(segment_bytes)),
                    },
                )
            except TableAlreadyExistsError:  # another writer created it in between
                table = catalog.load_table(ident)
        for attempt in range(self.commit_retries + 1):
            if not _missing_columns(table, value_column):
                break
            try:
                with table.update_schema() as update:
                    update.union_by_name(arrow_schema(value_column.arrow_type if value_column else None))
            except CommitFailedException:  # another broker changed the schema first (most likely, the same way)
                if attempt == self.commit_retries:
                    raise
            table = catalog.load_table(ident)
        return table

    # --- a segment -----------------------------------------------------------------------------------------------

    def write(self, seg: SegmentToWrite, what: str) -> IcebergSection:
        """Write the segment's rows and commit them; raises ``NotRepresentable`` (no data file left, nothing
        committed) for a segment the table cannot give back exactly."""
        value_column = self.value_column_for(seg.topic)  # type: ignore[operator]
        summary = SegmentSummary()
        # One walk: each chunk of rows becomes data files as it comes. A segment found not representable part
        # of the way (or any other failure) deletes the files written so far; nothing is committed. The table
        # is loaded (or created) only once the first chunk is built, so a segment refused there touches nothing.
        chunks = segment_row_tables(
            seg.log_path,
            seg.partition,
            seg.aborted,
            self.write_batch_bytes,
            summary,
            value_column,
            origin=RowOrigin(seg.topic_id, seg.segment_id),
        )
        first = next(chunks, None)
        if first is None:
            raise NotRepresentable("the segment holds no records")
        table = self.table(seg.topic, value_column, seg.log_path.stat().st_size)
        write_uuid = uuid.uuid4()
        written: list[DataFile] = []
        try:
            counter = itertools.count(0)
            for chunk in itertools.chain((first,), chunks):
                files = list(
                    _dataframe_to_data_files(
                        table_metadata=table.metadata, df=chunk, io=table.io, write_uuid=write_uuid, counter=counter
                    )
                )
                written += files
                _add_kafka_bounds(table, chunk, files)
            snapshot_id = self._commit(seg, summary, written, what)
        except BaseException:
            self._delete_files(table, written, what)
            raise
        return IcebergSection(
            table=".".join(self.handle.table_identifier(seg.topic)),
            snapshot_id=snapshot_id,
            partition=seg.partition,
            first_offset=summary.first_offset,
            last_offset=summary.last_offset,
            rows=summary.rows,
            batches=summary.batches,
            segment_size=summary.size,
            files=tuple(DataFileRef(f.file_path, f.record_count, f.file_size_in_bytes) for f in written),
        )

    def _commit(self, seg: SegmentToWrite, summary: SegmentSummary, files: list[DataFile], what: str) -> int:
        ident = self.handle.table_identifier(seg.topic)
        properties = {
            "kafka.segment.id": seg.segment_id,
            "kafka.partition": str(seg.partition),
            "kafka.offsets": f"{summary.first_offset}-{summary.last_offset}",
        }
        committed = self._replace(
            ident, seg.partition, summary.first_offset, summary.last_offset, files, properties, what, "the commit to"
        )
        assert committed is not None
        snapshot = committed.current_snapshot()
        assert snapshot is not None
        return snapshot.snapshot_id

    def _replace(
        self,
        ident: tuple[str, ...],
        partition: int,
        first: int,
        last: int,
        files: list[DataFile],
        properties: dict[str, str],
        what: str,
        doing: str,
    ) -> Table | None:
        """One commit that removes the rows of ``partition``'s offsets ``first..last`` and adds ``files``;
        retried on a freshly loaded table while other writers commit first. None: no table, nothing to do."""
        catalog = self.handle.catalog
        attempts = self.commit_retries + 1
        for attempt in range(attempts):
            try:
                table = catalog.load_table(ident)
            except NoSuchTableError:
                if files:
                    raise
                return None
            rewritten: list[DataFile] = []
            try:
                removed, rewritten = _stale_files(table, partition, first, last)
                if not removed and not files:
                    return table
                txn = table.transaction()
                if removed:
                    with txn.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
                        for f in removed:
                            overwrite.delete_data_file(f)
                        for f in (*rewritten, *files):
                            overwrite.append_data_file(f)
                else:
                    with txn.update_snapshot(snapshot_properties=properties).merge_append() as append:
                        for f in files:
                            append.append_data_file(f)
                return txn.commit_transaction()
            # pyiceberg retries a conflicting commit itself and may then fail its own validation of the files
            # removed: a conflict too, retried here on a freshly loaded table.
            except (CommitFailedException, ValidationException) as e:
                self._delete_files(table, rewritten, what)
                if attempt + 1 == attempts:
                    raise RemoteStorageException(
                        f"{what}: {doing} table {'.'.join(ident)} failed {attempts} times, each time after "
                        f"another writer committed first ({e}); raise iceberg.mode.commit.retries if the topic has "
                        f"many partitions tiered at once"
                    ) from e
                log.debug("%s: commit conflict on %s (attempt %d): %s", what, ".".join(ident), attempt + 1, e)
                time.sleep(_RETRY_PAUSE_S * (attempt + 1))
            except BaseException:
                self._delete_files(table, rewritten, what)
                raise
        raise AssertionError("unreachable")

    def _delete_files(self, table: Table, files: list[DataFile], what: str) -> None:
        for f in files:
            try:
                table.io.delete(f.file_path)
            except Exception as e:  # the original error matters more
                log.error("%s: could not delete the data file %s of the failed copy: %s", what, f.file_path, e)

    # --- delete ------------------------------------------------------------------------------------------------

    def delete_rows(self, topic: str, partition: int, first: int, last: int, what: str) -> None:
        """Delete the partition's offsets ``first..last`` from the topic's table (retried on conflict)."""
        properties = {"kafka.partition": str(partition), "kafka.offsets": f"{first}-{last}", "kafka.deleted": "true"}
        self._replace(
            self.handle.table_identifier(topic), partition, first, last, [], properties, what, "deleting its rows from"
        )
