"""The latest-per-key table on a real SQLite catalog, written by the plugin's copies and read by pyiceberg, DuckDB
and Spark (Iceberg's runtime): equal to a model of the records produced, through updates, tombstones, aborted
transactions, retried copies and replays; Debezium change events applied (JSON with and without schema, Avro);
maintenance on it; retention leaves it alone."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from iceberg_testing import (
    SPARK_SESSION,
    avro_bytes,
    duckdb_with_iceberg,
    iceberg_config,
    load_table,
    new_tip,
    run_iceberg_spark,
)

from rsm import RemoteStorageException, RemoteStorageManager
from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.latest_table import LatestWriter, read_watermarks
from rsm.iceberg.maintenance.run import maintain
from rsm.kafka.batch_builder import build_batch, build_control_batch
from rsm.kafka.records import ControlRecordType
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_entries_segment
from rsm.metadata import TopicIdPartition

T0 = 1_767_225_600_000
LATEST = {"iceberg.mode.table.orders.latest.enabled": "true", "iceberg.mode.maintenance.enabled": "false"}

Produced = tuple[int, int, bytes | None, bytes | None, bool]
"""(partition, offset, key, value, aborted)"""


def segment(
    directory: Path, partition: int, first: int, plan: list[tuple[bytes | None, bytes | None, str]]
) -> tuple[SegmentFiles, list[Produced]]:
    """A segment from ``first``: each entry (key, value, kind), kind "" a plain record, "abort" or "commit" a
    record in a transaction of its own that ends so (its marker follows it)."""
    entries: list[bytes] = []
    produced: list[Produced] = []
    offset = first
    sequence = 0
    for key, value, kind in plan:
        ts = T0 + offset
        if not kind:
            entries.append(build_batch([(ts, key, value, [])], base_offset=offset))
            produced.append((partition, offset, key, value, False))
            offset += 1
            continue
        entries.append(
            build_batch(
                [(ts, key, value, [])],
                base_offset=offset,
                producer_id=42,
                producer_epoch=0,
                base_sequence=sequence,
                transactional=True,
            )
        )
        sequence += 1
        produced.append((partition, offset, key, value, kind == "abort"))
        marker = ControlRecordType.ABORT if kind == "abort" else ControlRecordType.COMMIT
        entries.append(
            build_control_batch(marker, base_offset=offset + 1, timestamp_ms=ts, producer_id=42, producer_epoch=0)
        )
        offset += 2
    return write_entries_segment(directory, entries), produced


def model(produced: list[Produced]) -> dict[tuple[int, bytes], tuple[int, bytes]]:
    newest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    for partition, offset, key, value, aborted in produced:
        if aborted or key is None:
            continue
        if (partition, key) not in newest or newest[(partition, key)][0] < offset:
            newest[(partition, key)] = (offset, value)
    return {k: (o, v) for k, (o, v) in newest.items() if v is not None}


def latest_rows(config: dict[str, str], name: str = "orders_latest") -> Any:
    return load_table(config, name.removesuffix("_latest")).catalog.load_table(("kafka", name))


def pyiceberg_state(config: dict[str, str]) -> dict[tuple[int, bytes], tuple[int, bytes]]:
    out = {}
    for row in latest_rows(config).scan().to_arrow().to_pylist():
        k = (row["_kafka"]["partition"], row["_kafka"]["key"])
        assert k not in out, f"{k} twice"
        assert row["key_raw"] == row["_kafka"]["key"]
        out[k] = (row["_kafka"]["offset"], row["value_raw"])
    return out


def copy(m: RemoteStorageManager, tip: TopicIdPartition, seg: SegmentFiles) -> None:
    m.copy_log_segment_data(seg.to_metadata(tip), seg.to_log_segment_data())


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[Produced]]:
    """Two partitions, three segments each: updates, tombstones, a null key, aborted and committed
    transactions; every segment copied twice (a retried copy) and the first one replayed at the end."""
    work = tmp_path_factory.mktemp("latest")
    config = iceberg_config(work, **LATEST)
    tip0 = new_tip("orders", 0)
    tip1 = TopicIdPartition(tip0.topic_id, "orders", 1)
    produced: list[Produced] = []
    plans = [
        [(b"a", b"a1", ""), (b"b", b"b1", ""), (b"c", b"c1", ""), (b"a", b"a2", ""), (None, b"nokey", "")],
        [(b"b", None, ""), (b"a", b"a-aborted", "abort"), (b"d", b"d1", "commit"), (b"c", b"c2", "")],
        [(b"a", None, "abort"), (b"e", b"e1", ""), (b"d", None, ""), (b"b", b"b2", "")],
    ]
    with RemoteStorageManager() as m:
        m.configure(config)
        first_segments = []
        for partition, tip in ((0, tip0), (1, tip1)):
            offset = 0
            for i, plan in enumerate(plans if partition == 0 else plans[::-1]):
                seg, recs = segment(work / f"p{partition}-s{i}", partition, offset, plan)
                produced += recs
                offset = recs[-1][1] + (2 if plan[-1][2] else 1)
                copy(m, tip, seg)
                copy(m, tip, seg)  # a retried copy
                if i == 0:
                    first_segments.append((tip, seg))
        for tip, seg in first_segments:
            copy(m, tip, seg)  # replayed after newer segments: changes nothing
    return config, produced


def test_pyiceberg_reads_the_models_latest_per_key(keyed: tuple[dict[str, str], list[Produced]]) -> None:
    config, produced = keyed
    want = model(produced)
    assert pyiceberg_state(config) == want
    assert (0, b"a") in want and want[(0, b"a")][1] == b"a2"  # the aborted update and delete did not apply
    assert (0, b"d") not in want and (0, b"b") in want
    table = latest_rows(config)
    assert table.properties["kafka.latest.of"] == "kafka.orders"
    # The watermark of each partition: the last record it applied (a record without a key or aborted applies
    # nothing, so it does not move it).
    marks = read_watermarks(table)
    assert {p for _, p in marks} == {0, 1}
    for (topic_id, partition), offset in marks.items():
        assert topic_id and offset == max(o for q, o, k, v, ab in produced if q == partition and not ab and k)


def test_duckdb_reads_the_same_latest_table(keyed: tuple[dict[str, str], list[Produced]]) -> None:
    config, produced = keyed
    table = latest_rows(config)
    rows = (
        duckdb_with_iceberg()
        .execute(
            'SELECT _kafka."partition", _kafka."offset", key_raw, value_raw FROM iceberg_scan(?)',
            [table.metadata_location],
        )
        .fetchall()
    )
    assert {(p, bytes(k)): (o, bytes(v)) for p, o, k, v in rows} == model(produced)
    assert len(rows) == len(model(produced))


SPARK_LATEST = (
    SPARK_SESSION
    + """
