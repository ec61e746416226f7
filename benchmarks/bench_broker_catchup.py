"""Catch-up rate of a lagging consumer in a real Kafka broker: Kafka's own LocalTieredStorage (plain files, no
transform) next to this plugin (zstd + AES-256-GCM, 4 MiB chunks, filesystem backend, the chunk cache of
``--cache`` class and 32 MiB of prefetch), on the same machine in the same run.

For each plugin: a single-node KRaft broker on 127.0.0.1, a topic with 8 MiB segments and
``local.retention.bytes=1``, filled with ``kafka-producer-perf-test``; once every closed segment is remote and
deleted locally, ``kafka-consumer-perf-test`` reads the topic from the start, so all but the active segment
comes through the plugin's ``fetchLogSegment``.

The broker is Kafka ``--kafka`` (default ``kafka_dist.NEWEST_4X``) assembled from Maven Central by
``tests/support/kafka_dist.py`` (``--kafka-home DIR`` runs an existing installation's ``libs/`` instead); brokers and
tools run as ``java -cp libs/*`` with their main class (``tests/support/kraft_cluster.py``). LocalTieredStorage comes
from the ``kafka-storage`` test jar that kafka_dist puts in ``libs/``. Not part of CI.

    python benchmarks/bench_broker_catchup.py [--kafka 4.4.0] [--mb 229] [--rounds 3]
        [--transport sidecar|inprocess ...] [--cache memory|disk] [--only local|ours|ours-plain|ours-iceberg ...]
        [--pyspy FILE] [--plugin-time]

``--transport`` is repeatable: ``--only ours --transport sidecar --transport inprocess`` is the A/B of the two
transports, alternated round by round in the same run, and prints the in-process/sidecar ratio of rate and of
the CPU each spent per MB (broker JVM plus sidecar, which for the in-process transport is the broker alone).

Besides the rate, each plugin's run reports the consumer's average fetch latency (what the remote read adds to
every 1 MiB fetch), the CPU each process spent per MB read (broker JVM, our Python sidecar, the consumer), and
how many cores were busy on average: a catch-up that keeps every core busy is bound by CPU per MB, not by
latency, and the comparison then is between CPU budgets.

``--only ours-iceberg`` tiers the topic in Iceberg mode (rows of an Iceberg table, SQLite catalog, on the same
filesystem store); every fetch rebuilds the batches from the rows. Next to ``ours-plain`` (classic, no
transform) or ``ours`` in the same run it prints the Iceberg/classic ratio, round by round (issue 37: >= 0.5x):

    python benchmarks/bench_broker_catchup.py --only ours-plain --only ours-iceberg --rounds 3

``--compact-iceberg`` reads the Iceberg topic twice per round: once as tiered, then again after ``kts iceberg
maintain`` compacted its table (the plugin's own compaction; the broker's maintenance thread is off so that the
first read is of the copies' files; the compaction's inputs are expired and deleted before the second read, so
it can only read the rewritten files). Both reads are compared with the same round's read of the classic
topic, a first read as theirs (a second read of it would come from the chunk cache, which holds it all):

    python benchmarks/bench_broker_catchup.py --only ours-plain --only ours-iceberg --mb 64 --rounds 2 \
        --compact-iceberg

``--plugin-time`` wraps both plugins in ``TimedRemoteStorageManager.java`` (compiled here against the
distribution's jars) and reports the time the broker spent inside each: every fetch from the call to the close of
its stream, and every index fetch. That time is what the plugin adds to a fetch, measured alike for both; the
rest of the catch-up is the broker's and the consumer's, slowed only by the CPU the plugin's other threads take.

Target (issue 9): ours >= LocalTieredStorage despite decrypting and decompressing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # kafka_dist (the broker from Maven Central), kraft_cluster

import kafka_dist as kd  # noqa: E402 - tests/ is on sys.path
import kraft_cluster as kc  # noqa: E402
from bench_config import encryption_config  # noqa: E402 - benchmarks/ is sys.path[0]
from broker_harness import local_tiered_storage_jar, sidecar_pid  # noqa: E402
from broker_harness import process_tree as _process_tree  # noqa: E402
from broker_harness import pyspy as _pyspy  # noqa: E402
from broker_harness import tree_cpu as _tree_cpu  # noqa: E402

SEGMENT_BYTES = 8 * 1024 * 1024
RECORD_SIZE = 1000
KMS: tuple[str, str] | None = None  # ours-kms: local-kms's URL and the RSA key's id, set by main()
METRICS_PORT = 0  # ours-kms: the sidecar's Prometheus port (its key-service call counts)


def _start_local_kms(work: Path) -> subprocess.Popen[bytes]:
    """local-kms on 127.0.0.1 (.ci/key_services.py) with one RSA_2048 key; sets KMS."""
    global KMS, METRICS_PORT
    import socket

    import boto3

    ports = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    port, METRICS_PORT = ports
    proc = subprocess.Popen([sys.executable, str(ROOT / ".ci" / "key_services.py"), "local-kms", str(port), str(work)])
    url = f"http://127.0.0.1:{port}"
    kms = boto3.session.Session().client(
        "kms", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            key = kms.create_key(KeySpec="RSA_2048", KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"]
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.5)
    KMS = (url, key)
    return proc


def _service_calls() -> float:
    """calls-total of the sidecar's aws-kms key service, from its Prometheus endpoint."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r'^kts_key_service_metrics_calls_total\{[^}]*provider="aws-kms"[^}]*\} ([0-9.e+]+)$', text, re.M)
    if found is None:
        raise RuntimeError("no kts_key_service_metrics_calls_total for aws-kms on the sidecar's endpoint")
    return float(found.group(1))


