"""Maintenance inside the plugin: a background thread that takes the plugin's tables in turn, and the lease that
lets one broker at a time maintain a table without a coordinator of its own.

The lease is a table property, ``kafka.maintenance.lease`` = ``<owner>;<expiry ms>``, taken and renewed by a
commit through the catalog's atomic swap of the metadata location. A catalog that checks a commit's
requirements itself (pyiceberg's SQL catalog) is given one that the property still holds what this broker read,
so of two brokers taking a free lease at once one commit fails. A REST catalog checks only the requirements of
the Iceberg spec; there the lease is read back after the commit and kept only if it still names this broker (two
brokers may then both run a pass now and then: every step is safe beside another run, only wasted work).

A pass keeps its lease while it runs (``LeaseKeeper``: renewed every third of its time to live) and releases it
when it ends, so another broker can take the table at once; a pass whose lease another broker took ends before
its next step.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from pydantic import Field
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import ValidatableTableRequirement

from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance import Guard, StepResult, expire_snapshots, is_ours, maintain, purge_quarantine

log = logging.getLogger(__name__)

LEASE_PROPERTY = "kafka.maintenance.lease"


class _AssertProperty(ValidatableTableRequirement):
    """The table property ``key`` must hold ``value`` (None: be unset). Checked by catalogs that check
    requirements in pyiceberg (the SQL catalog); never sent to a REST catalog."""

    type: Literal["assert-kafka-property"] = Field(default="assert-kafka-property")
    key: str
    value: str | None

    def validate(self, base_metadata: TableMetadata | None) -> None:
        current = None if base_metadata is None else base_metadata.properties.get(self.key)
        if current != self.value:
            raise CommitFailedException(f"table property {self.key} is {current!r}, not {self.value!r}")


@dataclass(frozen=True)
class Lease:
    owner: str
    expiry_ms: int

    @staticmethod
    def parse(text: str | None) -> Lease | None:
        if not text or ";" not in text:
            return None
        owner, _, expiry = text.rpartition(";")
        try:
            return Lease(owner, int(expiry))
        except ValueError:
            return None

    def __str__(self) -> str:
        return f"{self.owner};{self.expiry_ms}"


def _checks_requirements_locally(catalog: Catalog) -> bool:
    from pyiceberg.catalog.rest import RestCatalog

    return not isinstance(catalog, RestCatalog)


def take_lease(
    table: Table,
    owner: str,
    ttl_s: float,
    now_ms: int | None = None,
    guard: Guard = nullcontext,
    renew_below: float = 0.5,
) -> Table | None:
    """The table with a lease for ``owner`` valid ``ttl_s`` from now (taken, or renewed when less than
    ``renew_below`` of ``ttl_s`` is left; 1.0: always), or None when another owner holds an unexpired lease or won
    the race for it. A commit is made under ``guard`` (this broker's copies to the table wait), on the table
    loaded again there."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ttl_ms = int(ttl_s * 1000)

    def state(t: Table) -> Literal["theirs", "ours", "take"]:
        held = Lease.parse(t.properties.get(LEASE_PROPERTY))
        if held is not None and held.owner != owner and held.expiry_ms > now_ms:
            return "theirs"
        if held is not None and held.owner == owner and held.expiry_ms - now_ms >= ttl_ms * renew_below:
            return "ours"
        return "take"

    if (held_by := state(table)) != "take":
        return table if held_by == "ours" else None
    with guard():
        table = table.catalog.load_table(table.name())
        if (held_by := state(table)) != "take":
            return table if held_by == "ours" else None
        raw = table.properties.get(LEASE_PROPERTY)
        txn = table.transaction()
        if _checks_requirements_locally(table.catalog):
            # Staged first: the transaction checks a requirement against its own metadata as it goes.
            txn._stage((), (_AssertProperty(key=LEASE_PROPERTY, value=raw),))  # noqa: SLF001 - see the module doc
        txn.set_properties({LEASE_PROPERTY: str(Lease(owner, now_ms + ttl_ms))})
        try:
            txn.commit_transaction()
        except CommitFailedException:
            return None
    fresh = table.catalog.load_table(table.name())
    mine = Lease.parse(fresh.properties.get(LEASE_PROPERTY))
    return fresh if mine is not None and mine.owner == owner else None


def release_lease(table: Table, owner: str, guard: Guard = nullcontext) -> None:
    """Give the lease up (only when it is still ``owner``'s), under ``guard`` on the table loaded again there."""
    if not _holds(table, owner):
        return
    with guard():
        table = table.catalog.load_table(table.name())
        raw = table.properties.get(LEASE_PROPERTY)
        if not _holds(table, owner):
            return
        txn = table.transaction()
        if _checks_requirements_locally(table.catalog):
            txn._stage((), (_AssertProperty(key=LEASE_PROPERTY, value=raw),))  # noqa: SLF001
        txn.remove_properties(LEASE_PROPERTY)
        try:
            txn.commit_transaction()
        except CommitFailedException:
            pass


def _holds(table: Table, owner: str) -> bool:
    held = Lease.parse(table.properties.get(LEASE_PROPERTY))
    return held is not None and held.owner == owner


class LeaseKeeper:
    """Keeps ``owner``'s lease of a table while a pass runs: a thread renews it every third of ``ttl_s`` (so a
    renewal late by up to two thirds of it still comes in time), and ``held`` turns False for good once a
    renewal finds another owner's unexpired lease (the pass should then stop). Leaving the ``with`` stops the
    thread and releases the lease; a failure to release is logged (the lease then expires)."""

    def __init__(self, catalog: Catalog, ident: tuple[str, ...], owner: str, ttl_s: float, guard: Guard) -> None:
        self._catalog = catalog
        self._ident = ident
        self._owner = owner
        self._ttl_s = ttl_s
        self._guard = guard
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"kts-lease-{ident[-1]}", daemon=True)

    @property
    def held(self) -> bool:
        return not self._lost.is_set()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if not self.held:
            return
        try:
            release_lease(self._catalog.load_table(self._ident), self._owner, self._guard)
        except Exception as e:
            log.warning(
                "Iceberg maintenance of %s: cannot release its lease (it expires in at most %.0f s): %s",
                ".".join(self._ident),
                self._ttl_s,
                e,
            )

    def _renew(self) -> None:
        while not self._stop.wait(self._ttl_s / 3):
            try:
                kept = self._renew_once()
            except Exception as e:  # the catalog may answer again before the lease expires
                log.warning("Iceberg maintenance of %s: cannot renew its lease: %s", ".".join(self._ident), e)
                continue
            if not kept:
                log.info(
                    "Iceberg maintenance of %s: another broker holds its lease now; this pass ends before its "
                    "next step",
                    ".".join(self._ident),
                )
                self._lost.set()
                return

    def _renew_once(self) -> bool:
        """Whether the lease is still ours: renewed, or its commit lost a race to another writer's commit and the
        lease still names this broker (renewed at the next turn)."""
        table = self._catalog.load_table(self._ident)
        if take_lease(table, self._owner, self._ttl_s, guard=self._guard, renew_below=1.0) is not None:
            return True
        held = Lease.parse(self._catalog.load_table(self._ident).properties.get(LEASE_PROPERTY))
        return held is None or held.owner == self._owner or held.expiry_ms <= time.time() * 1000


