"""A store outage under a real Kafka 4.x broker (``kafka_dist.NEWEST_4X``, assembled from Maven Central).

The plugin reaches SeaweedFS's S3 through the fault proxy. While the "outage" is on, every manifest upload fails
with a 500 (the segment and its indexes do go up first, so each failed copy has a partial upload to clean). The
plugin's S3 retries give up, it deletes what the attempt uploaded and throws ``RetriableRemoteStorageException``;
a 4.3+ broker then neither counts the copy as failed (``RemoteCopyErrorsPerSec`` stays 0) nor deletes the segment
itself, and copies the log segment again on its next task run (``RemoteCopyRequestsPerSec`` counts every attempt).

Two ways out, each must leave the bucket holding exactly what the broker accounts for:

- the outage ends: every closed segment is tiered once, the bucket holds a manifest, a log and an indexes object
  for each and nothing else, and every record reads back from offset 0;
- the topic is deleted while the copies still fail, after a wider outage that failed deletes too (so the plugin's
  own clean-up failed and left partial uploads): the broker's deletion of the partition deletes every segment it
  ever started, the abandoned attempts included, and the topic's prefix in the bucket ends empty.

Slow (a broker and a SeaweedFS): run by ``make test-kafka-4x`` (marker ``kafka_broker``), not ``make test``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import jvm_testing as jt
import kraft_cluster as kc
import pytest
from emulators import StoreServer, s3_keys
from faultproxy import FaultPlan, FaultProxy, object_kind

pytestmark = [pytest.mark.kafka_broker, pytest.mark.timeout(900)]

SEGMENT_BYTES = 1024 * 1024  # the smallest segment.bytes Kafka 4.x accepts
PLUGIN_METRICS = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"
RECORDS = 3600  # ~1.1 KB each: about four closed segments


class Outage:
    """What the proxy breaks while on: manifest uploads (always), deletes (when ``deletes`` is set)."""

    def __init__(self) -> None:
        self.on = False
        self.deletes = False

    def __call__(self, method: str, path: str) -> bool:
        if not self.on:
            return False
        if method == "PUT" and object_kind(path) == "manifest":
            return True
        return self.deletes and (method == "DELETE" or (method == "POST" and "delete" in path))


def wait_for(what: str, predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


@pytest.fixture
def cluster(tmp_path: Path, s3_seaweedfs_server: StoreServer) -> Iterator[tuple[kc.Cluster, FaultProxy, Outage]]:
    import kafka_dist as kd  # assembles the broker (Maven Central) only when a test runs

    jt.ensure_built()
    kafka = kd.kafka_home(kd.NEWEST_4X)
    outage = Outage()
    plan = FaultPlan(rate=1.0, faults=("server-error",), match=outage, record=False)
    upstream = int(s3_seaweedfs_server.endpoint.rsplit(":", 1)[1])
    proxy = FaultProxy(upstream, plan)
    storage = s3_seaweedfs_server.config(
        **{
            "s3.endpoint.url": proxy.url,
            "s3.retry.max.attempts": "2",
            "s3.retry.backoff.ms": "10",
            "s3.retry.backoff.max.ms": "50",
        }
    )
    plugin = kc.shim_plugin_lines(
        {"backend.class": "s3", **storage},
        **{"key.prefix": f"{tmp_path.name}/", "chunk.size": "262144", "compression.enabled": "true"},
    )
    c = kc.make_cluster(kafka, tmp_path / "kafka", 1, plugin)
    try:
        c.start()
        yield c, proxy, outage
    finally:
        c.stop()
        proxy.stop()


def closed_segments(node: kc.Node, topic: str) -> list[int]:
    """Base offsets of the partition's local segments but the active one."""
    logs = sorted(int(p.stem) for p in (node.work / "data" / f"{topic}-0").glob("*.log"))
    return logs[:-1]