import base64
df = spark.read.format("iceberg").load(sys.argv[3])
rows = df.selectExpr("_kafka.partition AS p", "_kafka.offset AS o", "key_raw AS k", "value_raw AS v").collect()
print(json.dumps([[r.p, r.o, base64.b64encode(r.k).decode(), base64.b64encode(r.v).decode()] for r in rows]))
spark.stop()
"""
)


@pytest.mark.timeout(1200)  # a JVM start and Iceberg's runtime; minutes on a loaded machine
def test_spark_reads_the_same_latest_table(keyed: tuple[dict[str, str], list[Produced]]) -> None:
    config, produced = keyed
    table = latest_rows(config)
    out = json.loads(run_iceberg_spark(SPARK_LATEST, "{}", table.metadata_location).strip().splitlines()[-1])
    got = {(p, base64.b64decode(k)): (o, base64.b64decode(v)) for p, o, k, v in out}
    assert got == model(produced)
    assert len(out) == len(got)


def test_a_failed_latest_commit_fails_the_copy_and_the_retry_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Log rows first, then the latest table: a copy whose latest commit fails is failed (Kafka retries it);
    the log rows are there, the latest table is not ahead; the retry brings it up to date."""
    config = iceberg_config(tmp_path, **LATEST)
    tip = new_tip()
    seg, produced = segment(tmp_path / "s", 0, 0, [(b"a", b"1", ""), (b"b", b"1", ""), (b"a", None, "")])
    real = LatestWriter._attempt

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the catalog went away")

    with RemoteStorageManager() as m:
        m.configure(config)
        monkeypatch.setattr(LatestWriter, "_attempt", failing)
        with pytest.raises(RemoteStorageException):
            copy(m, tip, seg)
        assert load_table(config).scan().to_arrow().num_rows == 3  # the log rows landed
        monkeypatch.setattr(LatestWriter, "_attempt", real)
        copy(m, tip, seg)
    assert pyiceberg_state(config) == model(produced) == {(0, b"b"): (1, b"1")}


