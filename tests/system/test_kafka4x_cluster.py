"""Three real Kafka 4.x brokers (``kafka_dist.NEWEST_4X``, KRaft, each node broker and controller) sharing one
SeaweedFS bucket through the plugin: a tiered topic with replication factor 3 takes numbered records in small
segments; half-way the leader of its partition is killed (SIGKILL, its sidecar with it); the rest goes to the new
leader, which tiers its own segments; then every record is read back from offset 0, from remote storage through
whichever broker leads, and must come back exactly, in order, once each.

Slow (three brokers, three sidecars and a SeaweedFS on two cores): run by ``make test-kafka-matrix`` (marker
``kafka_broker``), not ``make test``.
"""

from __future__ import annotations

import time
from pathlib import Path

import jvm_testing as jt
import kraft_cluster as kc
import pytest
from emulators import StoreServer, s3_client, s3_keys

pytestmark = [pytest.mark.kafka_broker, pytest.mark.timeout(1500)]

SEGMENT_BYTES = 1024 * 1024
RECORDS = 8000  # ~0.37 KB each on average: three segments, two closed (one tiered by each leader), the rest active


def tiered_keys(server: StoreServer, prefix: str) -> list[str]:
    return s3_keys(s3_client(server), server.bucket, prefix)


def local_logs(node: kc.Node, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (node.work / "data" / f"{topic}-0").glob("*.log"))


def wait_for(what: str, predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def test_leader_killed_mid_way_every_record_reads_back(
    tmp_path: Path,
    s3_seaweedfs_server: StoreServer,
) -> None:
    import kafka_dist as kd  # assembles the broker (Maven Central) only when a test runs

    jt.ensure_built()
    kafka = kd.kafka_home(kd.NEWEST_4X)
    prefix = f"{tmp_path.name}/"
    plugin = kc.shim_plugin_lines(
        {"backend.class": "s3", **s3_seaweedfs_server.config()},
        **{"key.prefix": prefix, "chunk.size": "262144", "compression.enabled": "true"},
    )
    # min.insync.replicas=2 with acks=all: every acknowledged record is on two brokers when one is killed
    cluster = kc.make_cluster(kafka, tmp_path / "kafka", 3, plugin, "min.insync.replicas=2\n")
    records = [f"r{i:06d}-" + "y" * (i % 700) for i in range(RECORDS)]
    half = RECORDS // 2
    try:
        cluster.start()
        cluster.create_topic(
            "t", 1, 3, remote_storage_enable="true", segment_bytes=str(SEGMENT_BYTES), local_retention_bytes="1"
        )
        cluster.produce("t", records[:half])
        first = cluster.leader("t")
        wait_for(  # the first leader tiered something before it dies
            "the first leader to tier a segment",
            lambda: any(k.endswith(".rsm-manifest") for k in tiered_keys(s3_seaweedfs_server, prefix)),
            180,
        )
        cluster.kill(first)
        wait_for("a new leader", lambda: cluster.leader("t").node_id != first.node_id, 120)
        second = cluster.leader("t")
        cluster.produce("t", records[half:])
        wait_for(  # the new leader tiered its closed segments and deleted them locally
            "the new leader to tier every closed segment",
            lambda: len(local_logs(second, "t")) == 1 and local_logs(second, "t")[0] > half,
            300,
        )
        manifests = [k for k in tiered_keys(s3_seaweedfs_server, prefix) if k.endswith(".rsm-manifest")]
        assert len(manifests) >= 2, manifests
        for leader in (first, second):  # both leaders tiered segments of their own into the one bucket
            assert b"Copied " in leader.out.read_bytes(), f"broker {leader.node_id} tiered nothing"
        got = cluster.consume_all("t", RECORDS)
        assert len(got) == RECORDS, f"{len(got)} of {RECORDS} records read back"
        assert got == records
    finally:
        cluster.stop()
