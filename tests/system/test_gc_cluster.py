"""``kts gc --bootstrap-server`` against real Kafka brokers (the newest 3.x and 4.x, one single-node KRaft broker
each) tiering to SeaweedFS's S3 through the fault proxy, with three kinds of drift made for real:

- a topic deleted while the store refuses deletes (the proxy answers every DELETE with a 500): its segments stay;
- a copy killed midway: the proxy holds one segment's manifest upload, and the broker is SIGKILLed (its sidecar
  with it) while it waits; the restarted broker copies the segment again under a new segment id, and the killed
  attempt's ``.log`` and ``.indexes`` stay, its record at COPY_SEGMENT_STARTED;
- a tiered segment whose three objects are removed by hand.

The dry run lists the first two (by the cluster's record, not by their shape: the deleted topic's segments are
complete) and reports the third as data loss (exit code 3); ``--delete`` removes exactly the first two, and every
other object in the bucket is still there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import jvm_testing as jt
import kafka_dist as kd
import kraft_cluster as kc
import pytest
from emulators import StoreServer, s3_keys
from faultproxy import FaultPlan, FaultProxy, object_kind
from gc_watch import watch_metrics

from rsm.cli.main import main
from rsm.kafka.remote_log_metadata import decode, encode

pytestmark = pytest.mark.timeout(900)

SEGMENT_BYTES = 1024 * 1024  # the smallest segment.bytes Kafka 4.x accepts
TOPIC_CONFIG = {"remote_storage_enable": "true", "segment_bytes": str(SEGMENT_BYTES), "local_retention_bytes": "1"}


class Drift:
    """What the proxy breaks: every delete while ``deletes_fail``; the manifest upload of topic ``killed`` while
    ``hold_killed`` (held, never sent, until the broker is gone)."""

    def __init__(self) -> None:
        self.deletes_fail = False
        self.hold_killed = False
        self.refused_gone = 0
        self.held = 0

    def __call__(self, method: str, path: str) -> str | None:
        if self.deletes_fail and (method == "DELETE" or (method == "POST" and "delete" in path)):
            self.refused_gone += "/gone-" in path
            return "server-error"
        if self.hold_killed and method == "PUT" and object_kind(path) == "manifest" and "/killed-" in path:
            self.held += 1
            return "hold"
        return None


def records(n: int) -> list[bytes]:
    return [f"{i:06d}-".encode() + b"x" * 1100 for i in range(n)]


def wait_for(what: str, predicate: object, timeout: float, node: kc.Node) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert node.alive(), f"the broker exited while waiting for {what}:\n{node.out.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{node.out.read_text()[-3000:]}"
        time.sleep(0.5)


@pytest.fixture(params=[kd.NEWEST_3X, kd.NEWEST_4X])
def cluster(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_seaweedfs_server: StoreServer,
) -> Iterator[tuple[kc.Cluster, Drift]]:
    jt.ensure_built()
    kafka = kd.kafka_home(request.param)
    drift = Drift()
    upstream = int(s3_seaweedfs_server.endpoint.rsplit(":", 1)[1])
    proxy = FaultProxy(upstream, FaultPlan(rate=1.0, pick=drift, stall_s=600))
    storage = s3_seaweedfs_server.config(
        **{"s3.endpoint.url": proxy.url, "s3.retry.max.attempts": "2", "s3.retry.backoff.ms": "10"}
    )
    plugin = kc.shim_plugin_lines(
        {"backend.class": "s3", **storage}, **{"key.prefix": f"{tmp_path.name}/", "chunk.size": "262144"}
    )
    c = kc.make_cluster(kafka, tmp_path / "kafka", 1, plugin)
    c.java_home = str(kd.DEFAULT_JAVA_HOME)
    c.rlm_log_level = "INFO"
    try:
        c.start()
        yield c, drift
    finally:
        c.stop()
        proxy.stop()


def keys(client: object, bucket: str, prefix: str) -> set[str]:
    return set(s3_keys(client, bucket, prefix))


def local_segments(node: kc.Node, topic: str) -> int:
    return len(list((node.work / "data" / f"{topic}-0").glob("*.log")))


def test_gc_reconciles_the_store_with_the_cluster(
    cluster: tuple[kc.Cluster, Drift],
    s3_seaweedfs_client: object,
    s3_seaweedfs_server: StoreServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    c, drift = cluster
    node = c.nodes[0]
    bucket, prefix = s3_seaweedfs_server.bucket, f"{tmp_path.name}/"

    def objects(topic: str) -> set[str]:
        return {k for k in keys(s3_seaweedfs_client, bucket, prefix) if k.startswith(f"{prefix}{topic}-")}

    def tiered(topic: str, n: int) -> bool:
        return len([k for k in objects(topic) if k.endswith(".rsm-manifest")]) >= n and local_segments(node, topic) == 1

    for topic in ("keep", "gone", "killed"):
        c.create_topic(topic, 1, 1, **TOPIC_CONFIG)
    drift.hold_killed = True
    kd.produce(c.bootstrap, "keep", records(2600))  # two closed segments
    kd.produce(c.bootstrap, "gone", records(1300))
    kd.produce(c.bootstrap, "killed", records(1300))
    wait_for("keep and gone to be tiered", lambda: tiered("keep", 2) and tiered("gone", 1), 300, node)
    wait_for("the killed copy's manifest upload to be held", lambda: drift.held > 0, 300, node)

    # 1. A topic deleted while the store refuses deletes.
    drift.deletes_fail = True
    gone = objects("gone")
    c.delete_topic("gone")
    wait_for("the broker to try deleting gone's segments", lambda: drift.refused_gone > 0, 120, node)
    time.sleep(2)  # its retry, refused too
    # 2. The copy of killed's first segment is killed midway: its .log and .indexes are up, its manifest held.
    c.kill(node)
    killed_attempt = objects("killed")
    assert killed_attempt and not [k for k in killed_attempt if k.endswith(".rsm-manifest")], killed_attempt
    drift.hold_killed = False
    c.start_node(node)
    c.wait_started(node)
    wait_for("killed to be tiered by the restarted broker", lambda: tiered("killed", 1), 300, node)
    assert objects("gone") == gone, "the store refused deletes, yet gone's objects went"
    # 3. A tiered segment's objects removed by hand.
    lost_manifest = sorted(k for k in objects("keep") if k.endswith(".rsm-manifest"))[0]
    lost = {lost_manifest.removesuffix(".rsm-manifest") + s for s in (".rsm-manifest", ".log", ".indexes")}
    s3_seaweedfs_client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in lost]})  # type: ignore[attr-defined]
    time.sleep(3)  # past the grace period below
    before = keys(s3_seaweedfs_client, bucket, prefix)

    # Every record the broker wrote to __remote_log_metadata decodes, and encodes back to the same bytes.
    values = metadata_values(c.bootstrap)
    assert len(values) >= 8, len(values)
    for value in values:
        assert encode(decode(value)) == value, value

    config = str(node.work / "server.properties")
    gc = ["gc", "--config", config, "--bootstrap-server", c.bootstrap, "--older-than", "2s"]
    capsys.readouterr()
    code = main(gc)
    out, err = capsys.readouterr()
    assert code == 3, out + err  # data loss
    assert "dry run" in out
    assert "dead-topic-segment" in out and "unfinished-copy" in out
    assert "suspected, not confirmed: topic gone" in out, out
    lost_id = lost_manifest.removesuffix(".rsm-manifest").rsplit("/", 1)[1].split("-", 1)[1]
    assert f"DATA LOSS keep-0 segment {lost_id} offsets 0.." in err, err
    assert all(k in err for k in lost if not k.endswith(".log")), err  # the .log is asked for beside a manifest
    assert keys(s3_seaweedfs_client, bucket, prefix) == before  # a dry run touches nothing
    # The scheduled check sees the same, as metrics.
    metrics = watch_metrics(config, c.bootstrap)
    assert metrics["kts_gc_cluster_lost_segments"] == 1, metrics
    # the first check's one Metadata read does not confirm the topic gone (Kafka writes no partition delete
    # marker on a topic deletion): suspected until a later check confirms it
    assert metrics['kts_gc_cluster_suspected_segments{kind="dead-topic-segment"}'] >= 1, metrics
    assert metrics['kts_gc_cluster_garbage_segments{kind="dead-topic-segment"}'] == 0, metrics
    assert metrics["kts_gc_cluster_record_complete"] == 1, metrics
    assert metrics['kts_gc_cluster_garbage_segments{kind="unfinished-copy"}'] == 1, metrics
    # keep's two and killed's second copy; gone's delete was refused, so it stays at DELETE_SEGMENT_STARTED
    assert metrics['kts_gc_cluster_segments{state="COPY_SEGMENT_FINISHED"}'] == 3, metrics
    assert metrics['kts_gc_cluster_segments{state="DELETE_SEGMENT_STARTED"}'] == 1, metrics
    assert metrics['kts_gc_cluster_segments{state="COPY_SEGMENT_STARTED"}'] == 1, metrics
    # a later check, a second or more after the first, confirms it (one broker: there is no other to ask)
    dead = 'kts_gc_cluster_garbage_segments{kind="dead-topic-segment"}'
    confirmed = watch_metrics(config, c.bootstrap, rounds=4, confirm_after=1.0, until=lambda m: m.get(dead, 0) >= 1)
    assert confirmed['kts_gc_cluster_garbage_bytes{kind="dead-topic-segment"}'] > 0, confirmed
    assert confirmed['kts_gc_cluster_suspected_segments{kind="dead-topic-segment"}'] == 0, confirmed
    assert keys(s3_seaweedfs_client, bucket, prefix) == before  # nor does the watch

    drift.deletes_fail = False
    code = main([*gc, "--delete", "--confirm-after", "2s"])
    out, err = capsys.readouterr()
    assert code == 3, out + err  # still lost: kts gc never touches it
    assert "Waiting 2 s (--confirm-after)" in out, out  # gone is confirmed by a second read, then removed
    assert "failed 0" in out, out + err
    listed = keys(s3_seaweedfs_client, bucket, prefix)
    held = {k for k in listed if k.startswith(f"{prefix}kts-quarantine/")}
    after = listed - held
    assert after == before - gone - killed_attempt, (sorted(before - after), sorted(after - before))
    # what went is in the quarantine, under its key below the prefix
    moved = {prefix + k.split("/", 3)[3] for k in held if not k.endswith(".kts-held.json")}
    assert moved == gone | killed_attempt, sorted(moved ^ (gone | killed_attempt))
    assert not objects("gone")
    assert lost_id in err


def metadata_values(bootstrap: str) -> list[bytes]:
    """Every value of ``__remote_log_metadata``, read with kafka-python."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [
            TopicPartition("__remote_log_metadata", p) for p in consumer.partitions_for_topic("__remote_log_metadata")
        ]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            out += [m.value for batch in consumer.poll(timeout_ms=1000).values() for m in batch]
        return out
    finally:
        consumer.close()
