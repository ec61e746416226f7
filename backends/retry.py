"""Bounded retries with jittered exponential backoff and deadlines, shared by the cloud backends.

The SDKs each have their own retry machinery with different defaults, error classes and no common way to
count what was retried. The backends switch SDK retries off and call through ``call_with_retry`` instead,
so every store gets the same policy: only throttling, 5xx, timeouts and connection errors are retried, at
most ``max_attempts`` times, never past the per-call timeout or the caller's overall deadline (an upload
can never hang forever), and every failed attempt is counted by its class in ``BackendMetrics``.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from backends.instrumentation import BackendMetrics

T = TypeVar("T")


class ErrorKind(enum.Enum):
    """Why an attempt failed; decides whether to retry and which error counter to bump."""

    NOT_FOUND = "not-found"
    INVALID_RANGE = "invalid-range"
    THROTTLING = "throttling"
    SERVER = "server"
    TIMEOUT = "configured-timeout"
    IO = "io"
    OTHER = "other"

    @property
    def retriable(self) -> bool:
        return self in (ErrorKind.THROTTLING, ErrorKind.SERVER, ErrorKind.TIMEOUT, ErrorKind.IO)

    @property
    def metric(self) -> str | None:
        """The ``errors-*`` counter; a missing key or a bad range is an answer, not an error."""
        if self in (ErrorKind.NOT_FOUND, ErrorKind.INVALID_RANGE):
            return None
        return self.value


class DeadlineExceeded(Exception):
    """The overall deadline of an operation passed (raised by ``Deadline.check``)."""


class Deadline:
    """A point in monotonic time after which an operation must give up; ``None`` seconds means never."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._at = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        return None if self._at is None else self._at - time.monotonic()

    def expired(self) -> bool:
        rem = self.remaining()
        return rem is not None and rem <= 0

    def check(self, what: str) -> None:
        if self.expired():
            raise DeadlineExceeded(f"{what}: deadline of {self.seconds:.1f} s exceeded")

    def earliest(self, seconds: float | None) -> Deadline:
        """The sooner of this deadline and ``seconds`` from now."""
        rem = self.remaining()
        if seconds is None:
            return self
        if rem is None or seconds < rem:
            return Deadline(seconds)
        return self


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try; backoff is full-jitter exponential, capped at ``backoff_max_s``."""

    max_attempts: int = 3
    backoff_s: float = 0.1
    backoff_max_s: float = 10.0
    call_timeout_s: float | None = None

    def pause(self, attempt: int, kind: ErrorKind) -> float:
        """Sleep before attempt ``attempt + 1``; throttling backs off twice as hard to let the store recover."""
        base = self.backoff_s * (2 if kind is ErrorKind.THROTTLING else 1)
        cap = min(self.backoff_max_s, base * (2 ** (attempt - 1)))
        return random.uniform(cap / 2, cap)


def call_with_retry(
    fn: Callable[[], T],
    *,
    operation: str,
    policy: RetryPolicy,
    classify: Callable[[BaseException], ErrorKind],
    metrics: BackendMetrics,
    deadline: Deadline | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn`` (one request of ``operation``) until it succeeds, fails for good, or time runs out.

    The last exception is re-raised unchanged (with a note saying how many attempts were made) so the
    backend can map it to ``KeyNotFound`` / ``InvalidRange`` / ``StorageBackendException``.
    """
    limit = (deadline or Deadline(None)).earliest(policy.call_timeout_s)
    attempt = 0
    while True:
        attempt += 1
        try:
            with metrics.request(operation):
                return fn()
        except Exception as e:
            kind = classify(e)
            if kind.metric is not None:
                metrics.error(kind.metric)
            if not kind.retriable:
                raise
            if attempt >= policy.max_attempts:
                e.add_note(f"gave up after {attempt} attempt(s) ({kind.value})")
                raise
            pause = policy.pause(attempt, kind)
            rem = limit.remaining()
            if rem is not None and rem <= pause:
                e.add_note(f"gave up after {attempt} attempt(s): call timeout / deadline reached")
                raise
            sleep(pause)
