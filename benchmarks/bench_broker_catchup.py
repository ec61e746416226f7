"""Catch-up rate of a lagging consumer in a real Kafka broker: Kafka's own LocalTieredStorage (plain files, no
transform) next to this plugin (zstd + AES-256-GCM, 4 MiB chunks, filesystem backend, the chunk cache of
``--cache`` class and 32 MiB of prefetch), on the same machine in the same run.

For each plugin: a single-node KRaft broker on 127.0.0.1, a topic with 8 MiB segments and
``local.retention.bytes=1``, filled with ``kafka-producer-perf-test``; once every closed segment is remote and
deleted locally, ``kafka-consumer-perf-test`` reads the topic from the start, so all but the active segment
comes through the plugin's ``fetchLogSegment``.

Needs a Kafka distribution: ``KAFKA_HOME`` (``../shared/tools/build-kafka-ref.sh`` assembles one). Without it
the script says so and exits 0; it is not part of CI.

    KAFKA_HOME=~/refs/kafka python benchmarks/bench_broker_catchup.py [--mb 229] [--transport sidecar|inprocess]

Target (issue 9): ours >= LocalTieredStorage despite decrypting and decompressing.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_config import encryption_config  # noqa: E402 - benchmarks/ is sys.path[0]

SEGMENT_BYTES = 8 * 1024 * 1024
RECORD_SIZE = 1000


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _plugin_properties(kind: str, work: Path, kafka: Path, transport: str, cache: str) -> str:
    if kind == "local":
        jar = next(iter(glob.glob(str(kafka / "plugins" / "local-tiered-storage" / "*.jar"))))
        return (
            "remote.log.storage.manager.class.name=org.apache.kafka.server.log.remote.storage.LocalTieredStorage\n"
            f"remote.log.storage.manager.class.path={jar}\n"
            f"rsm.config.dir={work / 'remote'}\n"
        )
    lines = [
        "remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager",
        f"rsm.config.python.executable={sys.executable}",
        "rsm.config.chunk.size=4194304",
        "rsm.config.storage.backend.class=filesystem",
        f"rsm.config.storage.root={work / 'remote'}",
        "rsm.config.storage.fsync.enabled=false",
        f"rsm.config.fetch.chunk.cache.class={cache}",
        f"rsm.config.fetch.chunk.cache.path={work / 'chunk-cache'}",
        "rsm.config.fetch.chunk.cache.size=268435456",
        f"rsm.config.fetch.chunk.cache.prefetch.max.size={os.environ.get('BENCH_PREFETCH', 33554432)}",
        f"rsm.config.jvm.transport={transport}",
    ]
    lines += [f"rsm.config.{k}={v}" for k, v in encryption_config(work).items()]
    if transport == "sidecar":
        lines.append(f"remote.log.storage.manager.class.path={ROOT / 'rsm' / '_jars'}/*")
    return "\n".join(lines) + "\n"


def _server_properties(work: Path, broker: int, controller: int, plugin: str) -> str:
    return f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{broker}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={work / "data"}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
remote.log.manager.task.interval.ms=1000
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=1000
remote.log.storage.system.enable=true
remote.log.metadata.manager.listener.name=PLAINTEXT
rlmm.config.remote.log.metadata.topic.replication.factor=1
{plugin}"""


