"""A topic's latest-per-key table in the catalog: created, evolved, and updated once a copy's log rows are in.

The table is partitioned by ``identity(_kafka.key_bucket)``. A copy's update reads the data files of the
buckets its changes touch, merges (``rsm.iceberg.latest.merge``) and commits one overwrite that replaces those
files with one new file per bucket, and sets the watermarks of the partitions it applied (table properties
``kafka.latest.offset.<topic id>.<partition>``) in the same commit. The commit's cost is bounded by the rows of
the buckets touched, whatever the table's age. A process's own updates of one table take turns for the whole
update (read, merge, write, commit), as each would replace the files the others read; another writer committing
first makes it start over on the fresh table, up to ``iceberg.mode.commit.retries`` times.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from rsm.errors import RemoteStorageException
from rsm.iceberg.commit_locks import TableLocks
from rsm.iceberg.commit_retries import CONFLICTS, retry_conflicts
from rsm.iceberg.data_files import delete_data_files, write_data_files
from rsm.iceberg.debezium import DebeziumColumns
from rsm.iceberg.latest import (
    DELETED,
    META,
    WATERMARK_PREFIX,
    as_schema,
    buckets_of,
    changes_of,
    merge,
    newest_per_key,
    past_watermarks,
    watermark_property,
    watermarks_after,
)
from rsm.iceberg.latest_config import LatestTable
from rsm.iceberg.tables import METADATA_PROPERTIES, TABLE_CODEC
from rsm.iceberg.transaction import transaction

log = logging.getLogger(__name__)

__all__ = ["LatestChanges", "LatestWriter", "read_watermarks"]

LATEST_OF_PROPERTY = "kafka.latest.of"
"""Table property of a latest table: the log table it follows."""


@dataclass
class LatestChanges:
    """A copy's changes to its topic's latest table, gathered chunk by chunk as the log rows are written (one
    change per key kept at a time, so memory follows the keys, not the records)."""

    spec: LatestTable
    changes: pa.Table | None = None
    debezium: DebeziumColumns = field(default_factory=DebeziumColumns)

    def add(self, chunk: pa.Table) -> None:
        new = changes_of(chunk, self.spec, self.debezium)
        self.changes = newest_per_key([self.changes, new] if self.changes is not None else [new])


def read_watermarks(table: Table) -> dict[tuple[str, int], int]:
    """The last offset applied per (topic id, partition), from the table's properties."""
    out: dict[tuple[str, int], int] = {}
    for k, v in table.properties.items():
        if k.startswith(WATERMARK_PREFIX):
            topic_id, _, partition = k[len(WATERMARK_PREFIX) :].rpartition(".")
            try:
                out[(topic_id, int(partition))] = int(v)
            except ValueError:
                continue
    return out