def test_a_copy_whose_log_commit_fails_leaves_the_latest_table_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = iceberg_config(tmp_path, **LATEST)
    tip = new_tip()
    first, _ = segment(tmp_path / "s0", 0, 0, [(b"a", b"1", "")])
    second, _ = segment(tmp_path / "s1", 0, 1, [(b"a", b"2", "")])
    from rsm.iceberg.replace import Replacer

    with RemoteStorageManager() as m:
        m.configure(config)
        copy(m, tip, first)

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise RemoteStorageException("the log commit failed")

        monkeypatch.setattr(Replacer, "replace", refused)
        with pytest.raises(RemoteStorageException):
            copy(m, tip, second)
    assert pyiceberg_state(config) == {(0, b"a"): (0, b"1")}


def test_retention_leaves_the_latest_table_and_maintenance_keeps_it_small(tmp_path: Path) -> None:
    config = iceberg_config(tmp_path, **LATEST, **{"iceberg.mode.delete.rows.enabled": "true"})
    tip = new_tip()
    segs = []
    produced: list[Produced] = []
    with RemoteStorageManager() as m:
        m.configure(config)
        offset = 0
        for i in range(12):
            seg, recs = segment(tmp_path / f"s{i}", 0, offset, [(b"k%d" % (j % 5), b"v%d" % i, "") for j in range(4)])
            offset += 4
            produced += recs
            meta = seg.to_metadata(tip)
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            segs.append(meta)
        before = latest_rows(config).current_snapshot().snapshot_id
        for meta in segs[:3]:
            m.delete_log_segment_data(meta)  # retention: the log rows go
    assert load_table(config).scan().to_arrow().num_rows == 36
    # The latest table is a compacted topic's state: retention makes no commit to it and removes no key.
    assert latest_rows(config).current_snapshot().snapshot_id == before
    assert pyiceberg_state(config) == model(produced)
    table = latest_rows(config)
    files_before = len(list(table.scan().plan_files()))
    assert files_before <= 16  # one file per bucket touched
    results = maintain(table, MaintenanceSettings(snapshot_max_age_s=0, snapshot_min_keep=1, snapshot_max_keep=2))
    by_step = {r.step: r for r in results}
    assert by_step["expire-snapshots"].count > 0 and by_step["compaction"].count == 0
    table = latest_rows(config)
    assert len(table.snapshots()) <= 2
    assert pyiceberg_state(config) == model(produced)


# --------------------------------------------------------------------------------------- Debezium change events

CDC = {
    "iceberg.mode.topics.regex": "cdc",
    "iceberg.mode.table.cdc.latest.enabled": "true",
    "iceberg.mode.table.cdc.latest.format": "debezium",
    "iceberg.mode.maintenance.enabled": "false",
}


