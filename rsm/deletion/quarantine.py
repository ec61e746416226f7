"""The quarantine: what the plugin deletes on its own inference is moved aside first, and can be put back.

An object held is copied to ``<root><run>/<its name below the place's root>`` (for the plugin's store
``<key.prefix>kts-quarantine/<run>/<key without key.prefix>``), a JSON record of it is written beside the copy
(same name plus ``.kts-held.json``: where it came from, its size, kind, topic, the evidence, when it was held),
and only then is the original deleted. ``restore`` copies it back when nothing lives under the original name;
``purge`` removes the copy and its record; ``expired`` lists what has been held longer than the retention
(``gc.quarantine.ms``), counted from when it was held with the retention configured now: shortening the retention
shortens every hold.

The record is written before the copy, so every copy has a record. A hold interrupted before its copy completed
leaves a record without a copy (and the original in place): such an item is listed with ``present`` False, and
purging it removes only the record. A hold interrupted after the copy leaves the copy and the original both:
restore refuses to overwrite the original, and purge removes the copy. A hold retried in the same run finds its
copy and record and returns them.
"""

from __future__ import annotations

import io
import json
import math
import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from backends.base import (
    BackendCapabilities,
    KeyNotFound,
    StorageBackend,
    read_exactly,
)
from rsm.deletion.holding import Held, HoldingStore
from rsm.deletion.rules import DeletionRefused, Evidence
from rsm.errors import CorruptDataException, RemoteStorageException

QUARANTINE_DIR = "kts-quarantine/"
"""The folder of the quarantine right under the place's root (``key.prefix``, the warehouse)."""
RECORD_SUFFIX = ".kts-held.json"
"""A held object's record sits beside its copy, under the copy's name plus this suffix."""
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
_RECORD_FORMAT = 1
_MAX_TIME = 1e13  # seconds since 1970: far beyond any clock, within a float's exact integers
_MAX_RECORD_BYTES = 1 << 20
_RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{4}")