class CommitGate:
    """Between this broker's copies to a table (many at once) and its maintenance commits (one, alone): a
    maintenance commit waits for the copies under way and holds new ones back until it is done."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._copies = 0
        self._exclusive = False
        self._waiting = 0
        self.copies_waited_s = 0.0  # the time copies spent waiting for maintenance commits, in all

    @contextmanager
    def copying(self) -> Iterator[None]:
        started = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            self._copies += 1
            self.copies_waited_s += time.monotonic() - started
        try:
            yield
        finally:
            with self._cond:
                self._copies -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._exclusive and not self._copies)
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass
class MaintenanceStats:
    """Counters of the passes this broker ran (pulled by the metrics), keyed by metric attribute."""

    totals: dict[str, float] = field(default_factory=dict)
    last_pass_end: float | None = None
    snapshots_max: int = 0
    manifests_max: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, results: list[StepResult]) -> None:
        names = {
            "expire-snapshots": ("snapshots-expired-total", None),
            "compaction": ("files-compacted-total", "bytes-compacted-total"),
            "rewrite-manifests": ("manifests-rewritten-total", None),
            "remove-orphans": ("orphan-files-removed-total", "orphan-bytes-removed-total"),
            "purge-quarantine": ("quarantine-files-purged-total", "quarantine-bytes-purged-total"),
        }
        with self.lock:
            for r in results:
                count_name, bytes_name = names.get(r.step, (None, None))
                if count_name:
                    self.totals[count_name] = self.totals.get(count_name, 0) + r.count
                if bytes_name:
                    self.totals[bytes_name] = self.totals.get(bytes_name, 0) + r.bytes
                if r.skipped:
                    self.totals["conflicts-total"] = self.totals.get("conflicts-total", 0) + 1
                if r.refused:
                    name = "orphan-removals-refused-total"
                    self.totals[name] = self.totals.get(name, 0) + 1
                if r.given_up:
                    name = "compaction-bins-given-up-total"
                    self.totals[name] = self.totals.get(name, 0) + r.given_up
                seconds = f"{r.step}-time-ms-total"
                self.totals[seconds] = self.totals.get(seconds, 0) + r.seconds * 1000

    def count(self, name: str, n: float = 1) -> None:
        with self.lock:
            self.totals[name] = self.totals.get(name, 0) + n

    def stats(self) -> dict[str, float]:
        with self.lock:
            out = {
                k: self.totals.get(k, 0.0)
                for k in (
                    "passes-total",
                    "errors-total",
                    "conflicts-total",
                    "compaction-bins-given-up-total",
                    "orphan-removals-refused-total",
                    "snapshots-expired-total",
                    "files-compacted-total",
                    "bytes-compacted-total",
                    "manifests-rewritten-total",
                    "orphan-files-removed-total",
                    "orphan-bytes-removed-total",
                    "quarantine-files-purged-total",
                    "quarantine-bytes-purged-total",
                )
            }
            for step in ("expire-snapshots", "compaction", "rewrite-manifests", "remove-orphans"):
                out[f"{step}-time-ms-total"] = self.totals.get(f"{step}-time-ms-total", 0.0)
            out["seconds-since-last-pass"] = (
                float("nan") if self.last_pass_end is None else time.time() - self.last_pass_end
            )
            out["table-snapshots-max"] = float(self.snapshots_max)
            out["table-data-manifests-max"] = float(self.manifests_max)
            return out


class Maintainer:
    """The background thread: every ``interval_s``, each of the plugin's tables in ``namespace`` whose lease it
    gets has a maintenance pass (orphan removal at most every ``orphan_interval_s`` per table)."""

    def __init__(
        self,
        catalog: Callable[[], Catalog],
        namespace: str,
        settings: MaintenanceSettings,
        interval_s: float,
        orphan_interval_s: float,
        owner: str | None = None,
        warehouse: str | None = None,
        lease_ttl_s: float | None = None,
    ) -> None:
        self.catalog = catalog
        self._lease_ttl_s = lease_ttl_s
        self.namespace = namespace
        self.settings = settings
        self.interval_s = interval_s
        self.orphan_interval_s = orphan_interval_s
        self.owner = owner or f"{uuid.uuid4()}"
        self.warehouse = warehouse
        self.stats = MaintenanceStats()
        self._last_orphans: dict[tuple[str, ...], float] = {}
        self._last_purge: float | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._commits: dict[str, int] = {}
        self._gates: dict[str, CommitGate] = {}
        self._due: set[str] = set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def lease_ttl_s(self) -> float:
        """How long a lease lasts unless renewed (a pass renews it every third of that while it runs)."""
        return self._lease_ttl_s if self._lease_ttl_s is not None else max(3 * self.interval_s, 300.0)

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="kts-iceberg-maintenance", daemon=True)
                self._thread.start()

    def gate(self, table: str) -> CommitGate:
        """The gate of ``table`` (its name in the namespace)."""
        with self._lock:
            return self._gates.setdefault(table, CommitGate())

    def note_commit(self, table: str) -> None:
        """A commit of this broker to ``table`` (its name in the namespace): every ``snapshot_max_keep // 2``
        of them wake the thread for an expiry of that table alone, so the snapshots a commit carries stay
        bounded between full passes on a table that commits fast."""
        with self._lock:
            n = self._commits.get(table, 0) + 1
            self._commits[table] = n
            if n >= max(1, self.settings.snapshot_max_keep // 2):
                self._commits[table] = 0
                self._due.add(table)
                self._wake.set()

    def close(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        next_pass = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_pass - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                due, self._due = self._due, set()
            if time.monotonic() < next_pass:
                self._expire(due)
                continue
            next_pass = time.monotonic() + self.interval_s
            try:
                self.run_pass()
            except Exception as e:  # the next pass tries again; the catalog may be down for a while
                self.stats.count("errors-total")
                log.warning(
                    "Iceberg maintenance pass failed (the next starts in %.0f s): %s", self.interval_s, e, exc_info=True
                )

    def _expire(self, tables: set[str]) -> None:
        """Expiry alone on ``tables`` (those whose lease this broker gets; the lease released after)."""
        for name in sorted(tables):
            ident = (self.namespace, name)
            try:
                catalog = self.catalog()
                table = catalog.load_table(ident)
                gate = self.gate(name)
                leased = (
                    take_lease(table, self.owner, self.lease_ttl_s, guard=gate.exclusive) if is_ours(table) else None
                )
                if leased is None:
                    continue
                with LeaseKeeper(catalog, ident, self.owner, self.lease_ttl_s, gate.exclusive), gate.exclusive():
                    # Loaded again under the gate: the copies committed since are in it.
                    fresh = catalog.load_table(ident)
                    self.stats.add([expire_snapshots(fresh, self.settings)])
            except NoSuchTableError:
                continue  # dropped since its commit woke the thread
            except Exception as e:
                self.stats.count("errors-total")
                log.warning("Iceberg snapshot expiry of %s.%s failed: %s", self.namespace, name, e)

    def _purge(self, catalog: Catalog) -> None:
        """Remove what the warehouse's quarantine held past its time, at most every ``orphan_interval_s`` (any
        broker may: an item purged twice is gone once)."""
        now = time.monotonic()
        if not self.warehouse or (self._last_purge is not None and now - self._last_purge < self.orphan_interval_s):
            return
        from pyiceberg.io import load_file_io

        io = load_file_io(dict(catalog.properties), self.warehouse)
        self.stats.add([purge_quarantine(io, self.warehouse, self.settings.quarantine_s)])
        self._last_purge = now

    def _proceeds(self, lease: LeaseKeeper) -> bool:
        """Whether a pass goes on to its next step: its lease still held and the plugin not closing."""
        return lease.held and not self._stop.is_set()

    def run_pass(self) -> None:
        """One pass over the namespace's tables (the thread's work; also callable directly)."""
        catalog = self.catalog()
        snapshots_max = manifests_max = 0
        for ident in catalog.list_tables(self.namespace):
            if self._stop.is_set():
                return
            try:
                table = catalog.load_table(ident)
            except NoSuchTableError:
                continue
            if not is_ours(table):
                continue
            gate = self.gate(ident[-1])
            leased = take_lease(table, self.owner, self.lease_ttl_s, guard=gate.exclusive)
            if leased is None:
                continue
            now = time.monotonic()
            last = self._last_orphans.get(ident)
            orphans = last is None or now - last >= self.orphan_interval_s
            try:
                with LeaseKeeper(catalog, tuple(ident), self.owner, self.lease_ttl_s, gate.exclusive) as lease:
                    others = _locations(catalog, ident) if orphans else None
                    results = maintain(
                        leased,
                        self.settings,
                        orphans=orphans,
                        others=others,
                        guard=gate.exclusive,
                        warehouse=self.warehouse,
                        proceed=partial(self._proceeds, lease),
                    )
            except Exception as e:
                self.stats.count("errors-total")
                log.warning("Iceberg maintenance of %s failed (next pass retries): %s", ".".join(ident), e)
                continue
            if orphans and "remove-orphans" in {r.step for r in results}:
                self._last_orphans[ident] = now
            self.stats.add(results)
            table = catalog.load_table(ident)
            snapshot = table.current_snapshot()
            snapshots_max = max(snapshots_max, len(table.metadata.snapshots))
            if snapshot is not None:
                manifests_max = max(manifests_max, len(snapshot.manifests(table.io)))
        self._purge(catalog)
        with self.stats.lock:
            self.stats.snapshots_max = snapshots_max
            self.stats.manifests_max = manifests_max
            self.stats.last_pass_end = time.time()
            self.stats.totals["passes-total"] = self.stats.totals.get("passes-total", 0) + 1


def _locations(catalog: Catalog, ident: tuple[str, ...]) -> dict[str, str]:
    """The other tables of the namespace, name to location (their files are never this table's orphans)."""
    out = {}
    for other in catalog.list_tables(ident[:-1]):
        if tuple(other) != tuple(ident):
            try:
                out[".".join(other)] = catalog.load_table(other).location()
            except NoSuchTableError:
                continue
    return out