def _connect_schema(columns: dict[str, str]) -> dict[str, Any]:
    row = {
        "type": "struct",
        "optional": True,
        "fields": [{"field": n, "type": t, "optional": n != "id"} for n, t in columns.items()],
    }
    return {
        "type": "struct",
        "name": "dbserver.public.customers.Envelope",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"field": "op", "type": "string", "optional": False},
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    }


def _event(
    op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, columns: dict[str, str] | None
) -> bytes:
    envelope = {"before": before, "after": after, "op": op, "ts_ms": 1, "source": {"db": "shop"}}
    if columns is None:
        return json.dumps(envelope).encode()
    return json.dumps({"schema": _connect_schema(columns), "payload": envelope}).encode()


def _cdc_key(i: int, with_schema: bool) -> bytes:
    if with_schema:
        schema = {"type": "struct", "fields": [{"field": "id", "type": "int32", "optional": False}]}
        return json.dumps({"schema": schema, "payload": {"id": i}}).encode()
    return json.dumps({"id": i}).encode()


@pytest.mark.parametrize("with_schema", [True, False], ids=["json-with-schema", "json-plain"])
def test_debezium_json_events_apply_creates_updates_and_deletes(tmp_path: Path, with_schema: bool) -> None:
    config = iceberg_config(tmp_path, topics="cdc", **CDC)
    v1 = {"id": "int32", "name": "string", "photo": "bytes"} if with_schema else None
    v2 = {"id": "int32", "name": "string", "photo": "bytes", "tier": "int64"} if with_schema else None
    photo = base64.b64encode(b"\x00\xff").decode() if with_schema else "raw"
    events = [
        (1, _event("r", None, {"id": 1, "name": "ann", "photo": photo}, v1)),
        (2, _event("r", None, {"id": 2, "name": "bob", "photo": photo}, v1)),
        (3, _event("c", None, {"id": 3, "name": "cy", "photo": photo}, v1)),
        (1, _event("u", {"id": 1}, {"id": 1, "name": "ann2", "photo": photo}, v1)),
        (2, _event("d", {"id": 2, "name": "bob"}, None, v1)),
        (2, None),  # the tombstone after a delete
        (4, _event("t", None, None, v1)),  # truncate: changes nothing
    ]
    later = [
        # A column added at the source: the table follows.
        (3, _event("u", {"id": 3}, {"id": 3, "name": "cy", "photo": photo, "tier": 7}, v2)),
        (5, _event("c", None, {"id": 5, "name": "eve", "photo": photo, "tier": 1}, v2)),
    ]
    tip = new_tip("cdc")
    with RemoteStorageManager() as m:
        m.configure(config)
        for i, batch in enumerate((events, later)):
            first = 0 if i == 0 else len(events)
            entries = [
                build_batch([(T0 + first + j, _cdc_key(k, with_schema), v, [])], base_offset=first + j)
                for j, (k, v) in enumerate(batch)
            ]
            copy(m, tip, write_entries_segment(tmp_path / f"s{i}", entries))
    table = latest_rows(config, "cdc_latest")
    got = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert sorted(got) == [1, 3, 5]
    assert got[1]["name"] == "ann2" and got[3]["name"] == "cy" and got[5]["name"] == "eve"
    if with_schema:
        assert got[1]["photo"] == b"\x00\xff"  # bytes, decoded from base64 by the schema
        assert table.schema().find_field("id").field_type.__class__.__name__ == "IntegerType"
        assert got[3]["tier"] == 7 and got[5]["tier"] == 1 and got[1]["tier"] is None
    else:
        assert got[3]["tier"] == 7 and got[1]["tier"] is None
    rows = (
        duckdb_with_iceberg()
        .execute("SELECT id, name FROM iceberg_scan(?) ORDER BY id", [table.metadata_location])
        .fetchall()
    )
    assert rows == [(1, "ann2"), (3, "cy"), (5, "eve")]