def new_run_id(now: float | None = None) -> str:
    """A run's id: its UTC start time, sortable, and four random hex digits (``20261129T041500Z-9f3a``)."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(2)}"


def check_run_id(run: str) -> str:
    """``run`` when it is a run id as ``new_run_id`` makes them; ``ValueError`` naming the expected form."""
    if not _RUN_ID.fullmatch(run):
        raise ValueError(f"{run!r} is not a quarantine run id such as 20261129T041500Z-9f3a")
    return run


def run_started(run: str) -> float | None:
    """When the run ``run`` started (its id says, to the second); None for a name that is no run id."""
    if not _RUN_ID.fullmatch(run):
        return None
    try:
        return datetime.strptime(run[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def encode_record(held: Held) -> bytes:
    """The JSON record of ``held`` (its ``present`` is not stored: the listing says it)."""
    doc = {
        "format": _RECORD_FORMAT,
        "original": held.original,
        "location": held.location,
        "size": held.size,
        "kind": held.kind,
        "run": held.run,
        "heldAt": held.held_at,
        "until": held.until,
        "topic": held.topic,
        "evidence": list(held.evidence),
    }
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False).encode("utf-8")


def decode_record(raw: bytes, name: str) -> Held:
    """The record ``raw`` read from ``name``; ``CorruptDataException`` naming ``name`` and the bad field."""

    def bad(why: str) -> CorruptDataException:
        return CorruptDataException(
            f"quarantine record {name} {why}; it is left alone (remove it with its copy by hand once checked)"
        )

    if len(raw) > _MAX_RECORD_BYTES:
        raise bad(f"is {len(raw):,} bytes, more than a record can be")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad(f"is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise bad("is not a JSON object")
    if doc.get("format") != _RECORD_FORMAT:
        raise bad(f"has format {doc.get('format')!r}, not {_RECORD_FORMAT}")

    def text(field_name: str, optional: bool = False) -> Any:
        value = doc.get(field_name)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise bad(f"has no text {field_name!r}")
        return value

    def number(field_name: str) -> float:
        value = doc.get(field_name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value > _MAX_TIME:
            raise bad(f"has no time {field_name!r} (seconds since 1970, at most {_MAX_TIME:g})")
        return float(value)

    size = doc.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise bad("has no non-negative integer 'size'")
    evidence = doc.get("evidence")
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise bad("has no list of texts 'evidence'")
    return Held(
        original=text("original"),
        location=text("location"),
        size=size,
        kind=text("kind"),
        run=text("run"),
        held_at=number("heldAt"),
        until=number("until"),
        topic=text("topic", optional=True),
        evidence=tuple(evidence),
    )


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


@dataclass
class RestoreReport:
    """What ``restore`` did: put back, refused (a live object has the name) and missing (the copy is gone)."""

    restored: list[Held] = field(default_factory=list)
    refused: list[tuple[Held, str]] = field(default_factory=list)
    missing: list[tuple[Held, str]] = field(default_factory=list)


@dataclass
class PurgeReport:
    """What ``purge`` removed, and the bytes its copies held."""

    purged: list[Held] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(h.size for h in self.purged if h.present)


class Quarantine:
    """Objects of one place held under ``root`` (``<key.prefix>kts-quarantine/``, ``<warehouse>/kts-quarantine/``)
    for ``retention_s`` seconds."""

    def __init__(
        self,
        store: HoldingStore,
        root: str,
        retention_s: float = DEFAULT_RETENTION_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if retention_s < 0 or not math.isfinite(retention_s):
            raise ValueError(f"retention_s must be a non-negative number of seconds, got {retention_s}")
        if root and not root.endswith("/"):
            raise ValueError(f"the quarantine's root must end with '/', got {root!r}")
        self.store = store
        self.root = root
        self.retention_s = retention_s
        self.clock = clock

    def describe(self) -> str:
        return f"the quarantine {self.root!r} in {self.store.describe()}"

    def _owned(self, name: str) -> str | None:
        """``name`` below the store's root when the store calls it the plugin's, else None (a store may say no by
        returning None or by raising ``RemoteStorageException``)."""
        try:
            return self.store.relative(name)
        except RemoteStorageException:
            return None

    def _relative(self, name: str) -> str:
        rel = self._owned(name)
        if rel is None or rel.endswith(RECORD_SUFFIX):
            raise DeletionRefused(
                f"{name} is not the plugin's in {self.store.describe()}: the quarantine holds only the plugin's own "
                "objects, so it was neither moved nor deleted"
            )
        return rel

    def hold(
        self,
        kind: str,
        items: Sequence[tuple[str, int | None]],
        evidence: Sequence[Evidence],
        run: str,
        topic: str | None = None,
    ) -> list[Held]:
        """Move each named object aside (copy, record, then delete the original) and return what is held. A name
        already gone is skipped; a name that is not the plugin's raises ``DeletionRefused`` before anything of
        ``items`` moves. A failed copy leaves its original in place and raises."""
        check_run_id(run)
        placed = [(name, self._relative(name)) for name, _size in items]
        lines = tuple(f"{e.signal}: {e.detail}" if e.detail else e.signal for e in evidence)
        out: list[Held] = []
        for name, rel in placed:
            location = f"{self.root}{run}/{rel}"
            record = location + RECORD_SUFFIX
            size = self.store.size(name)
            if size is None:
                if self.store.exists(record) and self.store.exists(location):
                    out.append(self._read(record))  # held by an earlier attempt of this run
                continue  # gone: nothing to hold
            now = self.clock()
            held = Held(name, location, size, kind, run, now, now + self.retention_s, topic, lines)
            self.store.put(record, encode_record(held))
            try:
                self.store.copy(name, location)
            except (KeyNotFound, FileNotFoundError):
                self.store.delete(record)
                continue  # deleted by someone else meanwhile
            except BaseException:
                self._forget(record)
                raise
            copied = self.store.size(location)
            if copied != size:
                self.store.delete(location)
                self.store.delete(record)
                raise RemoteStorageException(
                    f"{name} changed while it was moved into {self.describe()} ({size} bytes before, {copied} "
                    "copied): it was kept; run gc again once nothing writes it"
                )
            self.store.delete(name)
            out.append(held)
        return out

    def keep(
        self, kind: str, original: str, data: bytes, evidence: Sequence[Evidence], run: str, topic: str | None = None
    ) -> Held:
        """Hold ``data``, which no object of the place holds (rows a commit is about to remove from a table), as
        if it had been ``original``: the record first, then the copy. ``original`` names the item (a location of
        the place's own); nothing is ever written there, and such items are put back by their kind's own restore,
        not :meth:`restore`."""
        check_run_id(run)
        location = f"{self.root}{run}/{self._relative(original)}"
        lines = tuple(f"{e.signal}: {e.detail}" if e.detail else e.signal for e in evidence)
        now = self.clock()
        held = Held(original, location, len(data), kind, run, now, now + self.retention_s, topic, lines)
        self.store.put(location + RECORD_SUFFIX, encode_record(held))
        try:
            self.store.put(location, data)
        except BaseException:
            self._forget(location + RECORD_SUFFIX)
            raise
        if self.store.size(location) != len(data):
            self.store.delete(location)
            self._forget(location + RECORD_SUFFIX)
            raise RemoteStorageException(
                f"{original}: {len(data)} bytes written into {self.describe()} read back with another size; "
                "nothing was removed"
            )
        return held

    def _forget(self, record: str) -> None:
        try:
            self.store.delete(record)
        except Exception:  # the copy failed already: that is the error to report; the record only lists it
            pass

    def _read(self, record: str, present: bool = True) -> Held:
        held = decode_record(self.store.get(record), record)
        location = record[: -len(RECORD_SUFFIX)]
        rest = location[len(self.root) :] if location.startswith(self.root) else ""
        run, _, rel = rest.partition("/")
        if held.location != location or held.run != run or self._owned(held.original) != rel:
            raise CorruptDataException(
                f"quarantine record {record} names {held.original} held at {held.location} in run {held.run}, "
                "which is not where the record is: it is left alone (check it, then remove it by hand)"
            )
        return replace(held, present=present, until=held.held_at + self.retention_s)

    def held(self, run: str | None = None, topic: str | None = None, key: str | None = None) -> list[Held]:
        """What is held (every record, read), oldest run first; narrowed to one run, topic or original name. Reads
        only: a record without its copy is listed with ``present`` False, never removed here."""
        if run is not None:
            check_run_id(run)
        base = self.root if run is None else f"{self.root}{run}/"
        names = set(self.store.list(base))
        records = sorted(n for n in names if n.endswith(RECORD_SUFFIX))
        if key is not None:
            rel = self._owned(key)
            if rel is None:
                return []
            records = [r for r in records if r[len(self.root) :].partition("/")[2] == rel + RECORD_SUFFIX]
        out = [self._read(r, r[: -len(RECORD_SUFFIX)] in names) for r in records]
        if topic is not None:
            out = [h for h in out if h.topic == topic]
        return out

    def expired(self, now: float | None = None) -> list[Held]:
        """What has been held past its ``until``. One listing; only the records of runs that started longer ago
        than the retention are read (a run's id is its start time, and nothing of it was held before that)."""
        now = self.clock() if now is None else now
        names = set(self.store.list(self.root))
        out = []
        for record in sorted(n for n in names if n.endswith(RECORD_SUFFIX)):
            started = run_started(record[len(self.root) :].partition("/")[0])
            if started is not None and started + self.retention_s > now:
                continue
            held = self._read(record, record[: -len(RECORD_SUFFIX)] in names)
            if held.until <= now:
                out.append(held)
        return out

    def restore(self, items: Sequence[Held]) -> RestoreReport:
        """Copy each item back to its original name when nothing lives there now (a live object is never
        overwritten: that item is refused and stays held), then remove its copy and record."""
        report = RestoreReport()
        for h in items:
            record = h.location + RECORD_SUFFIX
            if self.store.exists(h.original):
                report.refused.append(
                    (h, "a live object has that name now; the held copy stays (purge it once you have checked)")
                )
                continue
            if not h.present or not self.store.exists(h.location):
                report.missing.append((h, "its held copy is gone (a hold interrupted, or purged): nothing to put back"))
                continue
            self.store.copy(h.location, h.original)
            if self.store.size(h.original) != h.size:
                raise RemoteStorageException(
                    f"{h.original} restored from {h.location} has not the {h.size} bytes held; the held copy is kept: "
                    "check the store and restore again"
                )
            self.store.delete(h.location)
            self.store.delete(record)
            report.restored.append(h)
        return report

    def purge(self, items: Sequence[Held]) -> PurgeReport:
        """Remove each item's copy, then its record: gone for good."""
        report = PurgeReport()
        for h in items:
            self.store.delete(h.location)
            self.store.delete(h.location + RECORD_SUFFIX)
            report.purged.append(h)
        return report


class BackendHolding:
    """The plugin's object store as a place to hold objects in: names are keys under ``prefix`` (``key.prefix``),
    ``owned`` says which of them are the plugin's (the key layout; every key under the prefix when None).

    Copies are server-side when the backend offers ``CopiesObjects``; otherwise streamed through this process
    (``fetch`` into ``upload``, never whole in memory)."""

    def __init__(
        self,
        backend: StorageBackend,
        prefix: str,
        owned: Callable[[str], bool] | None = None,
        capabilities: BackendCapabilities | None = None,
    ) -> None:
        self.backend = backend
        self.prefix = prefix
        self.owned = owned
        self.capabilities = capabilities or BackendCapabilities.of(backend)

    @property
    def root(self) -> str:
        """Where this store's quarantine is: ``<key.prefix>kts-quarantine/``."""
        return self.prefix + QUARANTINE_DIR

    def describe(self) -> str:
        return f"{self.backend!r}, key.prefix {self.prefix!r}"

    def relative(self, name: str) -> str | None:
        if not name.startswith(self.prefix):
            return None
        rel = name[len(self.prefix) :]
        if not rel or rel.startswith(QUARANTINE_DIR):
            return None
        if self.owned is not None and not self.owned(name):
            return None
        return rel

    def copy(self, source: str, target: str) -> None:
        if self.capabilities.copies is not None:
            self.capabilities.copies.copy_object(source, target)
            return
        with self.backend.fetch(source) as stream:
            self.backend.upload(target, stream)

    def exists(self, name: str) -> bool:
        return any(k == name for k in self.backend.list(name))

    def size(self, name: str) -> int | None:
        if self.capabilities.details is not None:
            return next((i.size for i in self.capabilities.details.list_details(name) if i.key == name), None)
        if not self.exists(name):
            return None
        total = 0
        try:
            with self.backend.fetch(name) as stream:
                while piece := stream.read(1 << 20):
                    total += len(piece)
        except KeyNotFound:
            return None
        return total

    def delete(self, name: str) -> None:
        self.backend.delete(name)

    def put(self, name: str, data: bytes) -> None:
        self.backend.upload(name, io.BytesIO(data))

    def get(self, name: str) -> bytes:
        with self.backend.fetch(name) as stream:
            return read_exactly(stream, _MAX_RECORD_BYTES + 1)

    def list(self, prefix: str) -> Iterator[str]:
        return self.backend.list(prefix)
