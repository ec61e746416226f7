"""The sidecar's starts and liveness as one JMX-shaped row, for the Prometheus endpoint the sidecar serves.

The JVM shim is the one that sees a sidecar die and starts the next (``SidecarTransport.java``), so it keeps
these on a bean of its own; a sidecar could not count the restarts of its predecessors. The shim passes its
counts to each sidecar it starts (``--starts``, ``--restart-failures``), and this row carries them to
Prometheus. ``starts-total`` therefore keeps growing across sidecar restarts (a restart is a counter increase,
not a reset) and only goes back to 1 when the broker restarts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rsm.metrics.catalog import DOMAIN, SIDECAR_TYPE
from rsm.metrics.snapshot import MetricRow


class SidecarHealth:
    """What one sidecar process knows of itself: which start it is, and when it last answered the shim."""

    def __init__(self, starts: int = 1, restart_failures: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        if starts < 1 or restart_failures < 0:
            raise ValueError(f"starts must be >= 1 and restart failures >= 0, got {starts} and {restart_failures}")
        self.starts = starts
        self.restart_failures = restart_failures
        self._clock = clock
        self._lock = threading.Lock()
        self._last_reply = clock()  # being ready is the first answer the shim waits for

    def replied(self) -> None:
        """A request of the shim was answered."""
        now = self._clock()
        with self._lock:
            self._last_reply = now

    def rows(self) -> list[MetricRow]:
        with self._lock:
            age = self._clock() - self._last_reply
        values = {
            "starts-total": float(self.starts),
            "restarts-total": float(self.starts - 1),
            "restart-failures-total": float(self.restart_failures),
            "up": 1.0,  # this process answers the scrape; a dead one answers nothing (Prometheus: up == 0)
            "last-reply-age-seconds": max(0.0, age),
        }
        return [MetricRow(DOMAIN, SIDECAR_TYPE, (), values)]
