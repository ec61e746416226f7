"""Iceberg mode as the plugin sees it: write a segment into its table, open a fetch of one, delete its rows.

``IcebergMode`` is built once per plugin, on first use (a broker whose topics are all classic never imports
pyiceberg); it holds the catalog handle, the table writer, the fetch planner (which finds a segment's rows through
the table's current snapshot) and the row-group cache of fetches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import pyarrow as pa

from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.iceberg.catalog import CatalogHandle, catalog_properties
from rsm.iceberg.config import IcebergConfig
from rsm.iceberg.fetch_plan import FetchPlanner, SegmentRows
from rsm.iceberg.maintainer import Maintainer
from rsm.iceberg.rows import NotRepresentable, SegmentSummary
from rsm.iceberg.section import IcebergSection, section_identifier
from rsm.iceberg.segment_fetch import RowGroupCache, iter_segment_rows
from rsm.iceberg.segment_stream import open_segment_stream
from rsm.iceberg.table_writer import SegmentToWrite, TableWriter
from rsm.iceberg.value_hook import load_factory
from rsm.kafka.indexes import decode_txn_index
from rsm.metadata import RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

_Opened = TypeVar("_Opened")

__all__ = ["IcebergMode", "NotRepresentable", "WrittenRows"]


@dataclass(frozen=True)
class WrittenRows:
    """A segment's rows, committed: where they are (``section``), and the CRC-32C of the segment file, taken by
    the walk that turned it into rows (the file is read once)."""

    section: IcebergSection
    crc32c: int


class IcebergMode:
    """The plugin's Iceberg side; thread-safe."""

    def __init__(self, cfg: IcebergConfig, backend_class: str, storage: Mapping[str, Any], key_prefix: str) -> None:
        self.cfg = cfg
        self.properties = catalog_properties(cfg, backend_class, storage, key_prefix)
        self.handle = CatalogHandle(cfg, self.properties)
        factory = load_factory(cfg.value_column_factory)
        if not cfg.value_column_factory and cfg.value_schemas:
            from rsm.iceberg.values import value_column_factory

            factory = value_column_factory(cfg.value_schemas)
        self.row_groups = RowGroupCache(cfg.fetch_cache_bytes, slice_readers=cfg.fetch_slice_readers)
        self.planner = FetchPlanner(self.handle, cfg.fetch_table_refresh_ms / 1000, indexed_files=cfg.fetch_index_files)
        self.writer = TableWriter(
            self.handle, cfg.write_batch_bytes, cfg.commit_retries, factory, cfg.write_concurrency
        )
        self.maintainer: Maintainer | None = None
        if cfg.maintenance_enabled:
            self.maintainer = Maintainer(
                lambda: self.handle.catalog,
                cfg.namespace,
                cfg.maintenance,
                cfg.maintenance_interval_s,
                cfg.orphan_interval_s,
                warehouse=self.properties.get("warehouse"),
            )

    def value_stats(self) -> Any:
        """The counters of ``rsm.iceberg.values`` (``stats()``), or None where no topic has parsed values."""
        if not self.cfg.value_schemas:
            return None
        from rsm.iceberg.values import STATS

        return STATS

    def write_segment(
        self,
        meta: RemoteLogSegmentMetadata,
        log_path: Path,
        transaction_index: Path | None,
        before_commit: Callable[[], None] | None = None,
    ) -> WrittenRows:
        """The segment's rows, committed; ``NotRepresentable`` when it must be tiered classic instead.
        ``before_commit`` is called right before the commit: a cancelled copy raises there, committing nothing."""
        aborted = decode_txn_index(transaction_index.read_bytes()) if transaction_index is not None else []
        tip = meta.topic_id_partition
        seg = SegmentToWrite(tip.topic, tip.topic_id, tip.partition, meta.remote_log_segment_id.id, log_path, aborted)
        if self.maintainer is not None:
            self.maintainer.start()  # a broker that copies maintains; a CLI or a reader never starts it
        summary = SegmentSummary()
        try:
            if self.maintainer is None:
                return WrittenRows(self.writer.write(seg, meta.describe(), before_commit, summary), summary.crc32c)
            # The maintainer knows tables by their name in the namespace (not the topic's name: dots are mapped).
            with self.maintainer.gate(self.handle.table_identifier(tip.topic)[1]).copying():
                section = self.writer.write(seg, meta.describe(), before_commit, summary)
            self.maintainer.note_commit(section_identifier(section.table, tip.topic)[1])
            latest = self.cfg.latest_of(tip.topic)
            if latest is not None and latest.namespace == self.cfg.namespace:
                self.maintainer.note_commit(latest.name)  # its expiry keeps its commits' cost flat too
            return WrittenRows(section, summary.crc32c)
        except (RemoteStorageException, NotRepresentable):
            raise
        except Exception as e:
            raise self._catalog_failure(f"cannot copy {meta.describe()} to its Iceberg table", e) from e

    def open_fetch(
        self, meta: RemoteLogSegmentMetadata, section: IcebergSection, start: int, end: int | None
    ) -> BinaryIO:
        what = meta.describe()
        stream = self._planned(
            meta,
            section,
            start,
            end,
            section.segment_size,
            lambda rows: open_segment_stream(rows, start, end, what, self.row_groups),
        )
        return stream  # type: ignore[return-value]

    def open_rows(
        self,
        meta: RemoteLogSegmentMetadata,
        section: IcebergSection,
        start: int,
        end: int | None,
        columns: Sequence[str],
        kafka_fields: Sequence[str] | None = None,
    ) -> Iterator[pa.Table]:
        """The segment's rows themselves (what ``open_fetch`` rebuilds batches from): those of batches at positions
        ``start..end``, found as a fetch finds them, whole batches at a time in segment order (``columns`` and
        ``kafka_fields``: see ``iter_segment_rows``)."""
        what = meta.describe()

        def first(rows: SegmentRows) -> tuple[Generator[pa.Table, None, None], pa.Table | None]:
            tables = iter_segment_rows(rows, start, end, what, self.row_groups, columns, kafka_fields)
            return tables, next(tables, None)

        tables, table = self._planned(meta, section, start, end, None, first)
        try:
            if table is not None:
                yield table
                yield from tables
        finally:
            tables.close()  # its files, when the consumer stops early

    def _planned(
        self,
        meta: RemoteLogSegmentMetadata,
        section: IcebergSection,
        start: int,
        end: int | None,
        size: int | None,
        opener: Callable[[SegmentRows], _Opened],
    ) -> _Opened:
        """``opener`` of the segment's rows as planned now, after the range check (``size``: the segment's, when
        ``start`` must not be past it). A planned file found gone means the table was maintained since it was
        loaded: the rows are planned again on a fresh load, once."""
        if end is not None and end < start:
            raise RemoteStorageException(f"invalid range [{start}, {end}] for {meta.describe()}: end before start")
        if size is not None and start > size:
            raise RemoteStorageException(
                f"start position {start} is past the end of {meta.describe()}, which has {size} bytes"
            )
        what = meta.describe()
        segment_id, topic = meta.remote_log_segment_id.id, meta.topic_id_partition.topic
        rows = self.planner.rows(section, segment_id, topic, what)
        try:
            return opener(rows)
        except RemoteResourceNotFoundException:
            if rows.snapshot_id is None:
                raise
            return opener(self.planner.rows(section, segment_id, topic, what, refresh=True))

    def delete_rows(self, meta: RemoteLogSegmentMetadata, section: IcebergSection) -> None:
        """Delete the rows the segment wrote, from the table its manifest names."""
        tip = meta.topic_id_partition
        try:
            self.writer.delete_rows(section, tip.topic, tip.topic_id, meta.remote_log_segment_id.id, meta.describe())
        except RemoteStorageException:
            raise
        except Exception as e:
            raise self._catalog_failure(f"cannot delete the rows of {meta.describe()}", e) from e

    def close(self) -> None:
        """Stop the maintenance thread (a pass under way ends after its current step) and close the readers kept
        between fetches."""
        if self.maintainer is not None:
            self.maintainer.close()
        self.row_groups.cursors.close()

    def _catalog_failure(self, what: str, e: Exception) -> RemoteStorageException:
        """A failure of the catalog or the warehouse (a database down, refused credentials, a store that does
        not answer) as the exception Kafka expects, naming the catalog and what to check; Kafka retries."""
        return RemoteStorageException(
            f"{what}: {type(e).__name__}: {e} (the {self.handle.describe()}, warehouse "
            f"{self.properties.get('warehouse', '?')}); where either did not answer or refused access, check "
            "iceberg.mode.catalog.* and iceberg.mode.warehouse; Kafka retries"
        )
