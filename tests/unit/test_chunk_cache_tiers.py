"""ChunkCache alone, over an in-memory range reader: the memory tier, the disk tier and the GETs between them,
without a manager."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fetch_fakes import FakeRanges, chunked_source

from chunking.buffer_pool import ChunkBufferPool
from rsm.errors import RemoteStorageException
from rsm.fetch.chunk_cache import ChunkCache, ChunkCacheSettings
from rsm.fetch.disk_store import DiskChunkStore
from rsm.fetch.source import SegmentSource

CHUNK = 64 * 1024
DATA = bytes(i % 253 for i in range(8 * CHUNK))


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


def _cache(
    ranges: FakeRanges, pool: ThreadPoolExecutor, memory: int = 32 * CHUNK, disk: DiskChunkStore | None = None
) -> ChunkCache:
    settings = ChunkCacheSettings(memory_bytes=memory, retention_s=None, coalesce_bytes=4 * CHUNK, get_timeout_s=10)
    return ChunkCache(ranges, ChunkBufferPool(CHUNK), settings, pool, disk=disk)  # type: ignore[arg-type]


def _load(cache: ChunkCache, src: SegmentSource, chunk_id: int, horizon: int | None = None) -> bytes:
    buf = cache.load(src, src.index.chunk(chunk_id), chunk_id if horizon is None else horizon)
    try:
        return bytes(buf.view)
    finally:
        buf.release()


def _original(chunk_id: int) -> bytes:
    return DATA[chunk_id * CHUNK : (chunk_id + 1) * CHUNK]


@pytest.mark.parametrize("compression", [False, True])
def test_a_second_load_is_served_from_memory(pool: ThreadPoolExecutor, compression: bool) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK, compression=compression)
    cache = _cache(ranges, pool)
    assert _load(cache, src, 3) == _original(3)
    assert _load(cache, src, 3) == _original(3)
    assert len(ranges.reads) == 1
    stats = cache.stats()
    assert stats["cache-hits-total"] == 1 and stats["cache-misses-total"] == 1


def test_one_get_brings_the_chunks_up_to_the_horizon_decoded_ahead(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    cache = _cache(ranges, pool)
    assert _load(cache, src, 0, horizon=3) == _original(0)
    assert cache.wait_idle()
    assert [_load(cache, src, i) for i in (1, 2, 3)] == [_original(i) for i in (1, 2, 3)]
    assert ranges.reads == [("seg.log", 0, 4 * CHUNK - 1)]
    assert cache.stats()["coalesced-get-total"] == 1


def test_readers_of_one_chunk_share_one_get_and_one_decode(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges(gate=threading.Event())
    src = chunked_source(ranges, DATA, CHUNK)
    cache = _cache(ranges, pool)
    results: list[bytes] = []
    readers = [threading.Thread(target=lambda: results.append(_load(cache, src, 5))) for _ in range(6)]
    for r in readers:
        r.start()
    assert ranges.started.wait(10)
    assert ranges.gate is not None
    ranges.gate.set()
    for r in readers:
        r.join(10)
    assert results == [_original(5)] * 6
    assert len(ranges.reads) == 1
    assert cache.stats()["cache-load-success-total"] == 1


def test_a_failed_load_is_not_cached(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    stored = ranges.objects.pop("seg.log")
    cache = _cache(ranges, pool)
    with pytest.raises(RemoteStorageException, match="missing although the manifest exists"):
        _load(cache, src, 1)
    ranges.objects["seg.log"] = stored
    assert _load(cache, src, 1) == _original(1)
    assert cache.stats()["cache-load-failure-total"] == 1


def test_a_forgotten_segment_is_read_from_the_store_again(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    cache = _cache(ranges, pool)
    _load(cache, src, 2)
    cache.forget_segment("seg")
    _load(cache, src, 2)
    assert len(ranges.reads) == 2


def test_a_corrupt_disk_entry_is_dropped_and_read_from_the_store(pool: ThreadPoolExecutor, tmp_path: Path) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    disk = DiskChunkStore(str(tmp_path / "disk"), 64 * CHUNK, None)
    cache = _cache(ranges, pool, memory=0, disk=disk)  # no memory tier: every load reads the disk tier
    assert _load(cache, src, 0, horizon=1) == _original(0)
    assert cache.wait_idle()
    assert disk.contains(src.cache_id, 1)
    disk.put(src.cache_id, 1, b"\x00" * CHUNK, "seg")  # bit rot
    assert _load(cache, src, 1) == _original(1)
    assert len(ranges.reads) == 2
    assert cache.stats()["integrity-failures-total"] == 1
    assert cache.wait_idle()
    assert _load(cache, src, 1) == _original(1)  # the good copy went back on disk
    assert cache.stats()["disk-cache-hits-total"] >= 2


def test_prefetch_decodes_a_chunk_into_memory_and_counts_its_hit(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    cache = _cache(ranges, pool)
    assert cache.ensure_cached(src, src.index.chunk(6), 6)
    assert not cache.ensure_cached(src, src.index.chunk(6), 6)  # there already
    assert _load(cache, src, 6) == _original(6)
    assert len(ranges.reads) == 1
    assert cache.stats()["prefetch-hits-total"] == 1
