"""Request, error and byte counters for the cloud backends.

Every request a backend sends to its store is counted under a stable name (``get-object-requests``,
``upload-part-requests``...) and every failed attempt under its error class (``errors-throttling``,
``errors-server``...), the same vocabulary as Aiven's ``s3-client-metrics`` / ``gcs-client-metrics`` /
``azure-blob-storage-client-metrics`` so dashboards map one to one. The counters are kept here, not in a
metrics library, because the metrics issue decides how they are exported: it can poll ``snapshot()`` or
subscribe with ``add_listener`` and forward every increment (with request latencies) to its own registry
without the backends changing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# One listener call per event: (counter name, increment, request latency in seconds or None).
Listener = Callable[[str, int, "float | None"], None]

ERROR_KINDS = ("throttling", "server", "configured-timeout", "io", "other")
"""The error classes, named after Aiven's: retriable ones first, ``other`` for everything not retried."""


class BackendMetrics:
    """Thread-safe monotonically increasing counters plus request latency totals.

    Counter names:

    - ``<operation>-requests``: requests sent (every attempt, retries included)
    - ``<operation>-time-total-ms`` / ``<operation>-time-max-ms``: summed and slowest attempt latency
    - ``errors-<kind>`` for ``kind`` in ``ERROR_KINDS``: failed attempts by cause
    - ``bytes-uploaded`` / ``bytes-downloaded``: payload bytes moved
    """

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        """Receive every increment from now on (the metrics issue hooks its registry in here)."""
        with self._lock:
            self._listeners.append(listener)

    def _add(self, name: str, n: int, latency: float | None = None) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(name, n, latency)
            except Exception:  # noqa: BLE001 - a broken exporter must never fail a storage call
                pass

    def _observe(self, operation: str, seconds: float) -> None:
        ms = int(seconds * 1000)
        with self._lock:
            self._counts[f"{operation}-time-total-ms"] = self._counts.get(f"{operation}-time-total-ms", 0) + ms
            key = f"{operation}-time-max-ms"
            if ms > self._counts.get(key, 0):
                self._counts[key] = ms

    @contextmanager
    def request(self, operation: str) -> Iterator[None]:
        """Count one request of ``operation`` and time it (the body is one attempt)."""
        start = time.monotonic()
        try:
            yield
        finally:
            elapsed = time.monotonic() - start
            self._observe(operation, elapsed)
            self._add(f"{operation}-requests", 1, elapsed)

    def count_request(self, operation: str) -> None:
        """Count a request whose latency is not meaningful (e.g. a lazily paged listing)."""
        self._add(f"{operation}-requests", 1)

    def error(self, kind: str) -> None:
        """Count one failed attempt of class ``kind`` (one of ``ERROR_KINDS``)."""
        self._add(f"errors-{kind}", 1)

    def bytes_uploaded(self, n: int) -> None:
        if n:
            self._add("bytes-uploaded", n)

    def bytes_downloaded(self, n: int) -> None:
        if n:
            self._add("bytes-downloaded", n)

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter; errors of every kind are present (0 when none happened)."""
        with self._lock:
            out = {f"errors-{k}": 0 for k in ERROR_KINDS}
            out.update(self._counts)
            return out

    def __repr__(self) -> str:
        return f"BackendMetrics({self.scope}, {self.snapshot()})"
