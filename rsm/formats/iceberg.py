"""Iceberg mode as a segment format: a topic's segments as rows of its Iceberg table (``rsm.iceberg``).

A copy only writes rows: no compression heuristic, no data key, no chunks; the CRC-32C the manifest records is
the one the row walk took while reading the segment file, which it reads once. The mode itself
(``rsm.iceberg.mode.IcebergMode``) is built on first use, so pyiceberg is imported only where a topic is in
Iceberg mode or an Iceberg segment is read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from backends.configdef import ConfigDef
from chunking.chunk_index import ChunkIndex
from rsm.core.config import RsmConfig
from rsm.core.copy_pipeline import CopyCancelled
from rsm.core.manifest import SegmentManifest
from rsm.core.memory_floor import config_value
from rsm.core.object_keys import SegmentKeys
from rsm.core.segment_format import SegmentFormat, WrittenBody
from rsm.errors import ConfigException, CorruptDataException
from rsm.fetch.source import SegmentSource
from rsm.iceberg.config import ROW_GROUP_MAX_BYTES, WRITER_MEMORY_FACTOR, IcebergConfig, mode_on
from rsm.iceberg.config_keys import CONFIG_DEF
from rsm.iceberg.section import IcebergSection
from rsm.iceberg.values_config import VALUES_CONFIG_DEF
from rsm.metadata import LogSegmentData, RemoteLogSegmentMetadata

if TYPE_CHECKING:
    import pyarrow as pa

    from rsm.core.manager import RemoteStorageManager
    from rsm.iceberg.maintainer import MaintenanceStats
    from rsm.iceberg.mode import IcebergMode
    from rsm.iceberg.segment_fetch import RowGroupCache
    from rsm.metrics.sources import HasStats

__all__ = ["ICEBERG", "IcebergFormat", "IcebergPlugin", "iceberg_format", "iceberg_section"]

log = logging.getLogger(__name__)


def iceberg_section(manifest: SegmentManifest) -> IcebergSection | None:
    """The manifest's Iceberg section, or None for a segment of another format."""
    section = manifest.section
    return section if isinstance(section, IcebergSection) else None


