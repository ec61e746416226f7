"""Rows into Parquet data files of a table, each with bounds of ``kafka.partition`` and ``kafka.offset``, under
whatever partition spec the table has; and a table's spec brought to the one configured.

pyiceberg keeps no bounds for fields inside a struct; without them every commit's replace of an offset range
would read every data file of the table. The rows are split as pyiceberg splits them (by the table's current
spec, then by target file size), and each file's bounds are computed from the rows that went into it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _determine_partitions, bin_pack_arrow_table, pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, TableProperties, WriteTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import IntegerType, LongType
from pyiceberg.utils.properties import property_as_int

from rsm.iceberg.schema import partition_spec
from rsm.iceberg.topic_tables import PartitionTerm

__all__ = ["spec_matches", "evolve_spec", "write_data_files"]

_BOUNDED = (("partition", IntegerType()), ("offset", LongType()))


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
    if spec.is_unpartitioned():
        groups: list[tuple[object, pa.Table]] = [(None, rows)]
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


def write_data_files(
    metadata: TableMetadata,
    io: FileIO,
    rows: pa.Table,
    write_uuid: uuid.UUID,
    counter: Iterator[int] | None = None,
) -> list[DataFile]:
    """Write ``rows`` as data files of the table (its current spec), each carrying the lower and upper bounds
    of its rows' ``kafka.partition`` and ``kafka.offset``."""
    if rows.num_rows == 0:
        return []
    tasks = _tasks(metadata, rows, write_uuid, counter if counter is not None else itertools.count(0))
    files = list(write_file(io=io, table_metadata=metadata, tasks=iter(tasks)))
    schema = metadata.schema()
    ids = {name: schema.find_field(f"kafka.{name}").field_id for name, _ in _BOUNDED}
    for task, f in zip(tasks, files, strict=True):
        kafka = pa.Table.from_batches(task.record_batches).column("kafka")
        for name, typ in _BOUNDED:
            min_max = pc.min_max(pc.struct_field(kafka, name)).as_py()
            if min_max["min"] is None:
                continue
            f.lower_bounds[ids[name]] = to_bytes(typ, min_max["min"])
            f.upper_bounds[ids[name]] = to_bytes(typ, min_max["max"])
    return files


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
