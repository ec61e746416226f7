"""Pooled chunk buffers on the fetch path: the pool itself, the segment stream's buffer ownership (no leaks
whichever way a stream is read or abandoned), decoding into a given buffer, and the filesystem backend's
``read_range_into`` with its symlink rules."""

from __future__ import annotations

import io
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TIP, FixedChunkBuffers, encryption_configs, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.base import InvalidRange, KeyNotFound, StorageBackendException, read_range, read_range_into
from backends.filesystem import FileSystemBackend
from chunking.buffer_pool import ChunkBufferPool
from chunking.errors import CorruptChunkError
from chunking.transform import ChunkTransformer
from encryption.aes import ChunkCipher, DataKeyAndAad
from encryption.errors import DecryptionError
from rsm.core.object_keys import segment_keys
from rsm.errors import CorruptDataException, RemoteStorageException
from rsm.fetch.stream import SegmentStream

BS = 4096


# --- the pool ---------------------------------------------------------------------------------------------------


def test_region_buffers_are_carved_at_consecutive_offsets_and_alias_the_region() -> None:
    backing = bytearray(3 * BS + 100)  # the 100-byte tail cannot hold a buffer
    pool = ChunkBufferPool(BS, region=memoryview(backing))
    assert pool.region_buffers == 3 and pool.region_free == 3

    bufs = [pool.take(BS) for _ in range(3)]
    assert [b.region_offset for b in bufs] == [0, BS, 2 * BS]  # lowest offsets first: pages touched as needed
    assert pool.region_free == 0 and pool.allocated == 0
    for i, b in enumerate(bufs):
        assert b.capacity == BS and b.size == BS
        b.memory[:] = bytes([i + 1]) * BS
    for i, b in enumerate(bufs):  # each buffer is its own slice of the region, nothing overlaps
        assert backing[b.region_offset : b.region_offset + BS] == bytes([i + 1]) * BS
    assert backing[3 * BS :] == bytes(100)


def test_exhausted_region_falls_back_to_heap_and_returns_go_to_their_own_list() -> None:
    pool = ChunkBufferPool(BS, max_idle=4, region=memoryview(bytearray(2 * BS)))
    a, b = pool.take(10), pool.take(BS)
    heap = pool.take(100)
    assert heap.region_offset is None and heap.capacity == BS and heap.size == 100 and len(heap.view) == 100
    assert pool.allocated == 1 and pool.region_free == 0

    heap.release()
    assert pool.idle == 1 and pool.region_free == 0  # a heap buffer never joins the region list
    a.release()
    assert pool.region_free == 1 and pool.idle == 1 and a.size == 0

    again = pool.take(5)  # region first, even with a heap buffer idle
    assert again is a and again.region_offset == 0 and again.size == 5
    third = pool.take(5)  # region exhausted again: the idle heap buffer, no new allocation
    assert third is heap and pool.allocated == 1 and pool.idle == 0
    for x in (again, third, b):
        x.release()
    assert pool.region_free == pool.region_buffers == 2 and pool.idle == 1


def test_released_region_buffer_is_reused_first() -> None:
    pool = ChunkBufferPool(BS, region=memoryview(bytearray(4 * BS)))
    first, second = pool.take(1), pool.take(1)
    second.release()
    assert pool.take(1) is second  # last in, first out: a warm buffer rather than an untouched page
    first.release()
    assert pool.take(1) is first


def test_double_release_is_ignored() -> None:
    pool = ChunkBufferPool(BS, max_idle=8, region=memoryview(bytearray(2 * BS)))
    r1, r2 = pool.take(1), pool.take(1)
    h = pool.take(1)
    for buf in (r1, h):
        buf.release()
        buf.release()
    assert pool.region_free == 1 and pool.idle == 1
    # had the second release listed the buffers twice, the next takes would hand one buffer to two owners
    x, y, z = pool.take(1), pool.take(1), pool.take(1)
    assert x is r1 and y is h and z is not h and z.region_offset is None
    assert pool.allocated == 2
    for buf in (x, y, z, r2):
        buf.release()
    assert pool.region_free == 2