class IcebergFormat:
    """``SegmentFormat`` of rows in a topic's Iceberg table. ``takes``: is the topic in Iceberg mode; ``mode()``:
    the mode (built once)."""

    kind = "iceberg"
    stores_log = False

    def __init__(self, config: RsmConfig) -> None:
        self.config = config
        self.cfg = IcebergConfig.from_map(config.raw)
        self._mode: IcebergMode | None = None
        self._lock = threading.Lock()
        if self.cfg.enabled:
            self.mode()  # a missing extra or warehouse fails configure(); the catalog opens at the first copy

    @property
    def deletes_need_manifest(self) -> bool:
        return self.cfg.delete_rows

    def takes(self, topic: str) -> bool:
        return self.cfg.is_iceberg_topic(topic)

    def mode(self) -> IcebergMode:
        with self._lock:
            if self._mode is None:
                try:
                    from rsm.iceberg.mode import IcebergMode
                except ImportError as e:
                    raise ConfigException(
                        f"Iceberg mode needs pyiceberg and pyarrow ({e}): install kafka-tiered-storage[iceberg]"
                    ) from None
                self._mode = IcebergMode(
                    self.cfg, self.config["storage.backend.class"], self.config.storage, self.config["key.prefix"]
                )
            return self._mode

    # --- the segment format ----------------------------------------------------------------------------------

    def write_body(
        self,
        meta: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        keys: SegmentKeys,
        uploaded: list[str],
        cancelled: Callable[[], bool] | None,
    ) -> WrittenBody | None:
        """The segment's rows, committed to its table; None for a segment whose rows cannot give it back exactly
        (it is tiered classic). Nothing goes into ``.log``: the chunk index describes the segment as one chunk."""
        from rsm.iceberg.rows import NotRepresentable

        def before_commit() -> None:
            if cancelled is not None and cancelled():
                raise CopyCancelled(f"copy of {meta.describe()} cancelled before the commit of its rows")

        try:
            written = self.mode().write_segment(meta, data.log_segment, data.transaction_index, before_commit)
        except NotRepresentable as e:
            log.warning("%s is tiered in the classic format, not in Iceberg mode: %s", meta.describe(), e)
            return None
        size = written.section.segment_size
        whole = ChunkIndex(size, size, [size], size)
        return WrittenBody(whole, [written.crc32c], False, None, None, 0, written.section)

    def _section(self, manifest: SegmentManifest, meta: RemoteLogSegmentMetadata) -> IcebergSection:
        section = iceberg_section(manifest)
        if section is None:
            raise CorruptDataException(f"the manifest of {meta.describe()} holds no Iceberg section")
        return section

    def open_fetch(
        self,
        meta: RemoteLogSegmentMetadata,
        manifest: SegmentManifest,
        source: SegmentSource,
        start: int,
        end: int | None,
    ) -> BinaryIO:
        return self.mode().open_fetch(meta, self._section(manifest, meta), start, end)

    def open_rows(
        self,
        meta: RemoteLogSegmentMetadata,
        manifest: SegmentManifest,
        start: int,
        end: int | None,
        columns: Sequence[str],
        kafka_fields: Sequence[str] | None,
    ) -> Iterator[pa.Table]:
        return self.mode().open_rows(meta, self._section(manifest, meta), start, end, columns, kafka_fields)

    def delete_body(self, meta: RemoteLogSegmentMetadata, manifest: SegmentManifest | None) -> None:
        """With ``iceberg.mode.delete.rows.enabled``, the rows the segment wrote, from the table its manifest
        names; otherwise nothing (the rows stay in the table)."""
        if not self.cfg.delete_rows or manifest is None:
            return
        self.mode().delete_rows(meta, self._section(manifest, meta))

    def metric_sources(self) -> Mapping[str, Callable[[], HasStats | None]]:
        return {
            "iceberg_row_groups": self.row_group_cache,
            "iceberg_values": self.value_stats,
            "iceberg_maintenance": self.maintenance_stats,
        }

    def close(self) -> None:
        """Stop the mode's background maintenance, if the mode was built."""
        mode = self._mode
        if mode is not None:
            mode.close()

    # --- the mode's counters ---------------------------------------------------------------------------------

    def value_stats(self) -> HasStats | None:
        """The counters of the mode's value parsing, or None while no topic's values are parsed."""
        mode = self._mode
        return mode.value_stats() if mode is not None else None

    def maintenance_stats(self) -> MaintenanceStats | None:
        """The mode's maintenance counters, or None while the mode is not built or maintenance is off."""
        mode = self._mode
        return mode.maintainer.stats if mode is not None and mode.maintainer is not None else None

    def row_group_cache(self) -> RowGroupCache | None:
        """The mode's row-group cache, or None while the mode is not built (nothing to report yet)."""
        mode = self._mode
        return mode.row_groups if mode is not None else None


class IcebergPlugin:
    """Plugs Iceberg mode in: its manifest section, its keys (``iceberg.mode.*``), its memory floor."""

    kind = "iceberg"
    config_defs: Sequence[ConfigDef] = (CONFIG_DEF, VALUES_CONFIG_DEF)

    def parse_section(self, obj: Any) -> IcebergSection:
        return IcebergSection.from_json(obj)

    def memory_floor(self, configs: Mapping[str, Any]) -> list[tuple[str, int]]:
        """With Iceberg mode on: the row-group cache of fetches and the rows of one segment copy."""
        if not mode_on(configs):
            return []
        return [
            ("iceberg.mode.fetch.cache.size", int(config_value(configs, "iceberg.mode.fetch.cache.size", CONFIG_DEF))),
            (
                f"{WRITER_MEMORY_FACTOR} x {ROW_GROUP_MAX_BYTES >> 20} MiB row group (one copy's rows)",
                WRITER_MEMORY_FACTOR * ROW_GROUP_MAX_BYTES,
            ),
        ]

    def build(self, config: RsmConfig) -> SegmentFormat:
        return IcebergFormat(config)


ICEBERG = IcebergPlugin()


def iceberg_format(manager: RemoteStorageManager) -> IcebergFormat:
    """The configured manager's Iceberg format (``RemoteStorageManager.segment_format("iceberg")``)."""
    found = manager.segment_format("iceberg")
    if not isinstance(found, IcebergFormat):
        raise ConfigException("Iceberg mode is not plugged into this plugin: import rsm (its root plugs it in)")
    return found
