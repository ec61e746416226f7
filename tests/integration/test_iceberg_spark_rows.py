"""The ``kafka-tiered`` source reads Iceberg-mode segments as their table's rows: the same records, options for
options, as rebuilding the batches and decoding them (``icebergRead=batches``), on a real SQLite catalog and
filesystem warehouse; compressed batches, headers, null keys and values, transactions with control records and
aborts; after a compaction that rewrote every row and after rows deleted by SQL; and through real PySpark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from iceberg_testing import Rec, iceberg_config, load_table, rewrite_sorted, segment_of

from rsm import RemoteStorageManager
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid
from rsm.spark.planning import PushedBounds
from rsm.spark.reader import TieredReader

pytestmark = pytest.mark.timeout(300)

TOPIC_ID = random_kafka_uuid()
BASE_TS = 1_767_225_600_000
WRITER_TS = 1_700_000_000_000  # write_segment's first timestamp


def _nullish(first: int, count: int) -> list[Rec]:
    """Records with null keys, null values, both, and null-valued headers."""
    out = []
    for off in range(first, first + count):
        key = None if off % 3 == 0 else b"k%d" % (off % 5)
        value = None if off % 4 == 0 else b"v%d" % off
        headers = (("a", b"1"), ("b", None)) if off % 2 else ()
        out.append(Rec(off, key, value, BASE_TS + (off - first) * 10, headers))
    return out


def _segments(tmp: Path) -> list[tuple[TopicIdPartition, SegmentFiles]]:
    p0 = TopicIdPartition(TOPIC_ID, "orders", 0)
    first = write_segment(tmp / "a", num_batches=30, codec="zstd", transactional=True, seed=3)
    second = write_segment(tmp / "b", base_offset=first.end_offset + 1, num_batches=20, codec="lz4", seed=4)
    third = segment_of(tmp / "c", _nullish(second.end_offset + 1, 120), per_batch=7, codec="gzip")
    p1 = TopicIdPartition(TOPIC_ID, "orders", 1)
    other = write_segment(tmp / "d", num_batches=20, codec="none", transactional=True, seed=5)
    return [(p0, first), (p0, second), (p0, third), (p1, other)]


@pytest.fixture()
def tiered(tmp_path: Path) -> tuple[dict[str, str], list[tuple[TopicIdPartition, SegmentFiles]]]:
    config = iceberg_config(tmp_path, **{"iceberg.mode.fetch.table.refresh.ms": "0"})
    segments = _segments(tmp_path / "src")
    with RemoteStorageManager() as m:
        m.configure(dict(config))
        for tip, seg in segments:
            m.copy_log_segment_data(seg.to_metadata(tip), seg.to_log_segment_data())
    return config, segments


class _NoBatches(RemoteStorageManager):
    """A manager whose batch fetches fail: the rows path must not rebuild batches."""

    def fetch_log_segment(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an Iceberg-mode segment was read by rebuilding its batches")


def _read(config: dict[str, str], how: str, pushed: PushedBounds | None = None, **options: str) -> pa.Table:
    opts = {**config, "topic": "orders", "icebergRead": how, **options}
    m = _NoBatches() if how == "rows" else RemoteStorageManager()
    m.configure(dict(config))
    try:
        reader = TieredReader(opts, manager=m)
        pieces = reader.plan(pushed)
        assert pieces and all(p.iceberg for p in pieces)
        batches = list(reader.record_batches(pushed))
        assert reader.stats.rows == sum(b.num_rows for b in batches)
        return pa.Table.from_batches(batches) if batches else pa.table({})
    finally:
        m.close()


def _same(config: dict[str, str], pushed: PushedBounds | None = None, **options: str) -> pa.Table:
    rows = _read(config, "rows", pushed, **options)
    batches = _read(config, "batches", pushed, **options)
    assert rows.num_rows > 0, (options, pushed)
    assert rows.schema == batches.schema
    assert rows.to_pylist() == batches.to_pylist(), options
    return rows


CASES: list[tuple[dict[str, str], PushedBounds | None]] = [
    ({}, None),
    ({"includeHeaders": "true"}, None),
    ({"isolationLevel": "read_committed", "includeHeaders": "true"}, None),
    ({"maxSliceBytes": "8192", "partitions": "0"}, None),
    ({"startingOffsets": '{"orders": {"0": 700, "1": 5}}', "endingOffsets": '{"orders": {"0": 2900, "1": -1}}'}, None),
    ({"rowsPerBatch": "50"}, PushedBounds(first_offset=300, last_offset=1500)),
    ({}, PushedBounds(partitions=frozenset({0}), min_timestamp=WRITER_TS + 5000, end_timestamp=BASE_TS + 900)),
]


def test_rows_give_the_records_rebuilt_batches_give(tiered: Any) -> None:
    config, segments = tiered
    everything = _same(config, includeHeaders="true")
    assert everything.column("key").null_count and everything.column("value").null_count
    headers = everything.column("headers").to_pylist()
    assert any(h and any(e["value"] is None for e in h) for h in headers)
    committed = _same(config, isolationLevel="read_committed")
    assert committed.num_rows < everything.num_rows  # aborted transactions left out
    for options, pushed in CASES:
        _same(config, pushed, **options)


def test_rows_after_a_compaction_and_a_sql_delete(tiered: Any) -> None:
    config, _segments = tiered
    before = _read(config, "rows", includeHeaders="true")
    rewrite_sorted(config)
    after = _same(config, includeHeaders="true")
    assert after.to_pylist() == before.to_pylist()
    for options, pushed in CASES:
        _same(config, pushed, **options)
    # rows deleted by SQL (copy-on-write: the files rewritten without them) are absent on both paths
    table = load_table(config)
    rows = table.scan().to_arrow()
    offsets = pc.struct_field(rows.column("kafka"), "offset")
    table.overwrite(rows.filter(pc.invert(pc.and_(pc.greater_equal(offsets, 100), pc.less_equal(offsets, 400)))))
    gone = _same(config, includeHeaders="true")
    assert gone.num_rows < after.num_rows
    assert not [o for o in gone.column("offset").to_pylist() if 100 <= o <= 400]


# --- real PySpark (the ``spark`` fixture skips these alone where pyspark is missing) ----------------------------


def _spark_rows(spark: Any, config: dict[str, str], how: str, where: str | None = None, **options: str) -> list[Any]:
    df = spark.read.format("kafka-tiered").options(**config, topic="orders", icebergRead=how, **options).load()
    if where:
        df = df.filter(where)
    cols = ["key", "value", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType", "topic"]
    if "headers" in df.columns:
        cols.append("headers")
    return sorted((tuple(r) for r in df.selectExpr(*cols).collect()), key=lambda r: (r[2], r[3]))


@pytest.mark.timeout(600)
def test_spark_reads_the_same_records_both_ways(spark: Any, tiered: Any) -> None:
    config, _segments = tiered
    for where, options in [
        (None, {"includeHeaders": "true"}),
        (None, {"isolationLevel": "read_committed", "maxSliceBytes": "8192"}),
        (f"partition = 0 AND offset >= 500 AND timestamp >= timestamp_millis({WRITER_TS + 5000})", {}),
    ]:
        rows = _spark_rows(spark, config, "rows", where, **options)
        assert rows, (where, options)
        assert rows == _spark_rows(spark, config, "batches", where, **options), (where, options)
    rewrite_sorted(config)
    assert _spark_rows(spark, config, "rows", includeHeaders="true") == _spark_rows(
        spark, config, "batches", includeHeaders="true"
    )
    # a schema of some columns reads only those
    some = spark.read.format("kafka-tiered").schema("offset long, value binary").options(**config, topic="orders")
    got = sorted((r.offset, r.value) for r in some.load().collect())
    assert got == sorted((r[3], r[1]) for r in _spark_rows(spark, config, "batches"))


def test_the_iceberg_read_option(tmp_path: Path) -> None:
    from rsm.spark.option_values import ReadOptionsError
    from rsm.spark.options import TieredReadOptions

    base = {**iceberg_config(tmp_path), "topic": "orders"}
    assert TieredReadOptions.from_options(base).iceberg_rows
    assert not TieredReadOptions.from_options({**base, "ICEBERGREAD": " Batches"}).iceberg_rows
    with pytest.raises(ReadOptionsError, match="icebergRead must be rows .* or batches .*got 'decoded'"):
        TieredReadOptions.from_options({**base, "icebergRead": "decoded"})
