"""The chunk cache: where every decoded chunk of a fetch comes from.

Three places can hold a chunk, checked in this order:
1. the memory tier: decoded chunks in pooled buffers, bounded in bytes, for the hottest reads (a warm fetch hands
   out the tier's own buffer: no copy, no allocation);
2. the disk tier (optional, ``fetch.chunk.cache.class=disk``): chunks as stored remotely, still compressed and
   encrypted, kept across restarts (see ``disk_store``);
3. the object store, read with **coalesced** ranged GETs: the chunks that follow the one asked for, up to the
   reader's horizon and ``fetch.coalesce.max.bytes``, come in the same GET, so a broker that reopens a stream
   every 1 MiB costs one GET per 16 MiB instead of one or more per chunk.

The parts: ``coalescing_fetcher`` makes the GETs, ``chunk_decoder`` turns stored bytes into original ones, and
this module keeps the two tiers and decides what goes where. Single flight (``single_flight``) at both levels:
a chunk is decoded once however many readers want it, and a chunk that is part of a GET in flight is not
requested again. Chunks that a coalesced GET brought beyond the one asked for are decoded in the background into
the memory tier, so a stream closed early (as the broker does every fetch) throws nothing away. A failed load is
never cached.

Cache keys carry the segment's ``cache_id``, made from its manifest (the data key's AAD, or the manifest's
CRC-32C without encryption): a segment id copied again after a failed copy has new objects and a new manifest,
so it can never be served the old bytes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Protocol

from backends.base import RangeReader
from chunking.buffer_pool import ChunkBuffer, ChunkBufferPool
from chunking.chunk_index import Chunk
from rsm.errors import CorruptDataException
from rsm.fetch.chunk_decoder import ChunkDecoder
from rsm.fetch.coalescing_fetcher import ChunkKey, CoalescingFetcher, StoredChunk
from rsm.fetch.disk_store import DiskChunkStore
from rsm.fetch.lru import TimedLru, wait_for
from rsm.fetch.rate_limit import RateLimiter
from rsm.fetch.source import SegmentSource


def _retain(buf: ChunkBuffer) -> None:
    buf.retain()


def _release(buf: ChunkBuffer) -> None:
    buf.release()


def _buffer_size(buf: ChunkBuffer) -> int:
    """The memory a cached chunk holds: its whole buffer, however short the chunk (a manifest of 1-byte chunks
    must not make the tier hold millions of buffers)."""
    return buf.capacity


@dataclass(frozen=True)
class SuppliedBuffers:
    """A pool for the chunk cache to decode into, from a transport (the sidecar's shared memory): the memory tier
    keeps at most ``max_cached_bytes`` of it (None: as configured), leaving the rest to fetches in flight."""

    pool: ChunkBufferPool
    max_cached_bytes: int | None = None


class ChunkBufferSupply(Protocol):
    """What a transport hands the plugin, before ``configure()``, to decode fetched chunks into its memory."""

    def chunk_buffers(self, buffer_size: int) -> SuppliedBuffers | None:
        """Asked once, while ``configure()`` builds the read path, for buffers of ``buffer_size`` bytes (the
        ``chunk.size``); None lets the plugin allocate its own."""
        ...


MAX_RUN_CHUNKS = 1024
"""At most this many chunks in one coalesced GET, whatever the chunk size: a run's bookkeeping stays small even
for a manifest of a million tiny chunks."""


@dataclass(frozen=True)
class ChunkCacheSettings:
    """How big the tiers are and how the store is read."""

    memory_bytes: int
    retention_s: float | None
    coalesce_bytes: int
    get_timeout_s: float
    max_cached_bytes: int | None = None  # a transport's lower bound on the memory tier


class ChunkCache:
    """Decoded chunks for every reader of the plugin: the memory tier, the optional disk tier, coalesced GETs.

    ``buffers`` is the pool every chunk is decoded into (the plugin's own, or one a transport supplied, such
    as the sidecar's shared memory); the memory tier keeps chunks in those buffers."""

    def __init__(
        self,
        ranges: RangeReader,
        buffers: ChunkBufferPool,
        settings: ChunkCacheSettings,
        background: Executor,
        *,
        disk: DiskChunkStore | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.buffers = buffers
        memory_bytes = settings.memory_bytes
        capacity = memory_bytes if settings.max_cached_bytes is None else min(memory_bytes, settings.max_cached_bytes)
        self.memory: TimedLru[ChunkKey, ChunkBuffer] = TimedLru(
            "chunk", capacity, settings.retention_s, weigher=_buffer_size, on_store=_retain, on_drop=_release
        )
        self.disk = disk
        self.coalesce_bytes = settings.coalesce_bytes
        # Decoded bytes a GET may put in the memory tier ahead of any reader: a quarter of the configured tier,
        # so what is decoded ahead is still there when the reader comes. With a disk tier the rest of the run
        # waits there, still encoded.
        self.decode_ahead_bytes = memory_bytes // 4
        # A tier too small for one of our buffers keeps nothing: decoding ahead into it is waste.
        self._tier_holds_chunks = capacity >= buffers.buffer_size
        self.get_timeout_s = settings.get_timeout_s
        self.fetcher = CoalescingFetcher(
            ranges, settings.coalesce_bytes, settings.get_timeout_s, background, rate_limiter
        )
        self.decoder = ChunkDecoder()
        self._lock = threading.Lock()
        self._prefetched: set[ChunkKey] = set()
        self.disk_hits = 0
        self.prefetch_hits = 0

    @property
    def stored_buffers(self) -> ChunkBufferPool:
        """The pool the GETs read into."""
        return self.fetcher.buffers

    # --- reading -------------------------------------------------------------------------------------------

    def load(
        self,
        src: SegmentSource,
        chunk: Chunk,
        horizon: int,
        planned: Callable[[], None] = lambda: None,
    ) -> ChunkBuffer:
        """The decoded chunk in a buffer the caller holds a reference to (and must ``release``). ``horizon`` is
        the last chunk id the reader may want: a coalesced GET never reaches past it. ``planned`` is called once
        the chunk's source is settled (cached, or claimed by a GET in flight) and before any I/O: a stream uses
        it to plan its chunks in order, so its first load, not a read-ahead one, decides the coalesced range.

        A warm hit hands out the memory tier's own buffer (one more reference, no copy).

        Each call counts once: a hit when the chunk was in the memory tier or already on its way (another
        reader's load, or a coalesced GET in flight, as a Caffeine async cache counts a pending entry), a miss
        when this call starts the read from the store or the disk tier."""
        key = (src.cache_id, chunk.id)
        for attempt in range(3):
            buf = self._from_memory(key, count_miss=False, count_hit=attempt == 0)
            if buf is not None:
                planned()
                return buf
            future, mine = self.memory.claim(key)
            if mine:
                if attempt == 0:
                    self.memory.count(hit=self.fetcher.in_flight(key))
                return self._load_claimed(src, chunk, horizon, future, planned)
            if attempt == 0:
                self.memory.count(hit=True)
            planned()
            wait_for(future, self.get_timeout_s, src.what(chunk))  # then take it from the tier
        # Loaded by others but gone again at once (a tier smaller than the readers' working set): read it alone.
        buf = self.buffers.take(chunk.original_size)
        try:
            self._load_into(src, chunk, horizon, buf.view, planned)
        except BaseException:
            buf.release()
            raise
        return buf

    def lookup(self, src: SegmentSource, chunk: Chunk) -> ChunkBuffer | None:
        """The decoded chunk when the memory tier has it (a reference the caller must ``release``), else None
        without counting a miss: the caller then loads it, and the load counts."""
        return self._from_memory((src.cache_id, chunk.id), count_miss=False)

    def _from_memory(self, key: ChunkKey, count_miss: bool, count_hit: bool = True) -> ChunkBuffer | None:
        """The memory tier's buffer for ``key`` with one more reference for the caller, or None."""
        buf = self.memory.get_with(key, _retain, count_miss=count_miss, count_hit=count_hit)
        if buf is not None and count_hit:
            self._note_hit(key)
        return buf

    def _load_claimed(
        self, src: SegmentSource, chunk: Chunk, horizon: int, future: Future[ChunkBuffer], planned: Callable[[], None]
    ) -> ChunkBuffer:
        key = (src.cache_id, chunk.id)
        started = time.perf_counter_ns()
        buf = self.buffers.take(chunk.original_size)
        try:
            self._load_into(src, chunk, horizon, buf.view, planned)
        except BaseException as e:
            planned()
            buf.release()
            self.memory.finish(key, future, None, e, started)
            raise
        self.memory.put(key, buf)
        self.memory.finish(key, future, buf, None, started, store=False)
        return buf

    def ensure_cached(self, src: SegmentSource, chunk: Chunk, horizon: int, background: bool = True) -> bool:
        """Bring a chunk into the cache without a reader (prefetch); False when it was there or on its way."""
        key = (src.cache_id, chunk.id)
        if chunk.original_size > self.buffers.buffer_size:
            return False  # bigger than our chunks (a foreign manifest): never allocated ahead of a reader
        if self.disk is None and not self._tier_holds_chunks:
            return False  # nowhere to keep it: a chunk decoded now would be thrown away at once
        if self.memory.contains(key) or self.memory.in_flight(key) or self.fetcher.in_flight(key):
            return False
        if self.disk is not None and self.disk.contains(src.cache_id, chunk.id):
            return False
        with self._stored(src, chunk, horizon, background) as stored:
            if self._tier_holds_chunks:  # else the GET's settling put it in the disk tier, still encoded
                self._decode_ahead(src, chunk, stored.data, prefetched=True)
        return True

    def _load_into(
        self, src: SegmentSource, chunk: Chunk, horizon: int, out: memoryview, planned: Callable[[], None]
    ) -> None:
        with self._stored(src, chunk, horizon, background=False, planned=planned) as stored:
            try:
                self.decoder.decode(src, chunk, stored.data, out)
            except CorruptDataException:
                if not stored.from_disk:
                    raise
                # A bad disk entry (bit rot, a torn write): drop it and read the chunk from the object store.
                assert self.disk is not None
                self.disk.drop(src.cache_id, chunk.id)
                with self._stored(src, chunk, chunk.id, background=False, use_disk=False) as again:
                    self.decoder.decode(src, chunk, again.data, out)

    # --- stored bytes: disk tier or a coalesced GET -------------------------------------------------------------

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until no GET is in flight and every fetched chunk is settled (on disk, in memory): for tools
        and tests that look at the cache itself; readers never need it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not len(self.fetcher.flights):
                return True
            time.sleep(0.005)
        return False

    def _stored(
        self,
        src: SegmentSource,
        chunk: Chunk,
        horizon: int,
        background: bool,
        use_disk: bool = True,
        planned: Callable[[], None] = lambda: None,
    ) -> StoredChunk:
        """The chunk's stored bytes: from a GET in flight, the disk tier, or a new GET."""
        # In flight first, then disk: a chunk lands only after it is on disk, so in this order a chunk whose GET
        # just finished is found in one place or the other.
        joined = self.fetcher.join(src, chunk, planned)
        if joined is not None:
            return joined
        if use_disk and self.disk is not None and self.disk.contains(src.cache_id, chunk.id):
            planned()  # the next chunk may plan now: reading this one from disk starts no GET
            data = self.disk.get(src.cache_id, chunk.id)
            if data is not None:
                with self._lock:
                    self.disk_hits += 1
                return StoredChunk(data, from_disk=True)
        run = self._plan_run(src, chunk, horizon) if use_disk else [chunk]
        return self.fetcher.fetch(src, run, background, self._settle_plan, self._settle, planned)

    def _plan_run(self, src: SegmentSource, first: Chunk, horizon: int) -> list[Chunk]:
        """``first`` and the chunks after it that are nowhere yet, up to the horizon and the coalescing size."""
        run = [first]
        total = first.transformed_size
        decoded = 0  # of the chunks after the first: without a disk tier, only what may be decoded ahead
        last = min(horizon, src.index.chunk_count - 1, first.id + MAX_RUN_CHUNKS - 1)
        if first.original_size > self.buffers.buffer_size:
            return run  # a chunk bigger than ours (a foreign or hostile manifest): alone, decoded by its reader
        for chunk_id in range(first.id + 1, last + 1):
            chunk = src.index.chunk(chunk_id)
            key = (src.cache_id, chunk_id)
            if total + chunk.transformed_size > self.coalesce_bytes:
                break
            if self.disk is None and decoded + chunk.original_size > self.decode_ahead_bytes:
                break
            if self.memory.contains(key) or self.memory.in_flight(key):
                break
            if self.disk is not None and self.disk.contains(src.cache_id, chunk_id):
                break
            run.append(chunk)
            total += chunk.transformed_size
            decoded += chunk.original_size
        return run

    def _settle_plan(self, run: Sequence[Chunk]) -> list[bool | None]:
        """For each chunk of a fetched run: decode it ahead (the chunks after the first, within a quarter of the
        tier), only put it on disk (False), or nothing (None)."""
        plan: list[bool | None] = []
        ahead = 0
        for i, c in enumerate(run):
            decode = self._tier_holds_chunks and i > 0 and ahead + c.original_size <= self.decode_ahead_bytes
            ahead += c.original_size if decode else 0
            plan.append(decode if decode or self.disk is not None else None)
        return plan

    def _settle(self, src: SegmentSource, chunk: Chunk, stored: memoryview, decode: bool) -> None:
        """Keep a fetched chunk: decoded in the memory tier first (a reader may be waiting), then on disk."""
        if decode:
            self._decode_ahead(src, chunk, stored, prefetched=False)
        if self.disk is not None:
            self.disk.put(src.cache_id, chunk.id, stored, src.segment_key)

    def _decode_ahead(self, src: SegmentSource, chunk: Chunk, stored: bytes | memoryview, prefetched: bool) -> None:
        """Decode a chunk nobody is waiting for yet into the memory tier; a reader that claimed it first wins."""
        key = (src.cache_id, chunk.id)
        future = self.memory.claim_missing(key)
        if future is None:  # a reader got there first (or it is still cached): decoding again is waste
            return
        started = time.perf_counter_ns()
        buf = self.buffers.take(chunk.original_size)
        try:
            self.decoder.decode(src, chunk, stored, buf.view)
        except BaseException as e:
            buf.release()
            self.memory.finish(key, future, None, e, started)
            future.exception()  # observed: nobody else may be waiting
            return
        self.memory.put(key, buf)
        buf.release()  # the tier keeps its own reference
        self.memory.finish(key, future, buf, None, started, store=False)
        if prefetched:
            with self._lock:
                self._prefetched.add(key)

    # --- bookkeeping ---------------------------------------------------------------------------------------

    def _note_hit(self, key: ChunkKey) -> None:
        if self._prefetched:
            with self._lock:
                if key in self._prefetched:
                    self._prefetched.discard(key)
                    self.prefetch_hits += 1

    def forget_segment(self, segment_key: str) -> None:
        """Drop a deleted segment's chunks (of every copy of it) from both tiers."""
        prefix = segment_key + "@"
        self.memory.invalidate_where(lambda k: k[0].startswith(prefix))
        if self.disk is not None:
            self.disk.drop_segment(segment_key)

    def stats(self) -> dict[str, float]:
        stats = self.memory.stats()
        stats.update(self.fetcher.stats())
        with self._lock:
            stats["disk-cache-hits-total"] = self.disk_hits
            stats["prefetch-hits-total"] = self.prefetch_hits
        stats["integrity-failures-total"] = self.decoder.integrity_failures
        if self.disk is not None:
            stats["disk-cache-size-total"] = len(self.disk)
            stats["disk-cache-bytes-total"] = self.disk.volume
        return stats
