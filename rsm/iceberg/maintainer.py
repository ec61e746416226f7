"""Maintenance inside the plugin: a background thread that takes the plugin's tables in turn, each under its
lease (``rsm.iceberg.maintenance.lease``: one broker at a time maintains a table), and the gate between this
broker's copies to a table and its maintenance commits.

A pass whose lease another broker took ends before its next step.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance.expiry import expire_snapshots
from rsm.iceberg.maintenance.lease import LeaseKeeper, take_lease
from rsm.iceberg.maintenance.orphans import purge_quarantine
from rsm.iceberg.maintenance.run import maintain
from rsm.iceberg.maintenance.step import StepResult, is_ours

log = logging.getLogger(__name__)


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
