"""Copies the shim gave up on: cancelled in Python, and their objects removed, before the shim reports failure.

The broker treats a copy whose call failed (or timed out) as failed, and deletes it again later; a copy that
went on in the sidecar and finished afterwards would leave a complete segment the broker never lists. When the
shim abandons a copy it sends ``OP_CANCEL_COPY`` with the segment's metadata; ``CopyCancels.cancel`` marks the
segment cancelled (a copy request still on its way is then refused), waits a bounded time for a running copy to
stop, and removes every object of the segment. The answer says whether they are gone.

A copy is named by its segment id: the broker never runs two copies of one segment id. Cancelled ids are
remembered for ``REMEMBER_S`` seconds, longer than any request can wait in a socket.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rsm.errors import RemoteStorageException
from rsm.metadata import RemoteLogSegmentMetadata

T = TypeVar("T")
REMEMBER_S = 3600.0


class CopyRefused(RemoteStorageException):
    """A copy request arrived for a segment whose copy the shim had already cancelled."""


class CopyCancels:
    """The sidecar's copies in flight, by segment id, and the ones the shim cancelled. ``remove`` deletes every
    object of a segment (the manager's ``delete_log_segment_data``)."""

    def __init__(self, remove: Callable[[RemoteLogSegmentMetadata], None]) -> None:
        self._remove = remove
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}
        self._cancelled: dict[str, float] = {}

    def is_cancelled(self, segment_id: str) -> bool:
        with self._lock:
            return segment_id in self._cancelled

    def run(self, meta: RemoteLogSegmentMetadata, copy: Callable[[Callable[[], bool]], T]) -> T:
        """Run ``copy(cancelled)`` as the segment's copy in flight. A copy cancelled before it started is refused;
        one cancelled while it ran (or that completed after its cancel) has its objects removed."""
        seg = meta.remote_log_segment_id.id
        done = threading.Event()
        with self._lock:
            self._forget_old()
            if seg in self._cancelled:
                raise CopyRefused(f"copy of {meta.describe()} refused: the shim had cancelled it already")
            self._running[seg] = done
        try:
            return copy(lambda: self.is_cancelled(seg))
        finally:
            with self._lock:
                self._running.pop(seg, None)
                cancelled = seg in self._cancelled
            try:
                if cancelled:
                    self._remove(meta)  # the copy may have finished after its cancel: nothing of it may stay
            finally:
                done.set()

    def cancel(self, meta: RemoteLogSegmentMetadata, wait_s: float) -> None:
        """Cancel the segment's copy and remove its objects; raises ``RemoteStorageException`` when the copy does
        not stop within ``wait_s`` seconds (its objects are removed when it does)."""
        seg = meta.remote_log_segment_id.id
        with self._lock:
            self._forget_old()
            self._cancelled[seg] = time.monotonic()
            running = self._running.get(seg)
        if running is not None and not running.wait(wait_s):
            raise RemoteStorageException(
                f"the cancelled copy of {meta.describe()} did not stop within {wait_s:.0f} s (an upload call that "
                f"does not return); its objects are removed when it ends"
            )
        self._remove(meta)

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - REMEMBER_S
        for seg in [s for s, at in self._cancelled.items() if at < cutoff]:
            del self._cancelled[seg]
