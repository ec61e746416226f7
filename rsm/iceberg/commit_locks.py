"""A lock per table for the commits of one process, so that its own commits to a table never race each other.

Copies write their data files in parallel; only the commit step (load the table's current metadata, plan what the
commit removes, commit) holds the table's lock. Conflicts then come only from other writers (another broker,
maintenance, another engine), which the commit's retries still handle. An entry lives while some thread holds or
waits for its lock, so the map holds at most one entry per thread however many tables come and go.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TableLocks"]


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0  # threads holding or waiting for ``lock``


class TableLocks:
    """Locks by table identifier; thread-safe. Hold one table's lock at a time (no order is imposed)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._entries: dict[tuple[str, ...], _Entry] = {}

    @contextmanager
    def hold(self, ident: tuple[str, ...]) -> Iterator[None]:
        """Hold the lock of table ``ident`` for the block."""
        key = tuple(ident)
        with self._mutex:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._mutex:
                entry.users -= 1
                if entry.users == 0:
                    del self._entries[key]

    def __len__(self) -> int:
        """Tables whose lock is held or waited for now."""
        with self._mutex:
            return len(self._entries)
