"""The ``kafka-tiered`` Spark data source and the bare reader over real tiered segments.

One ``local[2]`` SparkSession (the ``spark`` fixture of tests/integration/conftest.py) serves the run; the
standalone-cluster test runs its own driver in a child process (a second session cannot share this one's JVM).
Rows are compared field by field with the source ``.log`` files decoded by the reference decoders
(tests/support/spark_data.py).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import encryption_configs
from spark_data import BASE_TS, Dataset, build_dataset

from rsm import RemoteStorageManager
from rsm.errors import CorruptDataException
from rsm.kafka.batch_builder import build_batch, build_control_batch
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds
from rsm.kafka.indexes import decode_producer_snapshot
from rsm.kafka.log_scan import iter_batches
from rsm.kafka.records import (
    CompressionType,
    ControlRecordType,
    CorruptRecordBatch,
    DecompressionLimitExceeded,
    decode_records,
    decompress,
)
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_entries_segment, write_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid
from rsm.spark.option_values import ReadOptionsError
from rsm.spark.options import TieredReadOptions, redact
from rsm.spark.planning import PushedBounds
from rsm.spark.reader import TieredReader

pyspark = pytest.importorskip("pyspark", reason="pyspark comes with the [spark] extra")  # installed by [all]
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan, LessThanOrEqual  # noqa: E402

from rsm.spark.datasource import pushed_bounds  # noqa: E402

pytestmark = pytest.mark.timeout(240)

CHUNK = "4096"
Store = tuple[dict[str, str], Dataset]


def _plain(tmp: Path) -> dict[str, str]:
    return {
        "chunk.size": CHUNK,
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp / "store"),
        "storage.fsync.enabled": "false",
    }


@pytest.fixture(scope="module")
def fs_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    tmp = tmp_path_factory.mktemp("spark-fs")
    config = _plain(tmp)
    with RemoteStorageManager() as m:
        m.configure(config)
        ds = build_dataset(m, tmp / "src")
    return config, ds


@pytest.fixture(scope="module")
def s3_store(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, key_pairs: dict[str, tuple[Path, Path]]
) -> Store:
    server = request.getfixturevalue("s3_moto_server")
    tmp = tmp_path_factory.mktemp("spark-s3")
    config = {
        "chunk.size": CHUNK,
        "key.prefix": f"spark-{random_kafka_uuid()}/",
        "storage.backend.class": server.backend,
        **{f"storage.{k}": str(v) for k, v in server.config().items()},
        **encryption_configs(key_pairs),
    }
    with RemoteStorageManager() as m:
        m.configure(config)
        ds = build_dataset(m, tmp / "src", with_legacy=False)
    return config, ds


def _rows(df: Any) -> list[tuple[Any, ...]]:
    """Rows as the data set spells them (timestamps in epoch ms, bytes as bytes), sorted by topic/partition/offset."""
    cols = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType"]
    has_headers = "headers" in df.columns
    picked = df.selectExpr(*cols, *(["headers"] if has_headers else [])).collect()
    out = []
    for r in picked:
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        headers = [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] if has_headers else []
        out.append((key, value, r.topic, r.partition, r.offset, r.ts, r.timestampType, headers))
    return sorted(out, key=lambda x: (x[2], x[3], x[4]))


def _read(spark: SparkSession, config: dict[str, str], **options: str) -> Any:
    return spark.read.format("kafka-tiered").options(**config, **options).load()


# --- Spark, local[2] --------------------------------------------------------------------------------------------


def test_spark_reads_every_row_on_the_filesystem(spark: SparkSession, fs_store: Store) -> None:
    config, ds = fs_store
    df = _read(spark, config, topic="orders,payments", includeHeaders="true", maxSliceBytes="16384")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    got = _rows(df)
    assert got == ds.rows
    offsets = [(r[2], r[3], r[4]) for r in got]
    assert len(offsets) == len(set(offsets)), "an offset was read twice"
    # The leader change: offsets 100.. of orders-3 come from the new leader's segment, not the old one's.
    read = {r[1] for r in got if r[2] == "orders" and r[3] == 3}
    old_tail = {
        rec.value for h, b in iter_batches(ds.segments["o3-old"].log) for rec in decode_records(b) if rec.offset >= 100
    }
    assert old_tail and not old_tail & read
    assert [r[4] for r in got if r[2] == "orders" and r[3] == 3] == list(range(200))


def test_spark_reads_encrypted_segments_from_s3(spark: SparkSession, s3_store: Store) -> None:
    config, ds = s3_store
    got = _rows(_read(spark, config, topicPattern="orders|pay.*", includeHeaders="true", maxSliceBytes="16384"))
    assert got == ds.rows


def test_read_committed_drops_exactly_the_aborted_records(spark: SparkSession, fs_store: Store) -> None:
    config, ds = fs_store
    got = _rows(_read(spark, config, topic="orders", includeHeaders="true", isolationLevel="read_committed"))
    expected = [r for r in ds.committed() if r[2] == "orders"]
    assert ds.aborted and got == expected
    everything = {(r[2], r[3], r[4]) for r in ds.rows if r[2] == "orders"}
    assert everything - {(r[2], r[3], r[4]) for r in got} == ds.aborted


def test_sparks_kafka_source_options_assign_and_isolation_level(spark: SparkSession, fs_store: Store) -> None:
    """A job written for Spark's Kafka source: ``assign`` picks partitions per topic and the consumer setting
    ``kafka.isolation.level=read_committed`` leaves out aborted transactions' records (and control records)."""
    config, ds = fs_store
    aborted_partitions = sorted({p for t, p, _ in ds.aborted if t == "orders"})
    assert aborted_partitions, "the data set has aborted transactions"
    payments = sorted({r[3] for r in ds.rows if r[2] == "payments"})
    assign = {"orders": aborted_partitions, "payments": payments[:1]}
    wanted = {("orders", p) for p in aborted_partitions} | {("payments", payments[0])}
    df = _read(
        spark, config, assign=json.dumps(assign), includeHeaders="true", **{"kafka.isolation.level": "read_committed"}
    )
    got = _rows(df)
    expected = [r for r in ds.committed() if (r[2], r[3]) in wanted]
    assert got == expected and len({(r[2], r[3]) for r in got}) == len(wanted)
    uncommitted = _rows(
        _read(
            spark,
            config,
            assign=json.dumps(assign),
            includeHeaders="true",
            **{"kafka.isolation.level": "read_uncommitted"},
        )
    )
    assert uncommitted == [r for r in ds.rows if (r[2], r[3]) in wanted]
    left_out = {(r[2], r[3], r[4]) for r in uncommitted} - {(r[2], r[3], r[4]) for r in got}
    assert left_out == {a for a in ds.aborted if (a[0], a[1]) in wanted} and left_out


