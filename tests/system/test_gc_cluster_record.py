"""``kts gc --bootstrap-server`` judges nothing on a partial word, against a real Kafka 4.x broker (one KRaft node)
tiering to the filesystem store:

- a segment that retention deletes between the record's read and the store's listing is not reported lost (the
  record is read again after the listing);
- a topic id the cluster does not list, without a partition delete marker (records written here, as a broker
  whose topic vanished without one would have left them, with objects in the store), is "suspected, not
  confirmed" in a dry run, which waits for nothing; ``--delete`` waits ``--confirm-after``, reads again, and only
  then removes it;
- once retention (here a records delete) has removed the beginning of ``__remote_log_metadata``, the record is
  read but incomplete: ``--delete`` keeps even a marked dead topic's segment, naming the missing signal;
- a log start that moves past the read while it reads is an error naming the partition and its offsets, never a
  read that ends "complete" with records missing;
- with two brokers, successive Metadata reads ask different ones.

The first four share one broker and run in this order (the third and fourth move the metadata topic's log start for
good); the last starts two brokers of its own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jvm_testing as jt
import kafka_dist as kd
import kraft_cluster as kc
import pytest

from rsm.cli.gc_cluster import check
from rsm.cli.main import main
from rsm.cli.settings import open_manager
from rsm.core.object_keys import segment_keys
from rsm.kafka.remote_log_metadata import (
    PartitionDeleteRecord,
    RemotePartitionDeleteState,
    SegmentRecord,
    SegmentUpdateRecord,
    encode,
)
from rsm.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    random_kafka_uuid,
)
from rsm.operator_tools.client_settings import client_settings
from rsm.operator_tools.cluster_record import (
    METADATA_TOPIC,
    ClusterReadError,
    TopicAbsence,
    read_record,
    read_topics,
)
from rsm.operator_tools.reconcile import segments_from_records

pytestmark = pytest.mark.timeout(900)

SEGMENT_BYTES = 1024 * 1024  # the smallest segment.bytes Kafka 4.x accepts
TIERED = {"remote_storage_enable": "true", "segment_bytes": str(SEGMENT_BYTES), "local_retention_bytes": "1"}
S = RemoteLogSegmentState


@dataclass
class Broker:
    cluster: kc.Cluster
    config: str
    store: Path

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def manifests(self, topic: str) -> list[Path]:
        return sorted(self.store.rglob(f"{topic}-*/**/*.rsm-manifest"))


def wait_for(what: str, predicate: object, timeout: float, broker: Broker) -> None:
    node = broker.cluster.nodes[0]
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert node.alive(), f"the broker exited while waiting for {what}:\n{node.out.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{node.out.read_text()[-3000:]}"
        time.sleep(0.5)


def records(n: int) -> list[bytes]:
    return [f"{i:06d}-".encode() + b"x" * 1100 for i in range(n)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    jt.ensure_built()
    work = tmp_path_factory.mktemp("record")
    store = work / "store"
    plugin = kc.shim_plugin_lines({"backend.class": "filesystem", "root": str(store)}, **{"chunk.size": "262144"})
    c = kc.make_cluster(kd.kafka_home(kd.NEWEST_4X), work / "kafka", 1, plugin)
    c.java_home = str(kd.DEFAULT_JAVA_HOME)
    c.rlm_log_level = "INFO"
    try:
        c.start()
        b = Broker(c, str(c.nodes[0].work / "server.properties"), store)
        for topic in ("kept", "retained"):
            c.create_topic(topic, 1, 1, **TIERED)
            kd.produce(c.bootstrap, topic, records(2600))  # two closed segments, tiered
        wait_for("kept and retained to be tiered", lambda: all(len(b.manifests(t)) >= 2 for t in ("kept", "retained")),
                 300, b)  # fmt: skip
        yield b
    finally:
        c.stop()


def settings(broker: Broker) -> dict[str, object]:
    return client_settings(broker.bootstrap, {})


def gc(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    capsys.readouterr()
    started = time.monotonic()
    code = main(argv)
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    return code, out, err, took


def alter_topic(broker: Broker, topic: str, **configs: str) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], incremental=True)
    finally:
        admin.close()


def delete_records(broker: Broker, partition: int, before: int) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_records({TopicPartition(METADATA_TOPIC, partition): before})
    finally:
        admin.close()


def ghost(broker: Broker, name: str, *, marked: bool) -> tuple[RemoteLogSegmentMetadata, list[Path]]:
    """A finished segment of a topic id the cluster never had, in the record (partition 0 of the metadata topic)
    and in the store (a copy of one of ``kept``'s segments, dated two hours ago); with ``marked``, the record also
    holds its partition's delete marker."""
    tip = TopicIdPartition(random_kafka_uuid(), name, 0)
    long_ago = int(time.time() * 1000) - 2 * 3_600_000
    meta = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_kafka_uuid()), 0, 99, long_ago, 1, long_ago, 4096)
    out = [
        SegmentRecord(meta),
        SegmentUpdateRecord(meta.remote_log_segment_id, 1, long_ago, S.COPY_SEGMENT_FINISHED),
    ]
    if marked:
        out.append(PartitionDeleteRecord(tip, 1, long_ago, RemotePartitionDeleteState.DELETE_PARTITION_MARKED))
    kd.produce(broker.bootstrap, METADATA_TOPIC, [encode(r) for r in out])  # type: ignore[arg-type]
    source = broker.manifests("kept")[0]
    keys = segment_keys("", meta)
    paths = []
    for key, suffix in ((keys.manifest, ".rsm-manifest"), (keys.log, ".log"), (keys.indexes, ".indexes")):
        target = broker.store / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(str(source).removesuffix(".rsm-manifest") + suffix, target)
        os.utime(target, (long_ago / 1000, long_ago / 1000))
        paths.append(target)
    return meta, paths


