"""The lease that lets one broker at a time maintain a table without a coordinator of its own.

The lease is a table property, ``kafka.maintenance.lease`` = ``<owner>;<expiry ms>``, taken and renewed by a
commit through the catalog's atomic swap of the metadata location. A catalog that checks a commit's
requirements itself (pyiceberg's SQL catalog) is given one that the property still holds what this broker read,
so of two brokers taking a free lease at once one commit fails. A REST catalog checks only the requirements of
the Iceberg spec; there the lease is read back after the commit and kept only if it still names this broker (two
brokers may then both run a pass now and then: every step is safe beside another run, only wasted work).

A pass keeps its lease while it runs (``LeaseKeeper``: renewed every third of its time to live) and releases it
when it ends, so another broker can take the table at once.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal

from pydantic import Field
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import ValidatableTableRequirement

from rsm.iceberg.maintenance.step import Guard

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