def _ledger_segments(tmp_path: Path, config: dict[str, str]) -> tuple[SegmentFiles, SegmentFiles]:
    """Topic ``ledger``, partition 0, two tiered segments written as a broker would.

    Producers 7001 and 7002 are transactional, plain batches have no producer. Segment A (0..20): plain
    0-4, 7001's transaction T1 at 5-9 (its ABORT lands in segment B), 7002's T2 at 10-14 committed at 15,
    plain 16-20. Segment B (21..52): plain 21-25, ABORT of T1 at 26, 7002's T3 at 27-31 committed at 32,
    plain 33-37, then 7001's T4 at 38-42, plain 43-47 and 7002's T5 at 48-52, both still open when the
    tiered data ends (their markers are not tiered yet), so the last stable offset is 38.
    """
    tx = {7001: 0, 7002: 0}

    def data(base: int, pid: int = -1) -> bytes:
        specs = [(BASE_TS + base + i, f"k{base + i}".encode(), f"v{base + i}".encode(), []) for i in range(5)]
        if pid < 0:
            return build_batch(specs, base_offset=base)
        seq, tx[pid] = tx[pid], tx[pid] + 5
        return build_batch(
            specs, base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
        )

    def marker(kind: ControlRecordType, offset: int, pid: int) -> bytes:
        return build_control_batch(
            kind, base_offset=offset, timestamp_ms=BASE_TS + offset, producer_id=pid, producer_epoch=0
        )

    a = write_entries_segment(
        tmp_path / "ledger-a",
        [data(0), data(5, 7001), data(10, 7002), marker(ControlRecordType.COMMIT, 15, 7002), data(16)],
    )
    b = write_entries_segment(
        tmp_path / "ledger-b",
        [
            data(21),
            marker(ControlRecordType.ABORT, 26, 7001),
            data(27, 7002),
            marker(ControlRecordType.COMMIT, 32, 7002),
            data(33),
            data(38, 7001),
            data(43),
            data(48, 7002),
        ],
        open_transactions={7001: 5},
    )
    tip = TopicIdPartition(random_kafka_uuid(), "ledger", 0)
    with RemoteStorageManager() as m:
        m.configure(config)
        for files in (a, b):
            m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
    return a, b


