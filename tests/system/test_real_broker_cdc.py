"""Change events end to end: a real Kafka 4.x broker (``connect_dist.DEBEZIUM_KAFKA``, the release Debezium 3.6
runs on, from Maven Central) tiers, as rows of Iceberg tables, a keyed topic written by a producer and a topic
written by Debezium's PostgreSQL connector; Spark and DuckDB read each topic's current state per key equal to
its source.

The broker runs the shim with Iceberg mode for both topics and tiers fast: segments roll on time (``segment.ms``,
15 s) or, once a topic is quiet, when its newest record is older than ``local.retention.ms`` (20 s: Kafka's
retention check rolls the active segment), and the remote log manager runs every second. Both topics carry JSON
values parsed by a JSON Schema into the table's ``value`` column.

- The keyed topic takes updates of the same keys, tombstones, a committed and an aborted transaction, in two
  segments. Its model is the produced records: the newest committed record per key, a tombstone deleting it.
- The Debezium topic is written by a standalone Kafka Connect worker of the broker's own Kafka release, running
  Debezium's PostgreSQL connector (``pgoutput`` logical decoding on Debian's PostgreSQL with
  ``wal_level=logical``) over a table that gets a snapshot (``r``), inserts (``c``), updates (``u``), deletes
  (``d`` and a tombstone) and a primary-key change, in two segments. Its model is the database's table.

Once every record of both topics is tiered, the log tables hold every record (each change event's envelope
with ``op``, ``before`` and ``after``), and a latest-per-key query over each log table (the newest row per key
that is neither a control marker nor aborted; a tombstone or ``op = 'd'`` deletes) gives, in Spark and in
DuckDB, exactly the model's rows. So do the topics' latest-per-key tables, which the copies keep
(``iceberg.mode.table.<id>.latest.enabled``; the Debezium topic's with ``latest.format=debezium``, its rows the
columns of ``after``). About four minutes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import connect_dist as cd
import jvm_testing as jt
import kafka_dist as kd
import pytest
from iceberg_testing import SPARK_SESSION, run_iceberg_spark, spark_jdbc_catalog
from pg_testing import PostgresServer

from rsm.iceberg.duckdb_reader import duckdb_with_iceberg

VERSION = os.environ.get("KTS_CDC_BROKER_KAFKA", cd.DEBEZIUM_KAFKA)
KEYED = "ice-keyed"
CDC = "dbz.public.items"
SEGMENT_MS = 15_000
LOCAL_RETENTION_MS = 20_000
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "segment.ms": str(SEGMENT_MS),
    # A quiet partition's active segment rolls once its newest record is older than this (Kafka's retention
    # check rolls it to make it deletable), so every record ends up tiered.
    "local.retention.ms": str(LOCAL_RETENTION_MS),
    "retention.ms": "-1",
}
KEYED_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "v": {"type": "string"}}}
_ROW = {"id": {"type": "integer"}, "name": {"type": "string"}, "qty": {"type": "integer"}}
ENVELOPE_SCHEMA = {
    "type": "object",
    "properties": {
        "before": {"type": ["object", "null"], "properties": _ROW},
        "after": {"type": ["object", "null"], "properties": _ROW},
        "op": {"type": "string"},
        "ts_ms": {"type": "integer"},
    },
}


class Sent(NamedTuple):
    offset: int
    key: bytes
    value: bytes | None
    aborted: bool


@pytest.fixture(scope="module")
def logical_postgres() -> Iterator[PostgresServer]:
    """Debian's PostgreSQL with logical decoding (``wal_level=logical``) and room for a replication slot."""
    server = PostgresServer({"wal_level": "logical", "max_replication_slots": "4", "max_wal_senders": "4"}).start()
    try:
        yield server
    finally:
        server.stop()


def _plugin_lines(tmp: Path) -> str:
    base = kd.plugin_properties(tmp / "remote", "sidecar")
    extra = {
        "iceberg.mode.topics.regex": f"{KEYED}|dbz[.]public[.]items",
        "iceberg.mode.catalog.sqlite.path": str(tmp / "catalog.db"),
        "iceberg.value.schema.keyed.topic": KEYED,
        "iceberg.value.schema.keyed.json": json.dumps(KEYED_SCHEMA),
        "iceberg.value.schema.cdc.topic": CDC,
        "iceberg.value.schema.cdc.json": json.dumps(ENVELOPE_SCHEMA),
        # Each topic's latest-per-key table: the records as they are, and Debezium's events applied.
        "iceberg.mode.table.keyed.topic": KEYED,
        "iceberg.mode.table.keyed.latest.enabled": "true",
        "iceberg.mode.table.cdc.topic": CDC,
        "iceberg.mode.table.cdc.latest.enabled": "true",
        "iceberg.mode.table.cdc.latest.format": "debezium",
    }
    return base + "".join(f"rsm.config.{k}={v}\n" for k, v in extra.items())


