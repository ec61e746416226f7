"""Dev only: the shim in a real Kafka broker on a chosen Java. A single-node KRaft broker with the shim as its
RemoteStorageManager (sidecar transport, filesystem store) takes numbered records in 256 KiB segments, tiers every
closed segment and deletes it locally, then a consumer reads them all back from the start: everything but the
active segment comes through the shim's fetchLogSegment and fetchIndex. The records must come back exactly.

Skipped unless ``KAFKA_HOME`` names a Kafka distribution and ``KTS_BROKER_JAVA_HOMES`` lists one or more Java
homes (os.pathsep-separated) to run the broker on, e.g.::

    KAFKA_HOME=~/refs/kafka KTS_BROKER_JAVA_HOMES=/usr/lib/jvm/java-17-openjdk-amd64:/opt/jdk21 \\
        pytest tests/system/test_real_broker.py
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jvm_testing as jt
import pytest

KAFKA_HOME = os.environ.get("KAFKA_HOME", "")
JAVA_HOMES = [p for p in os.environ.get("KTS_BROKER_JAVA_HOMES", "").split(os.pathsep) if p]
pytestmark = pytest.mark.skipif(
    not (KAFKA_HOME and (Path(KAFKA_HOME) / "bin" / "kafka-server-start.sh").exists() and JAVA_HOMES),
    reason="needs KAFKA_HOME (a Kafka distribution) and KTS_BROKER_JAVA_HOMES",
)
RECORDS = 6000
SEGMENT_BYTES = 256 * 1024


def server_properties(work: Path, broker: int, controller: int) -> str:
    """The broker with the shim as its RemoteStorageManager: sidecar transport, filesystem store."""
    plugin = f"""remote.log.storage.manager.class.name={jt.SHIM_CLASS}
remote.log.storage.manager.class.path={jt.REPO / "rsm" / "_jars"}/*
rsm.config.python.executable={sys.executable}
rsm.config.python.path={jt.REPO}
rsm.config.jvm.transport=sidecar
rsm.config.chunk.size=65536
rsm.config.storage.backend.class=filesystem
rsm.config.storage.root={work / "remote"}
rsm.config.compression.enabled=true
"""
    return jt.kraft_server_properties(work, broker, controller, plugin)


def java_feature(java_home: str) -> int:
    r = subprocess.run(
        [str(Path(java_home) / "bin" / "java"), "-XshowSettings:properties", "-version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"java\.specification\.version = (\d+)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


@pytest.mark.parametrize("java_home", JAVA_HOMES)
def test_tier_and_read_back_through_the_shim(java_home: str, tmp_path: Path) -> None:
    jt.ensure_built()
    kafka = Path(KAFKA_HOME)
    bin_ = kafka / "bin"
    work = tmp_path
    broker_port, controller_port = jt.free_ports(2)
    boot = f"127.0.0.1:{broker_port}"
    props = work / "server.properties"
    props.write_text(server_properties(work, broker_port, controller_port))
    env = {
        **os.environ,
        "JAVA_HOME": java_home,
        "LOG_DIR": str(work / "logs"),
        "KAFKA_HEAP_OPTS": "-Xmx512m -Xms512m",
    }
    uuid = subprocess.run([bin_ / "kafka-storage.sh", "random-uuid"], capture_output=True, text=True, env=env)
    assert uuid.returncode == 0, uuid.stderr
    fmt = [bin_ / "kafka-storage.sh", "format", "-t", uuid.stdout.strip(), "-c", props]
    subprocess.run(fmt, check=True, capture_output=True, env=env)
    out = open(work / "broker.out", "wb")  # noqa: SIM115 - closed after the broker stops
    broker = subprocess.Popen(
        [bin_ / "kafka-server-start.sh", props], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    records = [f"record-{i:06d}-" + "x" * (i % 200) for i in range(RECORDS)]
    try:
        deadline = time.monotonic() + 120
        while b"Kafka Server started" not in (work / "broker.out").read_bytes():
            assert broker.poll() is None, (work / "broker.out").read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.5)
        topic = [bin_ / "kafka-topics.sh", "--bootstrap-server", boot, "--create", "--topic", "t"]
        topic += ["--partitions", "1", "--replication-factor", "1", "--config", "remote.storage.enable=true"]
        topic += ["--config", f"segment.bytes={SEGMENT_BYTES}", "--config", "local.retention.bytes=1"]
        subprocess.run(topic, check=True, capture_output=True, env=env, timeout=120)
        produce = [bin_ / "kafka-console-producer.sh", "--bootstrap-server", boot, "--topic", "t"]
        produce += ["--producer-property", "linger.ms=50", "--producer-property", "batch.size=65536"]
        p = subprocess.run(produce, input="\n".join(records) + "\n", text=True, capture_output=True, env=env)
        assert p.returncode == 0, p.stderr
        local = work / "data" / "t-0"
        deadline = time.monotonic() + 300
        while True:  # every closed segment tiered and deleted locally: only the active one is left
            logs = list(local.glob("*.log"))
            if len(logs) == 1 and not list(local.glob("*.deleted")) and int(logs[0].stem) > 0:
                break
            assert time.monotonic() < deadline, "the segments were not tiered in time"
            time.sleep(1)
        tiered_from = int(logs[0].stem)
        assert tiered_from > RECORDS // 4  # most records now live only in remote storage
        consume = [bin_ / "kafka-console-consumer.sh", "--bootstrap-server", boot, "--topic", "t"]
        consume += ["--from-beginning", "--max-messages", str(RECORDS), "--timeout-ms", "120000"]
        c = subprocess.run(consume, capture_output=True, text=True, env=env, timeout=300)
        assert c.stdout.splitlines() == records, c.stderr[-4000:]
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        try:
            broker.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(broker.pid, signal.SIGKILL)
        out.close()
    # the shim logs through System.Logger (java.util.logging, on the broker's stderr), Kafka through log4j
    log = (work / "broker.out").read_text(errors="replace") + (work / "logs" / "server.log").read_text(errors="replace")
    assert "kafka-tiered-storage RemoteStorageManager configured (sidecar transport)" in log
    started = re.search(r"Python sidecar started: pid \d+, interpreter \S+, socket (.*?), shared memory", log)
    assert started, "no sidecar start line in the broker's log"
    over_tcp = "(TCP, token)" in started.group(1)
    assert over_tcp == (java_feature(java_home) < 16)
    assert list((work / "remote").rglob("*.rsm-manifest")) or list((work / "remote").rglob("*manifest*"))
    shutil.rmtree(work / "data", ignore_errors=True)
