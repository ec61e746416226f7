"""The chunk cache: where every decoded chunk of a fetch comes from.

Three places can hold a chunk, checked in this order:
1. the memory tier: decoded chunks in pooled buffers, bounded in bytes, for the hottest reads (a warm fetch hands
   out the tier's own buffer: no copy, no allocation);
2. the disk tier (optional, ``fetch.chunk.cache.class=disk``): chunks as stored remotely, still compressed and
   encrypted, kept across restarts (see ``disk_store``);
3. the object store, read with **coalesced** ranged GETs: the chunks that follow the one asked for, up to the
   reader's horizon and ``fetch.coalesce.max.bytes``, come in the same GET, so a broker that reopens a stream
   every 1 MiB costs one GET per 16 MiB instead of one or more per chunk.

Single flight at both levels: a chunk is decoded once however many readers want it (they wait on the first
reader's future), and a chunk that is already part of a GET in flight is not requested again. Chunks that a
coalesced GET brought beyond the one asked for are decoded in the background into the memory tier, so a
stream closed early (as the broker does every fetch) throws nothing away. A failed load is never cached.

Cache keys carry the segment's ``cache_id``, made from its manifest (the data key's AAD, or the manifest's
CRC-32C without encryption): a segment id copied again after a failed copy has new objects and a new manifest,
so it can never be served the old bytes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import NoReturn, Protocol

from backends.base import InvalidRange, KeyNotFound, RangeReader, StorageBackendException
from chunking.buffer_pool import ChunkBuffer, ChunkBufferPool
from chunking.chunk_index import Chunk
from chunking.errors import ChunkingError
from chunking.transform import crc32c
from encryption.errors import DecryptionError
from rsm.errors import CorruptDataException, RemoteStorageException, storage_failure
from rsm.fetch.disk_store import DiskChunkStore
from rsm.fetch.lru import TimedLru, wait_for
from rsm.fetch.rate_limit import RateLimiter
from rsm.fetch.source import SegmentSource

ChunkKey = tuple[str, int]

MAX_RUN_CHUNKS = 1024
"""At most this many chunks in one coalesced GET, whatever the chunk size: the run's bookkeeping (a future per
chunk) stays small even for a manifest of a million tiny chunks."""


STORED_BUFFER_BYTES = 16 * 1024 * 1024
"""Pooled buffers for the stored bytes of coalesced GETs are at most this big (the default
``fetch.coalesce.max.bytes``); a larger GET gets memory of its own, as every GET did before the pool."""

STORED_BUFFERS_IDLE = 2
"""Idle stored-bytes buffers kept for the next GETs: a fresh 16 MiB buffer costs 4,096 page faults. Only GETs of
at least a quarter of a buffer use them, so a buffer in use is at least a quarter full."""


class _RunBytes:
    """The stored bytes one coalesced GET brought, shared by the chunks of its run.

    ``users`` counts who may still read them: each chunk's settling, plus every reader that took a chunk from the
    GET to decode it itself. The last one gives ``buffer`` back to the stored-bytes pool; nobody may read a view of
    it afterwards, which is why a reader counts itself in (under the cache's lock, while the chunk is still in
    flight, so the bytes are certainly alive) before it waits for the GET. Changed under the cache's lock only."""

    __slots__ = ("buffer", "users")

    def __init__(self, users: int) -> None:
        self.buffer: ChunkBuffer | None = None
        self.users = users


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


