"""A topic's table and its properties: loaded from the catalog, or created partitioned by day with the properties
the writer and the readers want; columns added since a table was made are added to it when it is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from rsm.errors import RemoteStorageException
from rsm.iceberg.schema import KAFKA_FIELDS, arrow_schema, iceberg_schema, partition_spec
from rsm.iceberg.value_hook import IncompatibleSchema, ValueColumn, canonical, merge_types

__all__ = [
    "DICTIONARY_BYTES",
    "FORCED_METADATA_PROPERTIES",
    "METADATA_PROPERTIES",
    "PAGE_ROWS",
    "ROW_GROUP_ROWS",
    "SMALL_SEGMENT_BYTES",
    "SMALL_SPLIT_BYTES",
    "SPLIT_BYTES",
    "TABLE_CODEC",
    "columns_to_add",
    "load_or_create",
    "missing_columns",
    "split_bytes",
    "table_properties",
]

TABLE_CODEC = "snappy"
"""Parquet codec of the tables this writer creates. Spark reads snappy data files faster than zstd ones (see
docs/benchmarks.md, "Iceberg mode"); zstd files are smaller. The table property is read at every write, so an
operator may set ``write.parquet.compression-codec`` on a table to change it."""
ROW_GROUP_ROWS = 32768
"""Rows per Parquet row group of the tables this writer creates: a fetch reads whole row groups, so this bounds
what it reads past the broker's start position."""
PAGE_ROWS = 1024
"""``write.parquet.page-row-limit`` of the tables this writer creates. pyarrow writes this many values at a time
and closes a page once it passes 1 MiB: with Iceberg's default of 20000 rows, pages of 370-byte values grew to
7 MiB, and Spark read them about 10% slower than pages of 1 MiB."""
DICTIONARY_BYTES = 64
"""``write.parquet.dict-size-bytes`` of the tables this writer creates: dictionary pages of at most 64 bytes, so
every column falls back to plain encoding after its first 1024 values. In four paired runs Spark read
``count(distinct key)`` faster that way in three (by 9-32%; 5% slower in the fourth) and ``sum(length(value))``
about as fast (docs/benchmarks.md, "Iceberg mode"); pyarrow writes the rows in a quarter less time, and the files
are no larger (snappy compresses the repeated fields as well). 64 is the least Java's Parquet writer takes (Spark's
``rewrite_data_files`` fails on a smaller size); tables made with 1 get 64 when next loaded."""
_OLD_DICTIONARY_BYTES = "1"
COMPACTED_ROW_GROUP_ROWS = 1 << 20
"""Rows per row group of the files compaction writes (pyarrow's default): one or two groups per file. Spark reads
a column's dictionary once per group, so keys that repeat read faster from few large groups (docs/benchmarks.md,
"The key scan"); a fetch reads such a group a slice at a time (``rsm.iceberg.row_slices``)."""
COMPACTED_DICTIONARY_BYTES = 1 << 20
"""``write.parquet.dict-size-bytes`` of the files compaction writes (pyarrow's default): a column whose distinct
values fit in 1 MiB a group (keys, most often) stays dictionary-encoded; the others fall back to plain after it."""


def compacted_file_properties(table_properties: Mapping[str, str]) -> dict[str, str]:
    """The write properties of the files compaction writes, for a table with ``table_properties``: large row
    groups and dictionaries where the table has the plugin's own small ones (an operator's value is kept)."""
    ours = {
        "write.parquet.row-group-limit": (str(ROW_GROUP_ROWS), str(COMPACTED_ROW_GROUP_ROWS)),
        "write.parquet.dict-size-bytes": (str(DICTIONARY_BYTES), str(COMPACTED_DICTIONARY_BYTES)),
    }
    return {key: large for key, (small, large) in ours.items() if table_properties.get(key) == small}


SPLIT_BYTES = 128 << 20
"""``read.split.target-size`` of the tables this writer creates (with adaptive split sizing off): Spark's and
Iceberg's default, one task per 128 MiB of data files."""
SMALL_SPLIT_BYTES = 64 << 20
"""The split size instead when the first segment is smaller than ``SMALL_SEGMENT_BYTES``: its data files are then
a few tens of MiB, and 128 MiB splits would put a small table in one task however many cores read it."""
SMALL_SEGMENT_BYTES = 32 << 20
"""First segments below this size give a table ``SMALL_SPLIT_BYTES``."""


METADATA_PROPERTIES = {
    # Off: pyiceberg (as Java Iceberg) would delete the metadata JSON files past the newest N itself after each
    # commit, at once and for good. They become orphans instead, taken after the grace into the quarantine.
    "write.metadata.delete-after-commit.enabled": "false",
    "write.metadata.previous-versions-max": "10",
}
"""Table properties that bound the metadata files a table keeps; set on the tables we create and on ours at
each maintenance run (an operator's own ``previous-versions-max`` is left as it is; ``delete-after-commit`` is
always turned off, see ``FORCED_METADATA_PROPERTIES``)."""
FORCED_METADATA_PROPERTIES = ("write.metadata.delete-after-commit.enabled",)
"""Of ``METADATA_PROPERTIES``, those maintenance sets whatever the table holds: a metadata file deleted on commit
bypasses the orphan grace and the quarantine."""


def split_bytes(segment_bytes: int) -> int:
    """The split size of a new table whose first segment has ``segment_bytes``."""
    return SMALL_SPLIT_BYTES if segment_bytes < SMALL_SEGMENT_BYTES else SPLIT_BYTES


