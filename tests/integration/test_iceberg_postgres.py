"""A cluster of brokers on one PostgreSQL catalog: two plugins ("brokers") tier segments of different
partitions of one topic into the same table at the same time; every commit lands (retried on conflict) and each
offset is in the table exactly once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from iceberg_testing import (
    SPARK_SQL,
    iceberg_config,
    load_table,
    order_records,
    run_iceberg_spark,
    segment_of,
    spark_jdbc_catalog,
    sql_summary,
    tier,
)
from pg_testing import PostgresServer

from rsm import RemoteStorageManager
from rsm.kafka.segment_files import SegmentFiles
from rsm.metadata import TopicIdPartition, random_kafka_uuid


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def test_two_brokers_commit_to_one_table_concurrently(postgres: PostgresServer, tmp_path: Path) -> None:
    topic_id = random_kafka_uuid()
    warehouse = tmp_path / "warehouse"
    configs = []
    for broker in (0, 1):
        cfg = iceberg_config(tmp_path / f"broker{broker}", **{"iceberg.mode.catalog.uri": postgres.url})
        cfg["iceberg.mode.warehouse"] = f"file://{warehouse}"  # one warehouse, as a shared object store would be
        cfg["iceberg.mode.commit.retries"] = "50"
        configs.append(cfg)
    per_segment, segments_per_broker = 40, 4
    work: list[list[tuple[TopicIdPartition, SegmentFiles]]] = [[], []]
    for broker in (0, 1):
        tip = TopicIdPartition(topic_id, "orders", broker)  # each broker leads one partition
        for s in range(segments_per_broker):
            recs = order_records(s * per_segment, per_segment)
            work[broker].append((tip, segment_of(tmp_path / f"b{broker}s{s}", recs)))

    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def broker(i: int) -> None:
        try:
            with RemoteStorageManager() as m:
                m.configure(configs[i])
                start.wait(60)
                for tip, files in work[i]:
                    m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=broker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    table = load_table(configs[0])
    kafka = table.scan(selected_fields=("kafka",)).to_arrow().column("kafka").combine_chunks()
    seen = Counter(zip(kafka.field("partition").to_pylist(), kafka.field("offset").to_pylist(), strict=True))
    want = {(p, o) for p in (0, 1) for o in range(per_segment * segments_per_broker)}
    assert set(seen) == want
    assert max(seen.values()) == 1  # no duplicate rows
    # One snapshot per segment (eight appends committed, none lost to a conflict).
    appended = [s for s in table.snapshots() if s.summary and s.summary.get("kafka.segment.id")]
    assert len({s.summary["kafka.segment.id"] for s in appended}) == 2 * segments_per_broker


def test_a_retried_copy_replaces_its_rows(postgres: PostgresServer, tmp_path: Path) -> None:
    """A segment copied again (a retried upload, a new leader) leaves its offsets once, not twice."""
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.catalog.uri": postgres.url, "iceberg.mode.namespace": "retry"})
    tip = TopicIdPartition(random_kafka_uuid(), "orders", 0)
    files = segment_of(tmp_path / "s", order_records(0, 50))
    with RemoteStorageManager() as m:
        m.configure(cfg)
        m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
        again = files.to_metadata(tip)  # a new segment id for the same offsets
        m.copy_log_segment_data(again, files.to_log_segment_data())
    offsets = load_table(cfg).scan(selected_fields=("kafka",)).to_arrow().column("kafka").combine_chunks()
    assert sorted(offsets.field("offset").to_pylist()) == list(range(50))


@pytest.mark.timeout(1200)  # a JVM start and Iceberg's runtime
def test_spark_reads_the_table_through_iceberg_jdbc_catalog_on_postgres(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """docs/iceberg.md's Spark example for a cluster: Iceberg's JDBC catalog on the brokers' PostgreSQL."""
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.catalog.uri": postgres.url, "iceberg.mode.namespace": "spark"})
    recs = order_records(0, 70)
    tier(cfg, TopicIdPartition(random_kafka_uuid(), "orders", 0), [segment_of(tmp_path / "s", recs)])
    jdbc_url = f"jdbc:postgresql://127.0.0.1:{postgres.port}/postgres"
    settings = spark_jdbc_catalog(jdbc_url, cfg["iceberg.mode.warehouse"], user="postgres")
    out = run_iceberg_spark(SPARK_SQL, json.dumps(settings), "kafka_tiered.spark.orders")
    assert json.loads(out.splitlines()[-1]) == sql_summary(recs)