class ChunkCache:
    """Decoded chunks for every reader of the plugin: the memory tier, the optional disk tier, coalesced GETs.

    ``buffers`` is the pool every chunk is decoded into (the plugin's own, or one a transport supplied, such
    as the sidecar's shared memory); the memory tier keeps chunks in those buffers, at most ``memory_bytes``
    of them, or ``max_cached_bytes`` when the supplier of the buffers set that lower."""

    def __init__(
        self,
        ranges: RangeReader,
        buffers: ChunkBufferPool,
        memory_bytes: int,
        retention_s: float | None,
        disk: DiskChunkStore | None,
        coalesce_bytes: int,
        background: Executor,
        get_timeout_s: float,
        rate_limiter: RateLimiter | None = None,
        max_cached_bytes: int | None = None,
    ) -> None:
        self.ranges = ranges
        self.buffers = buffers
        capacity = memory_bytes if max_cached_bytes is None else min(memory_bytes, max_cached_bytes)
        self.memory: TimedLru[ChunkKey, ChunkBuffer] = TimedLru(
            "chunk", capacity, retention_s, weigher=_buffer_size, on_store=_retain, on_drop=_release
        )
        self.disk = disk
        self.coalesce_bytes = coalesce_bytes
        # Decoded bytes a coalesced GET may put in the memory tier ahead of any reader: a quarter of the tier, so
        # what is decoded ahead is still there when the reader comes (16 MiB stored is ~64 MiB decoded, as big
        # as the whole default tier). With a disk tier the rest of the run waits there, still encoded. (A quarter
        # of the configured tier, whatever ``max_cached_bytes`` says: as it was when the sidecar lowered the
        # tier's capacity after the cache was built.)
        self.decode_ahead_bytes = memory_bytes // 4
        # A tier too small for one of our buffers keeps nothing: decoding ahead of a reader into it is pure waste
        # (with ``fetch.chunk.cache.size=0`` every prefetched chunk was decoded twice).
        self._tier_holds_chunks = capacity >= buffers.buffer_size
        # What coalesced GETs read into: recycled, like the decoded chunks, instead of a fresh buffer per GET.
        self.stored_buffers = ChunkBufferPool(
            min(STORED_BUFFER_BYTES, max(coalesce_bytes, 1)), max_idle=STORED_BUFFERS_IDLE
        )
        self.background = background
        self.get_timeout_s = get_timeout_s
        self.rate_limiter = rate_limiter
        self._lock = threading.Lock()
        self._fetching: dict[ChunkKey, tuple[Future[memoryview], _RunBytes]] = {}
        # Chunks of a GET in flight that a reader already took to decode itself: their background decode would
        # be a second one (the reader's copy may even be evicted by then). Emptied as each chunk settles.
        self._taken: set[ChunkKey] = set()
        self._prefetched: set[ChunkKey] = set()
        self.gets = 0
        self.get_bytes = 0
        self.coalesced_gets = 0
        self.coalesced_bytes = 0
        self.integrity_failures = 0
        self.disk_hits = 0
        self.prefetch_hits = 0

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
                    self.memory.count(hit=self._is_fetching(key))
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
        self, src: SegmentSource, chunk: Chunk, horizon: int, future: Future[bool], planned: Callable[[], None]
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
        self.memory.finish(key, future, True, None, started, store=False)
        return buf

    def ensure_cached(self, src: SegmentSource, chunk: Chunk, horizon: int, background: bool = True) -> bool:
        """Bring a chunk into the cache without a reader (prefetch); False when it was there or on its way."""
        key = (src.cache_id, chunk.id)
        if chunk.original_size > self.buffers.buffer_size:
            return False  # bigger than our chunks (a foreign manifest): never allocated ahead of a reader
        if self.disk is None and not self._tier_holds_chunks:
            return False  # nowhere to keep it: a chunk decoded now would be thrown away at once
        if self.memory.contains(key) or self.memory.in_flight(key) or self._is_fetching(key):
            return False
        if self.disk is not None and self.disk.contains(src.cache_id, chunk.id):
            return False
        stored, _, run_bytes = self._stored(src, chunk, horizon, background)
        try:
            if self._tier_holds_chunks:  # else the GET's settling put it in the disk tier, still encoded
                self._decode_in_background(src, chunk, stored, prefetched=True)
        finally:
            self._let_go(run_bytes)
        return True

    def _load_into(
        self, src: SegmentSource, chunk: Chunk, horizon: int, out: memoryview, planned: Callable[[], None]
    ) -> None:
        stored, from_disk, run_bytes = self._stored(src, chunk, horizon, background=False, planned=planned)
        try:
            self._decode(src, chunk, stored, out)
        except CorruptDataException:
            if not from_disk:
                raise
            # A bad disk entry (bit rot, a torn write): drop it and read the chunk from the object store.
            assert self.disk is not None
            self.disk.drop(src.cache_id, chunk.id)
            stored, _, again = self._stored(src, chunk, chunk.id, background=False, use_disk=False)
            try:
                self._decode(src, chunk, stored, out)
            finally:
                self._let_go(again)
        finally:
            self._let_go(run_bytes)

    def _decode(self, src: SegmentSource, chunk: Chunk, stored: bytes | memoryview, out: memoryview) -> None:
        what = src.what(chunk)
        view = out[: chunk.original_size]
        try:
            if src.transformer.is_identity:
                if len(stored) != chunk.original_size:
                    self._count_integrity_failure()  # a torn disk entry or a short object: the CRC cannot run
                    raise CorruptDataException(
                        f"{what}: the manifest says the chunk is stored untransformed, but gives "
                        f"{len(stored)} stored bytes for {chunk.original_size} original ones"
                    )
                view[:] = stored
            else:
                src.transformer.detransform_into(stored, view, what)
        except (ChunkingError, DecryptionError) as e:
            self._count_integrity_failure()
            raise CorruptDataException(f"{e}; the stored chunk is corrupt (run kts verify)") from None
        # The GCM tag already authenticated an encrypted chunk, and zstd checked its frame size: a CRC-32C pass
        # over the decoded bytes would add nothing but another read of 4 MiB per chunk (about 6% of the decode).
        if src.chunk_crcs is not None and src.transformer.cipher is None and crc32c(view) != src.chunk_crcs[chunk.id]:
            self._count_integrity_failure()
            raise CorruptDataException(
                f"{what}: CRC-32C mismatch (expected {src.chunk_crcs[chunk.id]:#010x}); the stored chunk is "
                f"corrupt (run kts verify)"
            )

    # --- stored bytes: disk tier or a coalesced GET -------------------------------------------------------------

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until no GET is in flight and every fetched chunk is settled (on disk, in memory): for tools
        and tests that look at the cache itself; readers never need it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._fetching:
                    return True
            time.sleep(0.005)
        return False

    def _is_fetching(self, key: ChunkKey) -> bool:
        with self._lock:
            return key in self._fetching

    def _stored(
        self,
        src: SegmentSource,
        chunk: Chunk,
        horizon: int,
        background: bool,
        use_disk: bool = True,
        planned: Callable[[], None] = lambda: None,
    ) -> tuple[bytes | memoryview, bool, _RunBytes | None]:
        """The chunk's stored bytes, whether they came from the disk tier, and the GET's bytes they lie in (the
        caller passes that to ``_let_go`` once it has decoded them; None for bytes of their own)."""
        key = (src.cache_id, chunk.id)
        # In flight first, then disk: a chunk leaves ``_fetching`` only after it is on disk, so in this order
        # a chunk whose GET just finished is found in one place or the other.
        pending = self._join_in_flight(key)
        if pending is not None:
            planned()
            return self._wait_in_flight(src, chunk, pending)
        if use_disk and self.disk is not None and self.disk.contains(src.cache_id, chunk.id):
            planned()  # the next chunk may plan now: reading this one from disk starts no GET
            stored = self.disk.get(src.cache_id, chunk.id)
            if stored is not None:
                with self._lock:
                    self.disk_hits += 1
                return stored, True, None
        run = self._plan_run(src, chunk, horizon) if use_disk else [chunk]
        with self._lock:
            pending = self._join_in_flight_locked(key)
            if pending is None:
                run = [c for c in itertools.takewhile(lambda c: (src.cache_id, c.id) not in self._fetching, run)]
                futures: dict[int, Future[memoryview]] = {c.id: Future() for c in run}
                run_bytes = _RunBytes(len(run) + 1)  # each chunk's settling, and this reader
                for c in run:
                    self._fetching[(src.cache_id, c.id)] = (futures[c.id], run_bytes)
        planned()
        if pending is not None:
            return self._wait_in_flight(src, chunk, pending)
        self._fetch_run(src, run, futures, run_bytes, background)
        return futures[chunk.id].result(), False, run_bytes

    def _join_in_flight(self, key: ChunkKey) -> tuple[Future[memoryview], _RunBytes] | None:
        with self._lock:
            return self._join_in_flight_locked(key)

    def _join_in_flight_locked(self, key: ChunkKey) -> tuple[Future[memoryview], _RunBytes] | None:
        """The GET in flight that brings ``key``, with the caller counted among its readers; None when there is
        none. The caller holds the lock: the chunk is not settled yet, so the GET's bytes are still alive."""
        entry = self._fetching.get(key)
        if entry is not None:
            self._taken.add(key)
            entry[1].users += 1
        return entry

    def _wait_in_flight(
        self, src: SegmentSource, chunk: Chunk, entry: tuple[Future[memoryview], _RunBytes]
    ) -> tuple[memoryview, bool, _RunBytes]:
        try:
            return wait_for(entry[0], self.get_timeout_s, src.what(chunk)), False, entry[1]
        except BaseException:
            self._let_go(entry[1])
            raise

    def _let_go(self, run_bytes: _RunBytes | None, settled: ChunkKey | None = None) -> None:
        """One reader of a GET's bytes is done with them; the last one recycles the buffer. ``settled``: the
        chunk whose settling this is leaves ``_fetching`` in the same step, so ``wait_idle`` never sees a GET
        finished whose buffer is not back yet."""
        if run_bytes is None:
            return
        with self._lock:
            if settled is not None:
                self._fetching.pop(settled, None)
                self._taken.discard(settled)
            run_bytes.users -= 1
            buf = run_bytes.buffer if run_bytes.users == 0 else None
            if buf is not None:
                run_bytes.buffer = None
        if buf is not None:
            buf.release()

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

    def _fetch_run(
        self,
        src: SegmentSource,
        run: list[Chunk],
        futures: dict[int, Future[memoryview]],
        run_bytes: _RunBytes,
        background: bool,
    ) -> None:
        """One GET for the run. Waiters get their bytes at once; writing the disk tier and decoding the chunks
        nobody asked for yet happen on the background pool, each chunk leaving ``_fetching`` only once it is
        settled (on disk, or claimed in the memory tier), so no reader can miss it in between."""
        start, end = run[0].transformed_position, run[-1].transformed_end
        try:
            blob = self._get(src, run[0], start, end, background, run_bytes)
        except BaseException as e:
            with self._lock:
                for c in run:
                    self._fetching.pop((src.cache_id, c.id), None)
                    self._taken.discard((src.cache_id, c.id))
            for f in futures.values():
                f.set_exception(e)
            raise
        for c in run:
            futures[c.id].set_result(blob[c.transformed_position - start : c.transformed_end - start])
        ahead = 0
        for i, c in enumerate(run):
            decode = self._tier_holds_chunks and i > 0 and ahead + c.original_size <= self.decode_ahead_bytes
            ahead += c.original_size if decode else 0
            if not decode and self.disk is None:  # nothing to do but mark it settled: no thread hand-off for that
                self._settle(src, c, futures[c.id].result(), False, run_bytes)
                continue
            try:
                self.background.submit(self._settle, src, c, futures[c.id].result(), decode, run_bytes)
            except RuntimeError:  # the plugin is closing
                self._settle(src, c, futures[c.id].result(), False, run_bytes)

    def _settle(self, src: SegmentSource, chunk: Chunk, stored: memoryview, decode: bool, run_bytes: _RunBytes) -> None:
        key = (src.cache_id, chunk.id)
        try:
            with self._lock:
                decode = decode and key not in self._taken
            if decode:  # first: a reader may be waiting for it; the disk copy is for later
                self._decode_in_background(src, chunk, stored, prefetched=False)
            if self.disk is not None:
                self.disk.put(src.cache_id, chunk.id, stored, src.segment_key)
        except Exception:  # noqa: BLE001 - a cache write is an optimisation: the reader reads the store again
            pass
        finally:
            self._let_go(run_bytes, settled=key)

    def _get(
        self, src: SegmentSource, first: Chunk, start: int, end: int, background: bool, run_bytes: _RunBytes
    ) -> memoryview:
        """Bytes ``[start, end)`` of the segment's ``.log``: into a pooled buffer, which ``run_bytes`` then holds,
        when they fill at least a quarter of one (a small GET must not pin a big buffer while its chunks settle;
        its memory comes cheaply from the heap anyway), else into memory of their own."""
        if end == start:
            return memoryview(b"")
        if self.rate_limiter is not None:
            self.rate_limiter.acquire(end - start, background=background)
        with self._lock:
            self.gets += 1
            self.get_bytes += end - start
            if end - start > first.transformed_size:
                self.coalesced_gets += 1
                self.coalesced_bytes += end - start
        what = src.what(first)
        pooled = self.stored_buffers.buffer_size // 4 <= end - start <= self.stored_buffers.buffer_size
        buf = self.stored_buffers.take(end - start) if pooled else None
        try:
            if buf is None:
                return memoryview(self.ranges.read(src.log_key, start, end - 1))
            self.ranges.read_into(src.log_key, start, end - 1, buf.view)
        except BaseException as e:
            if buf is not None:
                buf.release()  # nobody saw these bytes
            self._raise_get_failure(e, what)
        with self._lock:
            run_bytes.buffer = buf
        return buf.view

    @staticmethod
    def _raise_get_failure(error: BaseException, what: str) -> NoReturn:
        """A failed ranged read of the ``.log``, as the plugin's public family of exceptions."""
        if isinstance(error, KeyNotFound):
            raise RemoteStorageException(
                f"{what}: the .log object is missing although the manifest exists (deleted or partially removed "
                f"segment)"
            ) from None
        if isinstance(error, InvalidRange):
            raise CorruptDataException(
                f"{what}: the .log object is shorter than its manifest says (truncated object): {error}"
            ) from None
        if isinstance(error, StorageBackendException):
            raise storage_failure(f"cannot read {what}: {error}", error) from error
        raise error

    def _decode_in_background(
        self, src: SegmentSource, chunk: Chunk, stored: bytes | memoryview, prefetched: bool
    ) -> None:
        """Decode a chunk nobody is waiting for yet into the memory tier; a reader that claimed it first wins."""
        key = (src.cache_id, chunk.id)
        future = self.memory.claim_missing(key)
        if future is None:  # a reader got there first (or it is still cached): decoding again is waste
            return
        started = time.perf_counter_ns()
        buf = self.buffers.take(chunk.original_size)
        try:
            self._decode(src, chunk, stored, buf.view)
        except BaseException as e:
            buf.release()
            self.memory.finish(key, future, None, e, started)
            future.exception()  # observed: nobody else may be waiting
            return
        self.memory.put(key, buf)
        buf.release()  # the tier keeps its own reference
        self.memory.finish(key, future, True, None, started, store=False)
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

    def _count_integrity_failure(self) -> None:
        with self._lock:
            self.integrity_failures += 1

    def forget_segment(self, segment_key: str) -> None:
        """Drop a deleted segment's chunks (of every copy of it) from both tiers."""
        prefix = segment_key + "@"
        self.memory.invalidate_where(lambda k: k[0].startswith(prefix))
        if self.disk is not None:
            self.disk.drop_segment(segment_key)

    def stats(self) -> dict[str, float]:
        stats = self.memory.stats()
        with self._lock:
            stats.update(
                {
                    "disk-cache-hits-total": self.disk_hits,
                    "integrity-failures-total": self.integrity_failures,
                    "coalesced-get-total": self.coalesced_gets,
                    "remote-get-total": self.gets,
                    "remote-get-bytes-total": self.get_bytes,
                    "coalesced-get-bytes-total": self.coalesced_bytes,
                    "prefetch-hits-total": self.prefetch_hits,
                }
            )
        if self.disk is not None:
            stats["disk-cache-size-total"] = len(self.disk)
            stats["disk-cache-bytes-total"] = self.disk.volume
        return stats
