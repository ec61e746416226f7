"""Iceberg mode in a real Kafka broker (Kafka ``NEWEST_4X`` from Maven Central, Java 17): one topic tiered as
rows of an Iceberg table next to a classic topic on the same broker, on the filesystem and on S3 (SeaweedFS).

A single-node KRaft broker with the shim as its RemoteStorageManager and ``iceberg.mode.topics.regex`` matching
one of two topics (a SQLite catalog) takes the same records into both topics through kafka-python: keys, null
keys and values, headers, explicit timestamps, and transactions (committed and aborted, with plain records
written in between), in 1 MiB segments. Once every closed segment is tiered and deleted locally, both topics are
read from offset 0 with read_uncommitted and read_committed: every record (offset, timestamp, key, value,
headers) must be what was produced, aborted ones only where read_uncommitted, and the Iceberg topic must read
exactly as the classic one (and, in one cell, again after Spark's table maintenance). The table is then read
with pyiceberg (its FileIO on the same store): one row per
record of the tiered segments, no offset twice, the control markers flagged, and the records of the aborted
transactions flagged where the segment holding the records also holds the ABORT marker.

A further test tiers two topics whose Avro and Protobuf values (through a schema registry) change schema
version mid-stream: consumers and SQL (pyiceberg, DuckDB) read every record.

On the filesystem the in-process transport runs the test as above and the sidecar runs it with table
maintenance (which does all of the above first); the S3 cell runs the sidecar; about a minute each. On the
filesystem the classic topic also gets tests/system/test_real_broker.py's checks (the plugin's MBeans, deleting the
topic empties the store of it), which that test runs on the newest 3.x only.
``KTS_ICEBERG_BROKER_KAFKA`` picks another Kafka release.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jvm_testing as jt
import kafka_dist as kd
import pyarrow.compute as pc
import pytest
from emulators import StoreServer, fresh_store, serving, start_seaweedfs
from iceberg_testing import age_ledger, spark_maintain

from rsm.core.object_keys import parse_object_key

VERSION = os.environ.get("KTS_ICEBERG_BROKER_KAFKA", kd.NEWEST_4X)
ICE = "ice-orders"
CLASSIC = "orders"
SEGMENT_BYTES = 1024 * 1024  # Kafka 4 refuses smaller segments
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "segment.bytes": str(SEGMENT_BYTES),
    "local.retention.bytes": "1",
    "retention.ms": "-1",  # the records' timestamps are fixed, in the past
}
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z; every record's CreateTime is set, in steps of 7 ms


class Sent(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    aborted: bool


def _record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """Record ``i``'s key, value and headers: null keys, null values (tombstones; kafka-python refuses both null),
    no, one or two headers."""
    key = None if i % 7 == 0 else f"key-{i % 53}".encode()
    value = f"value-{i:06d}-".encode() + bytes([97 + i % 26]) * (i * 37 % 900)
    if i % 11 == 0 and key is not None:
        value = None
    headers: list[tuple[str, bytes | None]] = []
    if i % 3 == 0:
        headers.append(("trace", f"t{i}".encode()))
    if i % 5 == 0:
        headers.append(("empty", b""))
    return key, value, headers


def _produce(bootstrap: str) -> list[Sent]:
    """The same records into both topics, in this order: plain records, then for every round a transaction that
    is committed or aborted, with plain records written while it is open. Flushes between the phases make the
    offsets the same in both topics. Returns what went into the Iceberg topic, by offset."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = {"bootstrap_servers": bootstrap, "acks": "all", "linger_ms": 5, "batch_size": 64 * 1024}
    plain = KafkaProducer(**common)
    txn = KafkaProducer(transactional_id="kts-iceberg-test", enable_idempotence=True, **common)
    watcher = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    partitions = [TopicPartition(t, 0) for t in (ICE, CLASSIC)]
    sent: list[Sent] = []
    i = 0

    def marker_written() -> None:
        """The coordinator writes markers after the commit or abort returns: wait for both (one offset each)."""
        end = sent[-1].offset + 2
        deadline = time.monotonic() + 60
        while set(watcher.end_offsets(partitions).values()) != {end}:
            assert time.monotonic() < deadline, f"no transaction marker at offset {end - 1}"
            time.sleep(0.05)

    def send(producer: Any, count: int, aborted: bool) -> None:
        nonlocal i
        futures = []
        for _ in range(count):
            key, value, headers = _record(i)
            ts = BASE_TS + 7 * i
            pair = [
                producer.send(t, key=key, value=value, headers=headers, partition=0, timestamp_ms=ts)
                for t in (ICE, CLASSIC)
            ]
            futures.append((pair, Sent(-1, ts, key, value, tuple(headers), aborted)))
            i += 1
        producer.flush(timeout=120)
        for (ice, classic), s in futures:
            offset = ice.get(timeout=60).offset
            assert classic.get(timeout=60).offset == offset, "the two topics got different offsets"
            sent.append(s._replace(offset=offset))

    try:
        txn.init_transactions()
        send(plain, 400, False)
        for round_ in range(90):
            aborted = round_ % 3 == 1
            txn.begin_transaction()
            send(txn, 20 + round_ % 9, aborted)
            send(plain, 15, False)  # plain records between a transaction's records and its marker
            send(txn, 10, aborted)
            if aborted:
                txn.abort_transaction()
            else:
                txn.commit_transaction()
            marker_written()
            send(plain, 30, False)
    finally:
        txn.close(timeout=30)
        plain.close(timeout=30)
        watcher.close()
    return sorted(sent)