def test_read_committed_honours_later_aborts_and_stops_at_undecided_transactions(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = _plain(tmp_path)
    a, b = _ledger_segments(tmp_path, config)
    # The broker-side files say what the reader must find: T1's abort is indexed by the later segment only,
    # and the producer snapshot at B's end holds T4 and T5 open.
    assert a.aborted_txns == () and [(t.producer_id, t.first_offset, t.last_offset) for t in b.aborted_txns] == [
        (7001, 5, 26)
    ]
    open_txns = {
        e.producer_id: e.current_txn_first_offset for e in decode_producer_snapshot(b.producer_snapshot.read_bytes())
    }
    assert open_txns == {7001: 38, 7002: 48}
    data_offsets = [o for o in range(53) if o not in (15, 26, 32)]
    committed = [*range(0, 5), *range(10, 15), *range(16, 21), *range(21, 26), *range(27, 32), *range(33, 38)]

    uncommitted = TieredReader({**config, "topic": "ledger"})
    assert [r["offset"] for r in uncommitted.records()] == data_offsets
    reader = TieredReader({**config, "topic": "ledger", "isolationLevel": "read_committed"})
    assert [r["offset"] for r in reader.records()] == committed
    assert reader.stats.aborted_batches == 1  # T1's batch, dropped on the later segment's transaction index
    # A read that starts inside segment A still learns of T1's abort from segment B's index.
    assert [r["offset"] for r in reader.records(first_offset=5, last_offset=12)] == [10, 11, 12]
    # Past the last stable offset nothing is returned, not even records outside any transaction (43-47).
    assert list(reader.records(first_offset=38)) == []

    got = _read(spark, config, topic="ledger", isolationLevel="read_committed").select("offset", "value").collect()
    assert sorted((r.offset, bytes(r.value)) for r in got) == [(o, f"v{o}".encode()) for o in committed]
    pushed = _read(spark, config, topic="ledger", isolationLevel="read_committed").filter("offset >= 30")
    assert sorted(r.offset for r in pushed.select("offset").collect()) == [30, 31, *range(33, 38)]


def test_offsets_json_and_timestamps_bound_the_read(spark: SparkSession, fs_store: Store) -> None:
    config, ds = fs_store
    df = _read(
        spark,
        config,
        topic="orders",
        partitions="0,3",
        startingOffsets=json.dumps({"orders": {"0": 1010, "3": -2}}),
        endingOffsets=json.dumps({"orders": {"0": 2005, "3": -1}}),
    )
    expected = [
        r[:7] + ([],) for r in ds.rows if r[2] == "orders" and ((r[3] == 0 and 1010 <= r[4] < 2005) or r[3] == 3)
    ]
    assert _rows(df) == expected
    lo, hi = BASE_TS + 60_000, BASE_TS + 120_000
    df = _read(spark, config, topic="orders", partitions="0", startingTimestamp=str(lo), endingTimestamp=str(hi))
    expected = [r[:7] + ([],) for r in ds.rows if r[2] == "orders" and r[3] == 0 and lo <= r[5] < hi]
    assert expected and _rows(df) == expected


def _clock_segments(tmp_path: Path, config: dict[str, str]) -> None:
    """Topic ``clock``: timestamps that go back, as producers' CreateTime may.

    Partition 0, segment A (0..9): 0-4 at T+0..4, 5-9 at T+10..14. Segment B (10..29): 10-14 at T+100..104,
    15-19 at T+50..54 (older than the batch before), 20-24 at T+200..204, 25-29 at T+120..124. Partition 1
    (0..4) at T+0..4. Every batch is indexed, so lookups start mid-segment from the time index.
    """
    stamps = {0: 0, 5: 10, 10: 100, 15: 50, 20: 200, 25: 120}

    def data(base: int) -> bytes:
        first = BASE_TS + stamps[base]
        specs = [(first + i, f"k{base + i}".encode(), f"v{base + i}".encode(), []) for i in range(5)]
        return build_batch(specs, base_offset=base)

    segments = [
        (0, write_entries_segment(tmp_path / "clock-a", [data(0), data(5)], index_interval_bytes=1)),
        (0, write_entries_segment(tmp_path / "clock-b", [data(b) for b in (10, 15, 20, 25)], index_interval_bytes=1)),
        (1, write_entries_segment(tmp_path / "clock-p1", [data(0)], index_interval_bytes=1)),
    ]
    topic_id = random_kafka_uuid()
    with RemoteStorageManager() as m:
        m.configure(config)
        for partition, files in segments:
            m.copy_log_segment_data(
                files.to_metadata(TopicIdPartition(topic_id, "clock", partition)), files.to_log_segment_data()
            )


def test_timestamps_bound_offsets_per_partition_as_kafkas_offsets_for_times(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = _plain(tmp_path)
    _clock_segments(tmp_path, config)
    t = BASE_TS

    def offsets(**options: str) -> list[tuple[int, int]]:
        reader = TieredReader({**config, "topic": "clock", **options})
        return [(r["partition"], r["offset"]) for r in reader.records()]

    p0 = list(range(30))
    # The start is the first offset whose timestamp is >= the bound; later, older records (15-19) are kept.
    assert offsets(startingTimestamp=str(t + 100)) == [(0, o) for o in range(10, 30)]
    # Offset order, not time order: 17 has T+52, but 10 (T+100) is the first offset at or after T+52.
    assert offsets(startingTimestamp=str(t + 52), partitions="0") == [(0, o) for o in range(10, 30)]
    # Mid-batch in the first segment, and a partition whose records are all older reads nothing.
    assert offsets(startingTimestamp=str(t + 12)) == [(0, o) for o in range(7, 30)]
    assert offsets(startingTimestamp=str(t + 3)) == [(0, o) for o in range(3, 30)] + [(1, 3), (1, 4)]
    # The end is exclusive: the first offset at or after T+150 is 20, so 25-29 (T+120) are not read.
    assert offsets(endingTimestamp=str(t + 150), partitions="0") == [(0, o) for o in range(20)]
    assert offsets(startingTimestamp=str(t + 100), endingTimestamp=str(t + 200)) == [(0, o) for o in range(10, 20)]
    # No record that recent: an empty read for a start, the end of the tiered data for an end.
    assert offsets(startingTimestamp=str(t + 10_000)) == []
    assert offsets(endingTimestamp=str(t + 10_000)) == [(0, o) for o in p0] + [(1, o) for o in range(5)]
    # As in Spark's Kafka source, a timestamp bound takes precedence over the offsets option.
    assert offsets(startingTimestamp=str(t + 100), startingOffsets="earliest", partitions="0")[0] == (0, 10)

    # A pushed filter on `timestamp` still selects rows by their own timestamps.
    reader = TieredReader({**config, "topic": "clock", "partitions": "0"})
    pushed = pushed_bounds([GreaterThanOrEqual(("timestamp",), _dt(t + 100))])
    kept = [o for _, cols in reader.columns(pushed) for o in cols.to_columns().offsets]
    assert kept == [*range(10, 15), *range(20, 30)]

    df = _read(spark, config, topic="clock", startingTimestamp=str(t + 100), endingTimestamp=str(t + 200))
    got = sorted(
        (r.partition, r.offset, r.ts)
        for r in df.selectExpr("partition", "offset", "unix_millis(timestamp) AS ts").collect()
    )
    assert got == [
        (0, o, t + stamps) for o, stamps in zip(range(10, 20), [*range(100, 105), *range(50, 55)], strict=True)
    ]
    filtered = df.filter(f"timestamp >= timestamp_millis({t + 100})").select("offset").collect()
    assert sorted(r.offset for r in filtered) == list(range(10, 15))


def test_pushed_filters_give_the_same_rows(spark: SparkSession, fs_store: Store) -> None:
    config, ds = fs_store
    df = _read(spark, config, topic="orders").filter("partition = 0 AND offset >= 2000 AND offset <= 2050")
    expected = [r[:7] + ([],) for r in ds.rows if r[2] == "orders" and r[3] == 0 and 2000 <= r[4] <= 2050]
    assert expected and _rows(df) == expected
    ts = BASE_TS + 180_000
    df = _read(spark, config, topic="orders").filter(f"partition = 0 AND timestamp >= timestamp_millis({ts})")
    expected = [r[:7] + ([],) for r in ds.rows if r[2] == "orders" and r[3] == 0 and r[5] >= ts]
    assert expected and _rows(df) == expected


def test_a_schema_of_some_columns_reads_only_those(spark: SparkSession, fs_store: Store) -> None:
    config, ds = fs_store
    # Spark tells a Python data source nothing about the columns a query uses; a schema naming them is the way.
    df = spark.read.format("kafka-tiered").schema("Offset long, VALUE binary, partition int").options(**config)
    df = df.load(topic="orders,payments", maxSliceBytes="16384")
    assert df.columns == ["Offset", "VALUE", "partition"]
    got = sorted((r.partition, r.Offset, None if r.VALUE is None else bytes(r.VALUE)) for r in df.collect())
    assert got == sorted((r[3], r[4], r[1]) for r in ds.rows)
    headers = spark.read.format("kafka-tiered").schema("offset long, headers array<struct<key:string,value:binary>>")
    rows = headers.options(**config).load(topic="orders").collect()  # naming headers asks for them
    expected = sorted((r[4], r[7]) for r in ds.rows if r[2] == "orders")
    assert any(h for _, h in expected)
    assert (
        sorted((r.offset, [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]) for r in rows)
        == expected
    )
    for schema, needle in [
        ("nope binary", "'nope' of the given schema is not a column"),
        ("value string", "must be binary"),
        ("offset long NOT NULL", "NOT NULL"),
        ("key binary, KEY binary", "appears twice"),
    ]:
        with pytest.raises(Exception, match=needle):
            spark.read.format("kafka-tiered").schema(schema).options(**config).load(topic="orders").collect()


def test_secrets_stay_out_of_plans_and_reprs(
    spark: SparkSession, fs_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = fs_store
    secret = "do-not-show-7f3a"
    options = {
        **config,
        "storage.s3.secret.access.key": secret,
        "encryption.key.pairs.k.private.key": secret,
        "iceberg.mode.catalog.uri": f"postgresql+psycopg2://kts:{secret}@db.example/iceberg",
    }
    df = _read(spark, options, topic="orders")
    df.explain(mode="extended")
    df.explain(mode="formatted")
    plans = capsys.readouterr().out + df._jdf.queryExecution().toString()
    assert "kafka-tiered" in plans and secret not in plans
    # Those plans show no options at all (Spark 4.3); a SQL statement's plan does, masked by the regex register()
    # set on this session: Spark's own default would show the private key.
    listed = ", ".join(f"`{k}` '{v}'" for k, v in options.items())
    explained = spark.sql(f"EXPLAIN CREATE TEMPORARY VIEW v USING `kafka-tiered` OPTIONS ({listed})").first()[0]
    assert "encryption.key.pairs.k.private.key -> *********(redacted)" in explained and secret not in explained
    opts = TieredReadOptions.from_options({**options, "topic": "orders"})
    assert secret not in repr(opts) and secret not in repr(TieredReader(opts))
    assert secret not in json.dumps(redact(options))


# --- pushdown, proven by chunks read -----------------------------------------------------------------------------


class _CountingBackend:
    """Counts ranged reads of ``.log`` objects (one per chunk fetched) on a real backend, spying on its own
    ``read_range_into``, which the plugin's read path calls."""

    def __init__(self, backend: Any) -> None:
        self._real = backend.read_range_into
        self.log_reads = 0
        backend.read_range_into = self.read_range_into

    def read_range_into(self, key: str, start: int, end: int, out: Any) -> int:
        if key.endswith(".log"):
            self.log_reads += 1
        return self._real(key, start, end, out)  # type: ignore[no-any-return]


def _counting_reader(config: dict[str, str], **options: str) -> tuple[TieredReader, _CountingBackend]:
    m = RemoteStorageManager()
    # one GET per chunk read and no prefetch: the count is then the chunks the reader asked for
    m.configure(
        {
            **config,
            "fetch.readahead.chunks": "0",
            "fetch.coalesce.max.bytes": "1",
            "fetch.chunk.cache.prefetch.max.size": "0",
        }
    )
    counting = _CountingBackend(m.backend)
    return TieredReader({**config, **options}, manager=m), counting


def test_pushdown_reads_fewer_chunks(fs_store: Store) -> None:
    config, ds = fs_store
    full, full_count = _counting_reader(config, topic="orders")
    n_full = sum(1 for _ in full.records())
    filters = [EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 1500), LessThanOrEqual(("offset",), 1600)]
    bounds = pushed_bounds(filters)
    assert bounds == PushedBounds(frozenset({1}), 1500, 1600)
    narrow, narrow_count = _counting_reader(config, topic="orders", maxSliceBytes="16384")
    rows = [(r["offset"], r["value"]) for _, cols in narrow.columns(bounds) for r in _cols_rows(cols)]
    assert rows == [(r[4], r[1]) for r in ds.rows if r[2] == "orders" and r[3] == 1 and 1500 <= r[4] <= 1600]
    # The 101 records sit in one or two ~70 KB batches (about 20 of the partition's 4 KiB chunks each), read from
    # the offset index's entry before them; the full read touches every chunk of the topic.
    assert 0 < narrow_count.log_reads * 4 < full_count.log_reads, (narrow_count.log_reads, full_count.log_reads)
    assert n_full == sum(1 for r in ds.rows if r[2] == "orders")
    # A time bound skips whole segments on the manifest's max timestamp and starts mid-segment via the indexes.
    late, late_count = _counting_reader(config, topic="orders", partitions="0")
    late_rows = list(late.columns(pushed_bounds([GreaterThanOrEqual(("timestamp",), _dt(BASE_TS + 240_000))])))
    assert sum(len(c) for _, c in late_rows) == sum(
        1 for r in ds.rows if r[2] == "orders" and r[3] == 0 and r[5] >= BASE_TS + 240_000
    )
    assert {p.segment.start_offset for p, _ in late_rows} == {4000}
    assert late_count.log_reads < full_count.log_reads / 3
    assert pushed_bounds([LessThan(("timestamp",), _dt(BASE_TS + 1))]).end_timestamp == BASE_TS + 1


def _dt(ms: int) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _cols_rows(out: Any) -> Iterator[dict[str, Any]]:
    cols = out.to_columns()
    for i in range(len(cols)):
        yield {"offset": cols.offsets[i], "value": cols.values[i]}


def test_slices_start_at_batch_boundaries_and_cover_each_batch_once(fs_store: Store) -> None:
    config, ds = fs_store
    reader = TieredReader({**config, "topic": "orders", "partitions": "1", "maxSliceBytes": "16384"})
    slices = reader.plan()
    files = ds.segments["o1-big"]
    starts = {h.position for h, _ in iter_batches(files.log)}
    assert len(slices) > 4
    assert all(s.start_position in starts for s in slices)
    assert all(s.start_position % int(CHUNK) < 4096 for s in slices)
    assert [s.end_position for s in slices[:-1]] == [s.start_position for s in slices[1:]]
    assert slices[0].start_position == 0 and slices[-1].end_position is None
    offsets = [r["offset"] for r in reader.records()]
    assert offsets == sorted(set(offsets)) == [r[4] for r in ds.rows if r[2] == "orders" and r[3] == 1]


# --- corruption ----------------------------------------------------------------------------------------------------


def test_a_corrupt_chunk_fails_clearly_and_pushdown_never_reads_it(spark: SparkSession, tmp_path: Path) -> None:
    config = _plain(tmp_path)
    tip = TopicIdPartition(random_kafka_uuid(), "events", 0)
    with RemoteStorageManager() as m:
        m.configure(config)
        for base in (0, 5000):
            files = write_segment(tmp_path / f"s{base}", base_offset=base, num_batches=10, seed=base)
            m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
    (damaged,) = [p for p in (tmp_path / "store").rglob("*.log") if "00000000000000005000" in p.name]
    data = bytearray(damaged.read_bytes())
    data[5000] ^= 0xFF
    damaged.write_bytes(bytes(data))
    df = _read(spark, config, topic="events")
    with pytest.raises(Exception) as err:
        df.count()
    message = str(err.value)
    assert "CorruptDataException" in message and "events-0" in message and "chunk 1" in message
    # Offsets below 5000 live in the healthy segment only: the pushed filter keeps Spark away from the damage.
    assert df.filter("offset < 5000").count() == files_count(tmp_path / "s0")


def files_count(directory: Path) -> int:
    (log,) = directory.glob("*.log")
    return sum(h.records_count for h, _ in iter_batches(log) if not h.is_control)


def _segment_with_a_bad_crc(tmp_path: Path) -> tuple[dict[str, str], int, str]:
    """Topic ``audit`` partition 5: four lz4 batches of 10 records, the third with a flipped byte under its CRC.

    Returns the plugin config, the damaged batch's byte position and the tiered segment's id.
    """
    config = _plain(tmp_path)
    specs = [(BASE_TS + i, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(10)]
    batches = [build_batch(specs, base_offset=10 * i, codec="lz4") for i in range(4)]
    bad = bytearray(batches[2])
    bad[-3] ^= 0x55  # inside the records, covered by the CRC
    batches[2] = bytes(bad)
    files = write_entries_segment(tmp_path / "src", batches)
    with RemoteStorageManager() as m:
        m.configure(config)
        m.copy_log_segment_data(
            files.to_metadata(TopicIdPartition(random_kafka_uuid(), "audit", 5)), files.to_log_segment_data()
        )
    (piece,) = TieredReader({**config, "topic": "audit"}).plan()
    return config, len(batches[0]) + len(batches[1]), piece.segment.segment_id


def test_a_bad_batch_crc_fails_with_its_position_or_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, position, segment_id = _segment_with_a_bad_crc(tmp_path)
    with pytest.raises(CorruptDataException) as err:
        list(TieredReader({**config, "topic": "audit"}).records())
    text = str(err.value)
    assert "audit-5" in text and f"segment {segment_id}" in text and f"byte position {position}" in text
    assert "CRC" in text and "failOnCorruption" in text
    lenient = TieredReader({**config, "topic": "audit", "failOnCorruption": "false"})
    with caplog.at_level(logging.WARNING, logger="rsm.spark.reader"):
        offsets = [r["offset"] for r in lenient.records()]
    assert offsets == [o for o in range(40) if not 20 <= o < 30]
    assert lenient.stats.skipped_batches == 1
    (skipped,) = lenient.stats.skipped
    assert (skipped.topic, skipped.partition, skipped.segment_id, skipped.position) == (
        "audit",
        5,
        segment_id,
        position,
    )
    assert "CRC" in skipped.reason
    (warning,) = [r for r in caplog.records if r.name == "rsm.spark.reader" and r.levelno == logging.WARNING]
    message = warning.getMessage()
    assert f"audit-5: segment {segment_id}" in message and f"byte position {position}" in message
    assert "1 batch(es) skipped so far" in message


def test_spark_skips_a_bad_batch_with_a_warning_or_fails_naming_it(spark: SparkSession, tmp_path: Path) -> None:
    config, position, segment_id = _segment_with_a_bad_crc(tmp_path)
    with pytest.raises(Exception) as err:
        _read(spark, config, topic="audit").count()
    text = str(err.value)
    assert "CorruptDataException" in text and "audit-5" in text and f"segment {segment_id}" in text
    assert f"byte position {position}" in text
    # PySpark 4.1+ collects Python workers' log records into python_worker_logs when asked to.
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        rows = _read(spark, config, topic="audit", failOnCorruption="false").select("offset", "value").collect()
        logs = (
            spark.tvf.python_worker_logs()
            .filter("logger = 'rsm.spark.reader' AND level = 'WARNING'")
            .select("msg")
            .collect()
        )
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    assert sorted((r.offset, bytes(r.value)) for r in rows) == [
        (o, f"v{o % 10}".encode()) for o in range(40) if not 20 <= o < 30
    ]
    mine = [r.msg for r in logs if f"segment {segment_id}" in r.msg]
    assert len(mine) == 1, [r.msg for r in logs]
    assert f"audit-5: segment {segment_id}" in mine[0] and f"byte position {position}" in mine[0]
    assert "1 batch(es) skipped so far" in mine[0]


def test_decompression_is_capped_for_every_codec() -> None:
    payload = b"\0" * 300_000
    import gzip

    import lz4.frame
    import snappy
    import zstandard

    compressed = {
        CompressionType.GZIP: gzip.compress(payload),
        CompressionType.SNAPPY: snappy.compress(payload),
        CompressionType.LZ4: lz4.frame.compress(payload),
        CompressionType.ZSTD: zstandard.ZstdCompressor().compress(payload),
    }
    for codec, data in compressed.items():
        assert decompress(codec, data, 300_000) == payload
        with pytest.raises(DecompressionLimitExceeded):
            decompress(codec, data, 100_000)
    # Through the decoder a bomb is a corrupt batch at its position, never an allocation of the inflated size.
    specs = [(BASE_TS, None, b"\0" * 200_000, [])]
    bomb = build_batch(specs, codec="zstd")
    decoder = LogBatchDecoder(ReadBounds(), max_decompressed=64 << 10)
    with pytest.raises(CorruptRecordBatch, match="decompression cap"):
        decoder.feed(123, bomb, decoder.new_columns())


# --- options -------------------------------------------------------------------------------------------------------


def test_options_are_validated_with_precise_messages(tmp_path: Path) -> None:
    storage = _plain(tmp_path)
    cases = {
        "exactly one of topic": {**storage},
        "topicPattern": {**storage, "topicPattern": "("},
        "startingOffsets": {**storage, "topic": "t", "startingOffsets": "{not json"},
        "isolationLevel": {**storage, "topic": "t", "isolationLevel": "serializable"},
        "failOnCorruption": {**storage, "topic": "t", "failOnCorruption": "maybe"},
        "no storage": {"topic": "t"},
        "config.file": {"topic": "t", "config.file": str(tmp_path / "missing.properties")},
    }
    for needle, options in cases.items():
        with pytest.raises(ReadOptionsError, match=needle.split()[0]):
            TieredReadOptions.from_options(options)


def test_option_keys_are_case_insensitive_for_reader_and_plugin_keys(fs_store: Store, tmp_path: Path) -> None:
    config, ds = fs_store
    shouted = {k.upper(): v for k, v in config.items()}
    opts = TieredReadOptions.from_options(
        {
            **shouted,
            "TOPIC": "orders",
            "Partitions": "0",
            "STARTINGOFFSETS": json.dumps({"orders": {"0": 1010}}),
            "endingoffsets": json.dumps({"orders": {"0": 1020}}),
            "IsolationLevel": "read_committed",
            "INCLUDEHEADERS": "true",
        }
    )
    assert opts.plugin_config == config  # the plugin gets its keys in their declared spelling
    assert (opts.topics, opts.partitions, opts.read_committed, opts.include_headers) == (
        ("orders",),
        frozenset({0}),
        True,
        True,
    )
    assert [r["offset"] for r in TieredReader(opts).records()] == list(range(1010, 1020))
    # One key in two cases is one key: the same value is fine, two different values are refused.
    assert TieredReadOptions.from_options({**config, "topic": "orders", "TOPIC": "orders"}).topics == ("orders",)
    with pytest.raises(ReadOptionsError, match=r"isolationLevel is given twice.*'isolationLevel' and 'ISOLATIONLEVEL'"):
        TieredReadOptions.from_options(
            {**config, "topic": "t", "isolationLevel": "read_committed", "ISOLATIONLEVEL": "read_uncommitted"}
        )
    with pytest.raises(ReadOptionsError, match="storage.root is given twice, as 'storage.root' and 'STORAGE.ROOT'"):
        TieredReadOptions.from_options({**config, "topic": "t", "STORAGE.ROOT": str(tmp_path / "elsewhere")})
    # ...and the refusal shows the two values, except a secret's: error messages reach driver logs.
    secret = {"storage.s3.secret.access.key": "old-7f3a", "STORAGE.S3.SECRET.ACCESS.KEY": "new-7f3a"}
    with pytest.raises(ReadOptionsError, match="secret.access.key is given twice") as refused:
        TieredReadOptions.from_options({**config, "topic": "t", **secret})
    assert "7f3a" not in str(refused.value)
    with pytest.raises(ReadOptionsError, match=r"\('read_committed' and 'read_uncommitted'\)"):
        TieredReadOptions.from_options(
            {**config, "topic": "t", "isolationLevel": "read_committed", "ISOLATIONLEVEL": "read_uncommitted"}
        )


def test_unknown_option_keys_name_the_closest_key(fs_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    config, ds = fs_store
    # A near miss of a reader option would read other data than asked: refused, naming the option.
    for typo, meant in (
        ("startingOffset", "startingOffsets"),
        ("partition", "partitions"),
        ("isolation", "isolationLevel"),
    ):
        with pytest.raises(ReadOptionsError, match=f"'{typo}' is not an option.*did you mean {meant}\\?"):
            TieredReadOptions.from_options({**config, "topic": "orders", typo: "0"})
    # Spark Kafka source options that would change what is read, unsupported here: refused with ours named.
    with pytest.raises(ReadOptionsError, match="startingOffsetsByTimestamp.*startingTimestamp"):
        TieredReadOptions.from_options({**config, "topic": "orders", "startingOffsetsByTimestamp": "{}"})
    for bad in ('{"orders": "0"}', "[0]", "{}", '{"orders": [-1]}', "orders:0"):
        with pytest.raises(ReadOptionsError, match="assign must be JSON"):
            TieredReadOptions.from_options({**config, "assign": bad})
    with pytest.raises(ReadOptionsError, match="exactly one of topic.*assign"):
        TieredReadOptions.from_options({**config, "topic": "orders", "assign": json.dumps({"orders": [0]})})
    with pytest.raises(ReadOptionsError, match="disagree"):
        TieredReadOptions.from_options(
            {
                **config,
                "topic": "orders",
                "isolationLevel": "read_committed",
                "kafka.isolation.level": "read_uncommitted",
            }
        )
    with pytest.raises(ReadOptionsError, match="kafka.isolation.level must be"):
        TieredReadOptions.from_options({**config, "topic": "orders", "kafka.isolation.level": "serializable"})
    # A plugin-key typo and a Kafka source job's consumer settings: logged (closest key named) and dropped.
    caplog.set_level(logging.WARNING, logger="rsm.spark.options")
    opts = TieredReadOptions.from_options(
        {
            **config,
            "topic": "payments",
            "storage.fsync.enabledd": "false",
            "kafka.bootstrap.servers": "broker:9092",
            "failOnDataLoss": "false",
        }
    )
    assert opts.plugin_config == config
    warnings = [r.getMessage() for r in caplog.records if r.name == "rsm.spark.options"]
    assert any("storage.fsync.enabledd" in w and "Did you mean 'storage.fsync.enabled'?" in w for w in warnings), (
        warnings
    )
    assert any("kafka.bootstrap.servers" in w and "ignored" in w for w in warnings), warnings
    assert any("failondataloss" in w and "ignored" in w for w in warnings), warnings
    assert sum(1 for _ in TieredReader(opts).records()) == sum(1 for r in ds.rows if r[2] == "payments")


def test_spark_lower_cased_keys_still_find_a_mixed_case_key_pair(
    spark: SparkSession, tmp_path: Path, key_pairs: dict[str, tuple[Path, Path]]
) -> None:
    """Spark hands option keys over lower-cased; the key-pair id inside them gets its case back from the ring."""
    pub, priv = key_pairs["kek1"]
    config = {
        **_plain(tmp_path),
        "encryption.enabled": "true",
        "encryption.key.pair.id": "SparkKey",
        "encryption.key.pairs": "SparkKey",
        "encryption.key.pairs.SparkKey.public.key.file": str(pub),
        "encryption.key.pairs.SparkKey.private.key.file": str(priv),
    }
    files = write_segment(tmp_path / "enc", num_batches=3, records_per_batch=(5, 5), seed=3)
    with RemoteStorageManager() as m:
        m.configure(config)
        m.copy_log_segment_data(
            files.to_metadata(TopicIdPartition(random_kafka_uuid(), "sealed", 0)), files.to_log_segment_data()
        )
    expected = [(r.offset, r.value) for _, body in iter_batches(files.log.read_bytes()) for r in decode_records(body)]
    lowered = {k.lower(): v for k, v in config.items()}
    assert TieredReadOptions.from_options({**lowered, "topic": "sealed"}).plugin_config == config
    assert [(r["offset"], r["value"]) for r in TieredReader({**lowered, "topic": "sealed"}).records()] == expected
    got = _read(spark, config, Topic="sealed", STARTINGOFFSETS="earliest").select("offset", "value").collect()
    assert sorted((r.offset, bytes(r.value)) for r in got) == expected


def test_config_file_takes_broker_or_plugin_properties(tmp_path: Path, fs_store: Store) -> None:
    config, ds = fs_store
    broker = tmp_path / "server.properties"
    broker.write_text(
        "broker.id=1\nremote.log.storage.system.enable=true\n"
        + "".join(f"rsm.config.{k}={v}\n" for k, v in config.items())
    )
    plugin = tmp_path / "plugin.properties"
    plugin.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    expected = sum(1 for r in ds.rows if r[2] == "payments")
    for path in (broker, plugin):
        opts = TieredReadOptions.from_options({"config.file": str(path), "topic": "payments"})
        assert opts.plugin_config == config
        assert sum(1 for _ in TieredReader(opts).records()) == expected
    # the broker's config providers: the root from a file, as the broker resolves it
    (tmp_path / "paths.properties").write_text(f"root={config['storage.root']}\n")
    providers = (
        "config.providers=file\n"
        "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n"
    )
    lines = {**config, "storage.root": f"${{file:{tmp_path / 'paths.properties'}:root}}"}
    broker.write_text(providers + "".join(f"rsm.config.{k}={v}\n" for k, v in lines.items()))
    opts = TieredReadOptions.from_options({"config.file": str(broker), "topic": "payments"})
    assert opts.plugin_config == config
    broker.write_text(providers + "rsm.config.storage.root=${file:/nowhere/x.properties:root}\n")
    with pytest.raises(ReadOptionsError, match=r"config.file: rsm.config.storage.root in .*server.properties"):
        TieredReadOptions.from_options({"config.file": str(broker), "topic": "payments"})


# --- demo example ---------------------------------------------------------------------------------------------------


def test_example_query_summarises_the_demo_questions(spark: SparkSession, fs_store: Store) -> None:
    from rsm.spark.example import example_query

    config, ds = fs_store
    summary = example_query(spark, config, topic="orders")
    orders = [r for r in ds.rows if r[2] == "orders"]
    assert summary["records"] == len(orders)
    keys = {r[0] for r in orders}

    def name(k: bytes | None) -> str | None:
        return None if k is None else k.decode()

    counts = {name(k): sum(1 for r in orders if r[0] == k) for k in keys}
    top_key, top_n = summary["count_by_key"][0]
    assert top_n == counts[top_key] == max(counts.values())
    volume = {name(k): sum(len(r[1] or b"") for r in orders if r[0] == k) for k in keys}
    assert summary["top_producers_by_bytes"][0][1] == max(volume.values())
    assert summary["time_range"]["records"] == sum(
        1 for r in orders if summary["time_range"]["from_ms"] <= r[5] < summary["time_range"]["to_ms"]
    )


# The demo with its own Spark JVM: the whole demo took 11 minutes at load 20 to 25, this smaller one over 9 at
# load 40; the bound is 20 minutes.
@pytest.mark.timeout(1500)
def test_the_demos_spark_step_prints_only_the_demos_lines(tmp_path: Path) -> None:
    """``kts demo``'s Spark step: its own lines on the terminal; Spark's log lines, progress bars and the JVM's
    messages in the log file the demo names."""
    workdir = tmp_path / "demo"
    args = ["--segments", "2", "--segment-mb", "0.3", "--chunk-size", "65536", "--transport", "python", "--no-iceberg"]
    run = subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", "demo", "--dir", str(workdir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1200,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert run.returncode == 0, run.stdout[-5000:]
    lines = run.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("[7/7] Spark example query"))
    step = lines[start + 1 : lines.index("", start)]
    log = workdir / "spark.log"
    assert len(step) == 2, "\n".join(step)
    assert "records read by Spark from the store" in step[0], step
    assert step[1] == f"      Spark's own warnings: {log}", step
    assert not [line for line in lines if "WARN" in line or "[Stage" in line or "log4j" in line], run.stdout
    # Spark's own lines are kept: the data source registration it warns about, at WARN.
    assert "WARN DataSourceManager" in log.read_text(errors="replace"), log.read_text(errors="replace")[-3000:]


# --- a real cluster --------------------------------------------------------------------------------------------------


def _spark_home(tmp_path: Path) -> Path:
    """A Spark home of pyspark's own ``bin``, ``jars`` and ``python``: the cluster's workers keep their executors'
    folders in ``work`` under it, so they land in ``tmp_path`` instead of the installed package."""
    home = tmp_path / "spark-home"
    home.mkdir()
    for name in ("bin", "jars", "python"):
        (home / name).symlink_to(Path(pyspark.__file__).parent / name)
    return home


# The driver reports, for every task that decoded rows, the process ids of its Python worker and of the executor
# JVM that started it (the worker's nearest ``java`` ancestor), and the driver's own Python and JVM ids.
_CLUSTER_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession
    from rsm.spark.datasource import register

    def jvm_of(pid):
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
            if comm.endswith("(java"):
                return pid
            pid = int(rest.split()[1])
        return None

    def decoded(rows):
        n = sum(1 for _ in rows)
        return [(os.getpid(), jvm_of(os.getpid()), n)] if n else []

    # Both executors registered before the first task (ratio 1.0): tasks cannot all go to the first one up.
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "200s")
             .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
    register(spark)
    df = spark.read.format("kafka-tiered").options(**json.load(open(sys.argv[1]))).load()
    tasks = df.rdd.mapPartitions(decoded).collect()
    driver_jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    print("RESULT " + json.dumps({"tasks": tasks, "rows": df.count(), "driver": os.getpid(), "driver_jvm": driver_jvm}))
    spark.stop()
    """
)


# The driver took 265 s (60 CPU seconds) at load 17 on two cores: twice that is the bound.
@pytest.mark.timeout(600)
def test_standalone_cluster_reads_from_s3_in_separate_executors(s3_store: Store, tmp_path: Path) -> None:
    """Spark's ``local-cluster`` master: a standalone master and two workers inside the driver's JVM, each worker
    starting its executor as a JVM process of its own. The driver runs in a child process and reports the
    processes that decoded rows: Python workers of two executor JVMs, neither of them the driver's (the readers
    are pickled to them), reading from S3."""
    config, ds = s3_store
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_HOME": str(_spark_home(tmp_path)),
    }
    driver = tmp_path / "driver.py"
    driver.write_text(_CLUSTER_DRIVER)
    options_file = tmp_path / "options.json"  # not argv: options carry credentials
    options_file.write_text(json.dumps({**config, "topic": "orders", "maxSliceBytes": "16384"}))
    options_file.chmod(0o600)
    run = subprocess.run(
        [sys.executable, str(driver), str(options_file)],
        env=env,
        capture_output=True,
        timeout=560,
        cwd=str(tmp_path),
    )
    lines = [ln for ln in run.stdout.decode().splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stderr.decode()[-5000:]
    result = json.loads(lines[0][len("RESULT ") :])
    assert result["rows"] == sum(1 for r in ds.rows if r[2] == "orders")
    assert sum(n for _, _, n in result["tasks"]) == result["rows"]
    workers = {pid for pid, _, _ in result["tasks"]}
    executors = {jvm for _, jvm, _ in result["tasks"]}
    assert result["driver"] not in workers and len(workers) >= 2, result
    assert None not in executors and result["driver_jvm"] not in executors and len(executors) == 2, result


_FREEZE_PROBE = textwrap.dedent(
    """
    import gc, json, sys
    from pyspark.sql.types import LongType, StructField, StructType
    from rsm.spark.datasource import KafkaTieredDataSource
    reader = KafkaTieredDataSource(json.loads(sys.argv[1])).reader(StructType([StructField("offset", LongType())]))
    pieces = reader.partitions()
    before = gc.get_freeze_count()
    first = sum(batch.num_rows for batch in reader.read(pieces[0]))
    frozen = gc.get_freeze_count()
    made_since = [[i] for i in range(5000)]  # new containers: a later task must leave them to the collector
    second = sum(batch.num_rows for batch in reader.read(pieces[0]))
    print(json.dumps([before, first, frozen, second, gc.get_freeze_count()]))
    """
)


def test_a_worker_freezes_its_long_lived_objects_once(fs_store: Store) -> None:
    # A reused PySpark worker runs gc.collect() after every task; the reader freezes what the worker holds after
    # its first task's imports (rsm.spark.datasource._freeze_worker_heap) so those collections skip it, and only
    # once: objects of later tasks stay collectable.
    config, _ = fs_store
    options = json.dumps({**config, "topic": "orders"})
    r = subprocess.run([sys.executable, "-c", _FREEZE_PROBE, options], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    before, first, frozen, second, after = json.loads(r.stdout)
    assert before == 0 and frozen > 10_000  # pyspark, pyarrow and rsm: tens of thousands of objects
    assert first == second > 0
    assert after == frozen
