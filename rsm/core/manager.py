"""The Python ``RemoteStorageManager``: Kafka's KIP-405 plugin contract over a ``StorageBackend``.

A copy writes three objects, in this order: ``.log`` (transformed chunks), ``.indexes`` (the five indexes,
each encrypted on its own), then ``.rsm-manifest``, the commit marker. If anything fails, the objects already
written are deleted and the error is raised, so a segment is either complete or absent. Reads go through the
manifest (cached with its unwrapped data key) and decode only the chunks that cover the requested range.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from backends.base import (
    InvalidKey,
    InvalidRange,
    KeyNotFound,
    StorageBackend,
    StorageBackendException,
    read_range,
)
from backends.registry import create_backend
from chunking.buffer_pool import ChunkBuffer, ChunkBufferPool
from chunking.chunk_index import Chunk, ChunkIndex
from chunking.transform import ChunkTransformer, crc32c
from encryption.aes import OVERHEAD, ChunkCipher, DataKeyAndAad
from encryption.errors import DecryptionError, KeyPairError, KeyRingError
from encryption.keyring import RsaKeyPair, RsaKeyRing
from rsm.core.catalog import SegmentCatalog, TieredSegment
from rsm.core.compression_heuristic import should_compress
from rsm.core.config import PREFETCH_LISTING_CACHE_S, RsmConfig, register_known_keys, warn_unknown_keys
from rsm.core.copy_pipeline import TransformedLogReader
from rsm.core.custom_metadata import CustomMetadata
from rsm.core.manifest import (
    INDEX_UPLOAD_ORDER,
    MAX_MANIFEST_SIZE,
    EncryptionMetadata,
    IntegrityRecord,
    SegmentIndexEntry,
    SegmentManifest,
    metadata_to_json,
)
from rsm.core.object_keys import SegmentKeys, main_path, mask, segment_keys
from rsm.errors import (
    ConfigException,
    CorruptDataException,
    KeyRingException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
)
from rsm.fetch.chunk_cache import ChunkCache, SegmentSource
from rsm.fetch.disk_store import DiskChunkStore
from rsm.fetch.lru import TimedLru
from rsm.fetch.prefetch import Prefetcher
from rsm.fetch.rate_limit import RateLimiter, ThrottledReader
from rsm.fetch.stream import SegmentStream
from rsm.metadata import BROKER_INDEX_SET, IndexType, LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition
from rsm.metrics import MetricRow, MetricsRegistry
from rsm.metrics.catalog import BACKEND_BEANS
from rsm.metrics.config import CONFIG_DEF as METRICS_CONFIG_DEF
from rsm.metrics.config import metrics_config
from rsm.metrics.recorders import BackendRecorder, RsmRecorder
from rsm.metrics.snapshot import Pulled, as_dict, collect
from rsm.metrics.sources import fetch_path_sources

log = logging.getLogger("rsm")
register_known_keys(METRICS_CONFIG_DEF)

PLANNING_WAIT_S = 1.0
"""At most this long a read-ahead load waits for the previous chunk's plan: a safety net, since planning itself
does no I/O."""
INDEX_READ_GAP_MAX = 1024 * 1024
"""Indexes loaded ahead come in one ranged read when the bytes between them (other indexes) are at most this many."""


@dataclass
class LoadedManifest:
    """A parsed manifest with what it takes to read its segment (the transformer holds the unwrapped key).

    ``cache_id`` names this copy of the segment in the chunk cache: the manifest key plus the data key's AAD
    (or the manifest's CRC-32C without encryption), so a segment id copied again never meets old chunks."""

    key: str
    manifest: SegmentManifest
    transformer: ChunkTransformer
    cache_id: str


@dataclass(frozen=True)
class RewrapResult:
    """What key rotation found in one manifest: the key pair that wrapped its data key (None: the segment is
    unencrypted) and whether the manifest was (or, in a dry run, would be) rewritten under the active pair."""

    previous_key_id: str | None
    rewrapped: bool


class RemoteStorageManager:
    """Kafka's RemoteStorageManager. Thread-safe after ``configure()``: the broker calls it from many threads."""

    def __init__(self) -> None:
        self._config: RsmConfig | None = None
        self._backend: StorageBackend | None = None
        self._key_ring: RsaKeyRing | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._background: ThreadPoolExecutor | None = None
        self.manifest_cache: TimedLru[str, LoadedManifest] = TimedLru("segment-manifest", 0, None)
        self.index_cache: TimedLru[tuple[str, IndexType], bytes] = TimedLru("segment-indexes", 0, None, weigher=len)
        self.index_integrity_failures = 0  # indexes whose GCM tag or CRC-32C did not match (the index cache's bean)
        self._integrity_lock = threading.Lock()
        self.chunk_cache: ChunkCache | None = None
        self.prefetcher: Prefetcher | None = None
        self.upload_rate_limiter: RateLimiter | None = None
        self.fetch_rate_limiter: RateLimiter | None = None
        self._listings: TimedLru[TopicIdPartition, list[TieredSegment]] = TimedLru(
            "partition-listing", 256, PREFETCH_LISTING_CACHE_S
        )
        self._closed = False
        self.chunk_buffers = ChunkBufferPool(4 * 1024 * 1024)
        self.metrics_registry = MetricsRegistry()
        self.rsm_metrics = RsmRecorder(self.metrics_registry)
        self.metrics_settings: dict[str, Any] = {}

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Validate the configuration (``rsm.config.`` already stripped) and connect to the backend."""
        config = RsmConfig.from_map(configs)
        warn_unknown_keys(configs)
        key_ring = None
        if config["encryption.enabled"]:
            try:
                pairs = {p.key_id: RsaKeyPair.from_pem(p.key_id, p.public_pem, p.private_pem) for p in config.key_pairs}
                key_ring = RsaKeyRing(pairs, config["encryption.key.pair.id"])
            except KeyPairError as e:
                raise ConfigException(str(e)) from None
        metrics_cfg, self.metrics_settings = metrics_config(configs)
        backend = create_backend(config["storage.backend.class"], config.storage)
        self.metrics_registry = MetricsRegistry(metrics_cfg)
        self.rsm_metrics = RsmRecorder(self.metrics_registry)
        self._instrument(backend)
        self._config = config
        self._key_ring = key_ring
        self._backend = backend
        self._executor = ThreadPoolExecutor(max_workers=config.thread_pool_size, thread_name_prefix="rsm-transform")
        self._configure_fetch_path(config, backend)
        # Enough idle buffers for every pool thread's read-ahead; more come and go with the load.
        self.chunk_buffers = ChunkBufferPool(
            config["chunk.size"], max_idle=max(8, 2 * (config.thread_pool_size + config["fetch.readahead.chunks"]))
        )
        log.info(
            "RemoteStorageManager configured: backend=%s chunk.size=%d compression=%s encryption=%s",
            backend,
            config["chunk.size"],
            config["compression.enabled"],
            config["encryption.enabled"],
        )

    def _configure_fetch_path(self, config: RsmConfig, backend: StorageBackend) -> None:
        """The caches, prefetch and rate limits (``rsm.fetch``), sized by the ``fetch.*`` keys."""
        self.manifest_cache = TimedLru(
            "segment-manifest", config["fetch.manifest.cache.size"], config["fetch.manifest.cache.retention.ms"] / 1000
        )
        self.index_cache = TimedLru(
            "segment-indexes",
            config["fetch.indexes.cache.size"],
            config["fetch.indexes.cache.retention.ms"] / 1000,
            weigher=len,
        )
        upload_rate = config["upload.rate.limit.bytes.per.second"]
        fetch_rate = config["fetch.rate.limit.bytes.per.second"]
        self.upload_rate_limiter = RateLimiter(upload_rate) if upload_rate else None
        self.fetch_rate_limiter = RateLimiter(fetch_rate) if fetch_rate else None
        workers = config["fetch.chunk.cache.thread.pool.size"] or (os.cpu_count() or 2)
        self._background = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rsm-prefetch")
        retention = config["fetch.chunk.cache.retention.ms"] / 1000
        disk = None
        memory_bytes = config["fetch.chunk.cache.size"]
        if config["fetch.chunk.cache.class"] == "disk":
            disk = DiskChunkStore(config["fetch.chunk.cache.path"], config["fetch.chunk.cache.size"], retention)
            memory_bytes = config["fetch.chunk.cache.memory.size"]
        self.chunk_cache = ChunkCache(
            backend,
            lambda: self.chunk_buffers,
            memory_bytes,
            retention,
            disk,
            config["fetch.coalesce.max.bytes"],
            self._background,
            config["fetch.chunk.cache.get.timeout.ms"] / 1000,
            self.fetch_rate_limiter,
        )
        self.prefetcher = Prefetcher(
            self.chunk_cache, config["fetch.chunk.cache.prefetch.max.size"], self._background, self._next_source
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        if self._background is not None:
            self._background.shutdown(wait=True, cancel_futures=True)
        if self.chunk_cache is not None:
            self.chunk_cache.memory.clear()
            if self.chunk_cache.disk is not None:
                self.chunk_cache.disk.close()
        if self._backend is not None:
            self._backend.close()

    def thread_pools(self) -> dict[str, dict[str, float]]:
        """The plugin's pools, keyed by name, with Aiven's thread-pool metric names."""
        pools = {"transform": self._executor, "prefetch": self._background}
        out: dict[str, dict[str, float]] = {}
        for name, pool in pools.items():
            if pool is None:
                continue
            threads = len(pool._threads)  # noqa: SLF001 - ThreadPoolExecutor exposes no public gauge
            out[name] = {
                # The idle semaphore is released once per finished task, so it can exceed the thread count.
                "active-thread-count-total": max(0, threads - pool._idle_semaphore._value),  # noqa: SLF001
                "pool-size-total": threads,
                "parallelism-total": pool._max_workers,  # noqa: SLF001
                "queued-task-count-total": pool._work_queue.qsize(),  # noqa: SLF001
            }
        return out

    # --- metrics -------------------------------------------------------------------------------------------------

    def _instrument(self, backend: StorageBackend) -> None:
        """Forward the backend's request counters into its Aiven client-metrics bean (cloud backends only)."""
        instrumentation = getattr(backend, "instrumentation", None)
        store = str(getattr(backend, "STORE", "")).lower()
        if store in BACKEND_BEANS and hasattr(instrumentation, "add_listener"):
            instrumentation.add_listener(BackendRecorder(self.metrics_registry, store))

    def metrics_snapshot(self) -> list[MetricRow]:
        """Every metric now, as JMX rows (the shim's MBeans and the Prometheus endpoint read this)."""
        sources: list[Pulled] = fetch_path_sources(
            self.chunk_cache,
            self.manifest_cache,
            _IndexCacheStats(self),
            self.prefetcher,
            {"upload": self.upload_rate_limiter, "fetch": self.fetch_rate_limiter},
            self.thread_pools,
        )
        return collect(self.metrics_registry, sources, self.metrics_settings.get("metrics.jmx.mirror.domain"))

    def metrics(self) -> dict[str, dict[str, float]]:
        """A snapshot for Python users: JMX ObjectName -> attribute -> value, Aiven's names."""
        return as_dict(self.metrics_snapshot())

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def backend(self) -> StorageBackend:
        if self._backend is None:
            raise RemoteStorageException("RemoteStorageManager used before configure()")
        return self._backend

    @property
    def config(self) -> RsmConfig:
        if self._config is None:
            raise RemoteStorageException("RemoteStorageManager used before configure()")
        return self._config

    @property
    def key_ring(self) -> RsaKeyRing | None:
        return self._key_ring

    def _pool(self) -> ThreadPoolExecutor:
        if self._closed:
            raise RemoteStorageException("RemoteStorageManager is closed")
        if self._executor is None:
            raise RemoteStorageException("RemoteStorageManager used before configure()")
        return self._executor

    # --- keys ----------------------------------------------------------------------------------------------------

    def segment_keys(self, meta: RemoteLogSegmentMetadata) -> SegmentKeys:
        """The segment's keys: where custom metadata recorded a prefix/key at copy time, that location wins for
        every operation (fetch, index, delete), so changing ``key.prefix`` later never orphans a segment."""
        prefix = self.config["key.prefix"]
        path = main_path(meta)
        if meta.custom_metadata:
            try:
                recorded = CustomMetadata.decode(meta.custom_metadata)
            except ValueError as e:
                log.warning("ignoring undecodable custom metadata of %s: %s", meta.describe(), e)
            else:
                if recorded.object_prefix is not None:
                    prefix = recorded.object_prefix
                if recorded.object_key is not None:
                    path = recorded.object_key
        return SegmentKeys(prefix, path)

    def _show(self, key: str) -> str:
        return mask(key, self.config["key.prefix"], self.config["key.prefix.mask"])

    # --- copy ------------------------------------------------------------------------------------------------------

    def copy_log_segment_data(self, meta: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Upload the segment and its indexes, then the manifest; returns the custom metadata bytes (or None)."""
        config = self.config
        keys = segment_keys(config["key.prefix"], meta)
        tip = meta.topic_id_partition
        try:
            self._check_inputs(meta, data)
        except RemoteStorageException:  # nothing uploaded yet, but a failed copy all the same (segment-copy-errors)
            self.rsm_metrics.segment_copy_failed(tip.topic, tip.partition)
            raise
        uploaded: list[str] = []
        started = time.monotonic()
        try:
            compression = config["compression.enabled"]
            if compression and config["compression.heuristic.enabled"]:
                compression = should_compress(data.log_segment, data.offset_index)
            encryption: EncryptionMetadata | None = None
            cipher: ChunkCipher | None = None
            if config["encryption.enabled"]:
                assert self._key_ring is not None
                dk = DataKeyAndAad.generate()
                encryption = EncryptionMetadata(self._key_ring.wrap(dk.data_key), dk.aad)
                cipher = ChunkCipher(dk)
            transformer = ChunkTransformer(compression, config["compression.level"], cipher)

            log_size, chunk_index, chunk_crcs = self._upload_log(keys.log, data.log_segment, transformer, uploaded)
            index_entries, index_crcs, indexes_size = self._upload_indexes(keys.indexes, data, cipher, uploaded)
            manifest = SegmentManifest(
                chunk_index,
                index_entries,
                compression,
                encryption,
                metadata_to_json(meta),
                IntegrityRecord(chunk_crcs, index_crcs),
            )
            manifest_bytes = manifest.to_json_bytes()
            uploaded.append(keys.manifest)
            self.backend.upload(keys.manifest, self._throttled(manifest_bytes))
            self._forget(keys.manifest, meta.topic_id_partition)
        except BaseException as e:
            self.rsm_metrics.segment_copy_failed(tip.topic, tip.partition)
            self._cleanup_failed_copy(keys, uploaded, meta)
            if isinstance(e, RemoteStorageException):
                raise
            if isinstance(e, (StorageBackendException, OSError, ValueError)):
                raise RemoteStorageException(f"copy of {meta.describe()} failed: {type(e).__name__}: {e}") from e
            raise
        recorder = self.rsm_metrics
        recorder.object_uploaded(tip.topic, tip.partition, "log", log_size)
        recorder.object_uploaded(tip.topic, tip.partition, "indexes", indexes_size)
        recorder.object_uploaded(tip.topic, tip.partition, "rsm-manifest", len(manifest_bytes))
        recorder.segment_copied(tip.topic, tip.partition, time.monotonic() - started)
        log.info(
            "copied %s: %d bytes in %d chunks -> %d stored bytes (compression=%s, encryption=%s)",
            meta.describe(),
            chunk_index.original_file_size,
            chunk_index.chunk_count,
            log_size,
            compression,
            encryption is not None,
        )
        return self._custom_metadata(keys, log_size + indexes_size + len(manifest_bytes))

    def _check_inputs(self, meta: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        required = [
            ("log segment", data.log_segment),
            ("offset index", data.offset_index),
            ("time index", data.time_index),
            ("producer snapshot", data.producer_snapshot_index),
        ]
        if data.transaction_index is not None:
            required.append(("transaction index", data.transaction_index))
        for what, path in required:
            if not path.is_file():
                raise RemoteStorageException(
                    f"cannot copy {meta.describe()}: its {what} {path} does not exist or is not a regular file"
                )

    def _upload_log(
        self, key: str, path: Path, transformer: ChunkTransformer, uploaded: list[str]
    ) -> tuple[int, ChunkIndex, list[int]]:
        chunk_size = self.config["chunk.size"]
        file_size = path.stat().st_size
        window = 2 * self.config.thread_pool_size + 1
        reader = TransformedLogReader(path, file_size, chunk_size, transformer, self._pool(), window)
        counting = ThrottledReader(reader, self.upload_rate_limiter)
        try:
            uploaded.append(key)
            written = self.backend.upload(key, io.BufferedReader(counting, buffer_size=1024 * 1024))  # type: ignore[arg-type]
            if not reader.complete:
                raise RemoteStorageException(
                    f"backend stopped reading {self._show(key)} after {counting.count} "
                    f"bytes, before the end of the segment"
                )
        finally:
            reader.close()
        total = sum(reader.transformed_sizes)
        if written != total:
            raise RemoteStorageException(
                f"backend reported {written} bytes written for {self._show(key)}, the transformed segment has {total}"
            )
        nominal = chunk_size + (OVERHEAD if transformer.cipher is not None else 0)
        index = ChunkIndex(chunk_size, file_size, reader.transformed_sizes, nominal)
        return total, index, reader.chunk_crcs

    def _upload_indexes(
        self, key: str, data: LogSegmentData, cipher: ChunkCipher | None, uploaded: list[str]
    ) -> tuple[dict[IndexType, SegmentIndexEntry | None], dict[IndexType, int], int]:
        sources: dict[IndexType, bytes | None] = {
            IndexType.OFFSET: data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index.read_bytes(),
            IndexType.LEADER_EPOCH: data.leader_epoch_index,
            IndexType.TRANSACTION: data.transaction_index.read_bytes() if data.transaction_index else None,
        }
        entries: dict[IndexType, SegmentIndexEntry | None] = {}
        crcs: dict[IndexType, int] = {}
        parts: list[bytes] = []
        position = 0
        for t in INDEX_UPLOAD_ORDER:
            raw = sources[t]
            if raw is None:
                entries[t] = None
                continue
            crcs[t] = crc32c(raw)
            stored = cipher.encrypt(raw) if (cipher is not None and raw) else raw
            entries[t] = SegmentIndexEntry(position, len(stored))
            parts.append(bytes(stored))
            position += len(stored)
        blob = b"".join(parts)
        uploaded.append(key)
        self.backend.upload(key, self._throttled(blob))
        return entries, crcs, len(blob)

    def _throttled(self, data: bytes) -> BinaryIO:
        """Small uploads (indexes, manifests) pay the upload rate limit too."""
        if self.upload_rate_limiter is None:
            return io.BytesIO(data)
        return io.BufferedReader(ThrottledReader(io.BytesIO(data), self.upload_rate_limiter))  # type: ignore[return-value]

    def _custom_metadata(self, keys: SegmentKeys, remote_size: int) -> bytes | None:
        fields = set(self.config["custom.metadata.fields.include"])
        return CustomMetadata(
            remote_size=remote_size if "REMOTE_SIZE" in fields else None,
            object_prefix=keys.prefix if "OBJECT_PREFIX" in fields else None,
            object_key=keys.main_path if "OBJECT_KEY" in fields else None,
        ).encode()

    def _cleanup_failed_copy(self, keys: SegmentKeys, uploaded: list[str], meta: RemoteLogSegmentMetadata) -> None:
        if not uploaded:
            return
        try:
            self.backend.delete_many(keys.all())
        except InvalidKey as e:  # the store refused the key itself, so nothing can have been stored under it
            log.debug("nothing to clean up after the refused copy of %s: %s", meta.describe(), e)
        except Exception as e:  # the original error matters more; the broker's delete will retry this
            log.error(
                "could not delete the partial upload of %s (%s): %s",
                meta.describe(),
                ", ".join(self._show(k) for k in keys.all()),
                e,
            )

    # --- fetch -----------------------------------------------------------------------------------------------------

    def fetch_manifest(self, meta: RemoteLogSegmentMetadata) -> SegmentManifest:
        """The parsed manifest of a segment (public for tools: key rotation, inspection, Spark readers)."""
        return self._load(meta).manifest

    def segment_metadata(self, segment: TieredSegment) -> RemoteLogSegmentMetadata:
        """The broker's metadata of a listed segment, from its manifest (for tools, prefetch and Spark)."""
        manifest = self.fetch_manifest(segment.metadata_stub())
        return manifest.recorded_metadata(f"manifest {self._show(segment.keys.manifest)}")

    def catalog(self) -> SegmentCatalog:
        """The tiered segments under the configured ``key.prefix``."""
        return SegmentCatalog(self.backend, self.config["key.prefix"])

    def _load(self, meta: RemoteLogSegmentMetadata) -> LoadedManifest:
        keys = self.segment_keys(meta)
        return self.manifest_cache.get_or_load(
            keys.manifest,
            lambda: self._load_manifest(keys, meta),
            self.config["fetch.manifest.cache.get.timeout.ms"] / 1000,
            f"manifest {self._show(keys.manifest)}",
        )

    def _read_manifest(self, keys: SegmentKeys, meta: RemoteLogSegmentMetadata) -> bytes:
        try:
            with self.backend.fetch(keys.manifest) as f:
                return f.read(MAX_MANIFEST_SIZE + 1)
        except KeyNotFound:
            raise RemoteResourceNotFoundException(
                f"{meta.describe()} is not in remote storage: manifest {self._show(keys.manifest)} not found"
            ) from None
        except StorageBackendException as e:
            raise RemoteStorageException(
                f"cannot read the manifest {self._show(keys.manifest)} of {meta.describe()}: {e}"
            ) from e

    def _load_manifest(self, keys: SegmentKeys, meta: RemoteLogSegmentMetadata) -> LoadedManifest:
        what = f"manifest {self._show(keys.manifest)}"
        raw = self._read_manifest(keys, meta)
        try:
            manifest = SegmentManifest.from_json_bytes(raw, what)
        except CorruptDataException as first:
            # A manifest is read whole, without a range: a body cut short in transit whose Content-Length was
            # rewritten to match (a proxy, a middlebox) looks like a complete short object at the HTTP level, and
            # only parsing tells. One more read separates that from a stored object that is really corrupt.
            again = self._read_manifest(keys, meta)
            if again == raw:
                raise
            manifest = SegmentManifest.from_json_bytes(again, what)
            log.warning("%s was damaged in transit on the first read (%s); a second read parsed", what, first)
            raw = again
        tag = manifest.encryption.aad.hex() if manifest.encryption is not None else f"{crc32c(raw):08x}"
        return LoadedManifest(keys.manifest, manifest, self._transformer_for(manifest, meta), f"{keys.manifest}@{tag}")

    def _forget(self, manifest_key: str, tip: TopicIdPartition) -> None:
        """A segment was copied (maybe again), re-wrapped or deleted: no cache may answer for its old copy, and
        the partition's listing, which tells what segment follows which, is out of date."""
        self._listings.invalidate(tip)
        self.manifest_cache.invalidate(manifest_key)
        self.index_cache.invalidate_where(lambda k: k[0].startswith(manifest_key + "@"))
        if self.chunk_cache is not None:
            self.chunk_cache.forget_segment(manifest_key)

    def _transformer_for(self, manifest: SegmentManifest, meta: RemoteLogSegmentMetadata) -> ChunkTransformer:
        cipher = None
        if manifest.encryption is not None:
            if self._key_ring is None:
                raise KeyRingException(
                    f"{meta.describe()} is encrypted with key pair "
                    f"{manifest.encryption.key_pair_id!r}, but encryption is not configured: set "
                    f"encryption.enabled, encryption.key.pairs and that pair's private key"
                )
            try:
                data_key = self._key_ring.unwrap(manifest.encryption.data_key)
                cipher = ChunkCipher(DataKeyAndAad(data_key, manifest.encryption.aad))
            except KeyRingError as e:
                raise KeyRingException(f"cannot read {meta.describe()}: {e}") from None
            except ValueError as e:  # a key of the wrong length: anyone with the public key can wrap one
                raise KeyRingException(
                    f"cannot read {meta.describe()}: the data key in its manifest unwraps to an invalid AES key "
                    f"({e}); the manifest was not written by this plugin or was tampered with"
                ) from None
        return ChunkTransformer(manifest.compression, 3, cipher)

    def fetch_log_segment(
        self, meta: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        """A lazy stream over bytes ``[start_position, end_position]`` (inclusive; ``None`` = to the end)."""
        tip = meta.topic_id_partition
        last = meta.segment_size_in_bytes - 1 if end_position is None else end_position
        started = time.monotonic()
        try:
            stream = self._open_log_segment(meta, start_position, end_position)
        except BaseException:
            self.rsm_metrics.fetch_failed(tip.topic, tip.partition)
            raise
        requested = max(0, last - start_position + 1)
        self.rsm_metrics.fetch_requested(tip.topic, tip.partition, requested, time.monotonic() - started)
        return stream

    def record_resumed_fetch(self, meta: RemoteLogSegmentMetadata, start_position: int) -> None:
        """A broker fetch the JVM shim served from a stream it kept open since the previous fetch of the same
        segment (see ``rsm.jvm.sidecar``): no stream was opened here, but the broker asked for the rest of the
        segment from ``start_position``, and the fetch metrics count it like any other."""
        tip = meta.topic_id_partition
        requested = max(0, meta.segment_size_in_bytes - start_position)
        self.rsm_metrics.fetch_requested(tip.topic, tip.partition, requested, None)

    def _open_log_segment(
        self, meta: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        loaded = self._load(meta)
        index = loaded.manifest.chunk_index
        size = index.original_file_size
        if start_position < 0:
            raise RemoteStorageException(f"invalid start position {start_position} for {meta.describe()}")
        if end_position is not None and end_position < start_position:
            raise RemoteStorageException(
                f"invalid range [{start_position}, {end_position}] for {meta.describe()}: end before start"
            )
        if start_position >= size:
            if start_position == size:  # nothing left to read, e.g. position = size of an empty segment
                return SegmentStream([], 0, -1, lambda c: None, self._pool(), 0, meta.describe())  # type: ignore[arg-type, return-value]
            raise RemoteStorageException(
                f"start position {start_position} is past the end of {meta.describe()}, which has {size} bytes"
            )
        end = size - 1 if end_position is None else min(end_position, size - 1)
        chunks = index.chunks_for_range(start_position, end)
        src = self._source(loaded, meta)
        prefetcher = self.prefetcher
        load, lookup, found = self._chunk_loader(src, chunks[0].id, chunks[-1].id)
        return SegmentStream(
            chunks,
            start_position,
            end,
            load,
            self._pool(),
            self.config["fetch.readahead.chunks"],
            meta.describe(),
            on_progress=(lambda last: prefetcher.after_read(src, last)) if prefetcher is not None else None,
            lookup=lookup,
            on_found=found,
        )  # type: ignore[return-value]

    def _source(self, loaded: LoadedManifest, meta: RemoteLogSegmentMetadata) -> SegmentSource:
        keys = self.segment_keys(meta)
        integrity = loaded.manifest.integrity
        return SegmentSource(
            meta,
            loaded.key,
            loaded.cache_id,
            keys.log,
            self._show(keys.log),
            loaded.manifest.chunk_index,
            loaded.transformer,
            integrity.chunk_crcs if integrity is not None else None,
        )

    def _chunk_loader(
        self, src: SegmentSource, first_id: int, horizon: int
    ) -> tuple[Callable[[Chunk], ChunkBuffer], Callable[[Chunk], ChunkBuffer | None], Callable[[Chunk], None]]:
        """The stream's loader, its look-up of chunks already decoded (the memory tier), and what the stream
        calls for a chunk it found that way.

        Loads run in parallel, but each waits until the previous chunk of the stream is planned (planning does
        no I/O), so the first missing chunk starts the coalesced GET and the read-ahead joins it instead of
        racing it with GETs of its own. The stream's first chunk (``first_id``) waits for nothing, and a chunk
        found in memory counts as planned, so nobody waits for it."""
        cache = self.chunk_cache
        assert cache is not None
        planned: set[int] = set()
        waiting: dict[int, threading.Event] = {}  # an event only for a chunk somebody waits for
        lock = threading.Lock()

        def mark_planned(chunk_id: int) -> None:
            with lock:
                planned.add(chunk_id)
                event = waiting.pop(chunk_id, None)
            if event is not None:
                event.set()

        def load(chunk: Chunk) -> ChunkBuffer:
            previous = chunk.id - 1
            with lock:
                event = None
                if chunk.id > first_id and previous not in planned:
                    event = waiting.setdefault(previous, threading.Event())
            if event is not None:
                event.wait(PLANNING_WAIT_S)
            try:
                return cache.load(src, chunk, horizon, lambda: mark_planned(chunk.id))
            finally:
                mark_planned(chunk.id)

        def lookup(chunk: Chunk) -> ChunkBuffer | None:
            return cache.lookup(src, chunk)

        def found(chunk: Chunk) -> None:
            mark_planned(chunk.id)

        return load, lookup, found

    def _next_source(self, src: SegmentSource) -> SegmentSource | None:
        """The partition's segment that follows ``src`` (for prefetch across the border), or None."""
        meta = self.following_segment(src.meta)
        if meta is None:
            return None
        loaded = self._load(meta)
        self._load_broker_indexes(loaded, meta)
        return self._source(loaded, meta)

    def following_segment(self, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The metadata of the partition's tiered segment after ``meta`` (the one starting at its end offset + 1,
        else the next one up), or None when it is the last: what a consumer reading on will fetch next. The
        partition's listing is cached briefly (``_listings``), so a catch-up lists once, not once per segment."""
        tip = meta.topic_id_partition
        listing = self._listings.get_or_load(
            tip,
            lambda: self.catalog().partition_segments(tip),
            self.config["fetch.manifest.cache.get.timeout.ms"] / 1000,
            f"the listing of {tip.topic}-{tip.partition}",
        )
        after = [s for s in listing if s.start_offset > meta.start_offset]
        if not after:
            return None
        following = [s for s in after if s.start_offset == meta.end_offset + 1]
        return self.segment_metadata((following or after)[0])

    def fetch_log_segment_ahead(self, meta: RemoteLogSegmentMetadata, start_position: int) -> BinaryIO:
        """``fetch_log_segment`` to the end, for a stream a transport opens before the broker asks for it (the
        sidecar goes on into the next segment when a broker's stream reaches a segment's end). Neither counted
        nor, when it fails, counted as a failure: the broker's own fetch is, when it comes (then through
        ``record_resumed_fetch``, or as a request of its own)."""
        return self._open_log_segment(meta, start_position, None)

    def fetch_index(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        try:
            return self._fetch_index(meta, index_type)
        except RemoteResourceNotFoundException:
            raise  # an absent optional index (TRANSACTION) is routine: the broker asks for it on every segment
        except BaseException:
            tip = meta.topic_id_partition
            self.rsm_metrics.fetch_failed(tip.topic, tip.partition)
            raise

    def fetch_index_ahead(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """``fetch_index`` for an index a transport sends before the broker asks for it (the sidecar sends the
        broker's other two with the one asked for). A failure here is not counted in segment-fetch-errors:
        the transport leaves that index out, and the broker's own call for it meets the failure and counts it."""
        return self._fetch_index(meta, index_type)

    def _fetch_index(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        loaded = self._load(meta)
        entry = loaded.manifest.segment_indexes.get(index_type)
        if entry is None:
            raise RemoteResourceNotFoundException(f"{meta.describe()} has no {index_type.name} index")
        if entry.size == 0:
            return io.BytesIO(b"")
        keys = self.segment_keys(meta)
        what = self._index_what(index_type, meta, keys)
        return io.BytesIO(
            self._cached_index(
                loaded, index_type, lambda: self._load_index(loaded, keys, entry, index_type, what), what
            )
        )

    def _index_what(self, index_type: IndexType, meta: RemoteLogSegmentMetadata, keys: SegmentKeys) -> str:
        return f"{index_type.name} index of {meta.describe()} in {self._show(keys.indexes)}"

    def _cached_index(
        self, loaded: LoadedManifest, index_type: IndexType, load: Callable[[], bytes], what: str
    ) -> bytes:
        """The index from the index cache, loaded once by ``load`` whoever asks at the same time."""
        return self.index_cache.get_or_load(
            (loaded.cache_id, index_type), load, self.config["fetch.indexes.cache.get.timeout.ms"] / 1000, what
        )

    def _load_index(
        self, loaded: LoadedManifest, keys: SegmentKeys, entry: SegmentIndexEntry, index_type: IndexType, what: str
    ) -> bytes:
        stored = self._read_indexes(keys, entry.position, entry.position + entry.size, what)
        return self._decode_index(loaded, stored, index_type, what)

    def _read_indexes(self, keys: SegmentKeys, start: int, end: int, what: str) -> bytes:
        try:
            return read_range(self.backend, keys.indexes, start, end - 1)
        except KeyNotFound:
            raise RemoteStorageException(
                f"{what}: the .indexes object is missing although the manifest exists"
            ) from None
        except InvalidRange as e:
            raise CorruptDataException(f"{what}: the .indexes object is shorter than its manifest says: {e}") from None
        except StorageBackendException as e:
            raise RemoteStorageException(f"cannot read the {what}: {e}") from e

    def _load_broker_indexes(self, loaded: LoadedManifest, meta: RemoteLogSegmentMetadata) -> None:
        """Bring the indexes a broker fetches before a segment's first read (``BROKER_INDEX_SET``) into the
        index cache, with one ranged read: prefetch calls this for the segment a consumer reads next, so its
        first fetch there waits for no index read (on S3, one GET fewer per index on the consumer's path).

        Best effort: a failure leaves the indexes to the broker's own request, which then reports it."""
        keys = self.segment_keys(meta)
        wanted = [
            (index_type, entry)
            for index_type in BROKER_INDEX_SET
            if (entry := loaded.manifest.segment_indexes.get(index_type)) is not None
            and 0 < entry.size <= self.index_cache.capacity  # one the cache cannot keep would be read at every pass
            and not self.index_cache.contains((loaded.cache_id, index_type))
        ]
        if not wanted:
            return
        start = min(entry.position for _, entry in wanted)
        end = max(entry.position + entry.size for _, entry in wanted)
        if end - start - sum(entry.size for _, entry in wanted) > INDEX_READ_GAP_MAX:
            wanted = wanted[:1]  # far apart (a foreign layout): not worth reading what lies between
            start, end = wanted[0][1].position, wanted[0][1].position + wanted[0][1].size
        what = f"the indexes of {meta.describe()} in {self._show(keys.indexes)}"
        try:
            span = memoryview(self._read_indexes(keys, start, end, what))
            for index_type, entry in wanted:
                stored = span[entry.position - start : entry.position + entry.size - start]
                one = self._index_what(index_type, meta, keys)
                self._cached_index(
                    loaded, index_type, lambda t=index_type, b=stored, w=one: self._decode_index(loaded, b, t, w), one
                )
        except RemoteStorageException as e:
            log.debug("prefetch of %s skipped: %s", what, e)

    def _decode_index(
        self, loaded: LoadedManifest, stored: bytes | memoryview, index_type: IndexType, what: str
    ) -> bytes:
        cipher = loaded.transformer.cipher
        try:
            data = cipher.decrypt(stored, what) if cipher is not None else stored
        except DecryptionError as e:
            self._count_index_integrity_failure()
            raise CorruptDataException(f"{e}; the stored index is corrupt (run kts verify)") from None
        integrity = loaded.manifest.integrity
        expected = integrity.index_crcs.get(index_type) if integrity is not None else None
        if expected is not None and crc32c(data) != expected:
            self._count_index_integrity_failure()
            raise CorruptDataException(f"{what}: CRC-32C mismatch; the stored index is corrupt (run kts verify)")
        return bytes(data)

    def _count_index_integrity_failure(self) -> None:
        with self._integrity_lock:
            self.index_integrity_failures += 1

    # --- delete ----------------------------------------------------------------------------------------------------

    def delete_log_segment_data(self, meta: RemoteLogSegmentMetadata) -> None:
        """Delete the segment's objects; deleting what is already gone succeeds (the broker retries deletes)."""
        tip = meta.topic_id_partition
        started = time.monotonic()
        try:
            self._delete_objects(meta)
        except BaseException:
            self.rsm_metrics.segment_delete_failed(tip.topic, tip.partition)
            raise
        self.rsm_metrics.segment_deleted(
            tip.topic, tip.partition, meta.segment_size_in_bytes, time.monotonic() - started
        )

    def _delete_objects(self, meta: RemoteLogSegmentMetadata) -> None:
        keys = self.segment_keys(meta)
        # Manifest first: once it is gone, the segment no longer exists for readers, even if a later delete fails.
        try:
            self.backend.delete(keys.manifest)
            self.backend.delete_many([keys.log, keys.indexes])
        except StorageBackendException as e:
            raise RemoteStorageException(f"delete of {meta.describe()} failed: {e}") from e
        finally:
            self._forget(keys.manifest, meta.topic_id_partition)

    # --- key rotation ----------------------------------------------------------------------------------------------

    def rewrap_data_key(self, manifest_key: str, dry_run: bool = False) -> RewrapResult:
        """Re-wrap one segment's data key under the active key pair by rewriting only its manifest.

        The segment's data is untouched: only the wrapped key in the manifest changes. With ``dry_run`` the
        manifest is only inspected: ``rewrapped`` then says whether a real run would rewrite it.
        """
        if self._key_ring is None:
            raise ConfigException("key rotation needs encryption.enabled=true and the key ring configured")
        try:
            with self.backend.fetch(manifest_key) as f:
                raw = f.read(MAX_MANIFEST_SIZE + 1)
        except KeyNotFound:
            raise RemoteResourceNotFoundException(f"manifest {self._show(manifest_key)} not found") from None
        manifest = SegmentManifest.from_json_bytes(raw, f"manifest {self._show(manifest_key)}")
        if manifest.encryption is None:
            return RewrapResult(None, False)
        old_id = manifest.encryption.key_pair_id
        if old_id == self._key_ring.active_key_id:
            return RewrapResult(old_id, False)
        if dry_run:
            return RewrapResult(old_id, True)
        try:
            data_key = self._key_ring.unwrap(manifest.encryption.data_key)
        except KeyRingError as e:
            raise KeyRingException(f"cannot re-wrap {self._show(manifest_key)}: {e}") from None
        manifest.encryption = EncryptionMetadata(self._key_ring.wrap(data_key), manifest.encryption.aad)
        self.backend.upload(manifest_key, self._throttled(manifest.to_json_bytes()))
        self.manifest_cache.invalidate(manifest_key)
        return RewrapResult(old_id, True)


class _IndexCacheStats:
    """The index cache's bean: the LRU's own counters and the indexes that failed their integrity check."""

    def __init__(self, manager: RemoteStorageManager) -> None:
        self._manager = manager

    def stats(self) -> dict[str, float]:
        return {
            **self._manager.index_cache.stats(),
            "integrity-failures-total": self._manager.index_integrity_failures,
        }