def _consume(bootstrap: str, topic: str, isolation: str, timeout: float = 180) -> list[Sent]:
    """Every record of partition 0 from offset 0 to the end, with ``isolation``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        isolation_level=isolation,
        max_partition_fetch_bytes=256 * 1024,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    end = consumer.end_offsets([tp])[tp]
    out: list[Sent] = []
    deadline = time.monotonic() + timeout
    try:
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"{topic} ({isolation}): only {len(out)} records, at {out[-1:]}"
            for records in consumer.poll(timeout_ms=1000).values():
                for r in records:
                    assert r.timestamp_type == 0, r  # CreateTime
                    headers = tuple((k, v) for k, v in r.headers)
                    out.append(Sent(r.offset, r.timestamp, r.key, r.value, headers, False))
    finally:
        consumer.close()
    return out


class Store(NamedTuple):
    """The plugin's store as the test sees it: its ``rsm.config.*`` keys and a way to list and read objects."""

    plugin: dict[str, str]
    list_keys: Callable[[], list[str]]
    read: Callable[[str], bytes]
    io: dict[str, str]  # pyiceberg FileIO properties for the table's files


def _filesystem(tmp: Path) -> Store:
    root = tmp / "remote"

    def keys() -> list[str]:
        return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()] if root.exists() else []

    return Store(
        {"storage.backend.class": "filesystem", "storage.root": str(root)},
        keys,
        lambda k: (root / k).read_bytes(),
        {},
    )


def _s3(server: StoreServer, bucket: str) -> Store:
    from rsm.cli.emulators import _s3_client

    config = fresh_store(server, bucket)
    client = _s3_client(server.endpoint)

    def keys() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    plugin = {"storage.backend.class": "s3", **{f"storage.{k}": str(v) for k, v in config.items()}}
    io = {
        "s3.endpoint": server.endpoint,
        "s3.access-key-id": str(config["aws.access.key.id"]),
        "s3.secret-access-key": str(config["aws.secret.access.key"]),
        "s3.region": str(config.get("s3.region", "us-east-1")),
    }
    return Store(plugin, keys, lambda k: client.get_object(Bucket=bucket, Key=k)["Body"].read(), io)


# The broker's own maintainer, made to work within the test: a pass every 2 s, pairs of small files compacted,
# 3 snapshots kept. Orphans: the grace cannot go under an hour, so the broker's one orphan pass (at its first)
# moves none; `kts iceberg maintain` moves them into the quarantine below, once the test has aged the table's
# ledger of unreferenced files.
BROKER_MAINTENANCE = {
    "iceberg.mode.maintenance.interval.ms": "2000",
    "iceberg.mode.maintenance.compaction.min.files": "2",
    "iceberg.mode.maintenance.snapshot.min.keep": "1",
    "iceberg.mode.maintenance.snapshot.max.keep": "3",
}


def _plugin_lines(store: Store, tmp: Path, transport: str, **extra_keys: str) -> str:
    """The shim on ``store`` with Iceberg mode for ``ICE`` only (kafka_dist's lines, with the backend swapped)."""
    base = kd.plugin_properties(tmp / "unused", transport)
    lines = [line for line in base.splitlines() if not line.startswith("rsm.config.storage.")]
    extra = {
        **store.plugin,
        "iceberg.mode.topics.regex": ICE,
        "iceberg.mode.catalog.sqlite.path": str(tmp / "catalog.db"),
        **extra_keys,
    }
    return "\n".join(lines + [f"rsm.config.{k}={v}" for k, v in extra.items()]) + "\n"


