"""The quarantine: what the plugin deletes on its own inference is moved aside for ``gc.quarantine.ms``, so it can
be restored, and purged for good after.

An item held is copied to ``<root><run>/<name relative to the store>``, a JSON record written beside it
(``.kts-held.json``), and only then is the original deleted: a failed copy deletes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from rsm.deletion.holding import Held, HoldingStore
from rsm.deletion.rules import Evidence
from rsm.errors import RemoteStorageException

RECORD_SUFFIX = ".kts-held.json"
DEFAULT_RETENTION_S = 7 * 86400.0


@dataclass
class RestoreReport:
    restored: list[Held] = field(default_factory=list)
    refused: list[tuple[Held, str]] = field(default_factory=list)


class Quarantine:
    """Items of ``store`` held under ``root`` for ``retention_s``."""

    def __init__(
        self,
        store: HoldingStore,
        root: str,
        retention_s: float = DEFAULT_RETENTION_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.root = root if root.endswith("/") else root + "/"
        self.retention_s = retention_s
        self.clock = clock

    def _relative(self, name: str) -> str:
        relative = getattr(self.store, "relative", None)
        return str(relative(name)) if relative is not None else name.lstrip("/")

    def hold(
        self,
        kind: str,
        items: Sequence[tuple[str, int | None]],
        evidence: Sequence[Evidence],
        run: str,
        topic: str | None = None,
    ) -> list[Held]:
        """Move each of ``items`` ((name, size)) aside; those gone meanwhile are left out of the answer."""
        out = []
        for name, size in items:
            location = f"{self.root}{run}/{self._relative(name)}"
            now = self.clock()
            try:
                self.store.copy(name, location)
            except FileNotFoundError:
                continue
            held = Held(
                name,
                location,
                size if size is not None else (self.store.size(location) or 0),
                kind,
                run,
                now,
                now + self.retention_s,
                topic,
                tuple(f"{e.signal}: {e.detail}" for e in evidence),
            )
            self.store.put(location + RECORD_SUFFIX, json.dumps(asdict(held)).encode())
            self.store.delete(name)
            out.append(held)
        return out

    def held(self, run: str | None = None, topic: str | None = None, key: str | None = None) -> list[Held]:
        out = []
        for name in self.store.list(self.root):
            if not name.endswith(RECORD_SUFFIX):
                continue
            try:
                raw = json.loads(self.store.get(name))
                raw["evidence"] = tuple(raw.get("evidence", ()))
                item = Held(**raw)
            except (ValueError, TypeError) as e:
                raise RemoteStorageException(
                    f"quarantine record {name} is unreadable ({e}); remove it or its item by hand"
                ) from e
            if run not in (None, item.run) or topic not in (None, item.topic) or key not in (None, item.original):
                continue
            out.append(item)
        return out

    def restore(self, items: Sequence[Held]) -> RestoreReport:
        report = RestoreReport()
        for item in items:
            if self.store.exists(item.original):
                report.refused.append((item, f"{item.original} exists: a live object is never overwritten"))
                continue
            self.store.copy(item.location, item.original)
            self._drop(item)
            report.restored.append(item)
        return report

    def purge(self, items: Sequence[Held]) -> None:
        for item in items:
            self._drop(item)

    def expired(self, now: float | None = None) -> list[Held]:
        now = self.clock() if now is None else now
        return [h for h in self.held() if h.until <= now]

    def _drop(self, item: Held) -> None:
        self.store.delete(item.location)
        self.store.delete(item.location + RECORD_SUFFIX)