def run_one(kind: str, kafka: Path, mb: int, transport: str, cache: str = "memory") -> float:
    work = Path(tempfile.mkdtemp(prefix=f"kts-broker-{kind}-"))
    broker_port, controller_port = _free_ports(2)
    boot = f"127.0.0.1:{broker_port}"
    props = work / "server.properties"
    props.write_text(
        _server_properties(work, broker_port, controller_port, _plugin_properties(kind, work, kafka, transport, cache))
    )
    env = {**os.environ, "LOG_DIR": str(work / "logs"), "KAFKA_HEAP_OPTS": "-Xmx1g -Xms1g"}
    bin_ = kafka / "bin"
    cluster = subprocess.run([bin_ / "kafka-storage.sh", "random-uuid"], capture_output=True, text=True, env=env)
    subprocess.run(
        [bin_ / "kafka-storage.sh", "format", "-t", cluster.stdout.strip(), "-c", props],
        check=True,
        capture_output=True,
        env=env,
    )
    if kind == "ours" and transport == "inprocess":
        cmd = [sys.executable, "-m", "rsm.cli.main", "kafka-server-start", str(props)]
        env["KAFKA_HOME"] = str(kafka)
    else:
        cmd = [str(bin_ / "kafka-server-start.sh"), str(props)]
    out = open(work / "broker.out", "wb")  # noqa: SIM115 - closed after the broker stops
    broker = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while b"Kafka Server started" not in (work / "broker.out").read_bytes():
            if broker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: broker did not start; see {work / 'broker.out'}")
            time.sleep(0.5)
        subprocess.run(
            [bin_ / "kafka-topics.sh", "--bootstrap-server", boot, "--create", "--topic", "t"]
            + ["--partitions", "1", "--replication-factor", "1", "--config", "remote.storage.enable=true"]
            + ["--config", f"segment.bytes={SEGMENT_BYTES}", "--config", "local.retention.bytes=1"],
            check=True,
            capture_output=True,
            env=env,
        )
        records = mb * 1_000_000 // RECORD_SIZE
        subprocess.run(
            [bin_ / "kafka-producer-perf-test.sh", "--topic", "t", "--num-records", str(records)]
            + ["--record-size", str(RECORD_SIZE), "--throughput", "-1"]
            + ["--producer-props", f"bootstrap.servers={boot}", "acks=1", "linger.ms=20", "batch.size=262144"],
            check=True,
            capture_output=True,
            env=env,
        )
        local = work / "data" / "t-0"
        deadline = time.monotonic() + 600
        while True:
            logs = list(local.glob("*.log"))
            if len(logs) == 1 and not list(local.glob("*.deleted")) and int(logs[0].stem) > 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: segments were not tiered in time; see {work / 'logs'}")
            time.sleep(1)
        res = subprocess.run(
            [bin_ / "kafka-consumer-perf-test.sh", "--bootstrap-server", boot, "--topic", "t"]
            + ["--messages", str(records), "--timeout", "120000", "--fetch-size", "1048576"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        header, row = [line for line in res.stdout.splitlines() if line.strip()][-2:]
        fields = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=False))
        mbs = float(fields["MB.sec"])
        if re.search(r"ERROR", (work / "logs" / "server.log").read_text(errors="replace")):
            print(f"  note: {kind}: ERROR lines in {work / 'logs' / 'server.log'}")
        return mbs * 1.048576  # perf-test's MB is MiB
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        try:
            broker.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(broker.pid, signal.SIGKILL)
        out.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=229, help="topic size in MB")
    p.add_argument("--transport", choices=["sidecar", "inprocess"], default="sidecar")
    p.add_argument("--cache", choices=["memory", "disk"], default="memory", help="our fetch.chunk.cache.class")
    args = p.parse_args()
    home = os.environ.get("KAFKA_HOME")
    if not home or not (Path(home) / "bin" / "kafka-server-start.sh").exists():
        print("KAFKA_HOME does not name a Kafka distribution: skipped (../shared/tools/build-kafka-ref.sh makes one)")
        return 0
    kafka = Path(home)
    local = run_one("local", kafka, args.mb, args.transport)
    ours = run_one("ours", kafka, args.mb, args.transport, args.cache)
    print(f"catch-up of a {args.mb} MB topic (8 MiB segments) from remote storage, kafka-consumer-perf-test:")
    print(f"  LocalTieredStorage (plain files)            {local:7.1f} MB/s")
    print(
        f"  ours ({args.transport}, zstd + AES, {args.cache} cache)  {ours:7.1f} MB/s = {ours / local:.2f}x "
        "LocalTieredStorage"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
