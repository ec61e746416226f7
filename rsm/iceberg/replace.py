"""One commit that removes the rows a ``RowSelection`` names and adds new data files, retried on conflict.

The data files that may hold selected rows are found by their bounds (metadata only): a file whose bounds say
every row is selected is dropped whole, any other is read and rewritten without the selected rows, unless it
holds none. Another writer committing first makes the commit fail (``CommitFailedException``, or pyiceberg's
own validation after its retry); it is then tried again on the freshly loaded table, up to ``retries`` times.
The commits of one ``Replacer`` to one table take turns (a lock per table), so they conflict only with other
writers' commits.

A commit whose outcome is unknown (any other error from the commit itself: a connection lost at COMMIT, a REST
catalog's ``CommitStateUnknownException``) deletes nothing until the table is read back: every attempt carries a
fresh ``kafka.commit.id`` in its snapshot summary, and a snapshot with it means the commit landed. When the table
cannot be read back either, ``CommitOutcomeUnknown`` says so and every file stays (orphan removal takes the
ones no snapshot references).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException
from pyiceberg.expressions import (
    AlwaysTrue,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from rsm.errors import RemoteStorageException
from rsm.iceberg.commit_locks import TableLocks
from rsm.iceberg.data_files import delete_data_files, write_data_files
from rsm.iceberg.file_bounds import MANIFESTS
from rsm.iceberg.selection import RowSelection, offset_range_filter
from rsm.iceberg.transaction import transaction

log = logging.getLogger(__name__)

__all__ = [
    "COMMIT_ID",
    "CommitOutcomeUnknown",
    "Replacer",
    "RowSelection",
    "offset_range_filter",
    "stale_files",
]

COMMIT_ID = "kafka.commit.id"
"""Snapshot summary property: a fresh id per commit attempt, what reading the table back looks for."""
_RETRY_PAUSE_S = 0.05
_READ_BACK_ATTEMPTS = 3


class CommitOutcomeUnknown(RemoteStorageException):
    """A commit failed in a way that leaves open whether it landed, and the table could not be read back to tell:
    the files it would add are left in place (deleting them could break a committed snapshot)."""


def stale_files(table: Table, selection: RowSelection) -> tuple[list[DataFile], list[DataFile]]:
    """What removing the selected rows takes: (the table's data files to remove, files written to take the place
    of those that also hold other rows). A copy that overlaps nothing, the usual case, reads no data file and, once
    the manifests' bounds say so, plans nothing."""
    if not MANIFESTS.may_hold(table, selection.partition, selection.first, selection.last):
        return [], []
    schema = table.schema()
    removed: list[DataFile] = []
    rewritten: list[DataFile] = []
    write_uuid = uuid.uuid4()
    counter = itertools.count(0)
    try:
        for task in table.scan(row_filter=selection.expression(schema)).plan_files():
            f = task.file
            if selection.covers(f, table):
                removed.append(f)
                continue
            rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(tasks=[task])
            kept = rows.filter(pc.invert(selection.mask(rows)))
            if kept.num_rows == rows.num_rows:
                continue
            removed.append(f)
            if kept.num_rows:
                rewritten += write_data_files(table, kept, write_uuid, counter)
    except BaseException:
        delete_data_files(table.io, rewritten, f"rewrite of {table.name()}")
        raise
    return removed, rewritten


class _Conflict(Exception):
    """Another writer committed first: try again on the fresh table."""


@dataclass(frozen=True)
class _Unknown:
    """A commit that failed without saying whether it landed: to read back once the table's lock is released."""

    error: Exception
    commit_id: str
    io: FileIO
    rewritten: list[DataFile]


