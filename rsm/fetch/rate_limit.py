"""A token bucket that bounds bytes per second across every thread of the process.

Aiven's limiter lets one read consume the whole bucket, whose capacity is a full second of rate, and users
measure throughput above the limit (#709). This one lets a caller go into debt and sleeps it off: the bytes
that pass in any window of T seconds are at most ``rate * T`` plus one small burst (a tenth of a second of
rate) plus one request, so over a 10-second window the error is about 1%.

Readers that a broker thread waits for have priority over background work (prefetch): a background caller
waits while any foreground caller is waiting, so prefetch never delays a fetch.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

BURST_SECONDS = 0.1


class RateLimiter:
    """Shared by all uploads (or all remote reads) of one plugin instance."""

    def __init__(
        self,
        bytes_per_second: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second <= 0:
            raise ValueError(f"rate must be positive, got {bytes_per_second}")
        self.rate = float(bytes_per_second)
        self.capacity = max(1.0, self.rate * BURST_SECONDS)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.capacity
        self._last = clock()
        self._lock = threading.Condition()
        self._foreground_waiting = 0
        self.wait_ns = 0
        self.throttled_bytes = 0
        self.bytes_total = 0

    def acquire(self, n: int, background: bool = False) -> None:
        """Take ``n`` tokens, sleeping as long as the bucket is in debt."""
        if n <= 0:
            return
        with self._lock:
            if background:
                while self._foreground_waiting:
                    self._lock.wait(0.05)
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            debt = -self._tokens
            self.bytes_total += n
            if debt > 0:
                self.throttled_bytes += n
                if not background:
                    self._foreground_waiting += 1
        if debt <= 0:
            return
        started = time.perf_counter_ns()
        try:
            self._sleep(debt / self.rate)
        finally:
            with self._lock:
                self.wait_ns += time.perf_counter_ns() - started
                if not background:
                    self._foreground_waiting -= 1
                    self._lock.notify_all()

    def stats(self) -> dict[str, float]:
        with self._lock:
            return {
                "throttle-wait-time-total": self.wait_ns,
                "throttled-bytes-total": self.throttled_bytes,
                "rate-limited-bytes-total": self.bytes_total,
            }


class ThrottledReader(io.RawIOBase):
    """A readable that pays the limiter for every byte it hands to an upload."""

    def __init__(self, inner: Any, limiter: RateLimiter | None) -> None:
        super().__init__()
        self.inner = inner
        self.limiter = limiter
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.inner.readinto(b) or 0
        self.count += n
        if self.limiter is not None:
            self.limiter.acquire(n)
        return n


def throttled(data: bytes, limiter: RateLimiter | None) -> BinaryIO:
    """``data`` as an upload source that pays ``limiter`` (small uploads: indexes, manifests)."""
    if limiter is None:
        return io.BytesIO(data)
    return io.BufferedReader(ThrottledReader(io.BytesIO(data), limiter))  # type: ignore[return-value]