def _objects(store: Store, topic: str, suffix: str) -> list[str]:
    """The plugin's objects of ``topic`` with ``suffix`` (``log``, ``indexes``, ``rsm-manifest``)."""
    out = []
    for key in store.list_keys():
        p = parse_object_key(key, "")
        if p is not None and p.topic == topic and p.suffix.value == suffix:
            out.append(key)
    return out


def _manifests(store: Store, topic: str) -> list[dict[str, Any]]:
    return [json.loads(store.read(k)) for k in _objects(store, topic, "rsm-manifest")]


def _check_table(store: Store, tmp: Path, sent: list[Sent], sections: list[dict[str, Any]]) -> None:
    """The Iceberg table through pyiceberg: the tiered segments' records, each once, with the right flags."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("kafka_tiered", uri=f"sqlite:///{tmp / 'catalog.db'}", **store.io)
    rows = catalog.load_table(("kafka", ICE.replace("-", "_"))).scan().to_arrow()
    kafka = rows.column("kafka")
    offsets = pc.struct_field(kafka, "offset").to_pylist()
    control = pc.struct_field(kafka, "is_control").to_pylist()
    aborted = pc.struct_field(kafka, "aborted").to_pylist()
    assert len(offsets) == len(set(offsets)), "an offset is in the table more than once"
    tiered = {o for s in sections for o in range(s["firstOffset"], s["lastOffset"] + 1)}
    assert set(offsets) == tiered, "the table's offsets are not those of the tiered segments"
    by_offset = {s.offset: s for s in sent}
    records = {o for o, c in zip(offsets, control, strict=True) if not c}
    markers = {o for o, c in zip(offsets, control, strict=True) if c}
    assert records == {o for o in tiered if o in by_offset}, "a record row is missing, or a marker is not flagged"
    assert markers == tiered - set(by_offset), "a control marker is missing"
    assert markers, "no transaction marker landed in a tiered segment"
    flagged = {o for o, a in zip(offsets, aborted, strict=True) if a}
    assert flagged <= {o for o in records if by_offset[o].aborted}, "a committed or plain record is flagged aborted"
    # A transaction is flagged in the segment holding its ABORT marker (as Kafka's transaction index is).
    must = set()
    for s in sections:
        seg = range(s["firstOffset"], s["lastOffset"] + 1)
        last_marker = max((o for o in markers if o in seg), default=-1)  # transactions run one after another
        must |= {o for o in seg if o in by_offset and by_offset[o].aborted and o < last_marker}
    assert must, "no aborted transaction lies wholly in a tiered segment"
    assert must <= flagged, f"aborted records not flagged: {sorted(must - flagged)[:20]}"
    row_of = {o: i for i, o in enumerate(offsets)}
    keys = rows.column("key_raw").to_pylist()
    values = rows.column("value_raw").to_pylist()
    headers = rows.column("headers").to_pylist()
    for o in sorted(records):
        r, s = row_of[o], by_offset[o]
        assert (keys[r], values[r]) == (s.key, s.value), f"row of offset {o}"
        assert [(h["key"], h["value"]) for h in headers[r] or ()] == list(s.headers), f"headers of offset {o}"


def _produce_plain(bootstrap: str, first: int, count: int) -> list[Sent]:
    """Records ``first`` to ``first + count - 1`` (as :func:`_record`), plain, into both topics."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024)
    futures = []
    try:
        for i in range(first, first + count):
            key, value, headers = _record(i)
            ts = BASE_TS + 7 * i
            pair = [
                producer.send(t, key=key, value=value, headers=headers, partition=0, timestamp_ms=ts)
                for t in (ICE, CLASSIC)
            ]
            futures.append((pair, Sent(-1, ts, key, value, tuple(headers), False)))
        producer.flush(timeout=120)
        out = []
        for (ice, classic), s in futures:
            offset = ice.get(timeout=60).offset
            assert classic.get(timeout=60).offset == offset, "the two topics got different offsets"
            out.append(s._replace(offset=offset))
    finally:
        producer.close(timeout=30)
    return out


