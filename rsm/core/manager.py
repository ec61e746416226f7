"""The Python ``RemoteStorageManager``: Kafka's KIP-405 plugin contract over a ``StorageBackend``.

Each call of the contract hands over to a collaborator that ``configure()`` builds once (``rsm.core.wiring``;
docs/architecture.md shows who owns what):

- copy and delete: ``SegmentObjects`` (rsm.core.segment_objects), writing ``.log``, ``.indexes`` and the manifest;
- fetch: ``SegmentReader`` (rsm.fetch.segment_reader), lazy streams over the ``ChunkCache``, with ``Prefetcher``;
- fetch index: ``IndexReader`` (rsm.fetch.index_reader), with the index cache;
- manifests, for all of them: ``ManifestStore`` (rsm.core.manifest_store), with the manifest cache and key ring;
- the partition's next segment: ``NextSegmentFinder`` (rsm.fetch.next_segment), with its listing cache;
- metrics: the registry and recorders of ``rsm.metrics``, and the caches', pools' and limiters' own counters.

Transports (the JVM shim's sidecar and in-process bridge) may use more than the contract: the calls ``rsm.jvm``
describes as protocols (``rsm.jvm.seams``), and ``use_chunk_buffers`` before ``configure()``.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from backends.base import BackendCapabilities, StorageBackend
from backends.registry import create_backend
from chunking.buffer_pool import ChunkBufferPool
from encryption.keyring import RsaKeyRing
from rsm.core.catalog import SegmentCatalog, TieredSegment
from rsm.core.config import RsmConfig, warn_aiven_differences
from rsm.core.known_keys import refuse_unknown_keys
from rsm.core.manifest import SegmentManifest
from rsm.core.manifest_store import ManifestStore, RewrapResult
from rsm.core.memory_floor import memory_floor
from rsm.core.segment_format import Formats, SegmentFormat
from rsm.core.wiring import Wiring, make_key_ring, wire
from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.fetch.chunk_cache import ChunkBufferSupply, ChunkCache
from rsm.fetch.index_reader import IndexReader
from rsm.fetch.lru import TimedLru
from rsm.fetch.next_segment import NextSegmentFinder
from rsm.fetch.prefetch import Prefetcher
from rsm.fetch.rate_limit import RateLimiter
from rsm.fetch.segment_reader import SegmentReader
from rsm.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.metrics import MetricRow, MetricsRegistry
from rsm.metrics.catalog import BACKEND_BEANS
from rsm.metrics.config import metrics_config
from rsm.metrics.recorders import BackendRecorder, KeyServiceRecorder, RsmRecorder
from rsm.metrics.snapshot import Pulled, as_dict, collect
from rsm.metrics.sources import fetch_path_sources

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class RemoteStorageManager:
    """Kafka's RemoteStorageManager. Thread-safe after ``configure()``: the broker calls it from many threads."""

    def __init__(self) -> None:
        self._wired: Wiring | None = None
        self._closed = False
        self._buffer_supply: ChunkBufferSupply | None = None
        self.metrics_registry = MetricsRegistry()
        self.rsm_metrics = RsmRecorder(self.metrics_registry)
        self.metrics_settings: dict[str, Any] = {}

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def use_chunk_buffers(self, supply: ChunkBufferSupply) -> None:
        """Before ``configure()``: decode fetched chunks into the buffers ``supply`` gives (a transport's shared
        memory), which ``configure()`` asks it for once, as it builds the read path."""
        if self._wired is not None:
            raise RemoteStorageException("use_chunk_buffers() comes before configure(), which builds the read path")
        self._buffer_supply = supply

    @staticmethod
    def memory_floor(configs: Mapping[str, Any]) -> list[tuple[str, int]]:
        """What ``configs`` makes this manager hold in memory, key by key (the sidecar's start-up check)."""
        return memory_floor(configs)

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Validate the configuration (``rsm.config.`` already stripped) and connect to the backend. A key nothing
        reads fails it, naming the closest known key."""
        refuse_unknown_keys(configs)
        config = RsmConfig.from_map(configs)
        warn_aiven_differences(configs)
        metrics_cfg, self.metrics_settings = metrics_config(configs)
        self.metrics_registry = MetricsRegistry(metrics_cfg)
        key_ring = make_key_ring(config, KeyServiceRecorder(self.metrics_registry))
        backend = create_backend(config["storage.backend.class"], config.storage)
        self.rsm_metrics = RsmRecorder(self.metrics_registry)
        capabilities = BackendCapabilities.of(backend)
        self._instrument(capabilities)
        self._wired = wire(config, backend, capabilities, key_ring, self.rsm_metrics, self._buffer_supply)
        log.info(
            "RemoteStorageManager configured: backend=%s chunk.size=%d compression=%s encryption=%s",
            backend,
            config["chunk.size"],
            config["compression.enabled"],
            config["encryption.enabled"],
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        wired = self._wired
        if wired is None:
            return
        wired.formats.close()
        wired.pools.close()
        wired.chunks.memory.clear()
        if wired.chunks.disk is not None:
            wired.chunks.disk.close()
        wired.backend.close()

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ready(self, opening: bool = False) -> Wiring:
        """The collaborators; ``opening``: for what needs the thread pools, which ``close()`` stopped."""
        if opening and self._closed:
            raise RemoteStorageException("RemoteStorageManager is closed")
        if self._wired is None:
            raise RemoteStorageException("RemoteStorageManager used before configure()")
        return self._wired

    # --- copy and delete ---------------------------------------------------------------------------------------

    def copy_log_segment_data(self, meta: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Upload the segment and its indexes, then the manifest; returns the custom metadata bytes (or None)."""
        custom = self._ready(opening=True).objects.copy(meta, data)
        self._forget(meta)
        return custom

    def copy_log_segment_data_unless(
        self, meta: RemoteLogSegmentMetadata, data: LogSegmentData, cancelled: Callable[[], bool]
    ) -> bytes | None:
        """``copy_log_segment_data`` that stops, raising ``CopyCancelled`` and removing what it uploaded, as soon as
        ``cancelled()`` says so (checked before each object and while the ``.log`` streams). A transport whose
        caller gave up on the copy cancels it this way."""
        try:
            return self._ready(opening=True).objects.copy(meta, data, cancelled)
        finally:
            self._forget(meta)

    def delete_log_segment_data(self, meta: RemoteLogSegmentMetadata) -> None:
        """Delete the segment's objects; deleting what is already gone succeeds (the broker retries deletes)."""
        try:
            self._ready().objects.delete(meta)
        finally:
            self._forget(meta)

    def delete_segment_rows(self, meta: RemoteLogSegmentMetadata) -> None:
        """Delete what the segment's format stored outside its objects (an Iceberg-mode segment's rows, with
        ``iceberg.mode.delete.rows.enabled``) and nothing else: ``kts gc`` moves the objects into the quarantine
        itself."""
        try:
            self._ready().objects.delete_body(meta)
        finally:
            self._forget(meta)

    def forget_segment(self, meta: RemoteLogSegmentMetadata) -> None:
        """Drop what the caches hold of the segment (its objects were moved away)."""
        self._forget(meta)

    def _forget(self, meta: RemoteLogSegmentMetadata) -> None:
        """A segment was copied (maybe again) or deleted: no cache may answer for its old copy, and the partition's
        listing, which tells what segment follows which, is out of date."""
        wired = self._ready()
        manifest_key = wired.manifests.keys(meta).manifest
        wired.next_segments.forget(meta.topic_id_partition)
        wired.manifests.forget(manifest_key)
        wired.indexes.forget(manifest_key)
        wired.chunks.forget_segment(manifest_key)

    # --- fetch -------------------------------------------------------------------------------------------------

    def fetch_log_segment(
        self, meta: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        """A lazy stream over bytes ``[start_position, end_position]`` (inclusive; ``None`` = to the end)."""
        tip = meta.topic_id_partition
        last = meta.segment_size_in_bytes - 1 if end_position is None else end_position
        started = time.monotonic()
        try:
            stream = self._open(meta, start_position, end_position)
        except BaseException:
            self.rsm_metrics.fetch_failed(tip.topic, tip.partition)
            raise
        requested = max(0, last - start_position + 1)
        self.rsm_metrics.fetch_requested(tip.topic, tip.partition, requested, time.monotonic() - started)
        return stream

    def fetch_log_segment_ahead(self, meta: RemoteLogSegmentMetadata, start_position: int) -> BinaryIO:
        """``fetch_log_segment`` to the end, for a stream a transport opens before the broker asks for it (the
        sidecar goes on into the next segment when a broker's stream reaches a segment's end). Neither counted
        nor, when it fails, counted as a failure: the broker's own fetch is, when it comes (then through
        ``record_resumed_fetch``, or as a request of its own)."""
        return self._open(meta, start_position, None)

    def _open(self, meta: RemoteLogSegmentMetadata, start_position: int, end_position: int | None) -> BinaryIO:
        """The segment's stream, opened by the format its manifest names."""
        wired = self._ready(opening=True)
        src, manifest = wired.manifests.opened(meta)
        fmt = wired.formats.of(manifest, src.segment_key)
        return fmt.open_fetch(meta, manifest, src, start_position, end_position)

    def fetch_segment_rows(
        self,
        meta: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        columns: Sequence[str] = ("kafka", "headers", "key_raw", "value_raw"),
        kafka_fields: Sequence[str] | None = None,
    ) -> Iterator[pa.Table]:
        """An Iceberg-mode segment's rows as its table holds them now (not rebuilt into batches): those of the
        batches at positions ``[start_position, end_position]``, whole batches at a time in segment order, with
        ``columns`` of the table (``kafka`` always; only ``kafka_fields`` of it, besides those that select the
        rows, when given: null where a data file has none). For readers that want records, not Kafka's bytes (Spark's
        ``kafka-tiered`` source); a classic segment raises ``RemoteStorageException``."""
        wired = self._ready(opening=True)
        src, manifest = wired.manifests.opened(meta)
        fmt = wired.formats.of(manifest, src.segment_key)
        return fmt.open_rows(meta, manifest, start_position, end_position, columns, kafka_fields)

    def record_resumed_fetch(self, meta: RemoteLogSegmentMetadata, start_position: int) -> None:
        """A broker fetch the JVM shim served from a stream it kept open since the previous fetch of the same
        segment (see ``rsm.jvm.sidecar``): no stream was opened here, but the broker asked for the rest of the
        segment from ``start_position``, and the fetch metrics count it like any other."""
        tip = meta.topic_id_partition
        requested = max(0, meta.segment_size_in_bytes - start_position)
        self.rsm_metrics.fetch_requested(tip.topic, tip.partition, requested, None)

    def fetch_index(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        try:
            return io.BytesIO(self._ready().indexes.read(meta, index_type))
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
        return io.BytesIO(self._ready().indexes.read(meta, index_type))

    def following_segment(self, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The metadata of the partition's tiered segment after ``meta``, or None when it is the last: what a
        consumer reading on will fetch next (the partition's listing is cached briefly)."""
        return self._ready().next_segments.following(meta)

    # --- metrics -----------------------------------------------------------------------------------------------

    def _instrument(self, capabilities: BackendCapabilities) -> None:
        """Forward the backend's request counters into its Aiven client-metrics bean (cloud backends only)."""
        instrumented = capabilities.instrumentation
        store = instrumented.STORE.lower() if instrumented is not None else ""
        if instrumented is not None and store in BACKEND_BEANS:
            instrumented.instrumentation.add_listener(BackendRecorder(self.metrics_registry, store))

    def metrics_snapshot(self) -> list[MetricRow]:
        """Every metric now, as JMX rows (the shim's MBeans and the Prometheus endpoint read this)."""
        wired = self._wired
        sources: list[Pulled] = []
        if wired is not None:
            limiters = {"upload": wired.upload_limiter, "fetch": wired.fetch_limiter}
            sources = fetch_path_sources(
                wired.chunks,
                wired.manifests.cache,
                wired.indexes,
                wired.prefetcher,
                limiters,
                wired.pools.stats,
                **wired.formats.metric_sources(),
            )
        return collect(self.metrics_registry, sources, self.metrics_settings.get("metrics.jmx.mirror.domain"))

    def thread_pools(self) -> dict[str, dict[str, float]]:
        """The plugin's pools, keyed by name, with Aiven's thread-pool metric names."""
        return self._wired.pools.stats() if self._wired is not None else {}

    def metrics(self) -> dict[str, dict[str, float]]:
        """A snapshot for Python users: JMX ObjectName -> attribute -> value, Aiven's names."""
        return as_dict(self.metrics_snapshot())

    # --- for tools: what is tiered, manifests, key rotation ----------------------------------------------------

    def catalog(self) -> SegmentCatalog:
        """The tiered segments under the configured ``key.prefix``."""
        return self._ready().manifests.catalog()

    def fetch_manifest(self, meta: RemoteLogSegmentMetadata) -> SegmentManifest:
        """The parsed manifest of a segment (public for tools: key rotation, inspection, Spark readers)."""
        return self._ready().manifests.manifest(meta)

    def segment_metadata(self, segment: TieredSegment) -> RemoteLogSegmentMetadata:
        """The broker's metadata of a listed segment, from its manifest (for tools, prefetch and Spark)."""
        return self._ready().manifests.segment_metadata(segment)

    def rewrap_data_key(self, manifest_key: str, dry_run: bool = False) -> RewrapResult:
        """Re-wrap one segment's data key under the active key pair by rewriting only its manifest (see
        ``ManifestStore.rewrap``); ``dry_run`` only says whether a real run would."""
        return self._ready().manifests.rewrap(manifest_key, dry_run)

    # --- the collaborators, for tools and tests ----------------------------------------------------------------

    @property
    def config(self) -> RsmConfig:
        return self._ready().config

    @property
    def backend(self) -> StorageBackend:
        return self._ready().backend

    @property
    def backend_capabilities(self) -> BackendCapabilities:
        return self._ready().capabilities

    @property
    def key_ring(self) -> RsaKeyRing | None:
        return self._wired.key_ring if self._wired is not None else None

    @property
    def formats(self) -> Formats:
        """The segment formats: the classic one and those plugged in (``rsm.core.segment_format``)."""
        return self._ready().formats

    def segment_format(self, kind: str) -> SegmentFormat | None:
        """The configured format named ``kind`` (``classic``, ``iceberg``), or None where none is plugged in."""
        return self._ready().formats.named(kind)

    @property
    def manifests(self) -> ManifestStore:
        return self._ready().manifests

    @property
    def manifest_cache(self) -> TimedLru[str, Any]:
        return self._ready().manifests.cache

    @property
    def index_reader(self) -> IndexReader:
        return self._ready().indexes

    @property
    def index_cache(self) -> TimedLru[tuple[str, IndexType], bytes]:
        return self._ready().indexes.cache

    @property
    def segment_reader(self) -> SegmentReader:
        return self._ready().segments

    @property
    def next_segments(self) -> NextSegmentFinder:
        return self._ready().next_segments

    @property
    def chunk_cache(self) -> ChunkCache | None:
        return self._wired.chunks if self._wired is not None else None

    @property
    def chunk_buffers(self) -> ChunkBufferPool | None:
        """The pool fetched chunks are decoded into (a transport's, when it supplied one)."""
        return self._wired.chunks.buffers if self._wired is not None else None

    @property
    def prefetcher(self) -> Prefetcher | None:
        return self._wired.prefetcher if self._wired is not None else None

    @property
    def upload_rate_limiter(self) -> RateLimiter | None:
        return self._wired.upload_limiter if self._wired is not None else None

    @property
    def fetch_rate_limiter(self) -> RateLimiter | None:
        return self._wired.fetch_limiter if self._wired is not None else None
