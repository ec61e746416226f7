"""Data files of a topic's table: Arrow rows written as Parquet through the table's FileIO, each file given the
bounds of its ``kafka`` fields that pyiceberg leaves out, and deleted again when no commit took them; and a
table's partition spec brought to the one configured.

pyiceberg has no public function that writes data files without committing them (``Table.append`` does both), so
``write_data_files`` splits the rows as pyiceberg does (by the table's current spec, then by target file size)
with its ``_determine_partitions`` and writes them with ``write_file`` (docs/architecture.md lists the private
functions used and why). Each file's bounds are computed from the rows that went into it, under any spec.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    _determine_partitions,
    _get_field_from_arrow_table,
    bin_pack_arrow_table,
    pyarrow_to_schema,
    write_file,
)
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, WriteTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import IntegerType, LongType, PrimitiveType, StringType
from pyiceberg.utils.properties import property_as_int

from rsm.iceberg.schema import partition_spec
from rsm.iceberg.topic_tables import PartitionTerm

log = logging.getLogger(__name__)

__all__ = ["BOUNDED_FIELDS", "delete_data_files", "evolve_spec", "exact_bounds", "spec_matches", "write_data_files"]

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