def _widens(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``have`` already holds values of ``want``: equal, a narrower number, or the same
    kind in Arrow's other width (Iceberg has one string, binary and list type; pyiceberg reads them as large)."""
    if have.equals(want) or pa.types.is_null(want):
        return True
    if pa.types.is_struct(have) and pa.types.is_struct(want):
        fields = {f.name: f.type for f in have}
        return all(f.name in fields and _widens(fields[f.name], f.type) for f in want)
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(f(have) for f in lists) and any(f(want) for f in lists):
        return _widens(have.value_type, want.value_type)
    strings = (pa.types.is_string, pa.types.is_large_string)
    binaries = (pa.types.is_binary, pa.types.is_large_binary)
    same_kind = any(f(have) for f in strings) and any(f(want) for f in strings)
    same_kind = same_kind or (any(f(have) for f in binaries) and any(f(want) for f in binaries))
    return same_kind or (have, want) in ((pa.int64(), pa.int32()), (pa.float64(), pa.float32()))


def needs_evolution(table_schema: pa.Schema, incoming: pa.Schema) -> bool:
    have = {f.name: f.type for f in table_schema}
    return any(f.name not in have or not _widens(have[f.name], f.type) for f in incoming)


class LatestWriter:
    """Updates the latest tables of one catalog's topics; thread-safe (each update loads the table). Updates of
    one table hold its lock in ``locks`` from the table's load to the commit."""

    def __init__(self, catalog: Callable[[], Catalog], commit_retries: int, locks: TableLocks | None = None) -> None:
        self._catalog = catalog
        self.retries = commit_retries
        self.locks = locks if locks is not None else TableLocks()
        self._count_lock = threading.Lock()
        self.conflicts = 0
        """Updates started over because another writer committed first."""

    def apply(self, pending: LatestChanges, log_table: str, what: str) -> int | None:
        """Commit the copy's changes to the latest table (created when missing); the new snapshot's id, or None
        when there is nothing to apply (no keyed record, or every change already applied)."""
        changes = pending.changes
        spec = pending.spec
        if changes is None or changes.num_rows == 0:
            return None
        ident = ".".join(spec.identifier)

        def attempt() -> int | None:
            with self.locks.hold(spec.identifier):
                return self._attempt(spec, changes, log_table, what)

        def conflict(e: Exception, n: int) -> None:
            with self._count_lock:
                self.conflicts += 1
            log.debug("%s: commit conflict on %s (attempt %d): %s", what, ident, n, e)

        def refusal(e: Exception, attempts: int) -> Exception:
            return RemoteStorageException(
                f"{what}: the commit to the latest table {ident} failed {attempts} times, each time after "
                f"another writer committed first ({e}); raise iceberg.mode.commit.retries. The log rows "
                "are committed; Kafka retries the copy, which applies what the latest table lacks"
            )

        return retry_conflicts(attempt, self.retries, refusal, conflict)

    def table(self, spec: LatestTable, incoming: pa.Schema, log_table: str) -> Table:
        """The latest table, created with ``incoming``'s columns when missing; columns ``incoming`` adds or
        widens are added to an existing one (the log table's evolution rules: add, widen, optional)."""
        catalog = self._catalog()
        try:
            table = catalog.load_table(spec.identifier)
        except NoSuchTableError:
            table = self._create(catalog, spec, incoming, log_table)
        owner = table.properties.get("kafka.topic")
        if owner != spec.topic or LATEST_OF_PROPERTY not in table.properties:
            raise RemoteStorageException(
                f"table {'.'.join(spec.identifier)} is not the latest-per-key table of topic {spec.topic!r} "
                f"(kafka.topic={owner!r}); name another one with iceberg.mode.table.<id>.latest.name"
            )
        if needs_evolution(schema_to_pyarrow(table.schema()), incoming):
            try:
                with table.update_schema() as update:
                    update.union_by_name(incoming)
            except (ValueError, TypeError) as e:
                raise RemoteStorageException(
                    f"the latest table {'.'.join(spec.identifier)} of topic {spec.topic!r} cannot take the columns "
                    f"of the new records ({e}); a column changed its type in a way Iceberg cannot follow. Rename the "
                    "column at the source, or drop the latest table to start it again from new copies"
                ) from e
            table = catalog.load_table(spec.identifier)
        return table

    def _create(self, catalog: Catalog, spec: LatestTable, incoming: pa.Schema, log_table: str) -> Table:
        """The table, created partitioned by ``identity(_kafka.key_bucket)`` in one commit (the spec is added to
        the create transaction, so that the catalog's fresh field ids are the ones it names)."""
        properties = {
            "kafka.topic": spec.topic,
            LATEST_OF_PROPERTY: log_table,
            "write.parquet.compression-codec": TABLE_CODEC,
            "commit.manifest-merge.enabled": "true",
            **METADATA_PROPERTIES,
        }
        if spec.namespace:
            catalog.create_namespace_if_not_exists(spec.namespace)
        try:
            txn = catalog.create_table_transaction(spec.identifier, schema=incoming, properties=properties)
            with txn.update_spec() as update:
                update.add_field(f"{META}.key_bucket", IdentityTransform(), "key_bucket")
            txn.commit_transaction()
        except TableAlreadyExistsError:  # another broker created it in between
            pass
        return catalog.load_table(spec.identifier)

    def _attempt(self, spec: LatestTable, changes: pa.Table, log_table: str, what: str) -> int | None:
        table = self.table(spec, changes.drop_columns([DELETED]).schema, log_table)
        pending = past_watermarks(changes, read_watermarks(table))
        if pending.num_rows == 0:
            return None  # a retried copy or a replay: applied before
        buckets = buckets_of(pending)
        arrow_schema = schema_to_pyarrow(table.schema())
        bucket_field = next(i for i, f in enumerate(table.spec().fields) if f.name == "key_bucket")
        tasks = [
            t
            for t in table.scan().plan_files()
            if t.file.spec_id != table.spec().spec_id or t.file.partition[bucket_field] in buckets
        ]
        existing = (
            ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=tasks)
            if tasks
            else arrow_schema.empty_table()
        )
        rows = as_schema(merge(as_schema(existing, arrow_schema), pending), arrow_schema)
        written: list[DataFile] = []
        try:
            written = write_data_files(table, rows, uuid.uuid4(), itertools.count(0))
            marks = {watermark_property(t, p): str(o) for (t, p), o in watermarks_after(pending).items()}
            txn = transaction(table)
            summary = {"kafka.latest.keys": str(pending.num_rows), "kafka.latest.of": log_table}
            if tasks:
                with txn.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
                    for task in tasks:
                        overwrite.delete_data_file(task.file)
                    for f in written:
                        overwrite.append_data_file(f)
            else:
                with txn.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for f in written:
                        append.append_data_file(f)
            txn.set_properties(marks)
            committed = txn.commit_transaction()
        except CONFLICTS:
            delete_data_files(table.io, written, what)
            raise
        # Any other failure keeps the files: the commit may have landed (the watermarks then say so at the retry);
        # orphan removal takes them otherwise.
        snapshot = committed.current_snapshot()
        return snapshot.snapshot_id if snapshot is not None else None
