"""Data files of a topic's table: Arrow rows written as Parquet through the table's FileIO, each file given the
bounds of its ``kafka`` fields that pyiceberg leaves out, and deleted again when no commit took them; and a
table's partition spec brought to the one configured.

pyiceberg has no public function that writes data files without committing them (``Table.append`` does both), so
``write_data_files`` splits the rows as pyiceberg does (by the table's current spec, then by target file size)
with its ``_determine_partitions`` and writes them with ``write_file`` (docs/architecture.md lists the private
functions used and why). Each file's bounds are computed from the rows that went into it, under any spec.

``StreamingDataFiles`` writes rows that come a small table at a time (a segment's walk): it holds at most one
row group's rows (and the piece that completes it) and writes each full row group into the data file of its
partition, kept open through pyiceberg's Parquet writer until ``close``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.fileformat import FileFormatFactory, FileFormatWriter
from pyiceberg.io.pyarrow import (
    _determine_partitions,
    _get_field_from_arrow_table,
    _to_requested_schema,
    bin_pack_arrow_table,
    pyarrow_to_schema,
    write_file,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table import Table, TableProperties, WriteTask
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, PrimitiveType, StringType
from pyiceberg.utils.properties import property_as_int

from rsm.iceberg.config import ROW_GROUP_MAX_BYTES
from rsm.iceberg.schema import partition_spec
from rsm.iceberg.topic_tables import PartitionTerm

log = logging.getLogger(__name__)

__all__ = [
    "BOUNDED_FIELDS",
    "ROW_GROUP_MAX_BYTES",
    "StreamingDataFiles",
    "delete_data_files",
    "evolve_spec",
    "exact_bounds",
    "spec_matches",
    "write_data_files",
]


#: The ``kafka`` fields every data file gets bounds of: what a replace and a delete find their rows by.
BOUNDED_FIELDS: dict[str, PrimitiveType] = {
    "partition": IntegerType(),
    "offset": LongType(),
    "topic_id": StringType(),
    "segment_id": StringType(),
}


def _tasks(metadata: TableMetadata, rows: pa.Table, write_uuid: uuid.UUID, counter: Iterator[int]) -> list[WriteTask]:
    target = property_as_int(
        metadata.properties,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
    )
    assert target is not None
    schema = pyarrow_to_schema(
        rows.schema, name_mapping=metadata.schema().name_mapping, format_version=metadata.format_version
    )
    spec = metadata.spec()
    groups: list[tuple[object, pa.Table]]
    if spec.is_unpartitioned():
        groups = [(None, rows)]
    elif (key := _only_partition(spec, metadata.schema(), rows)) is not None:
        groups = [(key, rows)]
    else:
        groups = [
            (p.partition_key, p.arrow_table_partition)
            for p in _determine_partitions(spec=spec, schema=metadata.schema(), arrow_table=rows)
        ]
    return [
        WriteTask(
            write_uuid=write_uuid,
            task_id=next(counter),
            record_batches=batches,
            partition_key=key,  # type: ignore[arg-type]
            schema=schema,
        )
        for key, part in groups
        for batches in bin_pack_arrow_table(part, target)
    ]


def _only_partition(spec: PartitionSpec, schema: Schema, rows: pa.Table) -> PartitionKey | None:
    """The partition key of ``rows`` when they all fall in one partition (a segment's rows usually do), else None.

    ``_determine_partitions`` filters and then copies the rows of every partition, one partition too; this takes
    the same transforms of the same columns and keeps the rows as they are when there is only one."""
    values = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        column = schema.find_column_name(field.source_id)
        if column is None:
            raise ValueError(
                f"the table's partition field {field.name} has no source column (field id {field.source_id})"
            )
        unique = pc.unique(
            field.transform.pyarrow_transform(source.field_type)(_get_field_from_arrow_table(rows, column))
        )
        if len(unique) != 1:
            return None
        values.append(PartitionFieldValue(field=field, value=unique[0].as_py()))
    return PartitionKey(field_values=values, partition_spec=spec, schema=schema)


def write_data_files(
    table: Table,
    rows: pa.Table,
    write_uuid: uuid.UUID,
    counter: Iterator[int],
    properties: Mapping[str, str] | None = None,
) -> list[DataFile]:
    """``rows`` (the table's Arrow schema) as Parquet data files in the table's location, split by the table's
    current spec and target file size, each with the exact bounds of its rows' ``BOUNDED_FIELDS``. Nothing is
    committed; a caller that does not commit them deletes them (``delete_data_files``). File names come from
    ``write_uuid`` and ``counter``: one uuid and counter for all files of one commit. ``properties``: table
    properties that these files are written with instead of the table's (the table is not changed)."""
    if rows.num_rows == 0:
        return []
    metadata = table.metadata
    if properties:
        metadata = metadata.model_copy(update={"properties": {**metadata.properties, **properties}})
    tasks = _tasks(metadata, rows, write_uuid, counter)
    files = list(write_file(io=table.io, table_metadata=metadata, tasks=iter(tasks)))
    try:
        _add_kafka_bounds(table.schema(), tasks, files)
    except BaseException:
        delete_data_files(table.io, files, "bounds of new data files")
        raise
    return files


def _partition_groups(metadata: TableMetadata, rows: pa.Table) -> list[tuple[PartitionKey | None, pa.Table]]:
    """``rows`` split by the table's current spec (one group, the rows as they are, when they share a key)."""
    spec = metadata.spec()
    if spec.is_unpartitioned():
        return [(None, rows)]
    if (key := _only_partition(spec, metadata.schema(), rows)) is not None:
        return [(key, rows)]
    return [
        (p.partition_key, p.arrow_table_partition)
        for p in _determine_partitions(spec=spec, schema=metadata.schema(), arrow_table=rows)
    ]


class _OpenFile:
    """One data file being written: pyiceberg's Parquet writer over the table's FileIO, and the bounds of the
    ``kafka`` fields of the rows written so far."""

    def __init__(self, metadata: TableMetadata, io: FileIO, key: PartitionKey | None, path: str) -> None:
        self.key = key
        self.path = path
        self.output = io.new_output(path)
        self.writer: FileFormatWriter = FileFormatFactory.get(FileFormat.PARQUET).create_writer(
            self.output, metadata.schema(), metadata.properties
        )
        self.bounds: dict[str, tuple[object, object]] = {}

    def write(self, rows: pa.Table) -> None:
        self.writer.write(rows)
        if "kafka" not in rows.column_names:
            return
        kafka = rows.column("kafka")
        for name in BOUNDED_FIELDS:
            if name not in kafka.type.names:
                continue
            mm = pc.min_max(pc.struct_field(kafka, name)).as_py()
            if mm["min"] is None:
                continue
            low, high = self.bounds.get(name, (mm["min"], mm["max"]))
            self.bounds[name] = (min(low, mm["min"]), max(high, mm["max"]))  # type: ignore[type-var]

    def close(self, metadata: TableMetadata) -> DataFile:
        with self.writer:
            pass  # the context's exit closes the file and keeps its statistics
        stats = self.writer.result()
        f = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self.path,
            file_format=FileFormat.PARQUET,
            partition=self.key.partition if self.key else Record(),
            file_size_in_bytes=len(self.output),
            sort_order_id=None,
            spec_id=metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **stats.to_serialized_dict(),
        )
        schema = metadata.schema()
        for name, (low, high) in self.bounds.items():
            field_id = schema.find_field(f"kafka.{name}").field_id
            f.lower_bounds[field_id] = to_bytes(BOUNDED_FIELDS[name], low)
            f.upper_bounds[field_id] = to_bytes(BOUNDED_FIELDS[name], high)
        return f


class StreamingDataFiles:
    """Data files of ``table`` written from rows that come a small table at a time (``add``), in the table's
    Arrow schema. Rows wait until they make a row group (``write.parquet.row-group-limit`` rows, or
    ``ROW_GROUP_MAX_BYTES``); each row group goes to the open file of its partition. ``close`` writes what
    waits and closes every open file: the files written since the last ``close``, each with the exact bounds of
    its rows' ``BOUNDED_FIELDS``. Files already closed (``written``) and those open are deleted by ``abort``.
    Not thread-safe: one per copy."""

    def __init__(self, table: Table, write_uuid: uuid.UUID, counter: Iterator[int]) -> None:
        self.io = table.io
        self.metadata = table.metadata
        self.write_uuid = write_uuid
        self.counter = counter
        self.group_rows = property_as_int(
            self.metadata.properties,
            TableProperties.PARQUET_ROW_GROUP_LIMIT,
            TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT,
        ) or (1 << 20)
        self._locations = load_location_provider(self.metadata.location, self.metadata.properties)
        self._waiting: list[pa.Table] = []
        self._waiting_rows = 0
        self._waiting_bytes = 0
        self._open: dict[object, _OpenFile] = {}
        self.written: list[DataFile] = []

    @property
    def waiting_bytes(self) -> int:
        """Arrow bytes of the rows held until they make a row group."""
        return self._waiting_bytes

    def add(self, rows: pa.Table) -> None:
        """Take ``rows``; every full row group they complete is written."""
        if rows.num_rows == 0:
            return
        self._waiting.append(rows)
        self._waiting_rows += rows.num_rows
        self._waiting_bytes += rows.nbytes
        while self._waiting_rows >= self.group_rows or self._waiting_bytes >= ROW_GROUP_MAX_BYTES:
            held = pa.concat_tables(self._waiting)
            take = min(self.group_rows, held.num_rows)
            if self._waiting_bytes >= ROW_GROUP_MAX_BYTES and held.num_rows <= self.group_rows:
                take = held.num_rows
            self._write(held.slice(0, take))
            rest = held.slice(take)
            self._waiting = [rest] if rest.num_rows else []
            self._waiting_rows = rest.num_rows
            self._waiting_bytes = rest.nbytes if rest.num_rows else 0
            del held

    def close(self) -> list[DataFile]:
        """Write the rows still held, close the open files; the files closed."""
        if self._waiting:
            held = pa.concat_tables(self._waiting)
            self._waiting, self._waiting_rows, self._waiting_bytes = [], 0, 0
            self._write(held)
        closed = []
        while self._open:
            _, f = self._open.popitem()
            closed.append(f.close(self.metadata))
            self.written.append(closed[-1])
        return closed

    def abort(self, what: str) -> None:
        """Delete every file written, open or closed (a copy that does not commit them)."""
        self._waiting = []
        for f in self._open.values():
            try:
                f.writer.close()
            except Exception:  # the file is deleted next; an error closing it changes nothing
                pass
        paths = [f.path for f in self._open.values()]
        self._open.clear()
        delete_data_files(self.io, self.written, what)
        for path in paths:
            try:
                self.io.delete(path)
            except Exception as e:
                log.error("%s: could not delete the uncommitted data file %s: %s", what, path, e)

    def _write(self, rows: pa.Table) -> None:
        table_schema = self.metadata.schema()
        file_schema = sanitize_column_names(table_schema)
        arrow_schema = pyarrow_to_schema(
            rows.schema, name_mapping=table_schema.name_mapping, format_version=self.metadata.format_version
        )
        for key, part in _partition_groups(self.metadata, rows):
            batches = [
                _to_requested_schema(
                    requested_schema=file_schema,
                    file_schema=arrow_schema,
                    batch=batch,
                    include_field_ids=True,
                    format_model=FileFormatFactory.get(FileFormat.PARQUET),
                )
                for batch in part.to_batches()
            ]
            if not batches:
                continue
            slot = key.partition if key is not None else None
            f = self._open.get(slot)
            if f is None:
                task = WriteTask(
                    write_uuid=self.write_uuid, task_id=next(self.counter), record_batches=[], schema=arrow_schema
                )
                path = self._locations.new_data_location(
                    data_file_name=task.generate_data_file_filename("parquet"), partition_key=key
                )
                f = self._open[slot] = _OpenFile(self.metadata, self.io, key, path)
            f.write(pa.Table.from_batches(batches))


def _add_kafka_bounds(schema: Schema, tasks: list[WriteTask], files: list[DataFile]) -> None:
    """Give each data file the lower and upper bounds of its rows' ``BOUNDED_FIELDS``.

    pyiceberg keeps no bounds for fields inside a struct, so without these every commit's replace of an offset
    range would read every data file of the table.
    """
    for task, f in zip(tasks, files, strict=True):
        rows = pa.Table.from_batches(task.record_batches)
        if "kafka" not in rows.column_names:
            continue  # a latest-per-key table (rsm.iceberg.latest_table): its own struct, no offset ranges
        kafka = rows.column("kafka")
        for name, kind in BOUNDED_FIELDS.items():
            if name not in kafka.type.names:
                continue
            min_max = pc.min_max(pc.struct_field(kafka, name)).as_py()
            if min_max["min"] is None:
                continue
            field_id = schema.find_field(f"kafka.{name}").field_id
            f.lower_bounds[field_id] = to_bytes(kind, min_max["min"])
            f.upper_bounds[field_id] = to_bytes(kind, min_max["max"])


def exact_bounds(f: DataFile, schema: Schema, name: str) -> tuple[object, object] | None:
    """(lower, upper) of ``kafka.<name>`` (one of ``BOUNDED_FIELDS``) when the file's metadata says every row has
    a value in them; None when it says nothing or some rows hold null."""
    field_id = schema.find_field(f"kafka.{name}").field_id
    lower, upper, nulls = f.lower_bounds or {}, f.upper_bounds or {}, f.null_value_counts or {}
    if field_id not in lower or field_id not in upper or nulls.get(field_id) != 0:
        return None
    kind = BOUNDED_FIELDS[name]
    return from_bytes(kind, lower[field_id]), from_bytes(kind, upper[field_id])


def delete_data_files(io: FileIO, files: Sequence[DataFile], what: str) -> None:
    """Delete data files this process wrote and no commit took; a failure is logged (the error that made the
    caller give up matters more), and the file is left for ``kts gc``."""
    for f in files:
        try:
            io.delete(f.file_path)
        except Exception as e:
            log.error("%s: could not delete the uncommitted data file %s: %s", what, f.file_path, e)


def spec_matches(table: Table, terms: tuple[PartitionTerm, ...]) -> bool:
    """Whether the table's current spec is ``terms`` (same source columns and transforms, in any order)."""
    wanted = partition_spec(table.schema(), terms)
    have = {(f.source_id, str(f.transform)) for f in table.spec().fields}
    return have == {(f.source_id, str(f.transform)) for f in wanted.fields}


def evolve_spec(table: Table, terms: tuple[PartitionTerm, ...]) -> None:
    """One commit that makes the table's spec ``terms``: fields not wanted removed, new ones added. Data files
    written before keep the spec they were written with (Iceberg reads each by its own)."""
    wanted = partition_spec(table.schema(), terms)
    keep = {(f.source_id, str(f.transform)) for f in wanted.fields}
    have = {(f.source_id, str(f.transform)): f for f in table.spec().fields}
    with table.update_spec() as update:
        for key, f in have.items():
            if key not in keep:
                update.remove_field(f.name)
        for term, f in zip(terms, wanted.fields, strict=True):
            if (f.source_id, str(f.transform)) not in have:
                update.add_field(term.source, f.transform, term.field_name)
