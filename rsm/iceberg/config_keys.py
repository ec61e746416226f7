"""The keys of Iceberg mode (``iceberg.mode.*``), declared once (the key table); the plugin registers them with its
own, and ``rsm.iceberg.config`` reads them into an ``IcebergConfig``.

Aiven's own ``iceberg.*`` keys (``iceberg.namespace``, ``iceberg.catalog.<property>``) name Java catalogs; these
name pyiceberg's, so they live under a prefix of their own and Aiven's stay documented as not read.
"""

from __future__ import annotations

import re
from typing import Any

from backends.configdef import ConfigDef, ConfigKey, in_range, one_of

PREFIX = "iceberg.mode."
CATALOG_PROPERTY_PREFIX = "iceberg.mode.catalog.property."
ICEBERG_DIR = "iceberg/"
"""The default warehouse: this folder under ``key.prefix`` (tables' metadata and data files, never our objects)."""


def _regex(_key: str, value: Any) -> str | None:
    try:
        re.compile(value)
    except re.error as e:
        return f"not a regular expression: {e}"
    return None


_regex.valid_values = "a regular expression"  # type: ignore[attr-defined]


def _factory(_key: str, value: Any) -> str | None:
    if value and ":" not in value:
        return "expected module:function"
    return None


_factory.valid_values = "module:function"  # type: ignore[attr-defined]

SLICE_BYTES = 16 << 20
"""About the most bytes (a row group's uncompressed size per row) a fetch's slice of a large row group holds
(rsm.iceberg.row_slices): large records get fewer rows a slice, so that the row-group cache (64 MiB by default,
entries up to half of it) keeps several slices."""
SLICE_READERS_DEFAULT = 10
"""Readers of large row groups kept open between fetches, by default: Kafka's default ``remote.log.reader.threads``,
so each of the broker's reader threads catching up through a compacted file keeps its own."""
INDEXED_FILES_DEFAULT = 50_000
"""Live files fetches keep indexed by default (``rsm.iceberg.table_files``)."""
INDEXED_FILE_BYTES = 1 << 10
"""About the memory one indexed file takes (its path, partition, bounds and sequence number; 0.9 KiB measured
with paths of 125 characters)."""
WRITE_CONCURRENCY_DEFAULT = 2
"""Copies writing rows at once by default: building rows is CPU work under the GIL, so more than two at once buys
little throughput and costs a row group of rows and its encoding each (about 32 MiB)."""
CURSOR_MEMORY_BYTES = 2 * SLICE_BYTES
"""What an idle reader holds, at most: measured with pyarrow 26, a reader streaming a group's fetch columns held
the size of its last slice plus about 1 MiB per column read (30 MiB for slices of 15 MiB)."""


CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "iceberg.mode.topics.regex",
            "string",
            "",
            "Topics whose whole name matches this regular expression are tiered in Iceberg mode: each segment "
            "becomes rows of the topic's Iceberg table (one copy serves Kafka and SQL readers). Empty: none. A "
            "topic switched over keeps serving its segments tiered before in the classic format.",
            validator=_regex,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.namespace",
            "string",
            "kafka",
            "Iceberg namespace of the topics' tables (created when missing). A table is named after its topic, "
            "each character other than a letter, digit or '_' replaced by '_' (payments.eu -> payments_eu); "
            "iceberg.mode.table.<id>.name names another.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.catalog.type",
            "string",
            "sql",
            "The catalog: sql (pyiceberg's SQL catalog: SQLite by default, PostgreSQL with a SQLAlchemy URL), "
            "rest (an Iceberg REST catalog at iceberg.mode.catalog.uri) or glue (AWS Glue; region, endpoint and "
            "credentials as iceberg.mode.catalog.property.glue.*).",
            validator=one_of("sql", "rest", "glue"),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.catalog.uri",
            "string",
            "",
            "sql: a SQLAlchemy URL (postgresql+psycopg2://user:pass@host/db); empty: SQLite at "
            "iceberg.mode.catalog.sqlite.path. rest: the REST catalog's URL (required). glue: not used.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.catalog.sqlite.path",
            "string",
            "",
            "The SQLite file of the sql catalog when iceberg.mode.catalog.uri is empty (required then). Every "
            "broker that tiers Iceberg-mode topics must reach the same catalog: SQLite suits one broker and tests.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.catalog.name",
            "string",
            "kafka_tiered",
            "The catalog's name (the SQL catalog keeps it in its tables; readers open the catalog by it).",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.catalog.property.<property>",
            "string",
            None,
            "Any other pyiceberg catalog or FileIO property, passed as is (e.g. credential, token, s3.region, "
            "py-io-impl); it wins over what is derived from the storage.* keys.",
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.warehouse",
            "string",
            "",
            "Where tables and data files go, as a URI readers open (file:///..., s3://bucket/path, gs://..., "
            "abfs://...). Empty: the storage backend's own place, under key.prefix + 'iceberg/' (filesystem and "
            "S3, GCS and Azure backends).",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.topic",
            "string",
            None,
            "The topic the iceberg.mode.table.<id>.* keys are about (default: <id> itself; needed when the topic "
            "name has dots).",
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.name",
            "string",
            None,
            "The topic's table: <name> (in iceberg.mode.namespace) or <namespace>.<name>, letters, digits and "
            "'_'. Changing it sends new segments to that table; segments tiered before keep their table (their "
            "manifests name it).",
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.partition.by",
            "string",
            None,
            "The table's partition spec, comma-separated: hour, day or month (of kafka.timestamp) and any of "
            "`identity(<column>)`, `bucket[<n>](<column>)`, `truncate[<width>](<column>)` of a column such as "
            "value.country; none: unpartitioned. Unset: day for a new table, an existing one kept as it is. A "
            "change evolves the table's spec: new data only.",
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.latest.enabled",
            "boolean",
            False,
            "Also keep the topic's latest-per-key table: one row per Kafka partition and key, the record of the "
            "highest offset tiered so far; a tombstone (or a Debezium delete) removes the key. Updated by the copy "
            "that commits the log rows, right after them; aborted transactions never reach it "
            '(docs/iceberg.md, "The latest-per-key table").',
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.latest.name",
            "string",
            None,
            "The latest-per-key table: <name> (in the log table's namespace) or <namespace>.<name>. Default: the "
            "log table's name + '_latest' (kafka.orders -> kafka.orders_latest).",
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.latest.key",
            "string",
            "kafka.key",
            "What identifies a key: kafka.key (the record key's bytes) or comma-separated fields of the parsed "
            "value (value.customer_id, value.region; needs a value schema). A record whose key is null is left out. "
            "With latest.format=debezium the fields are columns of the row: after's, and before's for a delete.",
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.latest.format",
            "string",
            "record",
            "record: a row holds the record (key_raw, value_raw, headers, and the parsed key and value where the "
            "topic has them). debezium: values are Debezium change events (JSON with or without schema, or Avro "
            "through the registry); c, u and r write the columns of `after` as the row's own columns, d deletes "
            "the key.",
            validator=one_of("record", "debezium"),
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.table.<id>.latest.buckets",
            "int",
            16,
            "Hash buckets of the key, the latest table's partitions: a copy rewrites the files of at most this "
            "many buckets. More buckets: smaller rewrites per copy, more files. Takes effect when the table is "
            "created.",
            validator=in_range(1, 4096),
            dynamic=True,
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.delete.rows.enabled",
            "boolean",
            False,
            "When Kafka deletes an Iceberg-mode segment (retention), also delete the rows its copy wrote from the "
            "table (those of its offset range carrying its segment and topic ids; rows without ids, from earlier "
            "releases, stay). By default the rows stay for SQL readers and only Kafka's view of the segment goes.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.commit.retries",
            "int",
            10,
            "How often a segment's commit is retried when another writer committed to the table first.",
            validator=in_range(0, 1000),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.write.batch.bytes",
            "long",
            64 << 20,
            "Record bytes (decompressed) a copy writes into one data file (per table partition) while it holds "
            "one of the iceberg.mode.write.concurrency slots; a segment larger than this is written as several "
            "files. The rows stream into the file a row group at a time, so this sets the files' size, not the "
            "writer's memory.",
            validator=in_range(1 << 16, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.write.concurrency",
            "int",
            WRITE_CONCURRENCY_DEFAULT,
            "Data files (iceberg.mode.write.batch.bytes of records each) written at once, shared by all the "
            "broker's copier threads: a copy waits for a free slot before it writes its next file. A writing copy "
            "holds one row group of rows (at most 16 MiB) and its encoded copy: this x 32 MiB bounds the memory "
            "of Iceberg-mode copies.",
            validator=in_range(1, 64),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.fetch.cache.size",
            "long",
            64 << 20,
            "Bytes of decoded row groups kept in memory for fetches of Iceberg-mode segments, so a consumer that "
            "catches up 1 MiB at a time reads and decodes each row group once. Row groups of more than 32,768 rows "
            "(compaction's) or 16 MiB are read and kept in slices of up to 32,768 rows and 16 MiB. A row group or "
            "slice over half of it is served but not kept. 0: no cache.",
            validator=in_range(0, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.fetch.slice.readers",
            "int",
            SLICE_READERS_DEFAULT,
            "Readers of large row groups (compaction's) kept open between fetches, each where its last fetch "
            "stopped, so a consumer catching up decodes each slice once. Set it to the broker's "
            "remote.log.reader.threads (Kafka's default, 10): with more consumers catching up at once than readers "
            "kept, readers are closed and opened again, each time decoding its group from the start. An idle "
            "reader holds up to 32 MiB (kts config check counts them) and is closed after a minute unused. 0: none "
            "kept.",
            validator=in_range(0, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.fetch.table.refresh.ms",
            "long",
            5000,
            "How long a fetch of an Iceberg-mode segment uses the table state (current snapshot) it loaded before "
            "loading it again from the catalog. Rows that SQL deleted stop being served to Kafka within this time; "
            "a data file found missing (a compaction and orphan removal) reloads the table at once. While the "
            "catalog does not answer, the last loaded state serves.",
            validator=in_range(0, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.fetch.index.files",
            "int",
            INDEXED_FILES_DEFAULT,
            "Live data files of Iceberg-mode tables that fetches keep indexed by Kafka partition and offset bounds "
            "(about 1 KiB each), in all tables together: a fetch of a segment looks its data files up instead of "
            "reading the table's manifests, which are read once each. A table whose current snapshot lists more "
            "files is not indexed: each fetch of one of its segments reads all its manifests (slow; a warning says "
            "so), so raise this or compact the table.",
            validator=in_range(1, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.enabled",
            "boolean",
            True,
            "Run table maintenance inside the plugin: a background thread takes each Iceberg-mode table in turn "
            "(one broker at a time per table, by a lease kept as a table property) and expires snapshots, merges "
            'manifests, compacts small data files and removes orphan files (docs/iceberg.md, "Maintenance"). '
            "false: schedule `kts iceberg maintain` instead.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.interval.ms",
            "long",
            60_000,
            "Pause between two maintenance passes over the tables of this broker's Iceberg-mode topics.",
            validator=in_range(1000, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.snapshot.max.age.ms",
            "long",
            3_600_000,
            "Snapshots older than this are expired (unless among the newest "
            "iceberg.mode.maintenance.snapshot.min.keep). A SQL reader can time-travel this far back.",
            validator=in_range(0, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.snapshot.min.keep",
            "int",
            5,
            "The newest snapshots that are never expired, however old.",
            validator=in_range(1, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.snapshot.max.keep",
            "int",
            10,
            "Snapshots past the newest this many are expired however young (checked after every half as many "
            "commits of this broker): a commit copies and rewrites the table's metadata, which lists them all, "
            'several times, so its cost grows with every snapshot kept (docs/benchmarks.md, "Iceberg mode: '
            'cost in table age"). Raise it for longer time travel in SQL.',
            validator=in_range(1, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.manifests.max",
            "int",
            8,
            "Data manifests of the current snapshot above which they are merged (every commit reads them all).",
            validator=in_range(1, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.compaction.target.bytes",
            "long",
            128 << 20,
            "Small data files of one Kafka partition and one day are rewritten into files of up to this size, "
            "rows sorted by (partition, offset).",
            validator=in_range(1 << 20, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.compaction.min.files",
            "int",
            4,
            "Small files of one partition and day that must pile up before they are compacted.",
            validator=in_range(2, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.orphan.grace.ms",
            "long",
            3 * 86_400_000,
            "Files under a table's data/ and metadata/ that no kept table version references are moved into the "
            "warehouse's quarantine (kts-quarantine/, kept gc.quarantine.ms) once they have been unreferenced this "
            "long, counted from the first maintenance pass (or kts gc --delete) that saw them so: longer than any "
            "copy, any other engine's write and any reader of an expired snapshot takes. Data files wait at least "
            "a day whatever is set here.",
            validator=in_range(3_600_000, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.maintenance.orphan.interval.ms",
            "long",
            3_600_000,
            "Pause between two orphan-file passes over a table (each lists the table's location).",
            validator=in_range(1000, None),
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.mode.value.column.factory",
            "string",
            "",
            "module:function giving a topic's parsed value column (rsm.iceberg.values): called with the topic "
            "name, it returns None (no value column) or a ValueColumn. Empty: only value_raw.",
            validator=_factory,
            group="iceberg",
        ),
    ]
)
