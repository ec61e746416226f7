"""The orphan search: files of a table that no kept version references, past their grace, moved into the
warehouse's quarantine and later purged."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyiceberg.io import FileIO
from pyiceberg.table import Table

from rsm.deletion.fileio_holding import FileIOHolding, list_locations, normal_location
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import Quarantine, new_run_id
from rsm.deletion.rules import (
    TABLE_UNREFERENCED,
    TABLE_UNREFERENCED_FOR_GRACE,
    DeletionRefused,
    Evidence,
    authorize,
)
from rsm.errors import RemoteStorageException
from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance.references import referenced_files
from rsm.iceberg.maintenance.step import OWNER_PROPERTY, StepResult, is_ours

log = logging.getLogger(__name__)

ICEBERG_ORPHAN = "iceberg-orphan"
"""The deletion rule (``rsm.deletion.rules``) of a table's orphan files."""


DATA_FILE_MIN_GRACE_S = 86400.0
"""The least grace of a data file (under a table's ``data/``), whatever ``orphan.grace.ms`` says: a Spark job or
a long compaction may write for hours before its commit, and a reader of an expired snapshot reads as long."""
LEDGER_PATH = "kts/unreferenced.json"
"""Where, under a table's location (outside ``data/`` and ``metadata/``), the plugin keeps when each of the
table's unreferenced files was first seen so (:class:`UnreferencedLedger`)."""


@dataclass(frozen=True)
class OrphanFile:
    """A file of a table that no kept version references. ``age_s``: seconds since it was first seen so."""

    path: str
    size: int
    age_s: float
    evidence: tuple[Evidence, ...] = ()


def orphan_grace_s(relative: str, grace_s: float) -> float:
    """The grace of a file at ``relative`` (its path under the table's location): ``grace_s``, at least
    :data:`DATA_FILE_MIN_GRACE_S` for a file outside ``metadata/``."""
    return grace_s if relative.startswith("metadata/") else max(grace_s, DATA_FILE_MIN_GRACE_S)