def _load_table(store: Store, tmp: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("kafka_tiered", uri=f"sqlite:///{tmp / 'catalog.db'}", **store.io)
    return catalog.load_table(("kafka", ICE.replace("-", "_")))


def _compacted_files(table: Any, sections: list[dict[str, Any]]) -> list[str]:
    """The table's live data files whose offsets span more than one of ``sections`` (every tiered segment): no
    copy wrote those."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    field = table.schema().find_field("kafka.offset").field_id
    out = []
    for task in table.scan().plan_files():
        f = task.file
        lo = from_bytes(LongType(), f.lower_bounds[field])
        hi = from_bytes(LongType(), f.upper_bounds[field])
        if not any(s["firstOffset"] <= lo and hi <= s["lastOffset"] for s in sections):
            out.append(f.file_path)
    return out


def _settle(b: kd.Broker, store: Store, tmp: Path) -> None:
    """Wait until both topics' closed segments are tiered and the broker's maintainer has nothing left to
    compact (so the next step does not race its compaction)."""
    from rsm.iceberg.config import IcebergConfig
    from rsm.iceberg.maintenance import plan_compaction

    settings = IcebergConfig.from_map(BROKER_MAINTENANCE).maintenance
    for topic in (ICE, CLASSIC):
        local = b.data / f"{topic}-0"
        kd.wait_while_running(
            lambda local=local: kd.tiered_locally(local), 300, f"{topic}'s closed segments are tiered", b
        )  # type: ignore[misc]
    deadline = time.monotonic() + 120
    while plan := plan_compaction(_load_table(store, tmp), settings):
        if time.monotonic() > deadline:
            said = [line for line in b.log().splitlines() if "aintenance" in line or "compaction" in line]
            raise AssertionError(f"the broker's maintainer left {[x.describe() for x in plan]}: {said[-20:]}")
        time.sleep(1)


def _kts_maintain(b: kd.Broker, *sets: str) -> dict[str, int]:
    """``kts iceberg maintain`` with the broker's server.properties (and ``--set`` keys), as an operator runs
    it beside the broker: what it printed, as {step: count}."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "rsm.cli.main", "iceberg", "maintain", "--config", str(b.work / "server.properties")]
    for kv in sets:
        cmd += ["--set", kv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, f"kts iceberg maintain failed ({r.returncode}): {r.stdout}{r.stderr}"
    counts = {}
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line)]  # rich's table, box drawn or in ASCII
        if len(cells) > 4 and cells[2] in ("expire-snapshots", "compaction", "rewrite-manifests", "remove-orphans"):
            counts[cells[2]] = int(cells[3])
    assert "remove-orphans" in counts or "compaction" in counts, f"kts printed no steps: {r.stdout}"
    return counts


def _plugin_maintenance(b: kd.Broker, store: Store, tmp: Path, sent: list[Sent]) -> list[Sent]:
    """After Spark's procedures: more records, which the broker's maintainer compacts as they are tiered; then
    `kts iceberg maintain` beside it expires snapshots and moves the files the compactions replaced into the
    quarantine (unreferenced past the grace period, which cannot be set under an hour: the test ages the table's
    ledger). Returns the records produced."""
    after_spark = {t.file.file_path for t in _load_table(store, tmp).scan().plan_files()}
    more = _produce_plain(b.bootstrap, len(sent), 6000)
    _settle(b, store, tmp)
    table = _load_table(store, tmp)
    compacted = set(_compacted_files(table, [m["iceberg"] for m in _manifests(store, ICE)])) - after_spark
    assert compacted, "the broker's maintainer compacted none of the files tiered after Spark"

    before = len(table.metadata.snapshots)
    assert before >= 2, table.metadata.snapshots
    counts = _kts_maintain(
        b, "iceberg.mode.maintenance.snapshot.max.keep=1", "iceberg.mode.maintenance.snapshot.min.keep=1"
    )
    assert counts["expire-snapshots"] >= 1, counts
    table = _load_table(store, tmp)
    assert len(table.metadata.snapshots) < before, (before, table.metadata.snapshots)

    # The files only expired snapshots referenced (the compactions' inputs). Table
    # versions still in the metadata log keep their files (a reader may hold one): commits push them out, as a
    # broker's later copies would.
    from pyiceberg.exceptions import CommitFailedException

    from rsm.iceberg.maintenance import referenced_files
    from rsm.iceberg.tables import METADATA_PROPERTIES

    for tick in range(int(METADATA_PROPERTIES["write.metadata.previous-versions-max"]) + 1):
        for _attempt in range(20):  # the broker's maintainer commits too (its lease, renewed and released)
            try:
                with table.transaction() as txn:
                    txn.set_properties({"kts.test.tick": str(tick)})
                break
            except CommitFailedException:
                table = _load_table(store, tmp)
        else:
            raise AssertionError(f"tick {tick} lost 20 commits in a row to the broker's maintainer")
        table = _load_table(store, tmp)
    live = referenced_files(table)
    data = Path(table.location().removeprefix("file:")) / "data"
    aged = [p for p in data.rglob("*.parquet") if f"file://{os.path.normpath(p)}" not in live]
    assert aged, "no data file was left unreferenced by the compactions and the expiry"
    # The first run only records when it first saw them unreferenced; once the grace (at least a day for data
    # files) has passed since, the next run moves them (and the metadata files past the log) into the quarantine.
    counts = _kts_maintain(b, "iceberg.mode.maintenance.orphan.grace.ms=3600000")
    assert counts["remove-orphans"] == 0 and all(p.exists() for p in aged), counts
    assert age_ledger(Path(table.location().removeprefix("file:")), 2 * 86400) >= len(aged)
    counts = _kts_maintain(b, "iceberg.mode.maintenance.orphan.grace.ms=3600000")
    assert counts["remove-orphans"] >= len(aged), (counts, aged)
    assert not any(p.exists() for p in aged)
    return more