def test_a_segment_retention_deletes_during_the_check_is_not_lost(broker: Broker) -> None:
    first = broker.manifests("retained")
    deleted: list[str] = []

    def retention_now() -> None:
        """Between the record's read and the store's listing: retention takes retained's tiered segments."""
        alter_topic(broker, "retained", **{"retention.ms": "1000"})
        wait_for("retention to delete retained's first segment", lambda: not first[0].exists(), 120, broker)

        def recorded() -> bool:
            states = segments_from_records(read_record(settings(broker)).records)
            gone = [s for s in states.values() if s.metadata.topic_id_partition.topic == "retained"
                    and s.state == S.DELETE_SEGMENT_FINISHED]  # fmt: skip
            deleted[:] = [s.metadata.remote_log_segment_id.id for s in gone]
            return bool(gone)

        wait_for("the record to say so", recorded, 120, broker)

    with open_manager(broker.config, (), keys=False) as manager:
        checked = check(manager, 1.0, settings(broker), TopicAbsence(300), before_listing=retention_now)
    result = checked.result
    assert deleted and not first[0].exists()
    assert result.lost == [], [lost.segment.metadata.describe() for lost in result.lost]
    assert result.deleted_meanwhile >= 1
    assert checked.record.complete
    assert not [i for i in result.items if i.segment and i.segment.topic_id_partition.topic == "kept"]


