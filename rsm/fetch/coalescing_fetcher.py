"""Stored chunk bytes from the object store, with coalesced ranged GETs.

One GET brings a *run*: the chunk asked for and the chunks after it that the cache planned, so a broker that
reopens a stream every 1 MiB costs one GET per 16 MiB instead of one per chunk. Each chunk of a run flies in
``SingleFlight`` from the moment its GET is planned until it is settled (kept by the cache, or not wanted): a
reader that asks for it meanwhile joins the flight and gets a view into the GET's bytes, instead of a second GET.

A run's bytes are shared by its chunks and its readers through :class:`RunBytes`: each holder lets go once, and
the last one gives the buffer back to the pool. A reader gets a :class:`StoredChunk`, which lets go when
released (or at the end of a ``with`` block).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import NoReturn

from backends.base import InvalidRange, KeyNotFound, RangeReader, StorageBackendException
from chunking.buffer_pool import ChunkBuffer, ChunkBufferPool
from chunking.chunk_index import Chunk
from rsm.errors import CorruptDataException, RemoteStorageException, storage_failure
from rsm.fetch.lru import wait_for
from rsm.fetch.rate_limit import RateLimiter
from rsm.fetch.single_flight import SingleFlight
from rsm.fetch.source import SegmentSource

ChunkKey = tuple[str, int]

STORED_BUFFER_BYTES = 16 * 1024 * 1024
"""Pooled buffers for coalesced GETs are at most this big (the default ``fetch.coalesce.max.bytes``); a larger
GET gets memory of its own."""

STORED_BUFFERS_IDLE = 2
"""Idle GET buffers kept for the next GETs: a fresh 16 MiB buffer costs 4,096 page faults. Only GETs of at
least a quarter of a buffer use them, so a buffer in use is at least a quarter full."""


class RunBytes:
    """The bytes one GET brought, shared by its holders; the last one to let go recycles the buffer."""

    __slots__ = ("_buffer", "_holders", "_lock")

    def __init__(self, holders: int) -> None:
        self._lock = threading.Lock()
        self._buffer: ChunkBuffer | None = None
        self._holders = holders

    def attach(self, buffer: ChunkBuffer) -> None:
        with self._lock:
            self._buffer = buffer

    def hold(self) -> None:
        with self._lock:
            self._holders += 1

    def let_go(self) -> None:
        with self._lock:
            self._holders -= 1
            buffer = self._buffer if self._holders == 0 else None
            if buffer is not None:
                self._buffer = None
        if buffer is not None:
            buffer.release()


class ChunkFlight(Future):  # type: ignore[type-arg]
    """A chunk's stored bytes on their way: the future's result is a view into ``run``'s bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.run: RunBytes | None = None
        self.taken = False  # a reader joined to decode it itself: decoding it ahead would be a second decode


