"""The fetch path: chunk cache (memory and disk tiers), coalesced GETs, single flight, prefetch within and across
segments, rate limits. Reads follow the broker's pattern: a stream opened at a position, read for a while,
closed, reopened at the next position. GETs are counted on the real backend (filesystem here; the S3 test
counts them on the server)."""

from __future__ import annotations

import io
import json
import math
import threading
import time
import types
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import diskcache.core
import pytest
from emulators import StoreServer
from helpers import TIP, damage_stored_index, encryption_configs, wait_until

from rsm import CorruptDataException, RemoteResourceNotFoundException, RemoteStorageException
from rsm.core.object_keys import segment_keys
from rsm.fetch import segment_reader
from rsm.fetch.prefetch import Prefetcher
from rsm.fetch.rate_limit import RateLimiter
from rsm.metadata import IndexType

CHUNK = 65536


class GetCounter:
    """Counts ranged reads of ``.log`` objects on the real filesystem backend; optionally fails or holds them.
    Reads of other objects (``.indexes``) are only listed: key, first and last byte."""

    def __init__(self, backend: Any) -> None:
        self.calls: list[tuple[int, int]] = []
        self.other_reads: list[tuple[str, int, int]] = []
        self.fail_next = 0
        self.gate: threading.Event | None = None
        self._real = backend.read_range_into
        self._lock = threading.Lock()
        backend.read_range_into = self._read

    def _read(self, key: str, start: int, end: int, out: Any) -> int:
        if not key.endswith(".log"):
            self.other_reads.append((key, start, end))
        else:
            with self._lock:
                self.calls.append((start, end))
                failing = self.fail_next > 0
                self.fail_next -= 1 if failing else 0
            if self.gate is not None:
                self.gate.wait(10)
            if failing:
                raise OSError("injected read failure")
        return self._real(key, start, end, out)

    @property
    def count(self) -> int:
        return len(self.calls)


def broker_read(m: Any, meta: Any, size: int, step: int = 256 * 1024) -> bytes:
    """Read the whole segment the way the broker does: a new stream at each position, ``step`` bytes each."""
    out = bytearray()
    while len(out) < size:
        with m.fetch_log_segment(meta, len(out)) as f:
            piece = f.read(step)
        assert piece, f"no bytes at position {len(out)}"
        out += piece
    assert m.chunk_cache.wait_idle()  # background writes of the disk tier are done: tests look at it next
    return bytes(out)


@pytest.fixture
def segment(segment_factory: Any) -> Any:
    return segment_factory(target_bytes=2_500_000, seed=41)


def _manager(make_manager: Any, key_pairs: Any, **configs: Any) -> Any:
    base: dict[str, Any] = {
        "chunk_size": CHUNK,
        "compression_enabled": True,
        "fetch_coalesce_max_bytes": 512 * 1024,
        "fetch_chunk_cache_prefetch_max_size": 0,
    }
    base.update(configs)
    return make_manager(encryption_configs(key_pairs), **base)


def _stored_size(m: Any, meta: Any) -> int:
    return m.fetch_manifest(meta).chunk_index.transformed_file_size