def table_properties(topic: str, segment_bytes: int) -> dict[str, str]:
    """The properties of a new table for ``topic`` whose first segment has ``segment_bytes``."""
    return {
        "kafka.topic": topic,
        "write.parquet.compression-codec": TABLE_CODEC,
        "write.parquet.row-group-limit": str(ROW_GROUP_ROWS),
        "write.parquet.page-row-limit": str(PAGE_ROWS),
        "write.parquet.dict-size-bytes": str(DICTIONARY_BYTES),
        # Java Iceberg's default: an append merges small manifests once 100 pile up, so planning a scan (and a
        # commit's search by bounds) reads a bounded number of them.
        "commit.manifest-merge.enabled": "true",
        # Spark's Iceberg reader sizes splits by the bytes of the columns a query reads: a narrow query (keys
        # only) got 16 MiB splits, several tasks per core, and ran at a third of the speed of the same files read
        # as plain Parquet. Fixed splits instead, sized from the first segment (docs/benchmarks.md, "Iceberg mode").
        "read.split.adaptive-size.enabled": "false",
        "read.split.target-size": str(split_bytes(segment_bytes)),
        **METADATA_PROPERTIES,
    }


def columns_to_add(table: Table, value_column: ValueColumn | None) -> list[pa.Field]:
    """The columns to union into the table by name: the ``kafka`` struct when the table lacks a field of
    ``KAFKA_FIELDS``, and the parsed ``value`` and ``key`` structs the hook gives where the table lacks them or
    holds an older version (a new schema version adds fields, widens a type or makes a field optional). A hook's
    struct the table already holds (a broker on an older version) adds nothing. Raises ``IncompatibleSchema``
    for a struct the table cannot follow."""
    schema = table.schema()
    wanted: list[pa.Field] = []
    have_kafka = {f.name for f in schema.find_type("kafka").fields}  # type: ignore[attr-defined]
    if any(name not in have_kafka for name, _, _ in KAFKA_FIELDS):
        wanted.append(arrow_schema().field("kafka"))
    if value_column is None:
        return wanted
    parsed = [("value", value_column.arrow_type)]
    if value_column.key is not None:
        parsed.append(("key", value_column.key.arrow_type))
    have = {f.name: f.type for f in schema_to_pyarrow(schema)}
    for name, arrow_type in parsed:
        if arrow_type is None:
            continue
        want = arrow_type if name not in have else merge_types(have[name], arrow_type, name)
        if name not in have or not want.equals(canonical(have[name])):
            wanted.append(pa.field(name, want))
    return wanted


def missing_columns(table: Table, value_column: ValueColumn | None) -> bool:
    """Whether ``columns_to_add`` has anything to add."""
    return bool(columns_to_add(table, value_column))


def load_or_create(
    catalog: Catalog,
    ident: tuple[str, str],
    topic: str,
    value_column: ValueColumn | None,
    segment_bytes: int,
    retries: int,
    load: Callable[[tuple[str, str]], Table] | None = None,
    first_spec: Callable[[Schema], PartitionSpec] = partition_spec,
    create_namespace: bool = False,
) -> Table:
    """The topic's table (``load``, the catalog's by default), created with ``first_spec`` (by day by default)
    when missing, its read splits sized for segments of ``segment_bytes``; a ``value`` column the hook now
    gives, and ``kafka`` fields added since the table was made (old rows read them as null), are added to an
    existing table. Another broker changing the schema first is retried up to ``retries`` times.
    ``create_namespace``: the table's namespace may not exist yet (not the configured one, which the catalog
    handle makes)."""
    load = load or catalog.load_table
    try:
        table = load(ident)
    except NoSuchTableError:
        schema = iceberg_schema()
        if create_namespace:
            catalog.create_namespace_if_not_exists(ident[0])
        try:
            table = catalog.create_table(
                ident,
                schema=schema,
                partition_spec=first_spec(schema),
                properties=table_properties(topic, segment_bytes),
            )
        except TableAlreadyExistsError:  # another writer created it in between
            table = load(ident)
    ident = table.name()  # type: ignore[assignment]
    if table.properties.get("write.parquet.dict-size-bytes") == _OLD_DICTIONARY_BYTES:
        table = _raise_dictionary_size(catalog, table)
    for attempt in range(retries + 1):
        try:
            wanted = columns_to_add(table, value_column)
        except IncompatibleSchema as e:  # an inline schema edited so (a registry's are sorted out before)
            raise RemoteStorageException(
                f"table {'.'.join(ident)}: a parsed schema of topic {topic} changed a field the table cannot follow "
                f"({e}); restore the field's type in iceberg.value.schema.* / iceberg.key.schema.*, Kafka retries "
                "the copy"
            ) from e
        if not wanted:
            break
        try:
            with table.update_schema() as update:
                update.union_by_name(pa.schema(wanted))
        except CommitFailedException:  # another broker changed the schema first (most likely, the same way)
            if attempt == retries:
                raise
        table = catalog.load_table(ident)
    return table


def _raise_dictionary_size(catalog: Catalog, table: Table) -> Table:
    """A table made with ``write.parquet.dict-size-bytes=1`` (which Java writers refuse) gets ``DICTIONARY_BYTES``;
    another broker doing it first is no failure."""
    try:
        with table.transaction() as txn:
            txn.set_properties({"write.parquet.dict-size-bytes": str(DICTIONARY_BYTES)})
    except CommitFailedException:
        pass
    return catalog.load_table(table.name())
