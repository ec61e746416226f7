"""Prefetch: as a fetch goes on and when it ends, load what the same consumer will ask for next.

A lagging consumer reads a partition front to back, and the broker reopens a stream for every fetch request.
When a stream's reader reaches chunk k (moving on to it, or closing there), the chunks after k, up to
``fetch.chunk.cache.prefetch.max.size`` bytes, are brought into the chunk cache in the background. When the
segment ends before the budget does, the prefetch goes on into the **next segment of the same partition** (the
``NextSegmentFinder`` finds it by listing the partition's manifests, and loads its first indexes ahead), so a
consumer crossing a segment border does not stall on a cold first chunk. Aiven's prefetch stops at the border.

Prefetch runs on its own small pool and, with a fetch rate limit, yields to readers a broker thread waits for.
It is best effort: a failure is logged and ends that prefetch, it never reaches a reader.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor
from typing import Protocol

from rsm.fetch.chunk_cache import MAX_RUN_CHUNKS, ChunkCache
from rsm.fetch.source import SegmentSource

log = logging.getLogger(__name__)


class FollowingSegments(Protocol):
    """Where prefetch goes on at a segment's end (``rsm.fetch.next_segment.NextSegmentFinder``)."""

    def next_source(self, src: SegmentSource) -> SegmentSource | None:
        """The partition's segment after ``src``, or None after its last one."""
        ...


class Prefetcher:
    """Schedules background loads into a ``ChunkCache`` after each read."""

    def __init__(self, cache: ChunkCache, max_bytes: int, executor: Executor, following: FollowingSegments) -> None:
        self.cache = cache
        self.max_bytes = max_bytes
        self.executor = executor
        self.following = following
        self._lock = threading.Lock()
        self.runs = 0
        self.chunks = 0
        self.cross_segment = 0
        self.failures = 0
        # Per segment copy: the furthest chunk read whose run has not started yet. A reader reports every chunk
        # it moves on to; with tiny chunks that is thousands of reports, and they must not become thousands of
        # runs (each holding its own plan) queued behind each other: reports merge into the one waiting run.
        self._waiting: dict[str, int] = {}

    def after_read(self, src: SegmentSource, last_chunk_id: int) -> None:
        """A reader is done up to ``last_chunk_id`` (included, possibly still loading)."""
        if self.max_bytes <= 0:
            return
        with self._lock:
            queued = src.cache_id in self._waiting
            self._waiting[src.cache_id] = max(last_chunk_id, self._waiting.get(src.cache_id, -1))
        if queued:
            return
        try:
            self.executor.submit(self._run_waiting, src)
        except RuntimeError:  # the plugin is closing: nothing to prefetch for
            with self._lock:
                self._waiting.pop(src.cache_id, None)

    def _run_waiting(self, src: SegmentSource) -> None:
        with self._lock:
            last = self._waiting.pop(src.cache_id)
        self._run(src, last + 1)

    def _run(self, src: SegmentSource, first_id: int) -> None:
        budget = self.max_bytes
        current: SegmentSource | None = src
        with self._lock:
            self.runs += 1
        try:
            while current is not None and budget > 0:
                index = current.index
                chunk_size = max(1, index.original_chunk_size)
                horizon = min(index.chunk_count - 1, first_id + -(-budget // chunk_size) - 1, first_id + MAX_RUN_CHUNKS)
                for chunk_id in range(first_id, horizon + 1):
                    chunk = index.chunk(chunk_id)
                    budget -= chunk.original_size
                    if self.cache.ensure_cached(current, chunk, horizon, background=True):
                        with self._lock:
                            self.chunks += 1
                if budget <= 0 or horizon < index.chunk_count - 1:  # spent, or the per-run chunk cap was hit
                    break
                current = self.following.next_source(current)
                if current is not None and not current.has_chunks:
                    break  # an Iceberg-mode segment: no chunks to load ahead (its indexes were)
                first_id = 0
                if current is not None:
                    with self._lock:
                        self.cross_segment += 1
        except Exception as e:  # best effort: the reader will load what prefetch could not
            with self._lock:
                self.failures += 1
            log.warning("prefetch after %s stopped: %s: %s", src.meta.describe(), type(e).__name__, e)

    def stats(self) -> dict[str, float]:
        with self._lock:
            return {
                "prefetch-runs-total": self.runs,
                "prefetch-chunks-total": self.chunks,
                "prefetch-cross-segment-total": self.cross_segment,
                "prefetch-failures-total": self.failures,
                "prefetch-hits-total": self.cache.prefetch_hits,
            }