# The plugin's MBeans (tests/system/test_real_broker.py reads the same on the newest 3.x).
RSM = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"
CHUNK_CACHE = "aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics"


def _check_classic_beans(b: kd.Broker, store: Store) -> None:
    """The classic topic's uploads and fetches as the plugin's MBeans count them, read over JMX."""
    beans = kd.jmx_read(b, "aiven.kafka.server.tieredstorage*:*")

    def number(bean: str, attribute: str) -> float:
        assert bean in beans, f"no bean {bean} among {sorted(beans)}"
        return float(beans[bean][attribute])

    segments = len(_objects(store, CLASSIC, "rsm-manifest"))
    assert number(f"{RSM},topic={CLASSIC},partition=0,object-type=log", "object-upload-total") == segments
    assert number(f"{RSM},topic={CLASSIC},partition=0,object-type=rsm-manifest", "object-upload-total") == segments
    assert number(f"{RSM},topic={CLASSIC}", "segment-fetch-requested-bytes-total") > 0
    assert number(RSM, "segment-fetch-total") >= 1
    assert CHUNK_CACHE in beans


def _delete_classic(b: kd.Broker, store: Store) -> None:
    """Deleting the classic topic empties the store of its objects."""

    def classic_keys() -> list[str]:
        return [k for k in store.list_keys() if (p := parse_object_key(k, "")) is not None and p.topic == CLASSIC]

    assert classic_keys()
    kd.delete_topic(b, CLASSIC)
    kd.wait_while_running(lambda: not classic_keys(), 180, "the deleted topic's objects are gone from the store", b)


