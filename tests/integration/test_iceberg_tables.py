"""Iceberg mode's table per topic (the name mapping, configured names, a name changed by the operator) and its
partition spec (any of the configured transforms, evolved while Kafka keeps fetching every segment byte for byte),
on the filesystem with the SQLite catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from iceberg_testing import ORDER_SCHEMA, order_records, segment_of

from rsm import RemoteResourceNotFoundException, RemoteStorageException, RemoteStorageManager
from rsm.formats.iceberg import iceberg_format
from rsm.kafka.log_scan import iter_batches
from rsm.kafka.segment_files import SegmentFiles
from rsm.metadata import TopicIdPartition

TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"


def _configs(tmp: Path, **extra: str) -> dict[str, str]:
    return {
        "chunk.size": "65536",
        "storage.backend.class": "filesystem",
        "storage.fsync.enabled": "false",
        "storage.root": str(tmp / "store"),
        "iceberg.mode.topics.regex": r"orders|payments\..*|payments_eu|ice-.*",
        "iceberg.mode.catalog.sqlite.path": str(tmp / "catalog.db"),
        "iceberg.mode.delete.rows.enabled": "true",
        "iceberg.value.schema.orders.avro": json.dumps(ORDER_SCHEMA),
        **extra,
    }


def _manager(configs: dict[str, str]) -> RemoteStorageManager:
    m = RemoteStorageManager()
    m.configure(configs)
    return m


def _rows(m: RemoteStorageManager, ident: tuple[str, str]) -> Any:
    return iceberg_format(m).mode().handle.catalog.load_table(ident).scan().to_arrow()


def _offsets(rows: Any) -> list[int]:
    return sorted(pc.struct_field(rows.column("kafka"), "offset").to_pylist())


def _segment(tmp: Path, first: int, count: int = 60, hours: int = 1) -> SegmentFiles:
    """Uncompressed order records spread over ``hours`` hours (fetches come back byte for byte)."""
    recs = order_records(first, count)
    recs = [
        r.__class__(r.offset, r.key, r.value, r.timestamp + (i * hours * 3_600_000) // count, r.headers)
        for i, r in enumerate(recs)
    ]
    return segment_of(tmp / f"seg{first}", recs, per_batch=7, codec="none")


def test_a_topic_with_dots_gets_a_valid_table_and_loses_its_rows_there(tmp_path: Path) -> None:
    m = _manager(_configs(tmp_path))
    try:
        seg = _segment(tmp_path, 0)
        meta = seg.to_metadata(TopicIdPartition(TOPIC_ID, "payments.eu", 0))
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        section = m.fetch_manifest(meta).section
        assert section is not None and section.table == "kafka.payments_eu"
        catalog = iceberg_format(m).mode().handle.catalog
        assert catalog.list_tables("kafka") == [("kafka", "payments_eu")]
        assert catalog.load_table(("kafka", "payments_eu")).properties["kafka.topic"] == "payments.eu"
        assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
        m.delete_log_segment_data(meta)
        assert _rows(m, ("kafka", "payments_eu")).num_rows == 0
    finally:
        m.close()


def test_two_topics_of_one_table_name_are_refused_naming_the_way_out(tmp_path: Path) -> None:
    """payments.eu and payments_eu map to one name: the second topic's copy fails (Kafka retries it) and names
    the key that gives it a table of its own; nothing of it lands in the first topic's table."""
    m = _manager(_configs(tmp_path))
    try:
        seg = _segment(tmp_path, 0)
        m.copy_log_segment_data(
            seg.to_metadata(TopicIdPartition(TOPIC_ID, "payments.eu", 0)), seg.to_log_segment_data()
        )
        other = seg.to_metadata(TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", "payments_eu", 0))
        with pytest.raises(
            RemoteStorageException, match=r"holds the rows of topic 'payments\.eu'.*iceberg\.mode\.table"
        ):
            m.copy_log_segment_data(other, seg.to_log_segment_data())
        assert _rows(m, ("kafka", "payments_eu")).num_rows == 60
    finally:
        m.close()
    fixed = _configs(
        tmp_path, **{"iceberg.mode.table.p.topic": "payments_eu", "iceberg.mode.table.p.name": "eu.payments"}
    )
    m = _manager(fixed)
    try:
        m.copy_log_segment_data(other, seg.to_log_segment_data())
        assert m.fetch_manifest(other).section.table == "eu.payments"  # type: ignore[union-attr]
        assert _rows(m, ("eu", "payments")).num_rows == 60
    finally:
        m.close()


def test_a_renamed_table_takes_new_segments_and_old_ones_keep_theirs(tmp_path: Path) -> None:
    tip = TopicIdPartition(TOPIC_ID, "orders", 2)
    old, new = _segment(tmp_path, 0), _segment(tmp_path, 60)
    metas = {id(seg): seg.to_metadata(tip) for seg in (old, new)}
    m = _manager(_configs(tmp_path))
    try:
        m.copy_log_segment_data(metas[id(old)], old.to_log_segment_data())
    finally:
        m.close()
    m = _manager(_configs(tmp_path, **{"iceberg.mode.table.orders.name": "sales.orders_v2"}))
    try:
        m.copy_log_segment_data(metas[id(new)], new.to_log_segment_data())
        assert m.fetch_manifest(metas[id(old)]).section.table == "kafka.orders"  # type: ignore[union-attr]
        assert m.fetch_manifest(metas[id(new)]).section.table == "sales.orders_v2"  # type: ignore[union-attr]
        assert _offsets(_rows(m, ("kafka", "orders"))) == list(range(60))
        assert _offsets(_rows(m, ("sales", "orders_v2"))) == list(range(60, 120))
        for seg in (old, new):
            assert m.fetch_log_segment(metas[id(seg)], 0).read() == seg.log.read_bytes()
        m.delete_log_segment_data(metas[id(old)])  # its rows go from the table its manifest names
        assert _rows(m, ("kafka", "orders")).num_rows == 0
        assert _rows(m, ("sales", "orders_v2")).num_rows == 60
    finally:
        m.close()


def test_a_table_an_earlier_release_named_after_the_topic_is_kept(tmp_path: Path) -> None:
    """Before names were mapped, topic ice-legacy's table was kafka.ice-legacy: new segments keep going there."""
    from pyiceberg.catalog.sql import SqlCatalog

    from rsm.iceberg.schema import iceberg_schema, partition_spec

    (tmp_path / "warehouse").mkdir()
    catalog = SqlCatalog(
        "kafka_tiered", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{tmp_path / 'warehouse'}"
    )
    catalog.create_namespace("kafka")
    schema = iceberg_schema()
    catalog.create_table(
        ("kafka", "ice-legacy"), schema, partition_spec=partition_spec(schema), properties={"kafka.topic": "ice-legacy"}
    )
    m = _manager(_configs(tmp_path, **{"iceberg.mode.warehouse": f"file://{tmp_path / 'warehouse'}"}))
    try:
        seg = _segment(tmp_path, 0)
        meta = seg.to_metadata(TopicIdPartition(TOPIC_ID, "ice-legacy", 0))
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        assert m.fetch_manifest(meta).section.table == "kafka.ice-legacy"  # type: ignore[union-attr]
        assert _rows(m, ("kafka", "ice-legacy")).num_rows == 60
        later = _segment(tmp_path, 60)  # the writer now knows the table: the same one again
        later_meta = later.to_metadata(TopicIdPartition(TOPIC_ID, "ice-legacy", 0))
        m.copy_log_segment_data(later_meta, later.to_log_segment_data())
        assert m.fetch_manifest(later_meta).section.table == "kafka.ice-legacy"  # type: ignore[union-attr]
        assert _rows(m, ("kafka", "ice-legacy")).num_rows == 120
        assert ("kafka", "ice_legacy") not in iceberg_format(m).mode().handle.catalog.list_tables("kafka")
        m.delete_log_segment_data(meta)
        assert _offsets(_rows(m, ("kafka", "ice-legacy"))) == list(range(60, 120))
    finally:
        m.close()


SPECS = [
    (None, {("day", "day")}),
    ("hour, bucket[4](value.id)", {("hour", "hour"), ("value_id_bucket_4", "bucket[4]")}),
    (
        "month, truncate[6](value.item), identity(kafka.partition)",
        {("month", "month"), ("value_item_trunc_6", "truncate[6]"), ("kafka_partition", "identity")},
    ),
    ("none", set()),
]


def test_the_partition_spec_evolves_and_every_segment_still_fetches_byte_for_byte(tmp_path: Path) -> None:
    """Segments tiered under day (the default), then hour and a bucket of a value field, then month with a
    truncate and an identity, then unpartitioned: each change is a new spec of the table for new data only; every
    segment fetches back byte for byte, every data file carries the exact offset bounds of its rows, a retried
    copy of the first segment replaces its rows under the newest spec, and SQL readers see each offset once."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType, LongType

    tip = TopicIdPartition(TOPIC_ID, "orders", 1)
    segments = [_segment(tmp_path, n * 60, hours=30) for n in range(len(SPECS))]
    metas = [seg.to_metadata(tip) for seg in segments]
    for (spec, fields), seg, meta in zip(SPECS, segments, metas, strict=True):
        extra = {} if spec is None else {"iceberg.mode.table.orders.partition.by": spec}
        m = _manager(_configs(tmp_path, **extra))
        try:
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
            assert {(f.name, str(f.transform)) for f in table.spec().fields} == fields
            section = m.fetch_manifest(meta).section
            assert section is not None
            if fields:
                assert len(section.files) > 1  # 30 hours of rows: several partitions
        finally:
            m.close()
    m = _manager(_configs(tmp_path))  # partition.by unset again: the table keeps its spec
    try:
        retried = segments[0].to_metadata(tip, "retriedCopyxxxxxxxxxxx")
        m.copy_log_segment_data(retried, segments[0].to_log_segment_data())
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        assert table.spec().is_unpartitioned()
        assert len(table.specs()) == len(SPECS)
        # the retried copy's rows replaced the first copy's: Kafka reads the copy that finished
        for seg, meta in zip(segments, [retried, *metas[1:]], strict=True):
            assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
        original = segments[1].log.read_bytes()
        for h, _ in list(iter_batches(original))[::3]:  # from any batch, under the hour and bucket spec
            assert m.fetch_log_segment(metas[1], h.position).read() == original[h.position :]
        rows = table.scan().to_arrow()
        assert _offsets(rows) == list(range(60 * len(SPECS)))
        assert pc.count(pc.struct_field(rows.column("value"), "id")).as_py() == rows.num_rows  # values parsed
        schema = table.schema()
        pid, oid = schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id
        specs_seen = set()
        for task in table.scan().plan_files():
            f = task.file
            specs_seen.add(f.spec_id)
            kafka = pq.read_table(f.file_path.removeprefix("file://")).column("kafka")
            offsets = pc.struct_field(kafka, "offset")
            assert from_bytes(LongType(), f.lower_bounds[oid]) == pc.min(offsets).as_py()
            assert from_bytes(LongType(), f.upper_bounds[oid]) == pc.max(offsets).as_py()
            assert from_bytes(IntegerType(), f.lower_bounds[pid]) == 1 == from_bytes(IntegerType(), f.upper_bounds[pid])
        # the first segment's day-spec files were replaced by its retried copy, written under the newest spec
        assert specs_seen == {1, 2, 3}
    finally:
        m.close()


def test_a_new_table_gets_a_spec_of_value_fields_from_its_first_segment(tmp_path: Path) -> None:
    """The value column is added to a new table after it is created: the spec's value fields follow it, before
    the first segment's rows are written."""
    m = _manager(_configs(tmp_path, **{"iceberg.mode.table.orders.partition.by": "bucket[3](value.id), hour"}))
    try:
        seg = _segment(tmp_path, 0, hours=5)
        meta = seg.to_metadata(TopicIdPartition(TOPIC_ID, "orders", 0))
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        assert {(f.name, str(f.transform)) for f in table.spec().fields} == {
            ("value_id_bucket_3", "bucket[3]"),
            ("hour", "hour"),
        }
        assert {task.file.spec_id for task in table.scan().plan_files()} == {table.spec().spec_id}
        assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
    finally:
        m.close()


@pytest.mark.parametrize(
    ("spec", "message"),
    [("identity(value.nope)", "no column 'value.nope'"), ("bucket[4](headers)", "cannot apply")],
)
def test_a_partition_spec_that_does_not_fit_the_table_fails_the_copy_naming_the_key(
    tmp_path: Path, spec: str, message: str
) -> None:
    m = _manager(_configs(tmp_path, **{"iceberg.mode.table.orders.partition.by": spec}))
    try:
        seg = _segment(tmp_path, 0)
        meta = seg.to_metadata(TopicIdPartition(TOPIC_ID, "orders", 0))
        with pytest.raises(RemoteStorageException, match=rf"partition\.by.*{message}"):
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
        with pytest.raises(RemoteResourceNotFoundException):
            m.fetch_manifest(meta)
    finally:
        m.close()
