"""Iceberg mode's configuration as the plugin uses it: ``IcebergConfig`` and the maintenance settings, read from
the keys ``rsm.iceberg.config_keys`` declares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backends.configdef import ConfigException
from rsm.iceberg.config_keys import (
    CATALOG_PROPERTY_PREFIX,
    CONFIG_DEF,
    INDEXED_FILES_DEFAULT,
    PREFIX,
    SLICE_READERS_DEFAULT,
    WRITE_CONCURRENCY_DEFAULT,
)
from rsm.iceberg.latest_config import LatestTable, latest_tables
from rsm.iceberg.topic_tables import TopicTable, table_of, topic_tables


@dataclass(frozen=True)
class MaintenanceSettings:
    """What a maintenance run does (the ``iceberg.mode.maintenance.*`` keys; defaults as theirs)."""

    snapshot_max_age_s: float = 3600.0
    snapshot_min_keep: int = 5
    snapshot_max_keep: int = 10
    manifests_max: int = 8
    target_file_bytes: int = 128 << 20
    min_input_files: int = 4
    orphan_grace_s: float = 3 * 86400.0
    quarantine_s: float = 7 * 86400.0
    """How long an orphan file stays in the warehouse's quarantine before maintenance purges it (the plugin's
    ``gc.quarantine.ms``)."""


def mode_on(configs: Mapping[str, Any]) -> bool:
    """Whether ``configs`` (plugin keys) put any topic in Iceberg mode, as ``IcebergConfig.from_map`` reads it."""
    return bool(configs.get("iceberg.mode.topics.regex"))


ROW_GROUP_MAX_BYTES = 16 << 20
"""Arrow bytes of rows at which a copy writes a row group before it holds the table's
``write.parquet.row-group-limit`` rows (``rsm.iceberg.data_files.StreamingDataFiles``): what bounds the rows a
writing copy holds, whatever the size of its records."""

WRITER_MEMORY_FACTOR = 2
"""A segment copy in Iceberg mode holds about this many times ``ROW_GROUP_MAX_BYTES`` while it writes: the row
group's rows (with the piece of rows that completes it) and the same rows as pyiceberg converts them and Parquet
encodes them. A copy of 96 MiB of JSON records with their values parsed added 30-36 MiB to its process's peak
(tests/integration/test_iceberg_write_memory.py)."""


def _quarantine_s(raw: Mapping[str, Any]) -> float:
    """``gc.quarantine.ms`` (a key of the plugin's own table, rsm.core.config) in seconds; 7 days when unset."""
    value = raw.get("gc.quarantine.ms")
    try:
        return 7 * 86400.0 if value in (None, "") else int(value) / 1000
    except (TypeError, ValueError):
        raise ConfigException(
            f"Invalid value {value!r} for configuration gc.quarantine.ms: expected milliseconds"
        ) from None


@dataclass(frozen=True)
class IcebergConfig:
    """The parsed ``iceberg.mode.*`` keys."""

    topics: re.Pattern[str] | None
    namespace: str
    catalog_type: str
    catalog_uri: str
    sqlite_path: str
    catalog_name: str
    catalog_properties: dict[str, str] = field(default_factory=dict)
    warehouse: str = ""
    delete_rows: bool = False
    commit_retries: int = 10
    write_batch_bytes: int = 64 << 20
    write_concurrency: int = WRITE_CONCURRENCY_DEFAULT
    fetch_cache_bytes: int = 64 << 20
    fetch_table_refresh_ms: int = 5000
    fetch_slice_readers: int = SLICE_READERS_DEFAULT
    fetch_index_files: int = INDEXED_FILES_DEFAULT
    value_column_factory: str = ""
    maintenance_enabled: bool = True
    maintenance_interval_s: float = 60.0
    orphan_interval_s: float = 3600.0
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    #: The ``iceberg.value.schema.*`` and ``iceberg.key.schema.*`` keys as given (read by ``rsm.iceberg.values``).
    value_schemas: dict[str, Any] = field(default_factory=dict)
    #: Topics with ``iceberg.mode.table.<id>.*`` keys, by topic.
    tables: dict[str, TopicTable] = field(default_factory=dict)
    #: Topics with a latest-per-key table (``iceberg.mode.table.<id>.latest.enabled=true``), by topic.
    latest: dict[str, LatestTable] = field(default_factory=dict)

    def table_of(self, topic: str) -> TopicTable:
        """The topic's table: configured, or named after the topic in ``namespace``."""
        return table_of(self.tables, topic, self.namespace)

    def latest_of(self, topic: str) -> LatestTable | None:
        """The topic's latest-per-key table, where it has one."""
        return self.latest.get(topic)

    @property
    def enabled(self) -> bool:
        return self.topics is not None

    def is_iceberg_topic(self, topic: str) -> bool:
        return self.topics is not None and self.topics.fullmatch(topic) is not None

    @staticmethod
    def from_map(configs: Mapping[str, Any]) -> IcebergConfig:
        raw = {str(k): v for k, v in configs.items()}
        values = CONFIG_DEF.parse({k: v for k, v in raw.items() if k.startswith(PREFIX)})
        regex = values["iceberg.mode.topics.regex"]
        catalog_type = values["iceberg.mode.catalog.type"].lower()
        uri = values["iceberg.mode.catalog.uri"]
        sqlite = values["iceberg.mode.catalog.sqlite.path"]
        if regex and catalog_type == "rest" and not uri:
            raise ConfigException(
                "Missing required configuration 'iceberg.mode.catalog.uri' (iceberg.mode.catalog.type is rest): "
                "name the REST catalog's URL"
            )
        if regex and catalog_type == "sql" and not uri and not sqlite:
            raise ConfigException(
                "Missing required configuration 'iceberg.mode.catalog.sqlite.path' (iceberg.mode.topics.regex is "
                "set and iceberg.mode.catalog.uri is empty): name the SQLite file of the catalog, or set "
                "iceberg.mode.catalog.uri to a SQLAlchemy URL"
            )
        props = {
            k[len(CATALOG_PROPERTY_PREFIX) :]: str(v)
            for k, v in raw.items()
            if k.startswith(CATALOG_PROPERTY_PREFIX) and len(k) > len(CATALOG_PROPERTY_PREFIX)
        }
        return IcebergConfig(
            topics=re.compile(regex) if regex else None,
            namespace=values["iceberg.mode.namespace"],
            catalog_type=catalog_type,
            catalog_uri=uri,
            sqlite_path=sqlite,
            catalog_name=values["iceberg.mode.catalog.name"],
            catalog_properties=props,
            warehouse=values["iceberg.mode.warehouse"],
            delete_rows=values["iceberg.mode.delete.rows.enabled"],
            commit_retries=values["iceberg.mode.commit.retries"],
            write_batch_bytes=values["iceberg.mode.write.batch.bytes"],
            write_concurrency=values["iceberg.mode.write.concurrency"],
            fetch_cache_bytes=values["iceberg.mode.fetch.cache.size"],
            fetch_table_refresh_ms=values["iceberg.mode.fetch.table.refresh.ms"],
            fetch_slice_readers=values["iceberg.mode.fetch.slice.readers"],
            fetch_index_files=values["iceberg.mode.fetch.index.files"],
            value_column_factory=values["iceberg.mode.value.column.factory"],
            maintenance_enabled=values["iceberg.mode.maintenance.enabled"],
            maintenance_interval_s=values["iceberg.mode.maintenance.interval.ms"] / 1000,
            orphan_interval_s=values["iceberg.mode.maintenance.orphan.interval.ms"] / 1000,
            maintenance=MaintenanceSettings(
                snapshot_max_age_s=values["iceberg.mode.maintenance.snapshot.max.age.ms"] / 1000,
                snapshot_min_keep=values["iceberg.mode.maintenance.snapshot.min.keep"],
                snapshot_max_keep=values["iceberg.mode.maintenance.snapshot.max.keep"],
                manifests_max=values["iceberg.mode.maintenance.manifests.max"],
                target_file_bytes=values["iceberg.mode.maintenance.compaction.target.bytes"],
                min_input_files=values["iceberg.mode.maintenance.compaction.min.files"],
                orphan_grace_s=values["iceberg.mode.maintenance.orphan.grace.ms"] / 1000,
                quarantine_s=_quarantine_s(raw),
            ),
            value_schemas={
                k: v for k, v in raw.items() if k.startswith(("iceberg.value.schema.", "iceberg.key.schema."))
            },
            tables=(tables := topic_tables(raw, values["iceberg.mode.namespace"])),
            latest=latest_tables(raw, tables, values["iceberg.mode.namespace"]),
        )