class Replacer:
    """Commits that replace selected rows with new files, on the tables of one catalog; thread-safe. Its commits
    to one table take turns (``TableLocks``): they never conflict with each other, only with other writers."""

    def __init__(self, catalog: Callable[[], Catalog], retries: int) -> None:
        self._catalog = catalog
        self.retries = retries
        self.locks = TableLocks()
        self._count_lock = threading.Lock()
        self.conflicts = 0
        """Commits tried again because another writer committed first (pyiceberg's retries and ours)."""

    def _count_conflicts(self, n: int) -> None:
        if n:
            with self._count_lock:
                self.conflicts += n

    def replace(
        self,
        ident: tuple[str, ...],
        selection: RowSelection,
        files: Sequence[DataFile],
        properties: dict[str, str],
        what: str,
        doing: str,
        before_commit: Callable[[], None] | None = None,
    ) -> int | None:
        """One commit that removes ``selection``'s rows and adds ``files``; the id of its snapshot, or None when
        the table does not exist (and ``files`` is empty) or there is nothing to do. ``before_commit`` is called
        right before each attempt commits (a cancelled copy raises there, and nothing is committed). Raises
        ``CommitOutcomeUnknown`` when the commit may have landed: the caller must then keep ``files``."""
        attempts = self.retries + 1
        for attempt in range(attempts):
            try:
                with self.locks.hold(ident):
                    outcome = self._attempt(ident, selection, files, properties, what, before_commit)
            except _Conflict as e:
                self._count_conflicts(1)
                cause = e.__cause__
                if attempt + 1 == attempts:
                    raise RemoteStorageException(
                        f"{what}: {doing} table {'.'.join(ident)} failed {attempts} times, each time after "
                        f"another writer committed first ({cause}); raise iceberg.mode.commit.retries if the topic "
                        f"has many partitions tiered at once"
                    ) from cause
                log.debug("%s: commit conflict on %s (attempt %d): %s", what, ".".join(ident), attempt + 1, cause)
                time.sleep(_RETRY_PAUSE_S * (attempt + 1))
                continue
            if not isinstance(outcome, _Unknown):
                return outcome
            # Read back outside the lock: the catalog may be slow to answer, and this copy's turn is over.
            error = outcome.error
            landed = self._read_back(ident, outcome.commit_id, what, error, [*outcome.rewritten, *files])
            if landed is None:
                delete_data_files(outcome.io, outcome.rewritten, what)
                raise error
            log.info("%s: the commit to %s landed though it reported %s", what, ".".join(ident), error)
            return landed
        raise AssertionError("unreachable")

    def _attempt(
        self,
        ident: tuple[str, ...],
        selection: RowSelection,
        files: Sequence[DataFile],
        properties: dict[str, str],
        what: str,
        before_commit: Callable[[], None] | None,
    ) -> int | None | _Unknown:
        """One attempt, under the table's lock: the snapshot's id, None (nothing to do), or ``_Unknown``;
        raises ``_Conflict``."""
        try:
            table = self._catalog().load_table(ident)
        except NoSuchTableError:
            if files:
                raise
            return None
        removed, rewritten = stale_files(table, selection)
        if not removed and not files:
            return None
        commit_id = uuid.uuid4().hex
        try:
            txn = transaction(table)
            summary = {**properties, COMMIT_ID: commit_id}
            if removed:
                with txn.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
                    for f in removed:
                        overwrite.delete_data_file(f)
                    for f in (*rewritten, *files):
                        overwrite.append_data_file(f)
            else:
                with txn.update_snapshot(snapshot_properties=summary).merge_append() as append:
                    for f in files:
                        append.append_data_file(f)
            if before_commit is not None:
                before_commit()
        except BaseException:
            delete_data_files(table.io, rewritten, what)
            raise
        try:
            committed = txn.commit_transaction()
        # pyiceberg retries a conflicting commit itself and may then fail its own validation of the files
        # removed: a conflict too. Neither has changed the table.
        except (CommitFailedException, ValidationException) as e:
            self._count_conflicts(txn.retries)
            delete_data_files(table.io, rewritten, what)
            raise _Conflict() from e
        except Exception as e:
            self._count_conflicts(txn.retries)
            return _Unknown(e, commit_id, table.io, rewritten)
        self._count_conflicts(txn.retries)
        snapshot = committed.current_snapshot()
        assert snapshot is not None
        return snapshot.snapshot_id

    def _read_back(
        self, ident: tuple[str, ...], commit_id: str, what: str, error: Exception, kept: list[DataFile]
    ) -> int | None:
        """The id of the snapshot the commit ``commit_id`` made, or None when the table shows it did not land;
        raises ``CommitOutcomeUnknown`` when the table cannot be read."""
        last: Exception | None = None
        for attempt in range(_READ_BACK_ATTEMPTS):
            try:
                table = self._catalog().load_table(ident)
            except Exception as e:  # the catalog is still down, most likely: try again, then give up
                last = e
                time.sleep(_RETRY_PAUSE_S * (attempt + 1))
                continue
            for snapshot in reversed(table.snapshots()):
                if snapshot.summary is not None and snapshot.summary[COMMIT_ID] == commit_id:
                    return snapshot.snapshot_id
            return None
        raise CommitOutcomeUnknown(
            f"{what}: the commit to table {'.'.join(ident)} failed with {type(error).__name__}: {error}, and the "
            f"table could not be read back to tell whether it landed ({type(last).__name__}: {last}); its "
            f"{len(kept)} data files are kept (orphan removal takes them if no snapshot references them). "
            f"Kafka retries the copy; check the catalog (iceberg.mode.catalog.*)"
        ) from error
