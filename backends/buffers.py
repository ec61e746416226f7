"""The memory a backend's uploads hold at once: one byte budget shared by every upload of the backend.

An upload reserves a whole part (block, chunk) before it reads one from its source and gives back what the part
did not use once it is read; the rest goes back when the part has been sent. Waiters are served first come,
first served, so a large part is never starved by small ones. Ten copier threads uploading at once therefore hold
at most the budget between them, not ten times their own read-ahead.
"""

from __future__ import annotations

import collections
import threading

from backends.retry import Deadline

_POLL_S = 0.1


class UploadBuffers:
    """A first-come, first-served byte budget. ``peak`` is the most ever held at once (for tests and metrics)."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"an upload buffer budget must be positive, not {capacity}")
        self.capacity = capacity
        self._held = 0
        self._peak = 0
        self._lock = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    @property
    def peak(self) -> int:
        with self._lock:
            return self._peak

    def reserve(self, size: int, deadline: Deadline | None = None, what: str = "upload") -> None:
        """Wait until ``size`` bytes are free and take them. ``size`` above the capacity is refused (the backend's
        configuration keeps parts within it); ``deadline`` raises ``DeadlineExceeded`` naming ``what``."""
        if size > self.capacity:
            raise ValueError(f"{what}: a part of {size} bytes does not fit the upload buffer budget of {self.capacity}")
        if size <= 0:
            return
        ticket = object()
        with self._lock:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or self._held + size > self.capacity:
                    if deadline is not None:
                        deadline.check(f"{what}: waiting for upload buffer memory")
                    self._lock.wait(_POLL_S)
                self._held += size
                self._peak = max(self._peak, self._held)
            finally:
                self._queue.remove(ticket)
                self._lock.notify_all()

    def release(self, size: int) -> None:
        """Give back ``size`` bytes taken by ``reserve``."""
        if size <= 0:
            return
        with self._lock:
            if size > self._held:
                raise ValueError(f"released {size} bytes of upload buffers, more than the {self._held} held")
            self._held -= size
            self._lock.notify_all()
