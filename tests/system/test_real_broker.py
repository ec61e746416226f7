"""The shim in real Kafka brokers from Maven Central (tests/support/kafka_dist.py): the newest 3.x release with
both transports (sidecar, in-process JPype), on Java 17. The newest 4.x gets the same checks on the classic topic
of tests/system/test_real_broker_iceberg.py, which runs that release with both transports.

A single-node KRaft broker with the shim as its RemoteStorageManager (filesystem store) takes numbered records
in small segments, tiers every closed segment and deletes it locally; a consumer then reads everything from
offset 0, so all but the active segment comes through the shim's fetchLogSegment and fetchIndex, and must come
back record by record. The plugin's MBeans are read from the broker's JVM over JMX (Kafka's JmxTool); deleting
the topic must leave the store empty.

``make test-kafka-matrix`` runs the same test for every minor release 3.6 .. 4.4 and more Java versions through
``KTS_KAFKA_VERSIONS`` (comma-separated) and ``KTS_BROKER_JAVA_HOMES`` (os.pathsep-separated); a Kafka 4.x broker
is not started on a Java older than 17 (Kafka 4 itself needs 17).
"""

from __future__ import annotations

import os
from pathlib import Path

import jvm_testing as jt
import kafka_dist as kd
import pytest

VERSIONS = [v for v in os.environ.get("KTS_KAFKA_VERSIONS", kd.NEWEST_3X).split(",") if v]
JAVA_HOMES = [p for p in os.environ.get("KTS_BROKER_JAVA_HOMES", str(kd.DEFAULT_JAVA_HOME)).split(os.pathsep) if p]
TRANSPORTS = [t for t in os.environ.get("KTS_BROKER_TRANSPORTS", "sidecar,inprocess").split(",") if t]
TOPIC = "tiered"
RECORDS = 5000  # about 2.5 MiB: two closed segments
SEGMENT_BYTES = 1024 * 1024  # Kafka 4 refuses smaller segments
RSM = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"
CHUNK_CACHE = "aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics"


def _java_feature(java_home: str) -> int:
    return kd.java_feature(java_home)


def _cells() -> list[object]:
    out = []
    for version in VERSIONS:
        for java_home in JAVA_HOMES:
            for transport in TRANSPORTS:
                cell = f"{version}-java{_java_feature(java_home)}-{transport}"
                out.append(pytest.param(version, java_home, transport, id=cell))
    return out


def record(i: int) -> bytes:
    """Record ``i``: its number, then filler of varying length (about 500 bytes on average)."""
    return f"record-{i:06d}-".encode() + bytes([97 + i % 26]) * (i * 37 % 1000)


def _stored(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file()] if store.exists() else []


def _number(beans: dict[str, dict[str, str]], bean: str, attribute: str) -> float:
    assert bean in beans, f"no bean {bean} among {sorted(beans)}"
    return float(beans[bean][attribute])


@pytest.mark.timeout(900)  # the first run of a release assembles it from Maven Central
@pytest.mark.parametrize(("version", "java_home", "transport"), _cells())
def test_tier_read_back_and_delete_in_a_real_broker(
    version: str, java_home: str, transport: str, tmp_path: Path
) -> None:
    if kd.major(version) >= 4 and _java_feature(java_home) < 17:
        pytest.fail(f"Kafka {version} needs Java 17 or later; {java_home} is older: leave it out of the matrix")
    jt.ensure_built()
    store = tmp_path / "remote"
    plugin = kd.plugin_properties(store, transport)
    values = [record(i) for i in range(RECORDS)]
    with kd.running_broker(version, tmp_path / "broker", plugin, java_home=java_home, transport=transport) as b:
        kd.create_topic(
            b,
            TOPIC,
            {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1"},
        )
        kd.produce(b.bootstrap, TOPIC, values)
        local = b.data / f"{TOPIC}-0"
        kd.wait_while_running(
            lambda: kd.tiered_locally(local), 300, "every closed segment is tiered and deleted locally", b
        )
        active_from = int(next(iter(local.glob("*.log"))).stem)
        assert active_from > RECORDS // 3, active_from  # most records are now only in remote storage
        assert any(p.name.endswith(".rsm-manifest") for p in _stored(store)), sorted(map(str, _stored(store)))

        got = kd.consume(b.bootstrap, TOPIC, RECORDS)
        assert [o for o, _ in got] == list(range(RECORDS))
        for offset, value in got:
            assert value == values[offset], f"record {offset} came back different"

        beans = kd.jmx_read(b, "aiven.kafka.server.tieredstorage*:*")
        segments = len([p for p in _stored(store) if p.name.endswith(".rsm-manifest")])
        assert _number(beans, f"{RSM},object-type=rsm-manifest", "object-upload-total") == segments
        assert _number(beans, f"{RSM},topic={TOPIC},partition=0,object-type=log", "object-upload-total") == segments
        assert _number(beans, f"{RSM},topic={TOPIC}", "segment-fetch-requested-bytes-total") > 0
        assert _number(beans, RSM, "segment-fetch-total") >= 1
        assert _number(beans, RSM, "segment-fetch-requested-bytes-total") > 0
        assert CHUNK_CACHE in beans

        kd.delete_topic(b, TOPIC)
        kd.wait_while_running(
            lambda: not _stored(store), 180, "the deleted topic's segments are gone from the store", b
        )
        log = b.log()
    configured = "in-process" if transport == "inprocess" else transport
    assert f"kafka-tiered-storage RemoteStorageManager configured ({configured} transport)" in log
    if transport == "sidecar":  # Unix domain sockets from Java 16; older Java talks to the sidecar over TCP
        assert ("(TCP, token)" in log) == (_java_feature(java_home) < 16)
