"""The lazy streams of ``fetch_log_segment``: which chunks a range needs, and in what order they are loaded.

A stream's chunks load in parallel on the transform pool, at most ``fetch.readahead.chunks`` ahead of its reader.
Each load goes through the chunk cache, which coalesces the chunks after a missing one into one ranged GET. For
that GET to start from the stream's first missing chunk, and not from whichever read-ahead load a thread picks up
first, the loads are planned in order: each waits until the chunk before it is planned (its source settled:
cached, or claimed by a GET in flight), which involves no I/O. ``StreamPlan`` keeps that handshake for one stream.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor

from chunking.buffer_pool import ChunkBuffer
from chunking.chunk_index import Chunk
from rsm.errors import RemoteStorageException
from rsm.fetch.chunk_cache import ChunkCache
from rsm.fetch.prefetch import Prefetcher
from rsm.fetch.source import SegmentSource, SegmentSources
from rsm.fetch.stream import SegmentStream
from rsm.metadata import RemoteLogSegmentMetadata

PLANNING_WAIT_S = 1.0
"""At most this long a read-ahead load waits for the previous chunk's plan: a safety net, since planning itself
does no I/O."""


class StreamPlan:
    """One stream's ``ChunkSupply``: loads through the chunk cache, each after the previous chunk is planned.

    The stream's first chunk (``first_id``) waits for nothing, and a chunk found in the memory tier counts as
    planned, so nobody waits for it. ``horizon`` is the stream's last chunk: no coalesced GET reaches past it."""

    def __init__(
        self, cache: ChunkCache, src: SegmentSource, first_id: int, horizon: int, prefetcher: Prefetcher | None
    ) -> None:
        self._cache = cache
        self._src = src
        self._first_id = first_id
        self._horizon = horizon
        self._prefetcher = prefetcher
        self._planned: set[int] = set()
        self._waiting: dict[int, threading.Event] = {}  # an event only for a chunk somebody waits for
        self._lock = threading.Lock()

    def _mark_planned(self, chunk_id: int) -> None:
        with self._lock:
            self._planned.add(chunk_id)
            event = self._waiting.pop(chunk_id, None)
        if event is not None:
            event.set()

    def load(self, chunk: Chunk) -> ChunkBuffer:
        previous = chunk.id - 1
        with self._lock:
            event = None
            if chunk.id > self._first_id and previous not in self._planned:
                event = self._waiting.setdefault(previous, threading.Event())
        if event is not None:
            event.wait(PLANNING_WAIT_S)
        try:
            return self._cache.load(self._src, chunk, self._horizon, lambda: self._mark_planned(chunk.id))
        finally:
            self._mark_planned(chunk.id)

    def lookup(self, chunk: Chunk) -> ChunkBuffer | None:
        return self._cache.lookup(self._src, chunk)

    def found(self, chunk: Chunk) -> None:
        self._mark_planned(chunk.id)

    def reached(self, chunk_id: int) -> None:
        if self._prefetcher is not None:
            self._prefetcher.after_read(self._src, chunk_id)


class SegmentReader:
    """Opens the stream over a range of a segment: checks the range against the manifest's size, finds the
    chunks that cover it and hands them to a ``SegmentStream`` with a ``StreamPlan``. ``executor`` runs the
    streams' loads (the transform pool); ``prefetcher`` hears how far each reader got."""

    def __init__(
        self,
        sources: SegmentSources,
        cache: ChunkCache,
        executor: Executor,
        readahead: int,
        prefetcher: Prefetcher | None = None,
    ) -> None:
        self.sources = sources
        self.cache = cache
        self.executor = executor
        self.readahead = readahead
        self.prefetcher = prefetcher

    def open(
        self,
        meta: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None,
        src: SegmentSource | None = None,
    ) -> SegmentStream:
        """Bytes ``[start_position, end_position]`` of the segment (inclusive; None: to its end), decoded lazily;
        ``src``: the segment's source when the caller has it already."""
        if src is None:
            src = self.sources.source(meta)
        size = src.index.original_file_size
        if start_position < 0:
            raise RemoteStorageException(f"invalid start position {start_position} for {meta.describe()}")
        if end_position is not None and end_position < start_position:
            raise RemoteStorageException(
                f"invalid range [{start_position}, {end_position}] for {meta.describe()}: end before start"
            )
        if start_position >= size:
            if start_position == size:  # nothing left to read, e.g. position = size of an empty segment
                empty = StreamPlan(self.cache, src, 0, -1, None)
                return SegmentStream([], 0, -1, empty, self.executor, 0, meta.describe())
            raise RemoteStorageException(
                f"start position {start_position} is past the end of {meta.describe()}, which has {size} bytes"
            )
        end = size - 1 if end_position is None else min(end_position, size - 1)
        chunks = src.index.chunks_for_range(start_position, end)
        plan = StreamPlan(self.cache, src, chunks[0].id, chunks[-1].id, self.prefetcher)
        return SegmentStream(chunks, start_position, end, plan, self.executor, self.readahead, meta.describe())