DEBEZIUM_AVRO = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver.public.customers",
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"]}],
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


def test_debezium_avro_events_apply_through_the_parsed_value(tmp_path: Path) -> None:
    config = iceberg_config(
        tmp_path, topics="cdc", **CDC, **{"iceberg.value.schema.cdc.avro": json.dumps(DEBEZIUM_AVRO)}
    )

    def event(op: str, after: dict[str, Any] | None) -> bytes:
        return avro_bytes(DEBEZIUM_AVRO, {"before": None, "after": after, "op": op, "ts_ms": 5})

    events = [
        (b"1", event("c", {"id": 1, "name": "ann"})),
        (b"2", event("c", {"id": 2, "name": "bob"})),
        (b"1", event("u", {"id": 1, "name": "ann2"})),
        (b"2", event("d", None)),
        (b"3", event("r", {"id": 3, "name": None})),
    ]
    entries = [build_batch([(T0 + i, k, v, [])], base_offset=i) for i, (k, v) in enumerate(events)]
    with RemoteStorageManager() as m:
        m.configure(config)
        copy(m, new_tip("cdc"), write_entries_segment(tmp_path / "s", entries))
    rows = latest_rows(config, "cdc_latest").scan().to_arrow()
    assert sorted((r["id"], r["name"]) for r in rows.to_pylist()) == [(1, "ann2"), (3, None)]
    assert {"id", "name", "_kafka"} == set(rows.column_names)


@pytest.mark.parametrize("encoding", ["json-with-schema", "avro"])
def test_debezium_keyed_by_value_fields_takes_before_for_deletes(tmp_path: Path, encoding: str) -> None:
    """``latest.key=value.id``: creates and updates keyed by ``after``'s id, deletes by ``before``'s (REPLICA
    IDENTITY DEFAULT sends the key columns there); the Kafka key plays no part (here it is null)."""
    keyed = {**CDC, "iceberg.mode.table.cdc.latest.key": "value.id"}
    columns = {"id": "int32", "name": "string"}
    if encoding == "avro":
        keyed["iceberg.value.schema.cdc.avro"] = json.dumps(DEBEZIUM_AVRO)

    def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
        if encoding == "avro":
            return avro_bytes(DEBEZIUM_AVRO, {"before": before, "after": after, "op": op, "ts_ms": 5})
        return _event(op, before, after, columns)

    config = iceberg_config(tmp_path, topics="cdc", **keyed)
    events = [
        event("c", None, {"id": 1, "name": "ann"}),
        event("c", None, {"id": 2, "name": "bob"}),
        event("u", {"id": 1, "name": "ann"}, {"id": 1, "name": "ann2"}),
        event("d", {"id": 2, "name": None}, None),
        event("r", None, {"id": 3, "name": "cy"}),
    ]
    entries = [build_batch([(T0 + i, None, v, [])], base_offset=i) for i, v in enumerate(events)]
    tip = new_tip("cdc")
    with RemoteStorageManager() as m:
        m.configure(config)
        copy(m, tip, write_entries_segment(tmp_path / "s", entries))
        rows = latest_rows(config, "cdc_latest").scan().to_arrow().to_pylist()
        assert sorted((r["id"], r["name"]) for r in rows) == [(1, "ann2"), (3, "cy")]
        # A delete whose before lacks the key (REPLICA IDENTITY NOTHING) fails the copy, naming where and why.
        bad = [build_batch([(T0 + 9, None, event("d", None, None), [])], base_offset=len(events))]
        with pytest.raises(RemoteStorageException, match=r"offset 5 of partition 0 of topic 'cdc'.*REPLICA IDENTITY"):
            copy(m, tip, write_entries_segment(tmp_path / "bad", bad))
    assert sorted((r["id"], r["name"]) for r in latest_rows(config, "cdc_latest").scan().to_arrow().to_pylist()) == [
        (1, "ann2"),
        (3, "cy"),
    ]