def _run(tmp: Path, store: Store, transport: str, maintain: bool = False, kafka_checks: bool = False) -> None:
    """``kafka_checks``: the checks of tests/system/test_real_broker.py on the classic topic (the plugin's MBeans
    over JMX, the topic's deletion emptying the store of it), which that test runs on the newest 3.x only.
    ``maintain``: the broker's maintainer runs often (``BROKER_MAINTENANCE``) and must have compacted and
    expired while it tiered; then Spark's rewrite_data_files, expire_snapshots and remove_orphan_files run on
    the table (the broker still up, its fetches planned on the table before) and a consumer reads it all again;
    then more records are tiered (and compacted by the broker), `kts iceberg maintain` expires snapshots and
    removes orphan files beside the broker, more records again, and a consumer reads everything from offset 0."""
    jt.ensure_built()
    plugin = _plugin_lines(store, tmp, transport, **(BROKER_MAINTENANCE if maintain else {}))
    with kd.running_broker(VERSION, tmp / "broker", plugin, transport=transport) as b:
        for topic in (ICE, CLASSIC):
            kd.create_topic(b, topic, TOPIC_CONFIG)
        sent = _produce(b.bootstrap)
        for topic in (ICE, CLASSIC):
            local = b.data / f"{topic}-0"
            kd.wait_while_running(
                lambda local=local: kd.tiered_locally(local), 300, f"{topic}'s closed segments are tiered", b
            )  # type: ignore[misc]
        active_from = int(next(iter((b.data / f"{ICE}-0").glob("*.log"))).stem)
        assert active_from > sent[-1].offset // 2, active_from  # most records are now only in remote storage

        got = {
            (topic, isolation): _consume(b.bootstrap, topic, isolation)
            for topic in (ICE, CLASSIC)
            for isolation in ("read_uncommitted", "read_committed")
        }
        everything = [s._replace(aborted=False) for s in sent]
        committed = [s._replace(aborted=False) for s in sent if not s.aborted]
        for isolation, expected in (("read_uncommitted", everything), ("read_committed", committed)):
            records = got[(ICE, isolation)]
            assert [r.offset for r in records] == [e.offset for e in expected], isolation
            for r, e in zip(records, expected, strict=True):
                assert r == e, f"{ICE} ({isolation}): offset {e.offset} came back as {r}, produced {e}"
            assert records == got[(CLASSIC, isolation)], f"{isolation}: the Iceberg topic reads unlike the classic"

        ice = _manifests(store, ICE)
        classic = _manifests(store, CLASSIC)
        assert ice and classic, (len(ice), len(classic))
        assert all(m.get("iceberg") for m in ice), "a segment of the Iceberg topic was tiered classic"
        assert not any(m.get("iceberg") for m in classic), "a segment of the classic topic was tiered as rows"
        assert not _objects(store, ICE, "log") and _objects(store, CLASSIC, "log")
        sections = [m["iceberg"] for m in ice]
        assert max(s["lastOffset"] for s in sections) == active_from - 1
        _check_table(store, tmp, sent, sections)
        if kafka_checks:
            _check_classic_beans(b, store)
        if maintain:
            _settle(b, store, tmp)
            table = _load_table(store, tmp)
            assert _compacted_files(table, sections), "the broker's maintainer compacted no file while it tiered"
            # The first copy's snapshot is gone: expired.
            first = min(sections, key=lambda s: s["firstOffset"])
            kept = [s.summary.additional_properties if s.summary else {} for s in table.metadata.snapshots]
            assert len(kept) <= 3, kept
            assert f"{first['firstOffset']}-{first['lastOffset']}" not in {k.get("kafka.offsets") for k in kept}, kept
            warehouse = (tmp / "remote" / "iceberg").as_uri()
            out = spark_maintain(str(tmp / "catalog.db"), warehouse, f"kafka_tiered.{sections[0]['table']}")
            assert out["rewrite"]["rewritten_data_files_count"] > 0, out
            assert out["expire"]["deleted_data_files_count"] + out["orphans"] > 0, out
            for isolation, expected in (("read_uncommitted", everything), ("read_committed", committed)):
                again = _consume(b.bootstrap, ICE, isolation)
                assert again == got[(ICE, isolation)], f"{isolation}: the Iceberg topic reads otherwise after Spark"
                assert [r.offset for r in again] == [e.offset for e in expected], isolation
            _check_table(store, tmp, sent, sections)

            sent += _plugin_maintenance(b, store, tmp, sent)
            sent += _produce_plain(b.bootstrap, len(sent), 2000)
            _settle(b, store, tmp)
            everything = [s._replace(aborted=False) for s in sent]
            committed = [s._replace(aborted=False) for s in sent if not s.aborted]
            for isolation, expected in (("read_uncommitted", everything), ("read_committed", committed)):
                records = _consume(b.bootstrap, ICE, isolation)
                assert [r.offset for r in records] == [e.offset for e in expected], isolation
                for r, e in zip(records, expected, strict=True):
                    assert r == e, f"{ICE} ({isolation}) after maintenance: offset {e.offset} came back as {r}"
                assert records == _consume(b.bootstrap, CLASSIC, isolation), isolation
            _check_table(store, tmp, sent, [m["iceberg"] for m in _manifests(store, ICE)])
            beans = kd.jmx_read(b, "aiven.kafka.server.tieredstorage:type=iceberg-maintenance-metrics")
            metrics = {k: float(v) for bean in beans.values() for k, v in bean.items()}
            for name in ("passes-total", "files-compacted-total", "snapshots-expired-total"):
                assert metrics.get(name, 0) > 0, metrics
        if kafka_checks:
            _delete_classic(b, store)
        log = b.log()
    configured = "in-process" if transport == "inprocess" else transport
    assert f"kafka-tiered-storage RemoteStorageManager configured ({configured} transport)" in log
    if transport == "sidecar":  # Java 17: the shim reaches its sidecar over a Unix domain socket, not TCP
        assert "(TCP, token)" not in log