def _plugin_properties(kind: str, work: Path, transport: str, cache: str, compact: bool = False) -> str:
    if kind == "local":  # on the broker's class path already (libs/)
        return (
            "remote.log.storage.manager.class.name=org.apache.kafka.server.log.remote.storage.LocalTieredStorage\n"
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
    if kind == "ours":  # "ours-plain" stores chunks as they are: the transport's cost without the transform's
        lines += [f"rsm.config.{k}={v}" for k, v in encryption_config(work).items()]
    if kind == "ours-kms":  # zstd + AES as "ours", the data keys wrapped by an AWS KMS key (local-kms)
        assert KMS is not None
        url, key = KMS
        pair = "encryption.key.pairs.kms."
        lines += [
            f"rsm.config.{k}={v}"
            for k, v in {
                "compression.enabled": "true",
                "encryption.enabled": "true",
                "encryption.key.pair.id": "kms",
                "encryption.key.pairs": "kms",
                pair + "provider": "aws-kms",
                pair + "key.id": key,
                pair + "aws.endpoint.url": url,
                pair + "aws.region": "us-east-1",
                pair + "aws.access.key.id": "x",
                pair + "aws.secret.access.key": "x",
                "metrics.prometheus.port": str(METRICS_PORT),
            }.items()
        ]
    if kind == "ours-iceberg":  # the topic tiered as rows of an Iceberg table (SQLite catalog, same filesystem)
        lines += [
            "rsm.config.iceberg.mode.topics.regex=t",
            f"rsm.config.iceberg.mode.catalog.sqlite.path={work / 'catalog.db'}",
        ]
        if compact:  # the bench compacts, between its two reads
            lines.append("rsm.config.iceberg.mode.maintenance.enabled=false")
    if transport == "sidecar":
        lines.append(f"remote.log.storage.manager.class.path={ROOT / 'rsm' / '_jars'}/*")
    return "\n".join(lines) + "\n"


def _timed_properties(plugin: str, work: Path, timed_jar: Path) -> str:
    """The plugin's properties with TimedRemoteStorageManager in front of its class."""
    props = dict(line.split("=", 1) for line in plugin.splitlines() if line)
    delegate = props.pop("remote.log.storage.manager.class.name")
    path = props.pop("remote.log.storage.manager.class.path", None)
    props["remote.log.storage.manager.class.name"] = "kts.bench.TimedRemoteStorageManager"
    props["remote.log.storage.manager.class.path"] = f"{timed_jar}:{path}" if path else str(timed_jar)
    props["rsm.config.timed.delegate"] = delegate
    props["rsm.config.timed.events"] = str(work / "plugin-time.txt")
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _build_timed_jar(kafka: Path, out: Path) -> Path:
    src = ROOT / "benchmarks" / "TimedRemoteStorageManager.java"
    classes = out / "classes"
    subprocess.run(["javac", "-cp", f"{kafka / 'libs'}/*", "-d", classes, src], check=True)
    jar = out / "timed-rsm.jar"
    subprocess.run(["jar", "cf", jar, "-C", classes, "."], check=True)
    return jar


def _plugin_time(events: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"segment": [], "index": []}
    for line in events.read_text().splitlines():
        kind, ns = line.split()
        out[kind].append(int(ns) / 1e6)
    return out


def _table_files(props_file: Path) -> tuple[set[str], set[str]]:
    """The Iceberg topic's live data files and every data file a snapshot of its current metadata references
    (earlier metadata versions in its log are left out: the check is that the compaction's inputs left every
    snapshot, not that orphan removal may delete them yet)."""
    from rsm.cli.settings import load_configs
    from rsm.iceberg.catalog import catalog_properties
    from rsm.iceberg.config import IcebergConfig
    from rsm.iceberg.maintenance.namespace import open_existing_catalog

    configs = load_configs(str(props_file))
    cfg = IcebergConfig.from_map(configs)
    storage = {k[len("storage.") :]: v for k, v in configs.items() if k.startswith("storage.")}
    catalog = open_existing_catalog(cfg, catalog_properties(cfg, "filesystem", storage, ""))
    if catalog is None:
        raise RuntimeError(f"no Iceberg catalog with namespace {cfg.namespace!r} at {props_file}")
    table = catalog.load_table((cfg.namespace, "t"))
    referenced = {
        entry.data_file.file_path
        for snapshot in table.metadata.snapshots
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    }
    return {task.file.file_path for task in table.scan().plan_files()}, referenced


def compact_iceberg(work: Path, plugin: str) -> tuple[int, int]:
    """Compact the topic's table with ``kts iceberg maintain`` (snapshots expired down to the newest), check
    that its data files changed, and delete the files it replaced (what the orphan step does once they are
    older than the grace period), so that a fetch can only read the rewritten ones. Returns the number of live
    data files before and after."""
    props = work / "plugin.properties"
    props.write_text(plugin)
    before, _ = _table_files(props)
    keys = ["snapshot.max.keep=1", "snapshot.min.keep=1"]
    cmd = [sys.executable, "-m", "rsm.cli.main", "iceberg", "maintain", "--config", str(props), "--no-orphans"]
    cmd += [arg for k in keys for arg in ("--set", f"iceberg.mode.maintenance.{k}")]
    for _ in range(2):  # a run expires before it compacts: the second expires the snapshot before the compaction
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    after, referenced = _table_files(props)
    if not after or after & before or len(after) >= len(before):
        raise RuntimeError(f"the compaction changed nothing: {len(before)} data files before, {len(after)} after")
    gone = before - referenced
    if gone != before:
        raise RuntimeError(f"{len(before - gone)} replaced data files are still referenced by a snapshot")
    for f in gone:
        Path(urlparse(f).path).unlink()
    time.sleep(6)  # iceberg.mode.fetch.table.refresh.ms (5 s): the broker's fetches see the new snapshot
    return len(before), len(after)


def _sidecar_pid(root: int) -> int:
    pid = sidecar_pid(root)
    if pid is None:
        raise RuntimeError(f"no sidecar under the broker {root}")
    return pid


class Run(NamedTuple):
    """One catch-up: perf-test's rate (with the consumer group join) and its fetch-only rate, MB/s; the
    consumer's average fetch latency, ms; CPU seconds per process during the read; cores busy on average."""

    mbs: float
    fetch_mbs: float
    fetch_latency_ms: float
    cpu: dict[str, float]
    cores: float
    plugin_ms: dict[str, list[float]] | None = None  # --plugin-time: "segment"/"index" -> each call's ms
    service_calls: tuple[float, int] | None = None  # ours-kms: (calls to the key service, segments read)


def run_one(
    kind: str,
    kafka: Path,
    mb: int,
    transport: str,
    cache: str,
    pyspy: str | None = None,
    timed_jar: Path | None = None,
    perf_out: str | None = None,
    compact: bool = False,
) -> list[Run]:
    """One broker with ``kind``'s plugin, the topic filled and tiered, and a catch-up read of it (``compact``:
    two, the Iceberg table compacted in between)."""
    work = Path(tempfile.mkdtemp(prefix=f"kts-broker-{kind}-"))
    plugin = _plugin_properties(kind, work, transport, cache, compact)
    if timed_jar is not None:
        plugin = _timed_properties(plugin, work, timed_jar)
    cluster = kc.make_cluster(kafka, work / "kafka", 1, plugin)
    cluster.heap = "-Xmx1g"
    cluster.jvm_options = kc.BENCHMARK_JVM_OPTIONS
    cluster.rlm_log_level = "INFO"
    cluster.inprocess = kind != "local" and transport == "inprocess"
    node = cluster.nodes[0]
    try:
        cluster.start(timeout=120)
        boot = cluster.bootstrap
        cluster.create_topic(
            "t", 1, 1, remote_storage_enable="true", segment_bytes=str(SEGMENT_BYTES), local_retention_bytes="1"
        )
        records = mb * 1_000_000 // RECORD_SIZE
        cluster.tool(
            "producer-perf",
            *["--topic", "t", "--num-records", str(records), "--record-size", str(RECORD_SIZE), "--throughput", "-1"],
            *["--producer-props", f"bootstrap.servers={boot}", "acks=1", "linger.ms=20", "batch.size=262144"],
            timeout=900,
        )
        local = node.work / "data" / "t-0"
        deadline = time.monotonic() + 600
        while True:
            logs = list(local.glob("*.log"))
            if len(logs) == 1 and not list(local.glob("*.deleted")) and int(logs[0].stem) > 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: segments were not tiered in time; see {node.out}")
            time.sleep(1)
        assert node.process is not None
        broker_pid = node.process.pid

        def read() -> Run:
            before = _tree_cpu(broker_pid)
            children_before = os.times()
            spy = None
            if pyspy and kind != "local":
                # the in-process broker is the Python process that hosts the JVM: its embedded threads are sampled
                target = _sidecar_pid(broker_pid) if transport == "sidecar" else broker_pid
                spy = subprocess.Popen(
                    [_pyspy(), "record", "-p", str(target), "-o", f"{pyspy}.{transport}", "--format", "raw"]
                    + ["--rate", "250", "--threads", "--nonblocking"]
                )
                time.sleep(1)  # py-spy attaches
            perf = None
            if perf_out:  # every process of the broker's tree (the sidecar too), by shared object: where the CPU goes
                pids = ",".join(str(pid) for pid, _, _ in _process_tree(broker_pid))
                perf = subprocess.Popen(
                    ["perf", "record", "-F", "499", "-g", "-p", pids, "-o", f"{perf_out}.{kind}.{transport}"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1)
            started = time.monotonic()
            stdout = cluster.tool(
                "consumer-perf",
                *["--bootstrap-server", boot, "--topic", "t", "--messages", str(records), "--timeout", "120000"],
                *["--fetch-size", "1048576", "--print-metrics"],
                timeout=900,
            )
            elapsed = time.monotonic() - started
            after = _tree_cpu(broker_pid)
            children_after = os.times()  # before py-spy is reaped: its CPU is not the consumer's
            for profiler in (spy, perf):
                if profiler is not None:
                    profiler.send_signal(signal.SIGINT)
                    profiler.wait()
            cpu = {k: v - before.get(k, 0.0) for k, v in after.items()}
            cpu["consumer"] = (children_after.children_user + children_after.children_system) - (
                children_before.children_user + children_before.children_system
            )
            lines = stdout.splitlines()
            at = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
            header, row = lines[at], lines[at + 1]
            fields = dict(
                zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=False)
            )
            latency = re.search(r"fetch-latency-avg:\{client-id=[^,}]*\}\s*:\s*([0-9.]+)", stdout)
            if re.search(r"\] ERROR ", node.out.read_text(errors="replace")):
                print(f"  note: {kind}: ERROR lines in {node.out}")
            calls = None
            if kind == "ours-kms":  # the public key (once, at the first copy) and one unwrap per segment read
                calls = (_service_calls(), len(list((work / "remote").rglob("*.rsm-manifest"))))
            return Run(
                float(fields["MB.sec"]) * 1.048576,  # perf-test's MB is MiB
                float(fields["fetch.MB.sec"]) * 1.048576,
                float(latency.group(1)) if latency else float("nan"),
                cpu,
                sum(cpu.values()) / elapsed,
                service_calls=calls,
            )

        runs = [read()]
        if compact and kind == "ours-iceberg":
            files = compact_iceberg(work, plugin)
            print(f"  ours-iceberg: compacted {files[0]} data files into {files[1]} (the old ones deleted)")
            runs.append(read())
    finally:
        cluster.stop()
        events = work / "plugin-time.txt"  # written by the wrapper's shutdown hook
        plugin_ms = _plugin_time(events) if timed_jar is not None and events.exists() else None
        if os.environ.get("BENCH_KEEP") is None:
            shutil.rmtree(work, ignore_errors=True)
    if timed_jar is not None and plugin_ms is None:
        raise RuntimeError(f"{kind}: --plugin-time recorded nothing (the broker did not exit cleanly?)")
    return [runs[0]._replace(plugin_ms=plugin_ms), *runs[1:]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kafka", help="Kafka release to assemble from Maven Central (default: kafka_dist.NEWEST_4X)")
    p.add_argument("--kafka-home", help="an existing Kafka installation (its libs/) instead; --kafka names its release")
    p.add_argument("--mb", type=int, default=229, help="topic size in MB")
    p.add_argument(
        "--transport",
        action="append",
        choices=["sidecar", "inprocess"],
        help="our transport (repeatable: an A/B in the same run, alternating); default sidecar",
    )
    p.add_argument("--cache", choices=["memory", "disk"], default="memory", help="our fetch.chunk.cache.class")
    p.add_argument(
        "--only",
        action="append",
        choices=["local", "ours", "ours-plain", "ours-iceberg", "ours-kms"],
        help="run only this plugin (repeatable); ours-plain: ours without compression and encryption; "
        "ours-iceberg: the topic in Iceberg mode (rows of a table, rebuilt into batches on fetch); "
        "ours-kms: ours with the data keys wrapped by an AWS KMS key (local-kms, .ci/key_services.py)",
    )
    p.add_argument("--rounds", type=int, default=1, help="alternate the plugins this many times; medians")
    p.add_argument(
        "--pyspy",
        metavar="FILE",
        help="record our Python (the sidecar, or the in-process broker) with py-spy during the read: FILE.<transport>",
    )
    p.add_argument("--plugin-time", action="store_true", help="time the broker's calls into each plugin")
    p.add_argument(
        "--perf",
        metavar="FILE",
        help="perf record -g the broker's process tree during the read: FILE.<plugin>.<transport> "
        "(perf report -i ... --sort dso)",
    )
    p.add_argument(
        "--compact-iceberg",
        action="store_true",
        help="read the Iceberg topic twice, compacting its table with kts iceberg maintain in between; "
        "prints the Iceberg/classic ratio before and after",
    )
    args = p.parse_args()
    if args.compact_iceberg and (args.pyspy or args.perf or args.plugin_time):
        p.error("--compact-iceberg reads twice per broker: run it without --pyspy, --perf and --plugin-time")
    version = args.kafka or kd.NEWEST_4X
    kafka = Path(args.kafka_home) if args.kafka_home else kd.kafka_home(version)
    setups_kinds = args.only or ["local", "ours"]
    build = Path(tempfile.mkdtemp(prefix="kts-bench-build-"))
    lts = f"; LocalTieredStorage from {local_tiered_storage_jar(kafka).name}" if "local" in setups_kinds else ""
    print(f"Kafka {version} from {kafka}{lts}")
    timed_jar = _build_timed_jar(kafka, build) if args.plugin_time else None
    transports = list(dict.fromkeys(args.transport or ["sidecar"]))
    # (plugin, transport) in the order they run each round; LocalTieredStorage has no transport
    setups = [
        (kind, transport)
        for kind in dict.fromkeys(setups_kinds)
        for transport in (["-"] if kind == "local" else transports)
    ]
    runs: dict[str, list[Run]] = {}
    kms = _start_local_kms(build / "local-kms") if "ours-kms" in setups_kinds else None
    try:
        for _ in range(args.rounds):  # alternating, so a change in the machine's load hits all alike
            for kind, transport in setups:
                reads = run_one(
                    kind, kafka, args.mb, transport, args.cache, args.pyspy, timed_jar, args.perf, args.compact_iceberg
                )
                for suffix, run in zip(("", AFTER), reads, strict=False):
                    runs.setdefault(_setup_key(kind, transport) + suffix, []).append(run)
    finally:
        if kms is not None:
            kms.terminate()
            kms.wait(30)
        shutil.rmtree(build, ignore_errors=True)
    labels = {"local": "LocalTieredStorage (plain files)"}
    for transport in transports:
        labels[f"ours/{transport}"] = f"ours ({transport}, zstd + AES, {args.cache} cache)"
        labels[f"ours-plain/{transport}"] = f"ours ({transport}, no transform, {args.cache} cache)"
        labels[f"ours-iceberg/{transport}"] = f"ours ({transport}, Iceberg mode)"
        labels[f"ours-kms/{transport}"] = f"ours ({transport}, zstd + AES, aws-kms keys)"
    for key in list(labels):
        labels[key + AFTER] = labels[key] + ", compacted"

    def median(kind: str, field: str) -> float:
        return statistics.median(getattr(r, field) for r in runs[kind])

    print(
        f"catch-up of a {args.mb} MB topic (8 MiB segments) from remote storage, kafka-consumer-perf-test, "
        f"median of {args.rounds} round(s):"
    )

    def cpu_per_mb(kind: str) -> dict[str, float]:
        rs = runs[kind]
        return {k: statistics.median(r.cpu.get(k, 0.0) for r in rs) * 1000 / args.mb for k in rs[0].cpu}

    for kind, rs in runs.items():
        ratio = ""
        local = "local" + (AFTER if kind.endswith(AFTER) else "")
        if not kind.startswith("local") and local in runs:
            ratio = (
                f" = {median(kind, 'mbs') / median(local, 'mbs'):.2f}x LocalTieredStorage"
                f" (fetch-only {median(kind, 'fetch_mbs') / median(local, 'fetch_mbs'):.2f}x)"
            )
        print(f"  {labels[kind]:<58} {median(kind, 'mbs'):7.1f} MB/s{ratio}")
        print(
            f"  {'':<60}each round: "
            + ", ".join(f"{r.mbs:.1f}" for r in rs)
            + "; fetch-only: "
            + ", ".join(f"{r.fetch_mbs:.1f}" for r in rs)
        )
        cpu = cpu_per_mb(kind)
        print(
            f"  {'':<60}fetch latency {median(kind, 'fetch_latency_ms'):.2f} ms; CPU ms per MB: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items()))
            + f" = {sum(cpu.values()):.1f}; cores busy {median(kind, 'cores'):.2f} of {os.cpu_count()}"
        )
        timed = [r.plugin_ms for r in rs if r.plugin_ms is not None]
        if timed:
            seg = [statistics.median(t["segment"]) for t in timed]
            print(
                f"  {'':<60}inside the plugin per round: "
                + ", ".join(f"{sum(t['segment']) + sum(t['index']):.0f}" for t in timed)
                + f" ms ({len(timed[0]['segment'])} fetches, median {statistics.median(seg):.3f} ms each; "
                + f"{len(timed[0]['index'])} index fetches, {statistics.median(sum(t['index']) for t in timed):.0f} ms)"
            )
    for transport, suffix in [(t, s) for t in transports for s in ("", AFTER)]:  # Iceberg mode against classic
        ice = f"ours-iceberg/{transport}{suffix}"
        for classic in (f"ours/{transport}", f"ours-plain/{transport}"):
            if ice in runs and classic in runs:
                rate = [x.mbs / y.mbs for x, y in zip(runs[ice], runs[classic], strict=True)]
                when = (
                    " (after the compaction)" if suffix else (" (before a compaction)" if args.compact_iceberg else "")
                )
                print(
                    f"  Iceberg mode{when} / {labels[classic]} = "
                    f"{median(ice, 'mbs') / median(classic, 'mbs'):.2f}x the rate "
                    f"(per round: {', '.join(f'{x:.2f}' for x in rate)}; fetch-only "
                    f"{median(ice, 'fetch_mbs') / median(classic, 'fetch_mbs'):.2f}x)"
                )
    for transport in transports:  # aws-kms keys against file keys (issue 46: >= 0.95x; one unwrap per segment)
        kms_key, files = f"ours-kms/{transport}", f"ours/{transport}"
        if kms_key in runs:
            calls = [r.service_calls for r in runs[kms_key] if r.service_calls is not None]
            per_segment = ", ".join(f"{(c - 1) / n:.2f} ({c:.0f} calls, {n} segments)" for c, n in calls)
            print(f"  aws-kms calls per segment read, the public key left out: {per_segment}")
        if kms_key in runs and files in runs:
            rate = [x.mbs / y.mbs for x, y in zip(runs[kms_key], runs[files], strict=True)]
            print(
                f"  aws-kms keys / file keys = {median(kms_key, 'mbs') / median(files, 'mbs'):.2f}x the rate "
                f"(per round: {', '.join(f'{x:.2f}' for x in rate)}; fetch-only "
                f"{median(kms_key, 'fetch_mbs') / median(files, 'fetch_mbs'):.2f}x)"
            )
    for kind in ("ours", "ours-plain", "ours-iceberg", "ours-kms"):
        a, b = f"{kind}/inprocess", f"{kind}/sidecar"
        if a in runs and b in runs:
            rate = [x.mbs / y.mbs for x, y in zip(runs[a], runs[b], strict=True)]
            plugin_cpu = {t: sum(v for k, v in cpu_per_mb(t).items() if k != "consumer") for t in (a, b)}
            print(
                f"  {kind}: in-process / sidecar = {median(a, 'mbs') / median(b, 'mbs'):.2f}x the rate "
                f"(per round: {', '.join(f'{x:.2f}' for x in rate)}); CPU ms per MB of broker + sidecar: "
                f"in-process {plugin_cpu[a]:.1f}, sidecar {plugin_cpu[b]:.1f}"
            )
    return 0


AFTER = "@after"  # the key suffix of --compact-iceberg's second reads


def _setup_key(kind: str, transport: str) -> str:
    return kind if kind == "local" else f"{kind}/{transport}"


if __name__ == "__main__":
    sys.exit(main())
