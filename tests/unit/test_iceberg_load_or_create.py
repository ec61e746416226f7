"""rsm.iceberg.tables on a real SQLite catalog: a new table's spec and properties, and a table made before the
``kafka`` id fields getting them on load (its rows read them as null)."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

from iceberg_tables import kafka_rows, sql_catalog, table_rows
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StructType

from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.replace import Replacer, RowSelection
from rsm.iceberg.schema import KAFKA_FIELDS, iceberg_schema, partition_spec
from rsm.iceberg.tables import (
    COMPACTED_DICTIONARY_BYTES,
    COMPACTED_ROW_GROUP_ROWS,
    DICTIONARY_BYTES,
    compacted_file_properties,
    load_or_create,
    missing_columns,
    split_bytes,
    table_properties,
)


def test_a_new_table_is_partitioned_by_day_with_the_plugins_properties(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = load_or_create(catalog, ("kafka", "orders"), "orders", None, 1 << 20, 3)
    assert [f.name for f in table.spec().fields] == ["day"]
    assert table_properties("orders", 1 << 20).items() <= table.properties.items()
    assert not missing_columns(table, None)
    again = load_or_create(catalog, ("kafka", "orders"), "orders", None, 1 << 30, 3)
    assert again.metadata.table_uuid == table.metadata.table_uuid
    assert again.properties["read.split.target-size"] == str(split_bytes(1 << 20))


def test_read_splits_follow_the_first_segments_size() -> None:
    """Tables of small segments get 64 MiB splits (two tasks for four 16 MiB segments on two cores), others
    Spark's 128 MiB (one task per file of a 64 MiB segment instead of two)."""
    assert split_bytes(16 << 20) == split_bytes((32 << 20) - 1) == 64 << 20
    assert split_bytes(32 << 20) == split_bytes(1 << 30) == 128 << 20


def _schema_without_ids() -> Schema:
    full = iceberg_schema()
    kafka = full.find_field("kafka")
    kept = [f for f in kafka.field_type.fields if f.name not in ("segment_id", "topic_id")]  # type: ignore[attr-defined]
    assert len(kept) == len(KAFKA_FIELDS) - 2
    fields = [NestedField(kafka.field_id, "kafka", StructType(*kept), required=False)]
    return Schema(*fields, *[f for f in full.fields if f.name != "kafka"])


def test_a_table_made_before_the_id_fields_gets_them_and_old_rows_read_null(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    schema = _schema_without_ids()
    old = catalog.create_table(("kafka", "orders"), schema=schema, partition_spec=partition_spec(schema))
    assert missing_columns(old, None)
    rows = kafka_rows(0, range(5), None, None, fields=[n for n, _, _ in KAFKA_FIELDS if not n.endswith("_id")])
    files = write_data_files(old, rows, uuid.uuid4(), itertools.count())
    Replacer(lambda: catalog, 3).replace(("kafka", "orders"), RowSelection(0, 0, 4), files, {}, "copy", "c")
    table = load_or_create(catalog, ("kafka", "orders"), "orders", None, 1 << 20, 3)
    assert not missing_columns(table, None)
    assert table_rows(table) == [(0, o, None, None) for o in range(5)]


def test_a_table_made_with_one_byte_dictionaries_gets_what_java_writers_take(tmp_path: Path) -> None:
    """Java's Parquet writer (Spark's rewrite_data_files) refuses dict-size-bytes below 64; tables an earlier
    release made with 1 get 64 on load, and a property an operator set otherwise is left alone."""
    catalog = sql_catalog(tmp_path)
    schema = iceberg_schema()
    properties = {**table_properties("orders", 1 << 20), "write.parquet.dict-size-bytes": "1"}
    catalog.create_table(
        ("kafka", "orders"), schema=schema, partition_spec=partition_spec(schema), properties=properties
    )
    table = load_or_create(catalog, ("kafka", "orders"), "orders", None, 1 << 20, 3)
    assert table.properties["write.parquet.dict-size-bytes"] == str(DICTIONARY_BYTES) == "64"
    assert catalog.load_table(("kafka", "orders")).properties["write.parquet.dict-size-bytes"] == "64"
    mine = {**properties, "write.parquet.dict-size-bytes": "4096"}
    catalog.create_table(("kafka", "mine"), schema=schema, partition_spec=partition_spec(schema), properties=mine)
    assert (
        load_or_create(catalog, ("kafka", "mine"), "mine", None, 1 << 20, 3).properties["write.parquet.dict-size-bytes"]
        == "4096"
    )


def test_compaction_writes_large_groups_only_where_the_table_has_the_plugins_small_ones() -> None:
    ours = table_properties("orders", 64 << 20)
    assert compacted_file_properties(ours) == {
        "write.parquet.row-group-limit": str(COMPACTED_ROW_GROUP_ROWS),
        "write.parquet.dict-size-bytes": str(COMPACTED_DICTIONARY_BYTES),
    }
    operators = {**ours, "write.parquet.row-group-limit": "200000"}
    assert compacted_file_properties(operators) == {"write.parquet.dict-size-bytes": str(COMPACTED_DICTIONARY_BYTES)}
    assert compacted_file_properties({}) == {}  # a table made by another writer: its own defaults