def test_oversize_request_gets_an_unpooled_buffer() -> None:
    pool = ChunkBufferPool(BS, region=memoryview(bytearray(2 * BS)))
    big = pool.take(BS + 1)
    assert big.capacity == BS + 1 and big.size == BS + 1 and big.region_offset is None
    assert pool.region_free == 2 and pool.allocated == 0  # the region was left alone
    big.view[:] = b"x" * (BS + 1)
    big.release()
    assert pool.idle == 0 and pool.region_free == 2
    assert pool.take(BS).region_offset == 0  # exactly buffer_size still fits a pooled buffer


def test_idle_heap_buffers_are_bounded_by_max_idle() -> None:
    pool = ChunkBufferPool(BS, max_idle=2)
    assert pool.region_buffers == 0
    bufs = [pool.take(BS) for _ in range(5)]
    assert pool.allocated == 5
    for b in bufs:
        b.release()
    assert pool.idle == 2
    taken = [pool.take(1) for _ in range(3)]
    assert pool.allocated == 6  # two reused, one new
    assert len({id(t) for t in taken}) == 3
    pool.close()
    assert pool.idle == 0


def test_region_smaller_than_a_buffer_and_invalid_size() -> None:
    pool = ChunkBufferPool(BS, region=memoryview(bytearray(BS - 1)))
    assert pool.region_buffers == 0
    assert pool.take(1).region_offset is None
    with pytest.raises(ValueError):
        ChunkBufferPool(0)


