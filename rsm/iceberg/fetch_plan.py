"""Where a fetch finds an Iceberg-mode segment's rows: the data files of the table's current snapshot that may
hold them, not the files its manifest listed at copy time.

A compaction (ours, Spark's ``rewrite_data_files``, Trino's ``optimize``) moves rows into new files, and snapshot
expiry with orphan-file removal then deletes the old ones; rows deleted by SQL are gone from the current snapshot.
So a fetch picks, from the current snapshot's live files, those whose bounds may hold the segment's partition and
offset range (and its ``kafka.segment_id`` where the rows have one: rows of a later segment that overlaps these
offsets carry that segment's batch positions), with the position delete files that apply to each
(``rsm.iceberg.table_files``: each snapshot is indexed once, each manifest read once). A table with more live
files than the index holds is planned per segment by a pyiceberg scan instead.

The loaded table is kept per table for ``iceberg.mode.fetch.table.refresh.ms``, and loaded again at once when a
planned file is missing or when it predates the segment's commit; a plan is kept per segment and snapshot. When
the catalog does not answer, the last loaded table state serves; with none, the manifest's own files, while they
are still there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import (
    AlwaysTrue,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Snapshot

from rsm.errors import RemoteResourceNotFoundException, RetriableRemoteStorageException
from rsm.iceberg.catalog import CatalogHandle
from rsm.iceberg.config_keys import INDEXED_FILES_DEFAULT
from rsm.iceberg.file_bounds import bound_ids
from rsm.iceberg.schema import has_field
from rsm.iceberg.section import IcebergSection, section_identifier
from rsm.iceberg.selection import RowSelection
from rsm.iceberg.table_files import FieldIds, TableFiles, TooManyFiles

log = logging.getLogger(__name__)

SEGMENT_ID_FIELD = "kafka.segment_id"
"""The column naming the segment a row was copied from (tables written before it existed have none)."""
_MAX_PLANS = 4096


@dataclass(frozen=True)
class SegmentRows:
    """What a fetch of one segment reads: data files that may hold its rows, and which of their rows are its own
    (``partition``, offsets ``first_offset..last_offset`` and, when not None, ``segment_id``; rows without a
    segment id are taken by their offsets)."""

    io: FileIO
    files: tuple[str, ...]
    partition: int
    first_offset: int
    last_offset: int
    segment_id: str | None
    #: The snapshot planned; None: the manifest's own file list (the catalog did not answer).
    snapshot_id: int | None
    #: Files with delete files (merge-on-read deletes): read whole through pyiceberg, which applies them.
    merge_on_read: dict[str, Callable[[], pa.Table]] = field(default_factory=dict)


class FetchPlanner:
    """Plans fetches through the tables' current snapshots; thread-safe."""

    def __init__(
        self,
        handle: CatalogHandle,
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
        indexed_files: int = INDEXED_FILES_DEFAULT,
    ) -> None:
        self.handle = handle
        self.refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], tuple[float, Table]] = {}
        self._plans: OrderedDict[tuple[str, int], SegmentRows] = OrderedDict()
        self._expired: set[int] = set()
        self.files = TableFiles(indexed_files)
        self._unindexed: set[str] = set()  # tables told to be too large to index (logged once each)

    def _table(self, ident: tuple[str, str], refresh: bool) -> tuple[Table, bool]:
        """The table state and whether it was loaded just now."""
        now = self._clock()
        with self._lock:
            cached = self._tables.get(ident)
        if cached is not None and not refresh and now - cached[0] < self.refresh_s:
            return cached[1], False
        table = self.handle.catalog.load_table(ident)
        with self._lock:
            self._tables[ident] = (now, table)
        return table, True

    def _state_with(self, ident: tuple[str, str], section: IcebergSection, refresh: bool) -> Table:
        """The table state, loaded again when it predates the segment's commit (a segment copied since): the
        commit's snapshot is not in it. A snapshot found expired on a fresh load is remembered, so it costs one
        load, not one per fetch."""
        table, fresh = self._table(ident, refresh)
        if fresh or table.snapshot_by_id(section.snapshot_id) is not None:
            return table
        with self._lock:
            if section.snapshot_id in self._expired:
                return table
        table, _ = self._table(ident, True)
        if table.snapshot_by_id(section.snapshot_id) is None:
            with self._lock:
                if len(self._expired) >= _MAX_PLANS:
                    self._expired.clear()
                self._expired.add(section.snapshot_id)
        return table

    def rows(
        self, section: IcebergSection, segment_id: str, topic: str, what: str, refresh: bool = False
    ) -> SegmentRows:
        """The rows of the segment as the table holds them now; ``refresh``: reload the table first (a planned
        file was missing)."""
        ident = section_identifier(section.table, topic)
        try:
            table = self._state_with(ident, section, refresh)
        except NoSuchTableError:
            raise RemoteResourceNotFoundException(
                f"{what}: its table {'.'.join(ident)} is gone from the {self.handle.describe()} (dropped or "
                "renamed); Kafka cannot read the segment until the table is back"
            ) from None
        except Exception as e:
            with self._lock:
                cached = self._tables.get(ident)
            if cached is not None:
                log.warning(
                    "%s: the %s did not answer (%s); fetching from the last loaded table state",
                    what,
                    self.handle.describe(),
                    e,
                )
                table = cached[1]
            else:
                return self._manifest_files(section, segment_id, what, e)
        return self._plan(table, section, segment_id)

    def _plan(self, table: Table, section: IcebergSection, segment_id: str) -> SegmentRows:
        snapshot = table.current_snapshot()
        snapshot_id = snapshot.snapshot_id if snapshot is not None else -1
        key = (segment_id, snapshot_id)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        has_id = has_field(table.schema(), SEGMENT_ID_FIELD)
        tasks = self._tasks(table, snapshot, section, segment_id) if snapshot is not None else []
        merge_on_read = {t.file.file_path: _whole_file_reader(table, t) for t in tasks if t.delete_files}
        plan = SegmentRows(
            io=table.io,
            files=tuple(t.file.file_path for t in tasks),
            partition=section.partition,
            first_offset=section.first_offset,
            last_offset=section.last_offset,
            segment_id=segment_id if has_id else None,
            snapshot_id=snapshot_id,
            merge_on_read=merge_on_read,
        )
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > _MAX_PLANS:
                self._plans.popitem(last=False)
        return plan

    def _tasks(self, table: Table, snapshot: Snapshot, section: IcebergSection, segment_id: str) -> list[FileScanTask]:
        """Scan tasks of the snapshot's data files that may hold the segment's rows."""
        ids = _field_ids(table)
        if ids is not None:
            try:
                index = self.files.of(table, snapshot, ids)
            except TooManyFiles as e:
                self._too_many(table, str(e))
            else:
                wanted = segment_id if ids[2] is not None else None
                return index.tasks(section.partition, section.first_offset, section.last_offset, wanted)
        selection = RowSelection(section.partition, section.first_offset, section.last_offset, segment_id=segment_id)
        return list(table.scan(row_filter=selection.expression(table.schema())).plan_files())

    def _too_many(self, table: Table, count: str) -> None:
        name = ".".join(table.name())
        with self._lock:
            if name in self._unindexed:
                return
            self._unindexed.add(name)
        log.warning(
            "table %s: its current snapshot has %s, more than iceberg.mode.fetch.index.files (%d): each fetch of "
            "a segment reads the table's manifests; raise the setting (memory) or compact the table",
            name,
            count,
            self.files.max_files,
        )

    def _manifest_files(self, section: IcebergSection, segment_id: str, what: str, cause: Exception) -> SegmentRows:
        """The catalog did not answer and no table state is loaded: the files the manifest lists, while every
        one of them is still there (the table may have moved the rows since; these files still hold them)."""
        io = self.handle.io
        missing = [f.path for f in section.files if not _exists(io, f.path)]
        if missing or not section.files:
            raise RetriableRemoteStorageException(
                f"{what}: the {self.handle.describe()} did not answer ({type(cause).__name__}: {cause}) and "
                f"{'the data files its manifest lists are gone' if missing else 'its manifest lists no data file'}"
                f" (first: {missing[0] if missing else '-'}), so its rows cannot be found; check "
                "iceberg.mode.catalog.*; Kafka retries"
            ) from cause
        log.warning(
            "%s: the %s did not answer (%s); fetching from the data files its manifest lists",
            what,
            self.handle.describe(),
            cause,
        )
        return SegmentRows(
            io=io,
            files=tuple(f.path for f in section.files),
            partition=section.partition,
            first_offset=section.first_offset,
            last_offset=section.last_offset,
            segment_id=None,
            snapshot_id=None,
        )


def _field_ids(table: Table) -> FieldIds | None:
    """The ids of the fields the index reads bounds of; None when the table lacks a partition or offset."""
    ids = bound_ids(table)
    if ids is None:
        return None
    schema = table.schema()
    return *ids, schema.find_field(SEGMENT_ID_FIELD).field_id if has_field(schema, SEGMENT_ID_FIELD) else None


def _exists(io: FileIO, path: str) -> bool:
    try:
        return io.new_input(path).exists()
    except OSError:
        return False


def _whole_file_reader(table: Table, task: FileScanTask) -> Callable[[], pa.Table]:
    metadata, io, schema = table.metadata, table.io, table.schema()

    def read() -> pa.Table:
        return ArrowScan(metadata, io, schema, AlwaysTrue()).to_table(tasks=[task])

    return read