class StoredChunk:
    """A chunk's stored bytes for one reader; ``release`` (or leaving a ``with`` block) lets go of the GET's."""

    __slots__ = ("data", "from_disk", "_run")

    def __init__(self, data: bytes | memoryview, run: RunBytes | None = None, from_disk: bool = False) -> None:
        self.data = data
        self.from_disk = from_disk
        self._run = run

    def release(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.let_go()

    def __enter__(self) -> StoredChunk:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


SettlePlan = Callable[[Sequence[Chunk]], list[bool | None]]
"""For each chunk of a fetched run: None when nothing keeps it, else whether to decode it ahead of a reader."""
Settle = Callable[[SegmentSource, Chunk, memoryview, bool], None]
"""Keep one fetched chunk (decode it ahead when the flag says so); runs on the background pool."""


def _hold(flight: ChunkFlight) -> None:
    flight.taken = True
    assert flight.run is not None
    flight.run.hold()


class CoalescingFetcher:
    """Ranged GETs of a segment's ``.log``, one per run, each chunk in flight until the cache settled it."""

    def __init__(
        self,
        ranges: RangeReader,
        coalesce_bytes: int,
        get_timeout_s: float,
        background: Executor,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.ranges = ranges
        self.coalesce_bytes = coalesce_bytes
        self.get_timeout_s = get_timeout_s
        self.background = background
        self.rate_limiter = rate_limiter
        self.buffers = ChunkBufferPool(min(STORED_BUFFER_BYTES, max(coalesce_bytes, 1)), max_idle=STORED_BUFFERS_IDLE)
        self.flights: SingleFlight[ChunkKey, ChunkFlight] = SingleFlight(ChunkFlight)
        self._lock = threading.Lock()
        self.gets = 0
        self.get_bytes = 0
        self.coalesced_gets = 0
        self.coalesced_bytes = 0

    def in_flight(self, key: ChunkKey) -> bool:
        return key in self.flights

    def join(self, src: SegmentSource, chunk: Chunk, claimed: Callable[[], None]) -> StoredChunk | None:
        """The chunk's bytes when a GET in flight brings it (``claimed`` is called, then they are waited for),
        else None."""
        flight = self.flights.join((src.cache_id, chunk.id), _hold)
        if flight is None:
            return None
        claimed()
        return self._wait(src, chunk, flight)

    def fetch(
        self,
        src: SegmentSource,
        run: Sequence[Chunk],
        background: bool,
        settle_plan: SettlePlan,
        settle: Settle,
        claimed: Callable[[], None] = lambda: None,
    ) -> StoredChunk:
        """The bytes of ``run[0]``, by one GET for the run's chunks that are not in flight yet, or by joining
        the GET that brings it. ``claimed`` is called once the chunk's GET is decided, before any I/O.

        After the GET each chunk goes to ``settle`` (on the background pool when ``settle_plan`` says it is
        kept) and then lands; a reader can join it until then."""
        keys = [(src.cache_id, c.id) for c in run]
        run_bytes = RunBytes(1)  # this reader; each chunk's landing holds it too

        def take_part(flight: ChunkFlight) -> None:
            flight.run = run_bytes
            run_bytes.hold()

        first, flights = self.flights.claim_leading(keys, _hold, take_part)
        claimed()
        if not flights:
            return self._wait(src, run[0], first)
        run = run[: len(flights)]
        start, end = run[0].transformed_position, run[-1].transformed_end
        try:
            blob = self._get(src, run[0], start, end, background, run_bytes)
        except BaseException as e:
            for key, flight in flights.items():
                self.flights.land(key)
                flight.set_exception(e)
            raise
        views = [blob[c.transformed_position - start : c.transformed_end - start] for c in run]
        for c, view in zip(run, views, strict=True):
            flights[(src.cache_id, c.id)].set_result(view)
        for c, view, decode in zip(run, views, settle_plan(run), strict=True):
            if decode is None:  # nothing keeps it: land it here, no thread hand-off
                self._land(src, c, view, None, settle)
                continue
            try:
                self.background.submit(self._land, src, c, view, decode, settle)
            except RuntimeError:  # the plugin is closing
                self._land(src, c, view, None, settle)
        return StoredChunk(views[0], run_bytes)

    def _wait(self, src: SegmentSource, chunk: Chunk, flight: ChunkFlight) -> StoredChunk:
        """A joined flight's bytes; the caller already holds its run."""
        run = flight.run
        try:
            return StoredChunk(wait_for(flight, self.get_timeout_s, src.what(chunk)), run)
        except BaseException:
            if run is not None:
                run.let_go()
            raise

    def _land(self, src: SegmentSource, chunk: Chunk, view: memoryview, decode: bool | None, settle: Settle) -> None:
        key = (src.cache_id, chunk.id)
        try:
            if decode is not None:
                flight = self.flights.join(key)
                settle(src, chunk, view, decode and not (flight is not None and flight.taken))
        except Exception:  # noqa: BLE001 - keeping a chunk is an optimisation: a reader reads the store again
            pass
        finally:
            # Landing and letting go in one step: once no flight is left, every GET buffer is back in the pool.
            self.flights.land(key, _let_go)

    def _get(
        self, src: SegmentSource, first: Chunk, start: int, end: int, background: bool, run_bytes: RunBytes
    ) -> memoryview:
        """Bytes ``[start, end)`` of the ``.log``: into a pooled buffer (then held by ``run_bytes``) when they
        fill at least a quarter of one, else into memory of their own (a small GET must not pin a big buffer)."""
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
        pooled = self.buffers.buffer_size // 4 <= end - start <= self.buffers.buffer_size
        buf = self.buffers.take(end - start) if pooled else None
        try:
            if buf is None:
                return memoryview(self.ranges.read(src.log_key, start, end - 1))
            self.ranges.read_into(src.log_key, start, end - 1, buf.view)
        except BaseException as e:
            if buf is not None:
                buf.release()  # nobody saw these bytes
            raise_get_failure(e, what)
        run_bytes.attach(buf)
        return buf.view

    def stats(self) -> dict[str, float]:
        with self._lock:
            return {
                "coalesced-get-total": self.coalesced_gets,
                "remote-get-total": self.gets,
                "remote-get-bytes-total": self.get_bytes,
                "coalesced-get-bytes-total": self.coalesced_bytes,
            }


def _let_go(flight: ChunkFlight) -> None:
    if flight.run is not None:
        flight.run.let_go()


def raise_get_failure(error: BaseException, what: str) -> NoReturn:
    """A failed ranged read of the ``.log``, as the plugin's public family of exceptions."""
    if isinstance(error, KeyNotFound):
        raise RemoteStorageException(
            f"{what}: the .log object is missing although the manifest exists (deleted or partially removed segment)"
        ) from None
    if isinstance(error, InvalidRange):
        raise CorruptDataException(
            f"{what}: the .log object is shorter than its manifest says (truncated object): {error}"
        ) from None
    if isinstance(error, StorageBackendException):
        raise storage_failure(f"cannot read {what}: {error}", error) from error
    raise error
