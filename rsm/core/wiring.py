"""What ``RemoteStorageManager.configure()`` builds once: the collaborators each call of the contract hands over
to, sized by the configuration (docs/architecture.md shows who owns what)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from backends.base import BackendCapabilities, RangeReader, StorageBackend
from chunking.buffer_pool import ChunkBufferPool
from encryption.keyring import RsaKeyRing
from rsm.core.classic_format import ClassicFormat
from rsm.core.config import RsmConfig
from rsm.core.config_keys import PREFETCH_LISTING_CACHE_S
from rsm.core.key_services import build_key_ring
from rsm.core.manifest_store import ManifestStore
from rsm.core.pools import ThreadPools
from rsm.core.segment_format import Formats, plugged_formats
from rsm.core.segment_objects import SegmentObjects
from rsm.fetch.chunk_cache import ChunkBufferSupply, ChunkCache, ChunkCacheSettings
from rsm.fetch.disk_store import DiskChunkStore
from rsm.fetch.index_reader import IndexReader
from rsm.fetch.next_segment import NextSegmentFinder
from rsm.fetch.prefetch import Prefetcher
from rsm.fetch.rate_limit import RateLimiter
from rsm.fetch.segment_reader import SegmentReader
from rsm.metrics.recorders import KeyServiceRecorder, RsmRecorder

__all__ = ["Wiring", "make_key_ring", "wire"]


@dataclass(frozen=True)
class Wiring:
    """What ``configure()`` builds, once: nothing here is replaced afterwards."""

    config: RsmConfig
    backend: StorageBackend
    capabilities: BackendCapabilities
    key_ring: RsaKeyRing | None
    pools: ThreadPools
    upload_limiter: RateLimiter | None
    fetch_limiter: RateLimiter | None
    manifests: ManifestStore
    objects: SegmentObjects
    chunks: ChunkCache
    indexes: IndexReader
    next_segments: NextSegmentFinder
    prefetcher: Prefetcher
    segments: SegmentReader
    formats: Formats


def wire(
    config: RsmConfig,
    backend: StorageBackend,
    capabilities: BackendCapabilities,
    key_ring: RsaKeyRing | None,
    recorder: RsmRecorder,
    buffer_supply: ChunkBufferSupply | None,
) -> Wiring:
    """The collaborators, sized by the configuration (the ``fetch.*`` keys for the read path); the chunk cache
    decodes into the buffers ``buffer_supply`` gives when a transport supplied one."""
    upload_limiter = _limiter(config["upload.rate.limit.bytes.per.second"])
    fetch_limiter = _limiter(config["fetch.rate.limit.bytes.per.second"])
    background = config["fetch.chunk.cache.thread.pool.size"] or (os.cpu_count() or 2)
    pools = ThreadPools(config.thread_pool_size, background)
    manifests = ManifestStore(config, backend, key_ring, upload_limiter, capabilities.conditional_writes)
    ranges = RangeReader(backend, capabilities)
    chunks = _chunk_cache(config, ranges, pools, fetch_limiter, buffer_supply)
    indexes = IndexReader(
        manifests,
        ranges,
        config["fetch.indexes.cache.size"],
        config["fetch.indexes.cache.retention.ms"] / 1000,
        config["fetch.indexes.cache.get.timeout.ms"] / 1000,
    )
    listing_timeout = config["fetch.manifest.cache.get.timeout.ms"] / 1000
    next_segments = NextSegmentFinder(manifests, manifests, indexes, PREFETCH_LISTING_CACHE_S, listing_timeout)
    prefetcher = Prefetcher(chunks, config["fetch.chunk.cache.prefetch.max.size"], pools.background, next_segments)
    segments = SegmentReader(manifests, chunks, pools.transform, config["fetch.readahead.chunks"], prefetcher)
    classic = ClassicFormat(config, backend, key_ring, manifests, pools.transform, upload_limiter, segments)
    formats = Formats(classic, [plugin.build(config) for plugin in plugged_formats()])
    objects = SegmentObjects(config, backend, manifests, formats, upload_limiter, recorder)
    return Wiring(
        config=config,
        backend=backend,
        capabilities=capabilities,
        key_ring=key_ring,
        pools=pools,
        upload_limiter=upload_limiter,
        fetch_limiter=fetch_limiter,
        manifests=manifests,
        objects=objects,
        chunks=chunks,
        indexes=indexes,
        next_segments=next_segments,
        prefetcher=prefetcher,
        segments=segments,
        formats=formats,
    )


def _chunk_cache(
    config: RsmConfig,
    ranges: RangeReader,
    pools: ThreadPools,
    limiter: RateLimiter | None,
    buffer_supply: ChunkBufferSupply | None,
) -> ChunkCache:
    """The chunk cache over the buffers a transport supplied (``use_chunk_buffers``), else a pool of its own
    with enough idle buffers for every pool thread's read-ahead (more come and go with the load)."""
    retention = config["fetch.chunk.cache.retention.ms"] / 1000
    disk = None
    memory_bytes = config["fetch.chunk.cache.size"]
    if config["fetch.chunk.cache.class"] == "disk":
        disk = DiskChunkStore(config["fetch.chunk.cache.path"], config["fetch.chunk.cache.size"], retention)
        memory_bytes = config["fetch.chunk.cache.memory.size"]
    supplied = buffer_supply.chunk_buffers(config["chunk.size"]) if buffer_supply else None
    idle = max(8, 2 * (config.thread_pool_size + config["fetch.readahead.chunks"]))
    settings = ChunkCacheSettings(
        memory_bytes=memory_bytes,
        retention_s=retention,
        coalesce_bytes=config["fetch.coalesce.max.bytes"],
        get_timeout_s=config["fetch.chunk.cache.get.timeout.ms"] / 1000,
        max_cached_bytes=supplied.max_cached_bytes if supplied is not None else None,
    )
    pool = supplied.pool if supplied is not None else ChunkBufferPool(config["chunk.size"], max_idle=idle)
    return ChunkCache(ranges, pool, settings, pools.background, disk=disk, rate_limiter=limiter)


def _limiter(bytes_per_second: int) -> RateLimiter | None:
    return RateLimiter(bytes_per_second) if bytes_per_second else None


def make_key_ring(config: RsmConfig, recorder: KeyServiceRecorder) -> RsaKeyRing | None:
    """The key ring of ``encryption.key.pairs`` when encryption is on; bad key material is a ``ConfigException``.
    Calls to key services are recorded per provider (whose beans exist from the start)."""
    for pair in config.key_pairs:
        if pair.provider != "file":
            recorder.declare(pair.provider)
    return build_key_ring(config, recorder)
