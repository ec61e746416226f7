"""A dead topic's rows in a latest-per-key table: found, removed in one commit, and put back.

A latest table holds rows of every topic id its topic name has had (a topic deleted and created again writes to
the same table). Removing a topic id's rows rewrites only the data files that hold some of them, keeping every
other row of those files, in one overwrite commit; the caller keeps the removed rows (the quarantine) before the
commit. Putting rows back adds each one whose (Kafka partition, key) has no row now: a row written since, of
whatever topic id, is never replaced.
"""

from __future__ import annotations

import io
import itertools
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from rsm.errors import CorruptDataException
from rsm.iceberg.data_files import delete_data_files, write_data_files
from rsm.iceberg.latest import META, as_schema
from rsm.iceberg.latest_table import LATEST_OF_PROPERTY
from rsm.iceberg.transaction import transaction

__all__ = [
    "RowRemoval",
    "commit_removal",
    "is_latest_table",
    "plan_removal",
    "restore_rows",
    "rows_from_parquet",
    "rows_to_parquet",
    "topic_ids_of",
]

REMOVED_PROPERTY = "kafka.latest.removed.topic-ids"
"""Snapshot summary property of a removal: the topic ids whose rows it removed."""
RESTORED_PROPERTY = "kafka.latest.restored.rows"
"""Snapshot summary property of a restore: how many rows it put back."""


def is_latest_table(table: Table) -> bool:
    """Whether ``table`` is a latest-per-key table of the plugin (it names the log table it follows)."""
    return LATEST_OF_PROPERTY in table.properties and "kafka.topic" in table.properties


def _topic_ids(rows: pa.Table) -> pa.ChunkedArray:
    return pc.struct_field(rows.column(META), "topic_id")


def _read(table: Table, files: list) -> pa.Table:  # type: ignore[type-arg]
    arrow_schema = schema_to_pyarrow(table.schema())
    if not files:
        return arrow_schema.empty_table()
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=files)
    return as_schema(rows, arrow_schema)


def topic_ids_of(table: Table) -> dict[str, int]:
    """The topic ids the table's current rows carry, with how many rows each (a null id counts as ``""``)."""
    rows = _read(table, list(table.scan().plan_files()))
    counts: dict[str, int] = {}
    for topic_id in _topic_ids(rows).to_pylist():
        counts[topic_id or ""] = counts.get(topic_id or "", 0) + 1
    return counts


@dataclass
class RowRemoval:
    """What removing some topic ids' rows takes: the data files holding any of them, the rows of those files
    that stay, and the rows that go."""

    table: Table
    topic_ids: frozenset[str]
    files: list[DataFile]
    kept: pa.Table
    removed: pa.Table


def plan_removal(table: Table, topic_ids: frozenset[str]) -> RowRemoval | None:
    """The removal of the rows of ``topic_ids`` (never a null id) from the table as it is now; None when it holds
    none. Reads each data file once and keeps only those holding such rows."""
    if not topic_ids:
        return None
    wanted = pa.array(sorted(topic_ids), pa.string())
    files: list[DataFile] = []
    kept: list[pa.Table] = []
    removed: list[pa.Table] = []
    for task in table.scan().plan_files():
        rows = _read(table, [task])
        mask = pc.fill_null(pc.is_in(_topic_ids(rows), value_set=wanted), False)
        if not pc.any(mask).as_py():
            continue
        files.append(task.file)
        kept.append(rows.filter(pc.invert(mask)))
        removed.append(rows.filter(mask))
    if not files:
        return None
    return RowRemoval(table, topic_ids, files, pa.concat_tables(kept), pa.concat_tables(removed))


def commit_removal(removal: RowRemoval, what: str) -> int | None:
    """Replace the removal's files by files of the rows they keep, in one overwrite; the new snapshot's id.
    ``CommitFailedException`` or ``ValidationException`` when another writer committed first (the new files are
    deleted then): plan again on the fresh table."""
    table = removal.table
    written: list[DataFile] = []
    summary = {
        REMOVED_PROPERTY: ",".join(sorted(removal.topic_ids)),
        "kafka.latest.removed.rows": str(removal.removed.num_rows),
    }
    try:
        written = write_data_files(table, removal.kept, uuid.uuid4(), itertools.count(0))
        txn = transaction(table)
        with txn.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
            for f in removal.files:
                overwrite.delete_data_file(f)
            for f in written:
                overwrite.append_data_file(f)
        committed = txn.commit_transaction()
    except (CommitFailedException, ValidationException):
        delete_data_files(table.io, written, what)
        raise
    snapshot = committed.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else None


def _identity(rows: pa.Table) -> list[tuple[int, bytes]]:
    meta = rows.column(META)
    return list(
        zip(pc.struct_field(meta, "partition").to_pylist(), pc.struct_field(meta, "key").to_pylist(), strict=True)
    )


def restore_rows(table: Table, rows: pa.Table, what: str) -> tuple[int, pa.Table]:
    """Put ``rows`` (held by a removal) back where their (partition, key) has no row now, in one commit that
    rewrites the buckets they fall in; (how many rows were put back, the rows left out because their key has a
    row now).
    ``CommitFailedException`` or ``ValidationException`` when another writer committed first: try again."""
    arrow_schema = schema_to_pyarrow(table.schema())
    rows = as_schema(rows, arrow_schema)
    if rows.num_rows == 0:
        return 0, rows
    buckets = set(pc.struct_field(rows.column(META), "key_bucket").to_pylist())
    bucket_field = next(i for i, f in enumerate(table.spec().fields) if f.name == "key_bucket")
    tasks = [
        t
        for t in table.scan().plan_files()
        if t.file.spec_id != table.spec().spec_id or t.file.partition[bucket_field] in buckets
    ]
    existing = _read(table, tasks)
    taken = set(_identity(existing))
    free = pa.array([i not in taken for i in _identity(rows)], pa.bool_())
    back, left = rows.filter(free), rows.filter(pc.invert(free))
    if back.num_rows == 0:
        return 0, left
    written: list[DataFile] = []
    summary = {RESTORED_PROPERTY: str(back.num_rows)}
    try:
        written = write_data_files(table, pa.concat_tables([existing, back]), uuid.uuid4(), itertools.count(0))
        txn = transaction(table)
        with txn.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
            for task in tasks:
                overwrite.delete_data_file(task.file)
            for f in written:
                overwrite.append_data_file(f)
        txn.commit_transaction()
    except (CommitFailedException, ValidationException):
        delete_data_files(table.io, written, what)
        raise
    return back.num_rows, left


def rows_to_parquet(rows: pa.Table) -> bytes:
    """``rows`` as one Parquet file's bytes (what the quarantine holds of a removal)."""
    buf = io.BytesIO()
    pq.write_table(rows, buf, compression="zstd")
    return buf.getvalue()


def rows_from_parquet(data: bytes, name: str) -> pa.Table:
    """The rows of a Parquet file held by a removal; ``CorruptDataException`` naming ``name`` if it is none."""
    try:
        rows = pq.read_table(io.BytesIO(data))
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptDataException(
            f"{name} is not the Parquet file of removed rows it should be ({e}); it is left held: check it"
        ) from e
    if META not in rows.column_names:
        raise CorruptDataException(f"{name} holds no {META} column: not rows of a latest table; it is left held")
    return rows