def _end_offset(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def _wait_end(b: kd.Broker, topic: str, at_least: int, timeout: float = 120) -> int:
    kd.wait_while_running(lambda: _end_offset(b.bootstrap, topic) >= at_least, timeout, f"{topic} has {at_least}", b)
    return _end_offset(b.bootstrap, topic)


def _all_tiered(local: Path, end: int) -> bool:
    """Every record of the partition folder ``local`` (up to offset ``end``) tiered and deleted locally: only an
    empty active segment starting at ``end`` is left."""
    logs = list(local.glob("*.log"))
    return len(logs) == 1 and int(logs[0].stem) == end and not list(local.glob("*.deleted"))


# ------------------------------------------------------------------------------------------------ keyed topic


def _keyed_value(n: int) -> bytes:
    return json.dumps({"n": n, "v": f"v{n}"}).encode()


def _produce_keyed(b: kd.Broker) -> list[Sent]:
    """Two segments of records over 12 keys: updates, tombstones, a committed and an aborted transaction (with
    plain records written while it is open); the second segment updates and deletes keys of the first."""
    from kafka import KafkaProducer

    common: dict[str, Any] = {"bootstrap_servers": b.bootstrap, "acks": "all", "linger_ms": 2}
    plain = KafkaProducer(**common)
    txn = KafkaProducer(transactional_id="kts-cdc-keyed", enable_idempotence=True, **common)
    sent: list[Sent] = []
    n = 0

    def send(producer: Any, keys: list[int], aborted: bool = False, tombstone: bool = False) -> None:
        nonlocal n
        futures = []
        for k in keys:
            value = None if tombstone else _keyed_value(n)
            n += 1
            key = f"k{k:02d}".encode()
            futures.append((producer.send(KEYED, key=key, value=value, partition=0), key, value))
        producer.flush(timeout=60)
        sent.extend(Sent(f.get(timeout=60).offset, key, value, aborted) for f, key, value in futures)

    try:
        txn.init_transactions()
        send(plain, list(range(12)))
        send(plain, [1, 2, 3, 1, 1])
        send(plain, [4, 5], tombstone=True)
        txn.begin_transaction()
        send(txn, [6, 7, 4], aborted=True)  # aborted: k06 and k07 keep their values, k04 stays deleted
        send(plain, [8])
        send(txn, [9], aborted=True, tombstone=True)
        txn.abort_transaction()
        send(plain, [10, 5])  # k05 comes back after its tombstone
        _wait_end(b, KEYED, len(sent) + 1)  # and the ABORT marker
        time.sleep(SEGMENT_MS / 1000 + 2)  # the next record rolls the segment

        txn.begin_transaction()
        send(txn, [0, 11])
        send(txn, [2], tombstone=True)
        txn.commit_transaction()
        send(plain, [3, 3, 12])
        send(plain, [10], tombstone=True)
        _wait_end(b, KEYED, len(sent) + 2)  # and the COMMIT marker
        time.sleep(SEGMENT_MS / 1000 + 2)
    finally:
        txn.close(timeout=30)
        plain.close(timeout=30)
    return sent


def _keyed_model(sent: list[Sent]) -> dict[str, dict[str, Any]]:
    """{key: parsed value} of the newest committed record per key, tombstoned keys left out."""
    latest: dict[bytes, Sent] = {}
    for s in sorted(sent):
        if not s.aborted:
            latest[s.key] = s
    return {k.decode(): json.loads(s.value) for k, s in latest.items() if s.value is not None}


# ------------------------------------------------------------------------------------------------ Debezium


class Db:
    """The captured table through psycopg2, counting the change events each statement makes Debezium write."""

    def __init__(self, server: PostgresServer) -> None:
        import psycopg2

        self.conn = psycopg2.connect(host="127.0.0.1", port=server.port, user="postgres", dbname="postgres")
        self.conn.autocommit = True
        self.ops: list[str | None] = []

    @property
    def events(self) -> int:
        return len(self.ops)

    def run(self, sql: str, *args: Any, ops: str = "") -> None:
        """Runs ``sql``; ``ops`` are the events Debezium writes for it, in order (``t`` a tombstone)."""
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
        self.ops += [None if op == "t" else op for op in ops]

    def rows(self) -> dict[str, dict[str, Any]]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT id, name, qty FROM public.items")
            return _db_rows(cur.fetchall())


def _db_rows(rows: Any) -> dict[str, dict[str, Any]]:
    """{key JSON as Debezium writes it: row} of (id, name, qty) tuples; a key twice is an error."""
    out = {json.dumps({"id": i}): {"id": i, "name": nm, "qty": q} for i, nm, q in rows}
    assert len(out) == len(rows), "a key has two rows"
    return out


def _change_rows(db: Db, phase: int) -> None:
    """Inserts, updates, deletes (each a ``d`` event and a tombstone) and a primary-key change (``d``, tombstone,
    ``c``); phase 2 also deletes and inserts an id again."""
    base = 100 * phase
    for i in range(base, base + 15):
        db.run("INSERT INTO public.items VALUES (%s, %s, %s)", i, f"new-{i}", i, ops="c")
    for i in range(1, 8):
        db.run("UPDATE public.items SET qty = qty + %s, name = %s WHERE id = %s", phase, f"upd{phase}-{i}", i, ops="u")
    db.run("UPDATE public.items SET qty = 0 WHERE id = %s", base + 3, ops="u")
    for i in (base + 5, 10 + phase):
        db.run("DELETE FROM public.items WHERE id = %s", i, ops="dt")
    db.run("UPDATE public.items SET id = %s WHERE id = %s", 500 + phase, 20 + phase, ops="dtc")
    if phase == 2:
        db.run("DELETE FROM public.items WHERE id = 3", ops="dt")
        db.run("INSERT INTO public.items VALUES (3, 'again', 33)", ops="c")
        db.run("DELETE FROM public.items WHERE id = %s", 100 + 7, ops="dt")


# ------------------------------------------------------------------------------------------------ reading


def _latest_sql(table: str, struct_access: str) -> str:
    """The newest row per key that is neither a control marker nor aborted; a tombstone or ``op = 'd'``
    deletes the key (``struct_access`` is how the engine names ``value.op``: DuckDB and Spark differ)."""
    return f"""
    SELECT key_raw, value FROM (
        SELECT key_raw, value_raw, value,
               row_number() OVER (PARTITION BY key_raw ORDER BY kafka.offset DESC) AS newest
        FROM {table}
        WHERE NOT kafka.is_control AND NOT coalesce(kafka.aborted, false)
    ) AS t
    WHERE newest = 1 AND value_raw IS NOT NULL AND coalesce({struct_access}, '') <> 'd'
    """


SPARK_LATEST = (
    SPARK_SESSION
    + """
def plain(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode()
    return v.asDict(recursive=True) if hasattr(v, "asDict") else v
out = {}
for name, sql in json.loads(sys.argv[3]).items():
    out[name] = [{c: plain(v) for c, v in r.asDict().items()} for r in spark.sql(sql).collect()]
print(json.dumps(out))
spark.stop()
"""
)


def _duckdb_latest(metadata_location: str, op: str) -> dict[str, dict[str, Any]]:
    con = duckdb_with_iceberg()
    con.execute(f"CREATE VIEW t AS SELECT * FROM iceberg_scan('{metadata_location}')")
    rows = con.execute(_latest_sql("t", op)).fetchall()
    return {bytes(k).decode(): v for k, v in rows}


def _cdc_state(latest: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{key JSON: row} from the newest envelope per key: its ``after``."""
    out = {}
    for key, value in latest.items():
        assert value["op"] in ("r", "c", "u"), (key, value)
        out[json.dumps(json.loads(key))] = dict(value["after"])
    return out


@pytest.mark.timeout(1200)
def test_keyed_and_debezium_topics_tier_to_tables_equal_to_their_sources(
    logical_postgres: PostgresServer, tmp_path: Path
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    jt.ensure_built()
    db = Db(logical_postgres)
    db.run("CREATE TABLE public.items (id integer PRIMARY KEY, name text NOT NULL, qty integer)")
    db.run("ALTER TABLE public.items REPLICA IDENTITY FULL")  # `before` holds the whole row
    for i in range(1, 31):
        db.run("INSERT INTO public.items VALUES (%s, %s, %s)", i, f"item-{i}", 10 * i)
    db.ops += ["r"] * 30  # the connector's snapshot

    with kd.running_broker(VERSION, tmp_path / "broker", _plugin_lines(tmp_path)) as b:
        for topic in (KEYED, CDC):
            kd.create_topic(b, topic, TOPIC_CONFIG)
        connector = cd.postgres_connector(("127.0.0.1", logical_postgres.port), "dbz", "public.items", "kts_items")
        with cd.running_connect(b, tmp_path / "connect", {"items": connector}) as worker:
            worker.wait_running("items")
            _wait_end(b, CDC, db.events)
            sent = _produce_keyed(b)  # two segments, about 20 s
            _change_rows(db, 1)
            _wait_end(b, CDC, db.events)
            time.sleep(SEGMENT_MS / 1000 + 2)
            _change_rows(db, 2)
            _wait_end(b, CDC, db.events)
            expected_cdc = db.rows()
            cdc_ops = list(db.ops)
            assert _end_offset(b.bootstrap, CDC) == db.events, "Debezium wrote other events than the statements'"
            for topic in (KEYED, CDC):
                local, end = b.data / f"{topic}-0", _end_offset(b.bootstrap, topic)
                kd.wait_while_running(
                    lambda local=local, end=end: _all_tiered(local, end), 300, f"all of {topic} is tiered", b
                )  # type: ignore[misc]

        catalog = SqlCatalog("kafka_tiered", uri=f"sqlite:///{tmp_path / 'catalog.db'}")
        keyed = catalog.load_table(("kafka", "ice_keyed"))
        cdc = catalog.load_table(("kafka", "dbz_public_items"))

        # The log tables hold every record of the tiered segments: the keyed records as produced, the
        # envelopes with Debezium's operations.
        keyed_rows = {r["kafka"]["offset"]: r for r in keyed.scan().to_arrow().to_pylist()}
        by_offset = {s.offset: s for s in sent}
        records = {o: r for o, r in keyed_rows.items() if not r["kafka"]["is_control"]}
        assert set(records) == set(by_offset), "the keyed table does not hold exactly the produced records"
        assert len(keyed_rows) - len(records) == 2, "not both transaction markers are rows"
        for o, s in by_offset.items():
            assert (records[o]["key_raw"], records[o]["value_raw"]) == (s.key, s.value), o
            assert bool(records[o]["kafka"]["aborted"]) == s.aborted, f"offset {o}: aborted flag"
        cdc_rows = sorted(cdc.scan().to_arrow().to_pylist(), key=lambda r: r["kafka"]["offset"])
        assert [r["kafka"]["offset"] for r in cdc_rows] == list(range(len(cdc_ops))), "a change event is missing"
        assert [r["value"]["op"] if r["value"] else None for r in cdc_rows] == cdc_ops
        for rows in (keyed_rows.values(), cdc_rows):
            assert len({r["kafka"]["segment_id"] for r in rows}) >= 2, "the rows came from fewer than two segments"
        for r in cdc_rows:
            if r["value"] and r["value"]["op"] == "u":
                assert r["value"]["before"]["id"] == r["value"]["after"]["id"], r  # REPLICA IDENTITY FULL

        expected_keyed = _keyed_model(sent)
        tables = {"keyed": keyed, "cdc": cdc}
        duck = {n: _duckdb_latest(t.metadata_location, "value.op" if n == "cdc" else "NULL") for n, t in tables.items()}
        assert {k: dict(v) for k, v in duck["keyed"].items()} == expected_keyed
        assert _cdc_state(duck["cdc"]) == expected_cdc

        # The latest-per-key tables the copies kept hold the same.
        keyed_latest = catalog.load_table(("kafka", "ice_keyed_latest")).metadata_location
        cdc_latest = catalog.load_table(("kafka", "dbz_public_items_latest")).metadata_location
        con = duckdb_with_iceberg()
        rows = con.execute("SELECT key_raw, value FROM iceberg_scan(?)", [keyed_latest]).fetchall()
        assert {bytes(k).decode(): dict(v) for k, v in rows} == expected_keyed
        rows = con.execute("SELECT id, name, qty FROM iceberg_scan(?)", [cdc_latest]).fetchall()
        assert _db_rows(rows) == expected_cdc

        settings = spark_jdbc_catalog(
            f"jdbc:sqlite:{tmp_path / 'catalog.db'}", (tmp_path / "remote" / "iceberg").as_uri()
        )
        queries = {
            "keyed": _latest_sql("kafka_tiered.kafka.ice_keyed", "CAST(NULL AS STRING)"),
            "cdc": _latest_sql("kafka_tiered.kafka.dbz_public_items", "value.op"),
            "keyed_latest": "SELECT key_raw, value FROM kafka_tiered.kafka.ice_keyed_latest",
            "cdc_latest": "SELECT id, name, qty FROM kafka_tiered.kafka.dbz_public_items_latest",
        }
        spark = json.loads(
            run_iceberg_spark(SPARK_LATEST, json.dumps(settings), json.dumps(queries)).strip().splitlines()[-1]
        )
        assert {r["key_raw"]: r["value"] for r in spark["keyed"]} == expected_keyed
        assert _cdc_state({r["key_raw"]: r["value"] for r in spark["cdc"]}) == expected_cdc
        assert {r["key_raw"]: r["value"] for r in spark["keyed_latest"]} == expected_keyed
        assert _db_rows([(r["id"], r["name"], r["qty"]) for r in spark["cdc_latest"]]) == expected_cdc