@dataclass
class UnreferencedLedger:
    """When each unreferenced file of one table was first seen unreferenced by a pass (epoch seconds, by path
    under the table's location), kept as JSON at :data:`LEDGER_PATH`.

    A file is in it only while it is unreferenced and present: one referenced again, or gone, leaves it at the
    next pass, so it holds the files of about one grace period's commits however old the table. It is written
    only by a pass that may remove files (the maintenance lease holder, ``kts gc --delete``, ``kts iceberg
    maintain``); a read-only look reads it. Lost or unreadable, it starts again empty: files then wait a whole
    grace from the next pass (more kept, never less). Two writers at once (a broker's pass beside ``kts gc
    --delete``) may lose one's update: a file then re-enters later (kept longer), or keeps an earlier time that
    the other had dropped on seeing it referenced; the reference check just before each move still holds. Passes
    run every ``orphan.interval.ms``: a file referenced and dropped again between two passes keeps the time the
    first one saw, so the grace is counted to within that interval."""

    location: str
    first_seen: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def read(io: FileIO, table_location: str) -> UnreferencedLedger:
        location = f"{table_location.rstrip('/')}/{LEDGER_PATH}"
        entry = io.new_input(location)
        try:
            if not entry.exists():
                return UnreferencedLedger(location)
            with entry.open() as f:
                raw = json.loads(f.read())
            first_seen = {str(k): float(v) for k, v in raw["first_seen"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s is unreadable (%s): unreferenced files wait a whole grace from now", location, e)
            return UnreferencedLedger(location)
        return UnreferencedLedger(location, first_seen)

    def write(self, io: FileIO) -> None:
        data = json.dumps({"format": 1, "first_seen": self.first_seen}, sort_keys=True).encode()
        with io.new_output(self.location).create(overwrite=True) as out:
            out.write(data)


def shared_location(table: Table, others: Mapping[str, str]) -> str | None:
    """Why the table's orphan files must not be removed, or None: another table (``others``: name to location)
    at the same location, or one whose location holds the table's (a ``register_table`` clone or a backup of
    it). Each table's search would list the other's live files as its own orphans, so the search is refused for
    both, with a message naming them. A table inside this one's location is no such case: its files are left
    alone (``find_orphans``' ``others``)."""
    location = normal_location(table.location()).rstrip("/")
    sharing = sorted(
        name
        for name, other in others.items()
        if location == normal_location(other).rstrip("/")
        or location.startswith(normal_location(other).rstrip("/") + "/")
    )
    if not sharing:
        return None
    return (
        f"orphan files of table {'.'.join(table.name())} are not removed: table {', '.join(sharing)} is at its "
        f"location {table.location()} or holds it, so each would take the other's live files for orphans; drop "
        "the copy (a register_table clone or a backup) or give each table its own location"
    )


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_orphans(
    table: Table,
    grace_s: float,
    others: list[str] | None = None,
    warehouse: str | None = None,
    now: float | None = None,
    record: bool = False,
) -> list[OrphanFile]:
    """Files under the table's ``data/`` and ``metadata/`` that no kept version of the table references and that
    were first seen so at least their grace ago (:func:`orphan_grace_s`); none of a table that is not ours or
    (``warehouse`` given) lies outside the warehouse. ``others``: locations of other tables, whose files are left
    alone even when under this table's location.

    The grace counts from when a pass first saw the file unreferenced (the table's :class:`UnreferencedLedger`),
    never from its modification time alone: a file of a snapshot expired a minute ago is days old, and a reader
    that planned on that snapshot still reads it. ``record``: write the ledger (only a caller that may remove
    files); a read-only look reads it and finds only what earlier recorded passes saw. Each file found carries
    the evidence ``TABLE_UNREFERENCED_FOR_GRACE``."""
    location = table.location().rstrip("/")
    if not is_ours(table) or (
        warehouse and not normal_location(location).startswith(normal_location(warehouse).rstrip("/") + "/")
    ):
        return []
    now = time.time() if now is None else now
    listed = [f for sub in ("data", "metadata") for f in list_locations(table.io, f"{location}/{sub}/")]
    ledger = UnreferencedLedger.read(table.io, location)
    refs = referenced_files(table) if listed else set()
    base = normal_location(location) + "/"
    nested = [normal_location(o).rstrip("/") + "/" for o in others or [] if normal_location(o).startswith(base)]
    seen: dict[str, float] = {}
    orphans = []
    for path, size, mtime in listed:
        p = normal_location(path)
        if p in refs or any(p.startswith(n) for n in nested) or not p.startswith(base):
            continue
        relative = p[len(base) :]
        first = seen[relative] = ledger.first_seen.get(relative, now)
        since = max(first, mtime)  # a file written again in place starts over
        grace = orphan_grace_s(relative, grace_s)
        if now - since >= grace:
            detail = f"unreferenced since {_iso(since)} (first seen so by a pass), grace {grace:.0f} s"
            orphans.append(OrphanFile(path, size, now - since, (Evidence(TABLE_UNREFERENCED_FOR_GRACE, detail),)))
    if record and seen != ledger.first_seen:
        ledger.first_seen = seen
        ledger.write(table.io)
    return orphans


def _warehouse_of(table: Table, warehouse: str | None) -> str | None:
    """The warehouse the table's files are quarantined in: ``warehouse``, else the catalog's; None when the
    table's location is not inside it."""
    found = warehouse or table.catalog.properties.get("warehouse")
    if not found or not normal_location(table.location()).startswith(normal_location(found).rstrip("/") + "/"):
        return None
    return found


def hold_orphans(
    table: Table,
    orphans: Sequence[OrphanFile],
    warehouse: str,
    retention_s: float,
    run: str | None = None,
    others: Sequence[str] = (),
) -> tuple[list[Held], list[tuple[OrphanFile, str]]]:
    """Move ``orphans`` of ``table`` into the warehouse's quarantine, each once the deletion rule allows it: the
    table is loaded again and what its kept versions reference read again just before (``TABLE_UNREFERENCED``);
    a file referenced now, or of a table whose location another table shares, is kept. (held, kept with why)."""
    if not orphans:
        return [], []
    fresh = table.catalog.load_table(table.name())
    kept: list[tuple[OrphanFile, str]] = []
    shared = shared_location(fresh, {o: o for o in others})
    if shared is not None:
        return [], [(o, shared) for o in orphans]
    if not is_ours(fresh) or normal_location(fresh.location()) != normal_location(table.location()):
        why = f"table {'.'.join(fresh.name())} is no longer the plugin's, or moved; its files are kept"
        return [], [(o, why) for o in orphans]
    refs = referenced_files(fresh)
    versions = len(fresh.metadata.metadata_log) + 1
    store = FileIOHolding(fresh.io, warehouse)
    quarantine = Quarantine(store, store.root, retention_s)
    run = run or new_run_id()
    topic = fresh.properties.get(OWNER_PROPERTY)
    held: list[Held] = []
    for orphan in orphans:
        if normal_location(orphan.path) in refs:
            kept.append((orphan, "a version of the table references it now"))
            continue
        evidence = (
            *orphan.evidence,
            Evidence(TABLE_UNREFERENCED, f"none of the {versions} kept versions up to {fresh.metadata_location}"),
        )
        try:
            authorize(ICEBERG_ORPHAN, orphan.path, evidence)
        except DeletionRefused as e:
            kept.append((orphan, str(e)))
            continue
        try:
            held += quarantine.hold(ICEBERG_ORPHAN, [(orphan.path, orphan.size)], evidence, run, topic)
        except RemoteStorageException as e:  # not the warehouse's to hold, or written while it was moved
            kept.append((orphan, str(e)))
    if held:  # what was moved leaves the ledger now rather than at the next pass
        ledger = UnreferencedLedger.read(fresh.io, fresh.location())
        base = normal_location(fresh.location()).rstrip("/") + "/"
        moved = {normal_location(h.original)[len(base) :] for h in held}
        if moved & set(ledger.first_seen):
            ledger.first_seen = {k: v for k, v in ledger.first_seen.items() if k not in moved}
            ledger.write(fresh.io)
    return held, kept


def remove_orphans(
    table: Table,
    settings: MaintenanceSettings,
    dry_run: bool = False,
    others: list[str] | None = None,
    warehouse: str | None = None,
    now: float | None = None,
    run: str | None = None,
) -> StepResult:
    """Move the table's orphan files (:func:`find_orphans`) into the warehouse's quarantine (:func:`hold_orphans`),
    where they stay ``settings.quarantine_s`` before :func:`purge_quarantine` removes them. A dry run records
    nothing and moves nothing."""
    result = StepResult("remove-orphans")
    if not is_ours(table):
        return result
    root = _warehouse_of(table, warehouse)
    if root is None:
        result.skipped = f"the table's location {table.location()} is outside the warehouse: no quarantine to use"
        return result
    orphans = find_orphans(table, settings.orphan_grace_s, others, root, now, record=not dry_run)
    if dry_run:
        result.count = len(orphans)
        result.bytes = sum(o.size for o in orphans)
        result.details = [o.path for o in orphans]
        return result
    held, kept = hold_orphans(table, orphans, root, settings.quarantine_s, run, others or ())
    result.count = len(held)
    result.bytes = sum(h.size for h in held)
    result.details = [h.original for h in held]
    if kept:
        result.skipped = f"{len(kept)} kept: {kept[0][1]}"
    return result


def purge_quarantine(
    io: FileIO, warehouse: str, retention_s: float, now: float | None = None, dry_run: bool = False
) -> StepResult:
    """Remove for good what the warehouse's quarantine has held longer than ``retention_s`` (``gc.quarantine.ms``
    as configured now)."""
    result = StepResult("purge-quarantine")
    store = FileIOHolding(io, warehouse)
    quarantine = Quarantine(store, store.root, retention_s)
    expired = quarantine.expired(time.time() if now is None else now)
    result.count = len(expired)
    result.bytes = sum(h.size for h in expired if h.present)
    result.details = [h.original for h in expired]
    if expired and not dry_run:
        quarantine.purge(expired)
    return result
