"""What a transport (the sidecar, the in-process bridge) asks of the manager it serves.

``python.manager.class`` names the manager: ``rsm:RemoteStorageManager`` by default, or a class of your own. It
must have Kafka's KIP-405 calls (``KafkaRemoteStorageManager``). Everything else is optional, one small protocol
per feature, and a transport serving a manager without it works as it would without the feature:

- ``IndexesAhead``: the sidecar answers a request for one of the three indexes the broker fetches first with
  all three, reading the other two with ``fetch_index_ahead`` (without it: ``fetch_index``, counted as fetches);
- ``SegmentsAhead``: a stream that reaches its segment's end goes on into the partition's next segment;
- ``ResumedFetches``: the fetch metrics count the broker fetches the shim served from a stream it kept;
- ``MetricsSnapshots`` and ``MetricsSettings``: the shim's MBeans, and the Prometheus endpoint;
- ``TakesChunkBuffers``: fetched chunks are decoded straight into the sidecar's shared memory;
- ``CancellableCopies``: a copy the shim gave up on stops where it is (without it, it runs to its end and is
  removed then).

``ManagerCapabilities.of`` checks once, when the transport is wired to the manager, which of them the manager
implements; the transport then uses what is there and never asks again. docs/architecture.md has the picture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable

from rsm.fetch.chunk_cache import ChunkBufferSupply
from rsm.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.metrics.snapshot import MetricRow


@runtime_checkable
class KafkaRemoteStorageManager(Protocol):
    """Kafka's contract (KIP-405), which every manager has. Errors are ``rsm.errors``' family: the transports
    turn ``RemoteResourceNotFoundException`` and ``RemoteStorageException`` into Kafka's."""

    def configure(self, configs: Mapping[str, Any]) -> None: ...

    def copy_log_segment_data(self, meta: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None: ...

    def fetch_log_segment(
        self, meta: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO: ...

    def fetch_index(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO: ...

    def delete_log_segment_data(self, meta: RemoteLogSegmentMetadata) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class IndexesAhead(Protocol):
    def fetch_index_ahead(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """``fetch_index`` for an index sent before the broker asks for it: a failure is not counted (the broker's
        own request for it meets the failure and counts it)."""
        ...


@runtime_checkable
class SegmentsAhead(Protocol):
    def following_segment(self, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The partition's tiered segment after ``meta``, or None after the last one."""
        ...

    def fetch_log_segment_ahead(self, meta: RemoteLogSegmentMetadata, start_position: int) -> BinaryIO:
        """``fetch_log_segment`` to the end, opened before the broker asks: neither counted nor, when it fails,
        counted as a failure. The sidecar goes on with it only when it is an ``rsm.fetch.stream.SegmentStream``
        (pieces it can send without a copy)."""
        ...


@runtime_checkable
class ResumedFetches(Protocol):
    def record_resumed_fetch(self, meta: RemoteLogSegmentMetadata, start_position: int) -> None:
        """Count a broker fetch, from ``start_position`` to the end, that the shim served from a stream it kept."""
        ...


@runtime_checkable
class MetricsSnapshots(Protocol):
    def metrics_snapshot(self) -> list[MetricRow]:
        """Every metric now, one row per JMX bean (``rsm.metrics.snapshot``)."""
        ...


@runtime_checkable
class MetricsSettings(Protocol):
    metrics_settings: Mapping[str, Any]
    """The parsed ``metrics.*`` keys after ``configure()`` (the sidecar reads ``metrics.prometheus.port`` and
    ``metrics.prometheus.host``)."""


@runtime_checkable
class TakesChunkBuffers(Protocol):
    def use_chunk_buffers(self, supply: ChunkBufferSupply) -> None:
        """Before ``configure()``: decode fetched chunks into the buffers ``supply`` gives when ``configure()`` asks
        for them (``rsm.fetch.chunk_cache.ChunkBufferSupply``)."""
        ...


@runtime_checkable
class CancellableCopies(Protocol):
    def copy_log_segment_data_unless(
        self, meta: RemoteLogSegmentMetadata, data: LogSegmentData, cancelled: Callable[[], bool]
    ) -> bytes | None:
        """``copy_log_segment_data`` that stops, removing what it uploaded, once ``cancelled()`` is true."""
        ...


@dataclass(frozen=True)
class ManagerCapabilities:
    """What a manager offers a transport: each field is the manager itself, or None."""

    manager: KafkaRemoteStorageManager
    indexes_ahead: IndexesAhead | None = None
    segments_ahead: SegmentsAhead | None = None
    resumed_fetches: ResumedFetches | None = None
    metrics: MetricsSnapshots | None = None
    metrics_settings: MetricsSettings | None = None
    chunk_buffers: TakesChunkBuffers | None = None
    cancellable_copies: CancellableCopies | None = None

    @classmethod
    def of(cls, manager: KafkaRemoteStorageManager) -> ManagerCapabilities:
        """The one place that asks what ``manager`` implements; a transport calls it once, when it is wired."""
        return cls(
            manager,
            manager if isinstance(manager, IndexesAhead) else None,
            manager if isinstance(manager, SegmentsAhead) else None,
            manager if isinstance(manager, ResumedFetches) else None,
            manager if isinstance(manager, MetricsSnapshots) else None,
            manager if isinstance(manager, MetricsSettings) else None,
            manager if isinstance(manager, TakesChunkBuffers) else None,
            manager if isinstance(manager, CancellableCopies) else None,
        )

    def copy(self, meta: RemoteLogSegmentMetadata, data: LogSegmentData, cancelled: Callable[[], bool]) -> bytes | None:
        """The manager's copy, stopped by ``cancelled`` where the manager can be."""
        if self.cancellable_copies is not None:
            return self.cancellable_copies.copy_log_segment_data_unless(meta, data, cancelled)
        return self.manager.copy_log_segment_data(meta, data)

    def fetch_index_ahead(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """An index read before the broker asks: uncounted where the manager can, else its ``fetch_index``."""
        if self.indexes_ahead is not None:
            return self.indexes_ahead.fetch_index_ahead(meta, index_type)
        return self.manager.fetch_index(meta, index_type)

    def metrics_rows(self) -> list[MetricRow]:
        """The manager's metrics, or none for a manager without them."""
        return list(self.metrics.metrics_snapshot()) if self.metrics is not None else []

    def setting(self, key: str) -> Any:
        """One of the manager's parsed ``metrics.*`` settings, or None."""
        return self.metrics_settings.metrics_settings.get(key) if self.metrics_settings is not None else None
