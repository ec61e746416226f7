"""Data files of a topic's table: Arrow rows written as Parquet through the table's FileIO, each file given the
bounds of its ``kafka`` fields that pyiceberg leaves out, and deleted again when no commit took them.

pyiceberg has no public function that writes data files without committing them (``Table.append`` does both), so
``write_data_files`` calls its ``_dataframe_to_data_files`` (docs/architecture.md lists the private functions
used and why).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, PrimitiveType, StringType

from rsm.iceberg.schema import partition_spec

log = logging.getLogger(__name__)

__all__ = ["BOUNDED_FIELDS", "delete_data_files", "exact_bounds", "write_data_files"]

#: The ``kafka`` fields every data file gets bounds of: what a replace and a delete find their rows by.
BOUNDED_FIELDS: dict[str, PrimitiveType] = {
    "partition": IntegerType(),
    "offset": LongType(),
    "topic_id": StringType(),
    "segment_id": StringType(),
}


def write_data_files(table: Table, rows: pa.Table, write_uuid: uuid.UUID, counter: Iterator[int]) -> list[DataFile]:
    """``rows`` (the table's Arrow schema) as Parquet data files in the table's location, one per day they span
    (more when a day passes the target file size), with bounds of ``BOUNDED_FIELDS``. Nothing is committed; a
    caller that does not commit them deletes them (``delete_data_files``). File names come from ``write_uuid``
    and ``counter``: one uuid and counter for all files of one commit."""
    files = list(
        _dataframe_to_data_files(
            table_metadata=table.metadata, df=rows, io=table.io, write_uuid=write_uuid, counter=counter
        )
    )
    try:
        _add_kafka_bounds(table, rows, files)
    except BaseException:
        delete_data_files(table.io, files, "bounds of new data files")
        raise
    return files


def _add_kafka_bounds(table: Table, chunk: pa.Table, files: list[DataFile]) -> None:
    """Give each data file the lower and upper bounds of its ``BOUNDED_FIELDS``.

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
    names = [n for n in BOUNDED_FIELDS if n in kafka.type.names]
    days = pc.cast(pc.struct_field(kafka, "timestamp"), pa.date32()).cast(pa.int32())
    grouped = (
        pa.table({"day": days, **{n: pc.struct_field(kafka, n) for n in names}})
        .group_by("day")
        .aggregate([(n, "min_max") for n in names])
    )
    bounds = {row["day"]: row for row in grouped.to_pylist()}
    per_day: dict[object, int] = {}
    for f in files:
        per_day[f.partition[0]] = per_day.get(f.partition[0], 0) + 1
    for f in files:
        day = f.partition[0]
        if per_day[day] != 1 or day not in bounds:
            continue
        for name in names:
            min_max = bounds[day][f"{name}_min_max"]
            if min_max["min"] is None:
                continue
            field_id = schema.find_field(f"kafka.{name}").field_id
            f.lower_bounds[field_id] = to_bytes(BOUNDED_FIELDS[name], min_max["min"])
            f.upper_bounds[field_id] = to_bytes(BOUNDED_FIELDS[name], min_max["max"])


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