def test_retried_copies_are_not_errors_and_leave_nothing_behind(
    cluster: tuple[kc.Cluster, FaultProxy, Outage],
    s3_seaweedfs_client: object,
    s3_seaweedfs_server: StoreServer,
    tmp_path: Path,
) -> None:
    c, proxy, outage = cluster
    node = c.nodes[0]
    bucket = s3_seaweedfs_server.bucket
    prefix = f"{tmp_path.name}/"
    records = [f"r{i:06d}-" + "x" * 1100 for i in range(RECORDS)]
    outage.on = True

    # 1. Outage, then recovery.
    c.create_topic("t", 1, 1, remote_storage_enable="true", segment_bytes=str(SEGMENT_BYTES), local_retention_bytes="1")
    c.produce("t", records)
    closed = closed_segments(node, "t")
    assert len(closed) >= 3, closed

    def attempts(topic: str) -> int:
        return c.broker_topic_meter(node, "RemoteCopyRequestsPerSec", topic)

    def copy_errors(topic: str) -> int:
        return c.broker_topic_meter(node, "RemoteCopyErrorsPerSec", topic)

    wait_for("four attempts at the first segment", lambda: attempts("t") >= 4, 120)
    assert copy_errors("t") == 0
    assert proxy.plan.injected["server-error"] >= 3
    assert proxy.stats.by_kind["PUT log"] >= 3  # each failed attempt had uploaded its segment before the manifest
    # the plugin's own meter counts every failed copy, so the outage a 4.3+ broker keeps quiet about still shows
    plugin_errors = c.jmx_values(node, PLUGIN_METRICS, "segment-copy-errors-total")
    assert plugin_errors.get(PLUGIN_METRICS, 0) >= 3, plugin_errors
    assert closed_segments(node, "t") == closed, "a segment was deleted locally though its copy never finished"
    wait_for(  # the in-flight attempt's partial upload is cleaned too; none of the failed ones left a manifest
        "the failed attempts' objects to go",
        lambda: not [k for k in s3_keys(s3_seaweedfs_client, bucket, prefix) if "/t-" in k],
        60,
    )

    outage.on = False
    wait_for("every closed segment to be tiered and deleted locally", lambda: not closed_segments(node, "t"), 180)
    stored = [k for k in s3_keys(s3_seaweedfs_client, bucket, prefix) if "/t-" in k]
    manifests = [k for k in stored if k.endswith(".rsm-manifest")]
    assert len(manifests) == len(closed), stored
    for m in manifests:  # each tiered segment is exactly its three objects; nothing of a failed attempt is left
        base = m.removesuffix(".rsm-manifest")
        assert {base + ".log", base + ".indexes"} <= set(stored), stored
    assert len(stored) == 3 * len(closed), stored
    assert copy_errors("t") == 0
    assert c.consume_all("t", RECORDS) == records

    # 2. A wider outage (deletes fail too, so failed copies leave partial uploads), then the topic is deleted while
    #    its copies still fail: the broker's deletion of the partition must take the leftovers too.
    outage.on, outage.deletes = True, True
    c.create_topic("u", 1, 1, remote_storage_enable="true", segment_bytes=str(SEGMENT_BYTES), local_retention_bytes="1")
    c.produce("u", records[:2400])
    wait_for("retried copies of u", lambda: attempts("u") >= 3, 120)
    wait_for(
        "a partial upload left by a failed clean-up",
        lambda: any(k.endswith(".log") for k in s3_keys(s3_seaweedfs_client, bucket, prefix) if "/u-" in k),
        60,
    )
    assert copy_errors("u") == 0
    outage.deletes = False  # deletes work again; uploads of manifests still fail
    c.delete_topic("u")
    wait_for(
        "the deleted topic's objects to go",
        lambda: not [k for k in s3_keys(s3_seaweedfs_client, bucket, prefix) if "/u-" in k],
        180,
    )
    assert len([k for k in s3_keys(s3_seaweedfs_client, bucket, prefix) if "/t-" in k]) == 3 * len(closed)