def test_disk_cache_cold_warm_and_after_restart(
    segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "chunk-cache"
    disk = {"fetch_chunk_cache_class": "disk", "fetch_chunk_cache_path": str(cache_dir)}
    m = _manager(make_manager, key_pairs, **disk)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    gets = GetCounter(m.backend)

    assert broker_read(m, meta, len(original)) == original
    cold = gets.count
    assert 1 <= cold <= math.ceil(_stored_size(m, meta) / (512 * 1024)) + 1
    assert m.chunk_cache.stats()["coalesced-get-total"] >= 1

    assert broker_read(m, meta, len(original)) == original
    assert gets.count == cold, "a warm read must not touch the object store"
    m.close()

    # A new process on the same cache directory: every chunk comes from disk, none from the store.
    m2 = _manager(make_manager, key_pairs, **disk)
    gets2 = GetCounter(m2.backend)
    assert broker_read(m2, meta, len(original)) == original
    assert gets2.count == 0
    assert m2.chunk_cache.stats()["disk-cache-hits-total"] >= m2.fetch_manifest(meta).chunk_index.chunk_count


def test_disk_tier_holds_stored_bytes_not_plaintext(
    segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "chunk-cache"
    m = _manager(make_manager, key_pairs, fetch_chunk_cache_class="disk", fetch_chunk_cache_path=str(cache_dir))
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    assert broker_read(m, meta, len(original)) == original
    m.close()
    on_disk = b"".join(p.read_bytes() for p in cache_dir.rglob("*") if p.is_file())
    # Real record values are JSON lines: none of them may appear in the cache files.
    sample = original[len(original) // 2 : len(original) // 2 + 4096]
    probe = max(sample.split(b'"'), key=len)
    assert len(probe) >= 12
    assert probe in original and probe not in on_disk


def test_memory_cache_is_on_by_default(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    m = make_manager(encryption_configs(key_pairs), chunk_size=CHUNK, compression_enabled=True)
    assert m.config["fetch.chunk.cache.class"] == "memory"
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    gets = GetCounter(m.backend)
    assert broker_read(m, meta, len(original)) == original
    cold = gets.count
    assert broker_read(m, meta, len(original)) == original
    assert gets.count == cold
    stats = m.chunk_cache.stats()
    assert stats["cache-hits-total"] > 0 and stats["cache-size-total"] > 0


def test_a_miss_is_a_read_from_the_store_and_chunks_on_their_way_are_hits(
    segment: Any, make_manager: Any, key_pairs: Any
) -> None:
    """A cold sequential read: each coalesced GET starts with one miss; the other chunks it brings are hits for
    the readers that find them on their way, so the hit ratio says how often the store was spared a GET."""
    m = _manager(make_manager, key_pairs)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    chunks = m.fetch_manifest(meta).chunk_index.chunk_count
    gets = GetCounter(m.backend)
    assert broker_read(m, meta, len(original)) == original
    stats = m.chunk_cache.stats()
    assert 0 < gets.count < chunks / 4, "coalesced GETs of several chunks each"
    assert stats["cache-misses-total"] <= gets.count
    assert stats["cache-hits-total"] > 3 * stats["cache-misses-total"]


@pytest.mark.parametrize("cache_class", ["io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache", "disk"])
def test_aiven_class_names_are_accepted(make_manager: Any, tmp_path: Path, cache_class: str) -> None:
    m = make_manager(fetch_chunk_cache_class=cache_class, fetch_chunk_cache_path=str(tmp_path / "c"))
    assert m.config["fetch.chunk.cache.class"] == "disk"
    assert m.chunk_cache.disk is not None


def test_disk_class_without_path_is_a_config_error(make_manager: Any) -> None:
    from rsm import ConfigException

    with pytest.raises(ConfigException, match="fetch.chunk.cache.path"):
        make_manager(fetch_chunk_cache_class="disk")


def test_eviction_by_size(segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path) -> None:
    limit = 300_000
    m = _manager(
        make_manager,
        key_pairs,
        fetch_chunk_cache_class="disk",
        fetch_chunk_cache_path=str(tmp_path / "c"),
        fetch_chunk_cache_size=limit,
        fetch_chunk_cache_memory_size=4 * CHUNK,
    )
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    assert broker_read(m, meta, len(original)) == original
    stats = m.chunk_cache.stats()
    assert stats["cache-weight-total"] <= 4 * CHUNK
    assert stats["cache-eviction-total"] > 0
    # diskcache culls on writes, a few entries at a time: the volume stays near the limit, never the segment
    assert m.chunk_cache.disk.volume < limit + 3 * CHUNK < _stored_size(m, meta)
    gets = GetCounter(m.backend)
    assert broker_read(m, meta, len(original)) == original
    assert gets.count > 0, "evicted chunks come back from the store"


def test_retention_expires_unread_chunks(
    segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both tiers' clocks run ahead of the real one by ``skip`` seconds: the chunks expire when the test moves
    them past the retention, not when a loaded machine happens to pause between two reads."""
    skip = [0.0]
    monkeypatch.setattr(
        diskcache.core, "time", types.SimpleNamespace(time=lambda: time.time() + skip[0], sleep=time.sleep)
    )
    m = _manager(
        make_manager,
        key_pairs,
        fetch_chunk_cache_class="disk",
        fetch_chunk_cache_path=str(tmp_path / "c"),
        fetch_chunk_cache_retention_ms=600_000,
    )
    monkeypatch.setattr(m.chunk_cache.memory, "_clock", lambda: time.monotonic() + skip[0])
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    with m.fetch_log_segment(meta, 0) as f:
        first = f.read(1000)
    assert m.chunk_cache.wait_idle()  # the GET settled: its chunks are on disk, none is served from the flight
    gets = GetCounter(m.backend)
    skip[0] = 590.0  # 10 minutes' retention, 9 min 50 s later (plus the real time of a read, well under 10 s)
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read(1000) == first
    assert gets.count == 0
    skip[0] += 601.0  # now unread for longer than the retention
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read(1000) == first
    assert gets.count >= 1, "an expired chunk is read again from the store"


def test_unbounded_memory_tier_frees_expired_entries_nobody_looks_up() -> None:
    """Aiven's -1 size: nothing is evicted for room, so only the sweep frees chunks that are never read again.
    Each insert, lookup or stats() drops a bounded number of them; ``sweep()`` drops the rest."""
    from rsm.fetch.lru import SWEEP_ON_STORE, TimedLru

    now = [0.0]
    dropped: list[bytes] = []
    lru: TimedLru[int, bytes] = TimedLru(
        "chunk", 2**62, retention_s=10.0, weigher=len, clock=lambda: now[0], on_drop=dropped.append
    )
    for i in range(200):
        lru.put(i, bytes(1000))
    now[0] = 5.0
    assert lru.get(199) is not None  # read again: live for another 10 s
    now[0] = 11.0  # 0..198 expired; 199 was read at 5.0
    lru.put(1000, bytes(10))
    assert len(dropped) == SWEEP_ON_STORE, "one insert does bounded work"
    assert lru.weight == (199 - SWEEP_ON_STORE) * 1000 + 1000 + 10
    lru.stats()  # a metrics scrape sweeps a little too
    assert len(dropped) > SWEEP_ON_STORE
    swept_before = len(dropped)
    assert lru.sweep() == 199 - swept_before
    assert len(dropped) == 199 and lru.weight == 1010 and len(lru) == 2
    assert lru.stats()["cache-eviction-total"] == 199
    assert lru.get(199) is not None and lru.get(1000) is not None
    now[0] = 100.0
    assert lru.get(5) is None and lru.weight == 0, "a lookup of another key sweeps the expired ones"


def test_a_cache_without_retention_is_never_swept() -> None:
    from rsm.fetch.lru import TimedLru

    now = [0.0]
    lru: TimedLru[int, bytes] = TimedLru("chunk", 2**62, retention_s=None, weigher=len, clock=lambda: now[0])
    for i in range(10):
        lru.put(i, b"x")
    now[0] = 1e9
    lru.put(11, b"y")
    assert lru.sweep() == 0 and len(lru) == 11


@pytest.mark.parametrize("damage", ["flip", "truncate"])
@pytest.mark.parametrize("check", ["gcm", "crc32c"])
def test_damaged_disk_entry_is_dropped_and_fetched_again(
    segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path, damage: str, check: str
) -> None:
    """Encrypted chunks are checked by their GCM tag when read back from disk, plain ones by the manifest's CRC."""
    cache_dir = tmp_path / "c"
    # no compression: stored chunks are ~64 KiB, so diskcache keeps each in its own file
    m = make_manager(
        encryption_configs(key_pairs) if check == "gcm" else {},
        chunk_size=CHUNK,
        compression_enabled=False,
        fetch_coalesce_max_bytes=512 * 1024,
        fetch_chunk_cache_prefetch_max_size=0,
        fetch_chunk_cache_class="disk",
        fetch_chunk_cache_path=str(cache_dir),
        fetch_chunk_cache_memory_size=0,
    )
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    assert broker_read(m, meta, len(original)) == original
    files = sorted(p for p in cache_dir.rglob("*.val"))
    assert len(files) >= m.fetch_manifest(meta).chunk_index.chunk_count - 1
    for p in files:
        data = bytearray(p.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0x40
        else:
            del data[len(data) // 2 :]
        p.write_bytes(data)
    gets = GetCounter(m.backend)
    assert broker_read(m, meta, len(original)) == original
    assert gets.count >= len(files)
    assert m.chunk_cache.stats()["integrity-failures-total"] >= len(files)
    # the bad entries were replaced: a third read is served from disk again
    gets.calls.clear()
    assert broker_read(m, meta, len(original)) == original
    assert gets.count == 0


def test_recopied_segment_id_never_serves_stale_bytes(
    segment_factory: Any, make_manager: Any, key_pairs: Any, tmp_path: Path
) -> None:
    first = segment_factory(target_bytes=600_000, seed=51)
    second = segment_factory(target_bytes=600_000, seed=52)
    disk = {"fetch_chunk_cache_class": "disk", "fetch_chunk_cache_path": str(tmp_path / "c")}
    for encrypted in (True, False):
        extra = encryption_configs(key_pairs) if encrypted else {}
        m = make_manager(extra, chunk_size=CHUNK, compression_enabled=False, **disk)
        meta = first.to_metadata(TIP)
        m.copy_log_segment_data(meta, first.to_log_segment_data())
        assert broker_read(m, meta, first.size) == first.log.read_bytes()
        # The same segment id copied again with other bytes (a retried copy after a failure).
        m.copy_log_segment_data(meta, second.to_log_segment_data())
        meta2 = second.to_metadata(TIP, meta.remote_log_segment_id)
        assert broker_read(m, meta2, second.size) == second.log.read_bytes()
        m.close()
        # A restarted process that still has the first copy's chunks on disk.
        m2 = make_manager(extra, chunk_size=CHUNK, compression_enabled=False, **disk)
        assert broker_read(m2, meta2, second.size) == second.log.read_bytes()
        m2.close()


def test_failed_load_is_not_cached(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    m = _manager(make_manager, key_pairs)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    gets = GetCounter(m.backend)
    gets.fail_next = 1
    with pytest.raises(RemoteStorageException, match="injected read failure"):
        with m.fetch_log_segment(meta, 0) as f:
            f.read(1000)
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read(1000) == original[:1000]
    assert m.chunk_cache.stats()["cache-load-failure-total"] >= 1


def test_single_flight_32_readers_one_remote_read(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    m = _manager(make_manager, key_pairs, fetch_coalesce_max_bytes=1, fetch_readahead_chunks=0)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    gets = GetCounter(m.backend)
    gets.gate = threading.Event()
    position = 5 * CHUNK + 100
    results: list[bytes] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with m.fetch_log_segment(meta, position) as f:
                results.append(f.read(2000))
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(32)]
    for t in threads:
        t.start()
    assert wait_until(lambda: gets.count >= 1)
    time.sleep(0.2)  # every reader is now waiting on the one load
    gets.gate.set()
    for t in threads:
        t.join(30)
    assert not errors
    assert results == [original[position : position + 2000]] * 32
    assert gets.count == 1


def _prefetching(make_manager: Any, key_pairs: Any, segment: Any, prefetch_chunks: int) -> tuple[Any, Any]:
    """A manager with ``segment`` copied whose only background loads are prefetch's (no read-ahead, no
    coalescing), so what the cache holds is what prefetch brought; and the segment's metadata."""
    m = _manager(
        make_manager,
        key_pairs,
        fetch_chunk_cache_prefetch_max_size=prefetch_chunks * CHUNK,
        fetch_coalesce_max_bytes=1,
        fetch_readahead_chunks=0,
    )
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    return m, meta


def test_prefetch_within_segment(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    m, meta = _prefetching(make_manager, key_pairs, segment, 6)
    with m.fetch_log_segment(meta, 0) as f:
        f.read(100)
    cache_id = m.manifests.source(meta).cache_id
    assert wait_until(lambda: all(m.chunk_cache.memory.contains((cache_id, i)) for i in range(1, 7)))
    assert not m.chunk_cache.memory.contains((cache_id, 8))
    gets = GetCounter(m.backend)
    with m.fetch_log_segment(meta, 3 * CHUNK) as f:
        assert f.read(CHUNK) == segment.log.read_bytes()[3 * CHUNK : 4 * CHUNK]
    assert gets.count == 0
    assert m.prefetcher.stats()["prefetch-hits-total"] >= 1


def test_prefetch_follows_a_stream_that_stays_open(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    """The JVM shim keeps a broker's stream open from one fetch to the next: prefetch must follow its reader as
    it moves on through the segment, not wait for a close that does not come."""
    m, meta = _prefetching(make_manager, key_pairs, segment, 2)
    cache_id = m.manifests.source(meta).cache_id
    original = segment.log.read_bytes()
    f = m.fetch_log_segment(meta, 0)
    try:
        assert f.read(CHUNK) == original[:CHUNK]
        assert m.prefetcher.stats()["prefetch-runs-total"] == 0  # the first chunk: the stream plans its own loads
        for chunk_id in (1, 2, 3):  # on through chunks 1, 2 and 3, still open; each one reached starts a run
            # (one chunk at a time: reports that arrive while a run still waits for a worker merge into it)
            start = chunk_id * CHUNK
            assert f.read(CHUNK) == original[start : start + CHUNK]
            assert wait_until(lambda n=chunk_id: m.prefetcher.stats()["prefetch-runs-total"] == n)
        assert wait_until(lambda: all(m.chunk_cache.memory.contains((cache_id, i)) for i in (4, 5)))
        assert not m.chunk_cache.memory.contains((cache_id, 7))
    finally:
        f.close()
    time.sleep(0.2)  # the close reports chunk 3 again, which is no new run
    assert m.prefetcher.stats()["prefetch-runs-total"] == 3


def test_prefetch_reports_merge_while_their_run_waits(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    """A reader reports every chunk it reaches; with tiny chunks (a hostile manifest's 1-byte chunks) that is
    thousands of reports, which must not queue thousands of runs: they merge into the one not started yet."""
    m = _manager(make_manager, key_pairs, fetch_coalesce_max_bytes=1)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    src = m.manifests.source(meta)
    gate = threading.Event()
    pool = ThreadPoolExecutor(1)
    try:
        pool.submit(gate.wait, 10)  # the pool is busy: the first run waits, later reports join it
        prefetcher = Prefetcher(m.chunk_cache, 2 * CHUNK, pool, m.next_segments)
        for k in range(50):
            prefetcher.after_read(src, k % 5)  # the furthest chunk reached is 4
        gate.set()
    finally:
        pool.shutdown(wait=True)
    assert prefetcher.stats()["prefetch-runs-total"] == 1
    assert all(m.chunk_cache.memory.contains((src.cache_id, i)) for i in (5, 6))
    assert not m.chunk_cache.memory.contains((src.cache_id, 7))


def _consecutive_segments(segment_factory: Any, seed: int) -> tuple[Any, Any, Any, Any]:
    """Two segments of one partition, the second starting where the first ends: a, its metadata, b, its metadata."""
    a = segment_factory(target_bytes=300_000, seed=seed, base_offset=0)
    meta_a = a.to_metadata(TIP)
    b = segment_factory(target_bytes=300_000, seed=seed + 1, base_offset=meta_a.end_offset + 1)
    return a, meta_a, b, b.to_metadata(TIP)


def _tiered_pair(segment_factory: Any, make_manager: Any, key_pairs: Any, seed: int) -> tuple[Any, ...]:
    """A manager whose prefetch goes 4 chunks on (into the next segment), with both segments of
    ``_consecutive_segments`` copied: the manager, then a, its metadata, b, its metadata."""
    a, meta_a, b, meta_b = _consecutive_segments(segment_factory, seed)
    m = _manager(make_manager, key_pairs, fetch_chunk_cache_prefetch_max_size=4 * CHUNK, fetch_readahead_chunks=0)
    m.copy_log_segment_data(meta_a, a.to_log_segment_data())
    m.copy_log_segment_data(meta_b, b.to_log_segment_data())
    return m, a, meta_a, b, meta_b


def _check_offset_and_time_indexes(m: Any, meta: Any, seg: Any) -> None:
    """The broker's first two index calls for a segment give the segment's own files."""
    for index_type, path in ((IndexType.OFFSET, seg.offset_index), (IndexType.TIMESTAMP, seg.time_index)):
        with m.fetch_index(meta, index_type) as f:
            assert f.read() == path.read_bytes()


def test_prefetch_continues_into_the_next_segment(segment_factory: Any, make_manager: Any, key_pairs: Any) -> None:
    m, a, meta_a, b, meta_b = _tiered_pair(segment_factory, make_manager, key_pairs, seed=61)
    with m.fetch_log_segment(meta_a, a.size - 1000) as f:
        assert f.read() == a.log.read_bytes()[-1000:]
    cache_b = m.manifests.source(meta_b).cache_id
    assert wait_until(lambda: all(m.chunk_cache.memory.contains((cache_b, i)) for i in range(3)))
    assert m.prefetcher.stats()["prefetch-cross-segment-total"] >= 1
    gets = GetCounter(m.backend)
    with m.fetch_log_segment(meta_b, 0) as f:
        assert f.read(2 * CHUNK) == b.log.read_bytes()[: 2 * CHUNK]
    # The reader's two chunks came from the cache. (Its progress starts the next prefetch, which may GET what
    # follows: only the stored bytes of chunks 0 and 1 must not have been read.)
    read_chunks_end = m.fetch_manifest(meta_b).chunk_index.chunk(1).transformed_end
    assert [c for c in gets.calls if c[0] < read_chunks_end] == []
    # The indexes the broker fetches before a segment's first read came ahead too: serving them reads nothing.
    _check_offset_and_time_indexes(m, meta_b, b)
    assert gets.other_reads == []


def test_a_damaged_index_ahead_stops_no_prefetch_and_reaches_the_broker_as_an_error(
    segment_factory: Any, make_manager: Any, key_pairs: Any, tmp_path: Path
) -> None:
    """Prefetch loads the next segment's indexes with its chunks. When one of them is corrupt, the rest of the
    prefetch goes on, the intact index is served from the cache, and the corrupt one is never cached: the
    broker's own request for it gets the integrity error."""
    m, a, meta_a, b, meta_b = _tiered_pair(segment_factory, make_manager, key_pairs, seed=63)
    damage_stored_index(tmp_path / "store", m, meta_b, IndexType.TIMESTAMP)
    with m.fetch_log_segment(meta_a, a.size - 1000) as f:
        f.read()
    cache_b = m.manifests.source(meta_b).cache_id
    assert wait_until(lambda: all(m.chunk_cache.memory.contains((cache_b, i)) for i in range(3)))
    assert m.index_cache.contains((cache_b, IndexType.OFFSET))
    assert not m.index_cache.contains((cache_b, IndexType.TIMESTAMP))
    gets = GetCounter(m.backend)
    with m.fetch_index(meta_b, IndexType.OFFSET) as f:
        assert f.read() == b.offset_index.read_bytes()
    assert gets.other_reads == []
    with pytest.raises(CorruptDataException, match="TIMESTAMP index"):
        m.fetch_index(meta_b, IndexType.TIMESTAMP)


def test_indexes_far_apart_are_loaded_ahead_one_read_each(
    segment: Any, make_manager: Any, key_pairs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexes with too much between them (a foreign layout) are not read in one span: each prefetch pass
    loads the first one still missing, reading only its own bytes."""
    import rsm.fetch.index_reader as index_reader_module

    m = _manager(make_manager, key_pairs)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    monkeypatch.setattr(index_reader_module, "INDEX_READ_GAP_MAX", -1)
    src = m.manifests.source(meta)
    gets = GetCounter(m.backend)
    m.index_reader.load_ahead(src)
    assert m.index_cache.contains((src.cache_id, IndexType.OFFSET))
    assert not m.index_cache.contains((src.cache_id, IndexType.TIMESTAMP))
    offset = m.fetch_manifest(meta).segment_indexes[IndexType.OFFSET]
    assert [(start, end) for _, start, end in gets.other_reads] == [
        (offset.position, offset.position + offset.size - 1)
    ]
    m.index_reader.load_ahead(src)
    with m.fetch_index(meta, IndexType.TIMESTAMP) as f:
        assert f.read() == segment.time_index.read_bytes()
    assert len(gets.other_reads) == 2


def test_no_index_is_loaded_ahead_into_a_cache_that_cannot_keep_it(
    segment: Any, make_manager: Any, key_pairs: Any
) -> None:
    """With ``fetch.indexes.cache.size=0`` an index loaded ahead would be thrown away and read again at every
    prefetch pass: none is read."""
    m = _manager(make_manager, key_pairs, fetch_indexes_cache_size=0)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    gets = GetCounter(m.backend)
    m.index_reader.load_ahead(m.manifests.source(meta))
    assert gets.other_reads == []
    with m.fetch_index(meta, IndexType.OFFSET) as f:  # the broker's own request still reads it
        assert f.read() == segment.offset_index.read_bytes()
    assert len(gets.other_reads) == 1


def test_closing_early_keeps_what_was_loaded(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    m = _manager(make_manager, key_pairs, fetch_coalesce_max_bytes=8 * CHUNK)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    gets = GetCounter(m.backend)
    with m.fetch_log_segment(meta, 0) as f:
        f.read(10)
    cache_id = m.manifests.source(meta).cache_id
    # The first GET brought several chunks; the ones nobody read yet are decoded in the background.
    assert wait_until(lambda: m.chunk_cache.memory.contains((cache_id, 3)))
    before = gets.count
    with m.fetch_log_segment(meta, 2 * CHUNK) as f:
        f.read(CHUNK)
    assert gets.count == before


def test_warm_chunks_skip_the_thread_pool(
    segment: Any, make_manager: Any, key_pairs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk the memory tier holds is handed to the stream at once, without a task on the transform pool (a
    thread hand-off is most of a warm broker fetch's latency on a busy host). A chunk missing between two held
    ones is loaded as usual, without waiting for the plan of a chunk the loader never saw (or of a chunk before
    the stream)."""
    m = _manager(make_manager, key_pairs, fetch_chunk_cache_size=64 * 1024 * 1024)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    assert broker_read(m, meta, len(original)) == original  # everything is in the memory tier now
    pool = m.segment_reader.executor
    submitted: list[Any] = []

    class CountingPool:
        def submit(self, fn: Any, *args: Any) -> Any:
            submitted.append(args)
            return pool.submit(fn, *args)

    monkeypatch.setattr(m.segment_reader, "executor", CountingPool())
    assert broker_read(m, meta, len(original), step=CHUNK + 1000) == original
    assert submitted == []
    cache_id = m.manifests.source(meta).cache_id
    for chunk_id in (1, 2, 4):
        m.chunk_cache.memory.invalidate((cache_id, chunk_id))
    # A wait for a plan that never comes lasts the whole safety net: made 60 s here, so such a wait cannot hide
    # in a loaded machine's slowness. The read itself takes milliseconds (seconds at load 15): 30 s is both far
    # above it and far below one wait.
    monkeypatch.setattr(segment_reader, "PLANNING_WAIT_S", 60.0)
    started = time.monotonic()
    with m.fetch_log_segment(meta, CHUNK) as f:
        assert f.read(4 * CHUNK) == original[CHUNK : 5 * CHUNK]
    # neither the stream's first chunk (1) waited for a chunk before the stream, nor chunk 4 for chunk 3's plan
    assert time.monotonic() - started < 30
    assert [chunk.id for (chunk,) in submitted] == [1, 2, 4]


@pytest.mark.parametrize("cache_class", ["disk", "memory"])
def test_each_chunk_is_decoded_once_and_never_evicted_unread(
    segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path, cache_class: str
) -> None:
    """A coalesced GET decodes the chunks after the one asked for in the background; a reader that got to one
    first must not see it decoded a second time, and no more is decoded ahead than the memory tier can keep
    until the reader comes (a quarter of it), so nothing decoded is evicted unread and fetched again."""
    tier = 16 * CHUNK
    m = _manager(
        make_manager,
        key_pairs,
        fetch_chunk_cache_class=cache_class,
        fetch_chunk_cache_path=str(tmp_path / "cc"),
        fetch_chunk_cache_size=tier if cache_class == "memory" else 64 * 1024 * 1024,
        fetch_chunk_cache_memory_size=tier,
        fetch_coalesce_max_bytes=64 * 1024 * 1024,
    )
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    original = segment.log.read_bytes()
    chunks = m.fetch_manifest(meta).chunk_index.chunk_count
    assert chunks > 2 * 16, "the segment must be bigger than the memory tier for this test to mean anything"
    gets = GetCounter(m.backend)
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read() == original
    assert m.chunk_cache.wait_idle()
    stats = m.chunk_cache.stats()
    assert stats["cache-load-success-total"] == chunks, stats
    if cache_class == "memory":
        # no disk tier to hold the rest of a run: GETs are cut at what may be decoded ahead (4 chunks here)
        assert gets.count >= math.ceil(chunks / 5), gets.calls
    else:
        assert gets.count == 1, gets.calls


def test_index_cache_and_single_unwrap(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    from rsm import IndexType

    m = _manager(make_manager, key_pairs)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    unwraps = 0
    real = m.key_ring.unwrap

    def counting(wrapped: bytes) -> bytes:
        nonlocal unwraps
        unwraps += 1
        return real(wrapped)

    m.key_ring.unwrap = counting
    for _ in range(5):
        with m.fetch_log_segment(meta, 0) as f:
            f.read(10)
        assert m.fetch_index(meta, IndexType.OFFSET).read() == segment.offset_index.read_bytes()
    assert unwraps == 1
    assert m.index_cache.stats()["cache-hits-total"] == 4
    assert m.manifest_cache.stats()["cache-load-success-total"] == 1


def test_delete_drops_cached_chunks(segment: Any, make_manager: Any, key_pairs: Any, tmp_path: Path) -> None:
    m = _manager(make_manager, key_pairs, fetch_chunk_cache_class="disk", fetch_chunk_cache_path=str(tmp_path / "c"))
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    broker_read(m, meta, segment.size)
    assert len(m.chunk_cache.disk) > 0
    m.delete_log_segment_data(meta)
    assert len(m.chunk_cache.disk) == 0
    assert m.chunk_cache.stats()["cache-weight-total"] == 0


def test_a_manifest_read_in_flight_during_delete_is_not_kept(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    """A reader that had read the manifest from the store, but not yet put it in the cache, when the segment was
    deleted gets its answer; the cache does not keep that manifest. Kept, it would outlive the delete: the
    segment's next fetch_index would find it and fail on the missing .indexes object with a plain
    RemoteStorageException instead of "not found" (the JVM soak saw a stream after a delete)."""
    m = _manager(make_manager, key_pairs)
    meta = segment.to_metadata(TIP)
    m.copy_log_segment_data(meta, segment.to_log_segment_data())
    manifest_key = segment_keys("", meta).manifest
    real_fetch = m.backend.fetch
    read_done, go_on = threading.Event(), threading.Event()

    def fetch_then_wait(key: str, *args: Any) -> Any:
        stream = real_fetch(key, *args)
        if key == manifest_key and not read_done.is_set():
            body = stream.read()
            stream.close()
            read_done.set()
            assert go_on.wait(10)
            return _Body(body)
        return stream

    m.backend.fetch = fetch_then_wait
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(lambda: m.fetch_index(meta, IndexType.OFFSET).read())
        assert read_done.wait(10)
        m.delete_log_segment_data(meta)
        go_on.set()
        with pytest.raises(RemoteStorageException):  # its .indexes object went with the delete
            first.result(10)
    with pytest.raises(RemoteResourceNotFoundException):
        m.fetch_index(meta, IndexType.OFFSET)
    assert m.manifest_cache.stats()["cache-size-total"] == 0


class _Body:
    """A manifest body already read, handed out as the backend's stream would be."""

    def __init__(self, body: bytes) -> None:
        self._io = io.BytesIO(body)

    def __enter__(self) -> io.BytesIO:
        return self._io

    def __exit__(self, *exc: object) -> None:
        self._io.close()


# --- rate limits ---------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def time(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def test_rate_limiter_bounds_every_window() -> None:
    clock = FakeClock()
    rate = 50 * 1024 * 1024
    limiter = RateLimiter(rate, clock=clock.time, sleep=clock.sleep)
    passed: list[tuple[float, int]] = []
    for i in range(4000):  # 4 interleaved "copies" of 1 MiB reads
        n = 1024 * 1024 - (i % 4) * 4096
        limiter.acquire(n)
        passed.append((clock.time(), n))
    total = sum(n for _, n in passed)
    elapsed = clock.time()
    assert abs(total / elapsed - rate) / rate < 0.05
    # every 10-second window stays within 5% of the limit
    start = 0.0
    while start + 10 <= elapsed:
        in_window = sum(n for t, n in passed if start <= t < start + 10)
        assert in_window <= rate * 10 * 1.05
        start += 1.7


def test_prefetch_yields_to_waiting_readers() -> None:
    limiter = RateLimiter(1024 * 1024)
    limiter.acquire(2 * 1024 * 1024)  # in debt now
    order: list[str] = []
    reader = threading.Thread(target=lambda: (limiter.acquire(512 * 1024), order.append("reader")))
    reader.start()
    time.sleep(0.05)
    background = threading.Thread(
        target=lambda: (limiter.acquire(512 * 1024, background=True), order.append("prefetch"))
    )
    background.start()
    reader.join(10)
    background.join(10)
    assert order == ["reader", "prefetch"]


def test_upload_rate_limit_covers_every_uploaded_byte(segment: Any, make_manager: Any, key_pairs: Any) -> None:
    m = _manager(
        make_manager,
        key_pairs,
        upload_rate_limit_bytes_per_second=1048576,
        custom_metadata_fields_include="REMOTE_SIZE",
    )
    meta = segment.to_metadata(TIP)
    started = time.monotonic()
    custom = m.copy_log_segment_data(meta, segment.to_log_segment_data())
    elapsed = time.monotonic() - started
    from rsm.core.custom_metadata import CustomMetadata

    remote_size = CustomMetadata.decode(custom).remote_size
    stats = m.upload_rate_limiter.stats()
    assert stats["rate-limited-bytes-total"] == remote_size
    assert elapsed >= (remote_size - 0.1 * 1048576) / 1048576 * 0.95


# --- a real S3 server: GETs counted by the server ------------------------------------------------------------


def _moto_gets(server: StoreServer, suffix: str = ".log") -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{server.endpoint}/moto-api/recorder/download-recording", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return [e for e in map(json.loads, filter(None, lines)) if e["method"] == "GET" and suffix in e["url"]]


def _moto_recording(server: StoreServer, action: str) -> None:
    req = urllib.request.Request(f"{server.endpoint}/moto-api/recorder/{action}", method="POST", data=b"")
    urllib.request.urlopen(req, timeout=10).close()


def test_s3_broker_style_reads_count_gets_on_the_server(
    s3_moto_server: StoreServer,
    segment: Any,
    key_pairs: Any,
    tmp_path: Path,
) -> None:
    from rsm import RemoteStorageManager

    configs = {
        "storage.backend.class": s3_moto_server.backend,
        **{f"storage.{k}": v for k, v in s3_moto_server.config().items()},
        **encryption_configs(key_pairs),
        "chunk.size": str(CHUNK),
        "compression.enabled": "true",
        "key.prefix": f"gets-{time.time_ns()}/",
        "fetch.coalesce.max.bytes": str(512 * 1024),
        "fetch.chunk.cache.prefetch.max.size": "0",
        "fetch.chunk.cache.class": "disk",
        "fetch.chunk.cache.path": str(tmp_path / "c"),
    }
    meta = segment.to_metadata(TIP)
    original = segment.log.read_bytes()
    with RemoteStorageManager() as m:
        m.configure(configs)
        m.copy_log_segment_data(meta, segment.to_log_segment_data())
        stored = _stored_size(m, meta)
        _moto_recording(server=s3_moto_server, action="reset-recording")
        _moto_recording(server=s3_moto_server, action="start-recording")
        try:
            assert broker_read(m, meta, len(original)) == original
            cold = len(_moto_gets(s3_moto_server))
            assert broker_read(m, meta, len(original)) == original
            warm = len(_moto_gets(s3_moto_server)) - cold
        finally:
            _moto_recording(server=s3_moto_server, action="stop-recording")
    assert 1 <= cold <= math.ceil(stored / (512 * 1024)) + 1
    assert warm == 0
    keys = segment_keys(configs["key.prefix"], meta)
    assert keys.log.endswith(".log")


def test_s3_restart_and_prefetch_across_segments_take_no_gets(
    s3_moto_server: StoreServer,
    segment_factory: Any,
    key_pairs: Any,
    tmp_path: Path,
) -> None:
    """On a real S3 server: a restarted process serves a read from its disk cache, and prefetch has the next
    segment's first chunks ready, both with zero GETs of .log objects as the server counts them."""
    from rsm import RemoteStorageManager

    a, meta_a, b, meta_b = _consecutive_segments(segment_factory, seed=71)
    configs = {
        "storage.backend.class": s3_moto_server.backend,
        **{f"storage.{k}": v for k, v in s3_moto_server.config().items()},
        **encryption_configs(key_pairs),
        "chunk.size": str(CHUNK),
        "compression.enabled": "true",
        "key.prefix": f"prefetch-{time.time_ns()}/",
        "fetch.chunk.cache.class": "disk",
        "fetch.chunk.cache.path": str(tmp_path / "c"),
        "fetch.chunk.cache.prefetch.max.size": str(4 * CHUNK),
        "fetch.readahead.chunks": "0",
    }
    with RemoteStorageManager() as m:
        m.configure(configs)
        m.copy_log_segment_data(meta_a, a.to_log_segment_data())
        m.copy_log_segment_data(meta_b, b.to_log_segment_data())
        assert broker_read(m, meta_a, a.size) == a.log.read_bytes()  # ends at A's last chunk: prefetch goes on
        assert wait_until(lambda: m.prefetcher.stats()["prefetch-cross-segment-total"] >= 1)
        cache_b = m.manifests.source(meta_b).cache_id
        assert wait_until(lambda: all(m.chunk_cache.disk.contains(cache_b, i) for i in range(3)))
        assert m.chunk_cache.wait_idle()
        _moto_recording(server=s3_moto_server, action="reset-recording")
        _moto_recording(server=s3_moto_server, action="start-recording")
        try:  # the broker's first calls for B: its indexes, which prefetch brought with B's chunks
            _check_offset_and_time_indexes(m, meta_b, b)
            index_gets = _moto_gets(s3_moto_server, ".indexes")
        finally:
            _moto_recording(server=s3_moto_server, action="stop-recording")
        assert index_gets == []
    _moto_recording(server=s3_moto_server, action="reset-recording")
    _moto_recording(server=s3_moto_server, action="start-recording")
    try:
        with RemoteStorageManager() as m:  # a restart: only the disk tier is left
            m.configure({**configs, "fetch.chunk.cache.prefetch.max.size": "0"})  # its own prefetch would GET
            assert broker_read(m, meta_a, a.size) == a.log.read_bytes()
            with m.fetch_log_segment(meta_b, 0) as f:
                assert f.read(2 * CHUNK) == b.log.read_bytes()[: 2 * CHUNK]
            gets = _moto_gets(s3_moto_server)
    finally:
        _moto_recording(server=s3_moto_server, action="stop-recording")
    assert gets == []


# --- the stored bytes of coalesced GETs are recycled -------------------------------------------------------------


def _coalescing(segment_factory: Any, key_pairs: Any, make_manager: Any) -> tuple[Any, Any, bytes]:
    """AES without compression (so a GET's stored bytes fill a pooled buffer), 16 KiB chunks, GETs of up to
    four stored chunks, a tier of eight decoded ones: every GET's bytes are shared by a run of chunks that readers
    and background decodes take at different times."""
    seg = segment_factory(target_bytes=600_000, seed=44)
    m = make_manager(
        encryption_configs(key_pairs),
        chunk_size=16384,
        compression_enabled=False,
        fetch_readahead_chunks=3,
        transform_thread_pool_size=2,
        fetch_coalesce_max_bytes=4 * 16384,
        fetch_chunk_cache_size=8 * 16384,
        fetch_chunk_cache_prefetch_max_size=0,
    )
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    return m, meta, seg.log.read_bytes()


def test_get_buffers_are_recycled_not_allocated_per_get(
    segment_factory: Any, key_pairs: Any, make_manager: Any
) -> None:
    m, meta, original = _coalescing(segment_factory, key_pairs, make_manager)
    assert broker_read(m, meta, len(original), step=20_000) == original
    stats = m.chunk_cache.stats()
    assert stats["coalesced-get-total"] >= 3
    pool = m.chunk_cache.stored_buffers
    # One per GET whose chunks are still being decoded, not one per GET. A reader decodes the chunk it waits for
    # on its own thread while the pool's threads go on with the read-ahead, so several GETs overlap: 2-10 of 14
    # on a loaded VM. Without the pool it would be all 14.
    assert 1 <= pool.allocated < stats["remote-get-total"]
    assert pool.idle == min(pool.allocated, 2)  # all back at rest


def test_concurrent_readers_of_coalesced_gets_always_get_their_own_bytes(
    segment_factory: Any, key_pairs: Any, make_manager: Any
) -> None:
    """Readers that take chunks out of a GET in flight, background decodes and new GETs share the recycled GET
    buffers: a buffer given back while somebody still decodes from it would fail the GCM tag or the bytes."""
    import random

    m, meta, original = _coalescing(segment_factory, key_pairs, make_manager)
    errors: list[str] = []

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(15):
            start = rnd.randrange(len(original))
            length = rnd.randint(1, 120_000)
            try:
                with m.fetch_log_segment(meta, start) as f:
                    got = f.read(length)
            except Exception as e:  # noqa: BLE001 - collected, asserted below
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if got != original[start : start + length]:
                errors.append(f"wrong bytes for [{start}, +{length})")

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    assert m.chunk_cache.wait_idle()
    assert m.chunk_cache.stats()["integrity-failures-total"] == 0
    # Prefetch queued by the last reads may still start a GET after wait_idle() saw none in flight: every buffer
    # must come back once the plugin has nothing left to do, however long the queue takes to drain.
    pool = m.chunk_cache.stored_buffers
    deadline = time.monotonic() + 30
    while pool.idle != min(pool.allocated, 2) and time.monotonic() < deadline:
        m.chunk_cache.wait_idle()
        time.sleep(0.01)
    assert pool.idle == min(pool.allocated, 2)