def test_a_topic_one_read_lacks_is_only_suspected_until_a_second_read(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    meta, paths = ghost(broker, "ghost", marked=False)
    kept = {p: p.stat().st_size for p in broker.store.rglob("kept-*/**/*") if p.is_file()}
    base = ["gc", "--config", broker.config, "--bootstrap-server", broker.bootstrap, "--older-than", "1s"]

    code, out, err, took = gc([*base, "--confirm-after", "10m"], capsys)
    assert code == 0, out + err
    assert "dead-topic-segment" in out and "suspected, not confirmed: topic ghost" in out, out + err
    assert "Waiting" not in out and took < 600, (took, out)  # a dry run waits for nothing (10 min asked)
    assert all(p.exists() for p in paths)

    code, out, err, took = gc([*base, "--delete", "--confirm-after", "3s"], capsys)
    assert code == 0, out + err
    assert "Waiting 3 s (--confirm-after)" in out, out + err
    assert took >= 3, took
    assert "moved 3 objects" in out and "removed 1 items in all" in out and "failed 0" in out, out + err
    assert not any(p.exists() for p in paths), [p for p in paths if p.exists()]
    assert {p: p.stat().st_size for p in broker.store.rglob("kept-*/**/*") if p.is_file()} == kept
    assert meta.remote_log_segment_id.id in out


def test_an_incomplete_record_lists_but_removes_nothing(broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    before = read_record(settings(broker))
    assert before.complete
    target = max(before.partitions, key=lambda p: p.end)
    delete_records(broker, target.partition, 1)  # retention removed the beginning of one partition
    meta, paths = ghost(broker, "marked", marked=True)  # known: written after the cut

    record = read_record(settings(broker))
    assert not record.complete
    assert record.shortfall() == f"{METADATA_TOPIC}-{target.partition} starts at offset 1"
    base = ["gc", "--config", broker.config, "--bootstrap-server", broker.bootstrap, "--older-than", "1s"]
    code, out, err, _took = gc(base, capsys)
    assert code == 0, out + err
    assert "the record is not complete" in out and "dead-topic-segment" in out, out + err
    code, out, err, _took = gc([*base, "--delete"], capsys)
    assert code == 0, out + err
    assert f"{meta.remote_log_segment_id.id}" in err and "lacks the signal(s) record-complete (" in err, err
    assert all(p.exists() for p in paths)
    assert "removed 0 items in all" in out, out


def test_a_log_start_that_moves_during_the_read_fails_it(broker: Broker) -> None:
    start = read_record(settings(broker))
    target = max(start.partitions, key=lambda p: p.end - p.log_start)
    assert target.end - target.log_start >= 6, start.partitions
    polls: list[int] = []

    def cut() -> None:
        """After the third poll, one record at a time: the records not read yet are deleted."""
        polls.append(1)
        if len(polls) == 3:
            delete_records(broker, target.partition, target.end)

    one_at_a_time = {**settings(broker), "max_partition_fetch_bytes": 1, "max_poll_records": 1}
    with pytest.raises(ClusterReadError) as raised:
        read_record(one_at_a_time, on_poll=cut)
    message = str(raised.value)
    assert len(polls) >= 3
    assert f"{METADATA_TOPIC}-{target.partition} (log start {target.log_start} and end offset {target.end}" in message
    assert "no longer holds offset" in message and "retention.ms=-1" in message, message


def test_successive_topic_reads_ask_different_brokers(tmp_path: Path) -> None:
    """Two brokers: each Metadata read names the broker that answered, the second read asks the other one, and
    both list the same topic ids."""
    jt.ensure_built()
    store = {"backend.class": "filesystem", "root": str(tmp_path / "store")}
    plugin = kc.shim_plugin_lines(store, **{"chunk.size": "262144"})
    c = kc.make_cluster(kd.kafka_home(kd.NEWEST_4X), tmp_path / "kafka", 2, plugin)
    c.java_home = str(kd.DEFAULT_JAVA_HOME)
    try:
        c.start()
        c.create_topic("both", 2, 2, remote_storage_enable="true")
        bootstrap = client_settings(c.bootstrap, {})
        first = read_topics(bootstrap, {})
        second = read_topics(bootstrap, {}, first)
        third = read_topics(bootstrap, {}, second)
    finally:
        c.stop()
    assert first.brokers == second.brokers == (1, 2)
    assert {first.broker_id, second.broker_id} == {1, 2} and third.broker_id == first.broker_id
    assert first.broker == f"broker {first.broker_id} (127.0.0.1:{c.nodes[first.broker_id - 1].port})"
    assert "both" in first.topic_ids.values() and first.topic_ids == second.topic_ids