@pytest.mark.timeout(900)  # the first run assembles the broker from Maven Central
@pytest.mark.parametrize("transport", ["inprocess"])  # the sidecar's cell is the Spark maintenance test's start
def test_iceberg_topic_next_to_classic_on_the_filesystem(transport: str, tmp_path: Path) -> None:
    _run(tmp_path, _filesystem(tmp_path), transport, kafka_checks=True)


@pytest.mark.timeout(2400)  # and a JVM with Iceberg's Spark runtime
def test_iceberg_topic_reads_the_same_after_spark_maintenance(tmp_path: Path) -> None:
    """The broker's own maintainer (compacting and expiring as it tiers), Spark's rewrite_data_files (every file,
    sorted by partition and offset), expire_snapshots and remove_orphan_files (older than now), more records,
    `kts iceberg maintain` beside the broker, more records: a consumer reads the Iceberg topic from offset 0 as
    produced and as the classic topic, from data files the copies never wrote."""
    _run(tmp_path, _filesystem(tmp_path), "sidecar", maintain=True, kafka_checks=True)


@pytest.fixture
def seaweedfs_checking_signatures(tmp_path: Path) -> Iterator[StoreServer]:
    """SeaweedFS that knows the test key pair: pyarrow's S3 uploads (pyiceberg's FileIO) are chunk-signed, which
    a SeaweedFS without credentials refuses."""
    with serving("s3-seaweedfs", lambda d: start_seaweedfs(d, credentials=True), tmp_path / "seaweedfs") as server:
        yield server


@pytest.mark.timeout(900)
def test_iceberg_topic_next_to_classic_on_s3(seaweedfs_checking_signatures: StoreServer, tmp_path: Path) -> None:
    _run(tmp_path, _s3(seaweedfs_checking_signatures, "ice-broker"), "sidecar")


# ---------------------------------------------------------------------------- schemas that change mid-stream

EVO_AVRO, EVO_PB = "ice-evo-avro", "ice-evo-pb"
_AVRO_V1 = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}, {"name": "pad", "type": "string"}],
}
_AVRO_V2 = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "pad", "type": "string"},
        {"name": "score", "type": ["null", "double"], "default": None},
    ],
}
_PB_V1 = 'syntax = "proto3";\npackage kts.rb;\nmessage Reading { int32 id = 1; string name = 2; string pad = 3; }\n'
_PB_V2 = (
    'syntax = "proto3";\npackage kts.rb;\n'
    "message Reading { int64 id = 1; string name = 2; string pad = 3; optional double score = 4; }\n"
)


def _evolving_values(registry_url: str) -> dict[str, list[tuple[bytes, dict[str, Any]]]]:
    """Per topic, each record's value (wire format) and the parsed value expected: the first half written with
    version 1 of the topic's schema, the rest with version 2 (registered in between: as a producer would)."""
    from google.protobuf import message_factory
    from iceberg_testing import avro_bytes
    from schema_registry import register

    from rsm.iceberg.values import wire_value
    from rsm.iceberg.values.protobuf import compile_proto

    n, half = 2400, 1200
    out: dict[str, list[tuple[bytes, dict[str, Any]]]] = {EVO_AVRO: [], EVO_PB: []}

    def datum(i: int, v2: bool) -> dict[str, Any]:
        d: dict[str, Any] = {"id": i + (2**40 if v2 else 0), "name": f"r{i}", "pad": "x" * (1500 + i % 300)}
        if v2:
            d["score"] = None if i % 4 == 0 else i / 8
        return d

    pb = {
        v: message_factory.GetMessageClass(
            compile_proto("r.proto", {"r.proto": t}).pool.FindMessageTypeByName("kts.rb.Reading")
        )
        for v, t in (("v1", _PB_V1), ("v2", _PB_V2))
    }
    ids = {
        EVO_AVRO: register(registry_url, f"{EVO_AVRO}-value", json.dumps(_AVRO_V1)),
        EVO_PB: register(registry_url, f"{EVO_PB}-value", _PB_V1, "PROTOBUF"),
    }
    for i in range(n):
        if i == half:
            ids[EVO_AVRO] = register(registry_url, f"{EVO_AVRO}-value", json.dumps(_AVRO_V2))
            ids[EVO_PB] = register(registry_url, f"{EVO_PB}-value", _PB_V2, "PROTOBUF")
        v2 = i >= half
        d = datum(i, v2)
        expected = {**d, "score": d.get("score")}
        avro = avro_bytes(_AVRO_V2 if v2 else _AVRO_V1, d)
        out[EVO_AVRO].append((wire_value(ids[EVO_AVRO], avro), expected))
        msg = pb["v2" if v2 else "v1"](**{k: x for k, x in d.items() if x is not None})
        out[EVO_PB].append((wire_value(ids[EVO_PB], msg.SerializeToString(), [0]), expected))
    return out