def test_concurrent_owners_never_share_a_buffer() -> None:
    pool = ChunkBufferPool(256, max_idle=4, region=memoryview(bytearray(3 * 256)))
    errors: list[str] = []

    def work(tag: int) -> None:
        mark = bytes([tag]) * 256
        for _ in range(3000):
            b = pool.take(256)
            b.memory[:] = mark
            if bytes(b.memory) != mark:
                errors.append(f"buffer at {b.region_offset} shared by two owners")
            b.release()

    threads = [threading.Thread(target=work, args=(i + 1,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert pool.region_free == pool.region_buffers == 3


# --- the segment stream over a real manager --------------------------------------------------------------------

CHUNK = 16384


def _pool_with_region(buffers: int) -> ChunkBufferPool:
    return ChunkBufferPool(CHUNK, region=memoryview(bytearray(buffers * CHUNK)))


@pytest.fixture(
    params=[(False, False), (True, False), (False, True), (True, True)], ids=["plain", "zstd", "aes", "zstd+aes"]
)
def copied(request: Any, segment_factory: Any, key_pairs: Any, make_manager: Any) -> Iterator[tuple[Any, Any, bytes]]:
    """A manager holding one copied segment, with a region-backed pool big enough for every buffer in flight
    (so ``region_free == region_buffers`` at rest means nothing leaked), plus the metadata and original bytes."""
    compression, encryption = request.param
    seg = segment_factory(target_bytes=300_000, seed=21)
    extra = encryption_configs(key_pairs) if encryption else {}
    m = make_manager(
        extra,
        chunk_size=CHUNK,
        compression_enabled=compression,
        fetch_readahead_chunks=4,
        transform_thread_pool_size=2,
        fetch_coalesce_max_bytes=1,  # one GET per chunk: these tests follow each chunk's buffer
        fetch_chunk_cache_prefetch_max_size=0,
        fetch_chunk_cache_size=0,  # no memory tier holding buffers: every buffer must come back to the pool
        chunk_buffers=FixedChunkBuffers(_pool_with_region(32)),
    )
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    original = seg.log.read_bytes()
    assert len(original) > 10 * CHUNK and len(original) % CHUNK
    yield m, meta, original


def _all_back(m: Any) -> bool:
    pool = m.chunk_buffers
    return pool.region_free == pool.region_buffers


def test_readinto_whole_segment_releases_at_eof(copied: Any) -> None:
    m, meta, original = copied
    f = m.fetch_log_segment(meta, 0)
    assert isinstance(f, SegmentStream)
    out = bytearray(len(original) + 10)
    view = memoryview(out)
    got = 0
    while True:
        n = f.readinto(view[got : got + 7000])  # reads that straddle chunk borders
        if n == 0:
            break
        got += n
    assert got == len(original) and out[:got] == original
    assert _all_back(m), "buffers still held at EOF before close()"
    assert m.chunk_buffers.allocated == 0, "the region was big enough: no heap buffer should have been needed"
    assert f.read() == b""
    f.close()
    assert _all_back(m)


def test_next_piece_whole_segment_zero_copy(copied: Any) -> None:
    m, meta, original = copied
    parts = []
    with m.fetch_log_segment(meta, 0) as f:
        while (piece := f.next_piece()) is not None:
            assert piece.buffer.region_offset is not None
            assert 0 < piece.length <= CHUNK and piece.offset + piece.length <= piece.buffer.size
            parts.append(bytes(piece.view))  # valid until the next read: copy now
        assert f.next_piece() is None
    assert b"".join(parts) == original
    assert len(parts) == -(-len(original) // CHUNK)  # one piece per chunk without a limit
    assert _all_back(m)


def test_next_piece_with_limits_and_mixed_reads(copied: Any) -> None:
    m, meta, original = copied
    start, end = CHUNK - 100, 5 * CHUNK + 7
    got = bytearray()
    with m.fetch_log_segment(meta, start, end) as f:
        piece = f.next_piece(50)
        assert piece is not None and piece.length == 50 and piece.offset == CHUNK - 100
        got += piece.view
        piece = f.next_piece()  # the rest of the first chunk only
        assert piece is not None and piece.length == 50
        got += piece.view
        got += f.read(CHUNK + 3)
        piece = f.next_piece(0)
        assert piece is not None and piece.length == 0
        taken = f.take_piece()
        assert taken is not None
        got += taken.view
        taken.buffer.release()
        got += f.read()
    assert bytes(got) == original[start : end + 1]
    assert _all_back(m)


def test_take_piece_hands_over_ownership(copied: Any) -> None:
    m, meta, original = copied
    pool = m.chunk_buffers
    pieces = []
    with m.fetch_log_segment(meta, 0) as f:
        while (piece := f.take_piece()) is not None:
            pieces.append(piece)
    # the stream is closed and has read far past every early piece: still, none of them was reused
    assert len({id(p.buffer) for p in pieces}) == len(pieces)
    assert b"".join(bytes(p.view) for p in pieces) == original
    assert pool.region_free == pool.region_buffers - len(pieces)
    for p in pieces:
        p.buffer.release()
    assert _all_back(m)


def test_closing_early_with_readahead_pending_leaks_nothing(copied: Any) -> None:
    m, meta, original = copied
    for start in (0, 3 * CHUNK + 5, len(original) - 2 * CHUNK):
        f = m.fetch_log_segment(meta, start)
        assert f.read(100) == original[start : start + 100]
        f.close()
        assert wait_until(lambda: _all_back(m)), (start, m.chunk_buffers.region_free)
    f = m.fetch_log_segment(meta, 0)
    piece = f.next_piece(10)
    assert piece is not None and bytes(piece.view) == original[:10]
    f.close()
    m.close()  # waits for the pool threads: every read-ahead load has finished or was cancelled
    assert _all_back(m)


def test_abandoned_stream_gives_its_buffers_back_when_collected(copied: Any) -> None:
    import gc

    m, meta, original = copied
    f = m.fetch_log_segment(meta, CHUNK)
    assert f.read(10) == original[CHUNK : CHUNK + 10]
    del f
    gc.collect()
    assert wait_until(lambda: _all_back(m))


def _gate_chunk_reads(m: Any) -> tuple[threading.Event, list[int]]:
    """Spy on the real backend: reads of the .log object past its first chunk wait for the event."""
    gate = threading.Event()
    started: list[int] = []
    backend = m.backend
    real = backend.read_range_into

    def gated(key: str, start: int, end: int, out: Any) -> int:
        if key.endswith(".log") and start > 0:
            started.append(start)
            gate.wait(10)
        return real(key, start, end, out)

    backend.read_range_into = gated
    return gate, started


def test_close_while_loads_are_running_releases_them_when_they_finish(copied: Any) -> None:
    m, meta, original = copied
    pool = m.chunk_buffers
    gate, started = _gate_chunk_reads(m)
    try:
        f = m.fetch_log_segment(meta, 0)
        assert f.read(100) == original[:100]
        assert wait_until(lambda: len(started) >= 1)
        f.close()
        # the loads stuck in the backend still own their buffers; the queued ones were cancelled
        assert pool.region_free < pool.region_buffers
    finally:
        gate.set()
    m.close()
    assert _all_back(m)
    assert len(started) <= 2  # two pool threads: the queued loads were cancelled, never ran


def test_failing_chunk_mid_stream_leaks_nothing(copied: Any) -> None:
    m, meta, original = copied
    keys = segment_keys(m.config["key.prefix"], meta)
    path = Path(m.backend.root) / keys.log
    stored = bytearray(path.read_bytes())
    stored[len(stored) // 2] ^= 0xFF  # a chunk in the middle: CRC-32C, the GCM tag or zstd catches it
    path.write_bytes(stored)
    f = m.fetch_log_segment(meta, 0)
    with pytest.raises(RemoteStorageException):
        while f.read(CHUNK):
            pass
    f.close()
    m.close()
    assert _all_back(m)


def test_memory_tier_shares_buffers_and_gives_them_back(segment_factory: Any, make_manager: Any) -> None:
    """A warm read hands out the cached buffer itself (no copy); eviction and close give every buffer back."""
    seg = segment_factory(target_bytes=300_000, seed=21)
    m = make_manager(
        chunk_size=CHUNK,
        fetch_chunk_cache_prefetch_max_size=0,
        fetch_chunk_cache_size=3 * CHUNK,
        chunk_buffers=FixedChunkBuffers(_pool_with_region(16)),
    )
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    original = seg.log.read_bytes()
    with m.fetch_log_segment(meta, 0, CHUNK - 1) as f:
        first = f.take_piece()
        assert first is not None and bytes(first.view) == original[:CHUNK]
    assert m.chunk_cache.wait_idle()
    with m.fetch_log_segment(meta, 0, CHUNK - 1) as f:
        again = f.take_piece()
    assert again is not None and again.buffer is first.buffer  # the tier's buffer, shared
    first.buffer.release()
    again.buffer.release()
    held = m.chunk_cache.stats()["cache-size-total"]
    assert 1 <= held <= 3  # the tier holds at most its capacity, each in one region buffer
    assert m.chunk_buffers.region_free == m.chunk_buffers.region_buffers - held
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read() == original
    assert m.chunk_cache.wait_idle()
    assert m.chunk_cache.stats()["cache-eviction-total"] > 0
    m.chunk_cache.memory.clear()
    assert _all_back(m)


TIER_CHUNKS, READAHEAD, TRANSFORM_THREADS = 2, 2, 2


def most_buffers_out(streams: int, threads: int) -> int:
    """The most buffers the ``recycling`` manager can have out of its pool at once, each holder at its fullest:
    the memory tier's chunks; per open stream, its current chunk, the one it just took and its read-ahead; per
    transform thread, the chunk a load decodes (its stream may have closed meanwhile) and one its GET decodes
    ahead; and per thread that releases buffers, one on its way back to the pool."""
    return TIER_CHUNKS + streams * (READAHEAD + 2) + 2 * TRANSFORM_THREADS + threads


class BuffersOut:
    """Counts a pool's buffers out at once (taken, not yet given back) and the most at any moment: what the
    holders hold, whatever the pool keeps idle (it drops buffers past ``max_idle`` and allocates again later, so
    ``allocated`` also counts that churn)."""

    def __init__(self, pool: ChunkBufferPool) -> None:
        self.now = self.most = 0
        lock = threading.Lock()
        take, give_back = pool.take, pool.give_back

        def counted_take(size: int) -> Any:
            buf = take(size)
            if buf._pool is pool:
                with lock:
                    self.now += 1
                    self.most = max(self.most, self.now)
            return buf

        def counted_give_back(buf: Any) -> None:
            with lock:
                self.now -= 1
            give_back(buf)

        pool.take = counted_take  # type: ignore[method-assign]
        pool.give_back = counted_give_back  # type: ignore[method-assign]


@pytest.fixture(params=["zstd+aes", "plain"])
def recycling(request: Any, segment_factory: Any, key_pairs: Any, make_manager: Any) -> tuple[Any, Any, bytes]:
    """A manager with its own heap pool (no region) and a memory tier of two chunks: a whole-segment read
    evicts nearly every chunk it decodes, so the same few buffers go round and round."""
    seg = segment_factory(target_bytes=300_000, seed=33)
    encrypted = request.param == "zstd+aes"
    m = make_manager(
        encryption_configs(key_pairs) if encrypted else {},
        chunk_size=CHUNK,
        compression_enabled=encrypted,
        fetch_readahead_chunks=READAHEAD,
        transform_thread_pool_size=TRANSFORM_THREADS,
        fetch_chunk_cache_size=TIER_CHUNKS * CHUNK,
        fetch_chunk_cache_prefetch_max_size=0,
    )
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    return m, meta, seg.log.read_bytes()


def test_evicted_buffer_is_not_reused_while_a_stream_still_reads_it(recycling: Any) -> None:
    """Stream A holds chunk 0's buffer (shared with the memory tier); stream B then reads the whole segment,
    which evicts chunk 0 and recycles every other buffer. A's buffer must stay A's: B never gets it and its
    bytes do not change. Once A lets go, it goes back to the pool and is used again."""
    m, meta, original = recycling
    pool = m.chunk_buffers
    out = BuffersOut(pool)
    chunks = -(-len(original) // CHUNK)
    a = m.fetch_log_segment(meta, 0)
    held = a.next_piece()
    assert held is not None and bytes(held.view) == original[: held.length]
    seen_by_b: list[Any] = []
    with m.fetch_log_segment(meta, 0) as b:
        got = bytearray()
        while (piece := b.next_piece()) is not None:
            seen_by_b.append(piece.buffer)
            got += piece.view
    assert bytes(got) == original
    assert m.chunk_cache.wait_idle()
    assert m.chunk_cache.stats()["cache-eviction-total"] >= chunks - 2  # chunk 0 among them
    assert not held.buffer.shared  # the tier let go of chunk 0: A is its only holder
    assert all(buf is not held.buffer for buf in seen_by_b[1:])  # B's own chunk 0 came from the tier, before eviction
    assert bytes(held.view) == original[: held.length]  # untouched while A holds it
    # Recycled, not allocated per chunk. Two streams (A, B), this thread and the two transform threads: at most
    # 17 buffers out at once; measured 7 or 8 out, and as many allocated, at load 2 to 19. B alone loaded
    # chunks - 1 = 18 chunks from the store, so a buffer per load would pass the bound.
    most = most_buffers_out(streams=2, threads=1 + TRANSFORM_THREADS)
    assert out.most <= most < chunks - 1, (out.most, pool.allocated, chunks)
    assert pool.allocated <= most
    a.close()
    assert held.buffer in pool._idle  # A was its last holder: back to the pool now
    before_c = pool.allocated
    with m.fetch_log_segment(meta, CHUNK) as c:
        assert c.read() == original[CHUNK:]
    # C alone has at most 13 out at once, and idle ones serve it (measured: no new buffer); a buffer per chunk
    # would be 18 new ones.
    assert pool.allocated - before_c <= most_buffers_out(streams=1, threads=1 + TRANSFORM_THREADS) < chunks - 1


READERS = 4


def test_concurrent_readers_never_see_a_buffer_change_under_them(recycling: Any) -> None:
    """Four threads read random ranges of the segment piece by piece through a tier that evicts constantly.
    Each piece is checked twice, the second time after other threads had the chance to recycle buffers: a
    buffer reused while its reader still held it would show another chunk's bytes."""
    import random

    m, meta, original = recycling
    out = BuffersOut(m.chunk_buffers)
    errors: list[str] = []

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(25):
            start = rnd.randrange(len(original))
            pos = start
            with m.fetch_log_segment(meta, start) as f:
                for _ in range(rnd.randint(1, 6)):
                    piece = f.next_piece(rnd.choice([-1, 1000, CHUNK // 2]))
                    if piece is None:
                        break
                    want = original[pos : pos + piece.length]
                    if bytes(piece.view) != want:
                        errors.append(f"wrong bytes at {pos}")
                    threading.Event().wait(rnd.random() / 500)  # let the others evict and recycle
                    if bytes(piece.view) != want:
                        errors.append(f"bytes at {pos} changed while the stream held them")
                    pos += piece.length

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(READERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:5]
    stats = m.chunk_cache.stats()
    assert stats["cache-eviction-total"] > 20  # the tier really was recycling
    # Four streams at once, four reader threads and two transform threads: at most 28 buffers out at once;
    # measured 13 out at load 2 to 19. Buffers are recycled, not allocated per chunk: a buffer per load would
    # reach the loads from the store (292 to 344 misses). ``allocated``, which also counts the buffers the pool
    # dropped past its idle limit of 8 and made again, measured 12 to 33 (a quarter of the misses is 73 or more).
    most = most_buffers_out(streams=READERS, threads=READERS + TRANSFORM_THREADS)
    assert out.most <= most, (out.most, most)
    assert m.chunk_buffers.allocated < stats["cache-misses-total"] / 4, (m.chunk_buffers.allocated, stats)


def test_reading_on_after_a_failed_chunk_never_returns_another_chunks_bytes(
    segment_factory: Any, make_manager: Any
) -> None:
    seg = segment_factory(target_bytes=300_000, seed=21)
    m = make_manager(chunk_size=CHUNK, fetch_readahead_chunks=4)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    original = seg.log.read_bytes()
    path = Path(m.backend.root) / segment_keys(m.config["key.prefix"], meta).log
    stored = bytearray(path.read_bytes())
    stored[3 * CHUNK + 10] ^= 0xFF  # chunk 3 (stored as is: no compression, no encryption)
    path.write_bytes(stored)
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read(3 * CHUNK) == original[: 3 * CHUNK]
        with pytest.raises(CorruptDataException):
            f.read(100)
        with pytest.raises(RemoteStorageException, match="already failed"):  # never another chunk's bytes
            f.read(100)


# --- a property: any range, any piece size -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_copy(tmp_path_factory: pytest.TempPathFactory, segment_factory: Any) -> Iterator[tuple[Any, Any, bytes]]:
    from rsm import RemoteStorageManager

    seg = segment_factory(target_bytes=120_000, seed=8)
    m = RemoteStorageManager()
    m.use_chunk_buffers(FixedChunkBuffers(ChunkBufferPool(4096, region=memoryview(bytearray(12 * 4096)))))
    m.configure(
        {
            "chunk.size": "4096",
            "compression.enabled": "true",
            "storage.backend.class": "filesystem",
            "storage.root": str(tmp_path_factory.mktemp("store")),
            "storage.fsync.enabled": "false",
            "fetch.readahead.chunks": "3",
            "fetch.chunk.cache.size": "0",  # these properties follow the stream's buffers, not the cache's
            "fetch.chunk.cache.prefetch.max.size": "0",
        }
    )
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    yield m, meta, seg.log.read_bytes()
    m.close()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_range_via_next_piece_equals_the_original(shared_copy: Any, data: st.DataObject) -> None:
    m, meta, original = shared_copy
    size = len(original)
    start = data.draw(st.integers(0, size - 1), label="start")
    end = data.draw(st.integers(start, size + 5000) | st.none(), label="end")
    limit = data.draw(st.sampled_from([-1, 1, 7, 1000, 4095, 4096, 10_000]), label="limit")
    stop_after = data.draw(st.integers(1, 50) | st.none(), label="stop_after")
    expected = original[start : size if end is None else end + 1]
    got = bytearray()
    with m.fetch_log_segment(meta, start, end) as f:
        n = 0
        while (piece := f.next_piece(limit)) is not None:
            assert piece.length > 0 and (limit < 0 or piece.length <= limit)
            got += piece.view
            n += 1
            if stop_after is not None and n == stop_after:
                break
    if stop_after is None or n < stop_after:
        assert bytes(got) == expected
    else:
        assert expected.startswith(bytes(got))
    assert wait_until(lambda: _all_back(m)), m.chunk_buffers.region_free
    assert m.chunk_buffers.allocated == 0


# --- decoding into a given buffer -------------------------------------------------------------------------------

DATA = os.urandom(3000) + b"kafka " * 5000


@pytest.mark.parametrize("compressed, encrypted", [(True, False), (True, True), (False, True)])
def test_detransform_into_round_trip_writes_only_the_target(compressed: bool, encrypted: bool) -> None:
    """zstd and AES-GCM write straight into the target (AES alone too: decrypted where the chunk will live)."""
    cipher = ChunkCipher(DataKeyAndAad.generate()) if encrypted else None
    t = ChunkTransformer(compressed, cipher=cipher)
    stored = t.transform(DATA)
    backing = bytearray(b"\xee" * (len(DATA) + 20))
    t.detransform_into(stored, memoryview(backing)[10 : 10 + len(DATA)], "chunk 0")
    assert backing[10:-10] == DATA
    assert backing[:10] == backing[-10:] == b"\xee" * 10


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda s: s[:-5], "truncated or corrupt"),
        (lambda s: s[: len(s) // 2], "truncated or corrupt"),
        (lambda s: s[:3], "not a zstd frame"),
        (lambda s: b"not zstd at all", "not a zstd frame"),
        (lambda s: s + s, "decodes to more than"),
        (lambda s: s + b"junk", "chunk 4"),
    ],
    ids=["cut-5", "cut-half", "cut-header", "garbage", "two-frames", "trailing-junk"],
)
def test_detransform_into_rejects_damaged_zstd(mangle: Callable[[bytes], bytes], message: str) -> None:
    t = ChunkTransformer(True)
    stored = mangle(bytes(t.transform(DATA)))
    with pytest.raises(CorruptChunkError, match=message):
        t.detransform_into(stored, memoryview(bytearray(len(DATA))), "chunk 4")


@pytest.mark.parametrize("delta", [-1, 1])
def test_detransform_into_size_mismatch(delta: int) -> None:
    zstd = ChunkTransformer(True)
    with pytest.raises(CorruptChunkError, match="declares"):
        zstd.detransform_into(zstd.transform(DATA), memoryview(bytearray(len(DATA) + delta)), "chunk 1")
    cipher = ChunkCipher(DataKeyAndAad.generate())
    aes = ChunkTransformer(False, cipher=cipher)
    out = bytearray(b"\x01" * (len(DATA) + delta))
    with pytest.raises(CorruptChunkError, match="chunk index says"):
        aes.detransform_into(aes.transform(DATA), memoryview(out), "chunk 1")
    assert out == b"\x01" * (len(DATA) + delta)  # nothing written on a mismatch
    plain = ChunkTransformer(False)
    with pytest.raises(CorruptChunkError, match="chunk index says"):
        plain.detransform_into(DATA, memoryview(bytearray(len(DATA) + delta)), "chunk 1")


def test_detransform_into_rejects_a_flipped_bit_before_decompressing() -> None:
    t = ChunkTransformer(True, cipher=ChunkCipher(DataKeyAndAad.generate()))
    stored = bytearray(t.transform(DATA))
    stored[40] ^= 1
    with pytest.raises(DecryptionError, match="AES-GCM"):
        t.detransform_into(bytes(stored), memoryview(bytearray(len(DATA))), "chunk 2")


# --- the filesystem backend's read_range_into -------------------------------------------------------------------

OBJECT = bytes(range(256)) * 40 + b"tail"


@pytest.fixture
def fs(tmp_path: Path) -> FileSystemBackend:
    b = FileSystemBackend(tmp_path / "root")
    b.upload("topic/seg/00.log", io.BytesIO(OBJECT))
    return b


@pytest.mark.parametrize("start, end", [(0, len(OBJECT) - 1), (0, 0), (255, 513), (len(OBJECT) - 4, len(OBJECT) - 1)])
def test_read_range_into_exact_bytes(fs: FileSystemBackend, start: int, end: int) -> None:
    out = bytearray(b"\xaa" * (end - start + 3))
    n = fs.read_range_into("topic/seg/00.log", start, end, memoryview(out)[1:-1])
    assert n == end - start + 1
    assert out[1:-1] == OBJECT[start : end + 1] and out[:1] == out[-1:] == b"\xaa"
    target = bytearray(end - start + 1)
    read_range_into(fs, "topic/seg/00.log", start, end, memoryview(target))
    assert target == OBJECT[start : end + 1] == read_range(fs, "topic/seg/00.log", start, end)


def test_read_range_past_the_end(fs: FileSystemBackend) -> None:
    key, size = "topic/seg/00.log", len(OBJECT)
    out = bytearray(10)
    assert fs.read_range_into(key, size - 4, size + 5, memoryview(out)) == 4  # clamped, as the contract says
    assert out[:4] == b"tail"
    with pytest.raises(InvalidRange) as e:
        read_range_into(fs, key, size - 4, size + 5, memoryview(bytearray(10)))  # a full range was required
    assert e.value.size == size
    for start in (size, size + 100):
        with pytest.raises(InvalidRange):
            fs.read_range_into(key, start, start + 1, memoryview(bytearray(2)))
    with pytest.raises(InvalidRange):
        fs.read_range_into(key, 5, 4, memoryview(bytearray(1)))
    with pytest.raises(KeyNotFound):
        fs.read_range_into("topic/seg/missing.log", 0, 0, memoryview(bytearray(1)))
    with pytest.raises(ValueError):
        read_range_into(fs, key, 0, 9, memoryview(bytearray(9)))


def test_symlinked_object_file_is_refused_and_nothing_is_read(fs: FileSystemBackend, tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"SECRET" * 10)
    assert fs.root is not None
    (fs.root / "topic" / "seg" / "evil.log").symlink_to(secret)
    out = bytearray(b"\x00" * 6)
    for call in (
        lambda: fs.read_range_into("topic/seg/evil.log", 0, 5, memoryview(out)),
        lambda: read_range(fs, "topic/seg/evil.log", 0, 5),
        lambda: fs.fetch("topic/seg/evil.log").read(),
    ):
        with pytest.raises(StorageBackendException, match="symlink") as e:
            call()
        assert not isinstance(e.value, KeyNotFound)
    assert out == bytes(6)
    # the object next to it in the same (already verified) directory is still readable
    assert read_range(fs, "topic/seg/00.log", 0, 3) == OBJECT[:4]


def test_symlinked_directory_leading_out_of_the_root_is_refused(fs: FileSystemBackend, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "seg"
    outside.mkdir(parents=True)
    (outside / "00.log").write_bytes(b"SECRET")
    assert fs.root is not None
    (fs.root / "escape").symlink_to(tmp_path / "outside")
    out = bytearray(6)
    with pytest.raises(StorageBackendException, match="symlink 'escape'"):
        fs.read_range_into("escape/seg/00.log", 0, 5, memoryview(out))
    with pytest.raises(StorageBackendException, match="symlink 'escape'"):
        fs.fetch("escape/seg/00.log")
    with pytest.raises(StorageBackendException, match="symlink .*outside the storage root"):
        fs.upload("escape/seg/new.log", io.BytesIO(b"x"))
    assert out == bytes(6) and not (outside / "new.log").exists()
    # no symlink below the root is followed, even one that stays inside it: reads and writes agree
    (fs.root / "alias").symlink_to(fs.root / "topic")
    with pytest.raises(StorageBackendException, match="symlink 'alias'"):
        read_range(fs, "alias/seg/00.log", 0, 1)
    with pytest.raises(StorageBackendException, match="symlink .*elsewhere"):
        fs.upload("alias/seg/new.log", io.BytesIO(b"x"))


def test_directory_swapped_for_a_symlink_after_first_use_is_refused(fs: FileSystemBackend, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "00.log").write_bytes(b"SECRET" + bytes(100))
    assert fs.root is not None
    assert read_range(fs, "topic/seg/00.log", 0, 5) == OBJECT[:6]  # the directory is now "verified"
    shutil.rmtree(fs.root / "topic" / "seg")
    (fs.root / "topic" / "seg").symlink_to(outside)
    with pytest.raises(StorageBackendException, match="symlink 'seg'"):
        read_range(fs, "topic/seg/00.log", 0, 5)
