"""The plugin's link to Iceberg mode (``rsm.iceberg``): which topics it takes, and the mode itself, built on
first use so that pyiceberg is imported only where a topic is in Iceberg mode or an Iceberg segment is read."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rsm.core.config import RsmConfig
from rsm.errors import ConfigException
from rsm.iceberg.config import IcebergConfig

if TYPE_CHECKING:
    from rsm.iceberg.maintainer import MaintenanceStats
    from rsm.iceberg.mode import IcebergMode
    from rsm.iceberg.segment_fetch import RowGroupCache
    from rsm.metrics.sources import HasStats


class IcebergLink:
    """``wants(topic)``: is the topic tiered in Iceberg mode; ``mode()``: the mode (built once)."""

    def __init__(self, config: RsmConfig) -> None:
        self.config = config
        self.cfg = IcebergConfig.from_map(config.raw)
        self._mode: IcebergMode | None = None
        self._lock = threading.Lock()
        if self.cfg.enabled:
            self.mode()  # a missing extra or warehouse fails configure(); the catalog opens at the first copy

    def wants(self, topic: str) -> bool:
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

    def value_stats(self) -> HasStats | None:
        """The counters of the mode's value parsing, or None while no topic's values are parsed."""
        mode = self._mode
        return mode.value_stats() if mode is not None else None

    def close(self) -> None:
        """Stop the mode's background maintenance, if the mode was built."""
        mode = self._mode
        if mode is not None:
            mode.close()

    def maintenance_stats(self) -> MaintenanceStats | None:
        """The mode's maintenance counters, or None while the mode is not built or maintenance is off."""
        mode = self._mode
        return mode.maintainer.stats if mode is not None and mode.maintainer is not None else None

    def row_group_cache(self) -> RowGroupCache | None:
        """The mode's row-group cache, or None while the mode is not built (nothing to report yet)."""
        mode = self._mode
        return mode.row_groups if mode is not None else None