@pytest.mark.timeout(900)
def test_iceberg_topics_whose_avro_and_protobuf_schemas_change_mid_stream(tmp_path: Path) -> None:
    """Two Iceberg topics whose values (Avro, Protobuf, through a schema registry) switch to a new schema version
    half-way (a field added, int widened to long): consumers read every record back byte for byte, and SQL
    (DuckDB's iceberg extension, pyiceberg) reads every tiered record with its parsed value."""
    from kafka import KafkaProducer
    from pyiceberg.catalog.sql import SqlCatalog
    from schema_registry import fake_registry

    from rsm.iceberg.duckdb_reader import duckdb_with_iceberg

    jt.ensure_built()
    store = _filesystem(tmp_path)
    with fake_registry() as registry:
        plugin = _plugin_lines(store, tmp_path, "sidecar").replace(
            f"rsm.config.iceberg.mode.topics.regex={ICE}", "rsm.config.iceberg.mode.topics.regex=ice-evo-.*"
        )
        plugin += f"rsm.config.iceberg.value.schema.registry.url={registry.url}\n"
        values = _evolving_values(registry.url)
        with kd.running_broker(VERSION, tmp_path / "broker", plugin, transport="sidecar") as b:
            for topic in values:
                kd.create_topic(b, topic, TOPIC_CONFIG)
            producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=5)
            for topic, rows in values.items():
                for i, (raw, _) in enumerate(rows):
                    producer.send(topic, key=b"k%d" % i, value=raw, partition=0, timestamp_ms=BASE_TS + i)
            producer.flush()
            producer.close()
            for topic in values:
                local = b.data / f"{topic}-0"
                kd.wait_while_running(
                    lambda local=local: kd.tiered_locally(local), 300, f"{topic}'s closed segments are tiered", b
                )  # type: ignore[misc]
            for topic, rows in values.items():
                got = _consume(b.bootstrap, topic, "read_uncommitted")
                assert [(r.offset, r.value) for r in got] == [(i, raw) for i, (raw, _) in enumerate(rows)], topic
                sections = [m["iceberg"] for m in _manifests(store, topic)]
                assert sections and all(sections), f"{topic}: a segment was not tiered as rows"
                tiered = {o for s in sections for o in range(s["firstOffset"], s["lastOffset"] + 1)}
                assert max(tiered) >= len(rows) // 2, f"{topic}: no version-2 record was tiered"

                catalog = SqlCatalog("kafka_tiered", uri=f"sqlite:///{tmp_path / 'catalog.db'}", **store.io)
                assert {s["table"] for s in sections} == {f"kafka.{topic.replace('-', '_')}"}
                table = catalog.load_table(sections[0]["table"])
                assert [f.name for f in table.schema().find_field("value").field_type.fields] == [
                    "id",
                    "name",
                    "pad",
                    "score",
                ]
                scanned = table.scan().to_arrow().to_pylist()
                by_offset = {r["kafka"]["offset"]: r for r in scanned}
                assert set(by_offset) == tiered, topic
                for o in sorted(tiered):
                    assert by_offset[o]["value_raw"] == rows[o][0], f"{topic} offset {o}"
                    assert by_offset[o]["value"] == rows[o][1], f"{topic} offset {o}"
                count, parsed, ids, v2 = (
                    duckdb_with_iceberg()
                    .execute(
                        "SELECT count(*), count(value), sum(value.id), count(value.score) FROM iceberg_scan(?)",
                        [table.metadata_location],
                    )
                    .fetchone()
                )
                assert (count, parsed) == (len(tiered), len(tiered)), topic
                assert ids == sum(rows[o][1]["id"] for o in tiered), topic
                assert v2 == sum(1 for o in tiered if rows[o][1]["score"] is not None), topic
