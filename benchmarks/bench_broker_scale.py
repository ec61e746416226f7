"""A broker's bill at Kafka's defaults: one real Kafka 4.x broker tiering many partitions at once, then many
consumers catching up together, for each plugin in the same run (issue 56).

For each plugin: a single-node KRaft broker on 127.0.0.1 (``tests/support/kraft_cluster.py``, Kafka ``--kafka``,
default ``kafka_dist.NEWEST_4X``, heap 1 GiB as ``kafka-server-start`` gives it) with
``remote.log.manager.copier.thread.pool.size`` and ``remote.log.reader.threads`` at Kafka's default of 10; a topic of
``--partitions`` partitions (8 MiB segments) filled by ``kafka-producer-perf-test`` before tiered storage is
turned on for it (``remote.storage.enable=true``, ``local.retention.bytes=1``), so that all start copying at once:
the copy phase runs from the broker's first ``Copying`` log line to its last ``Copied`` one. Then ``--consumers``
consumers (one JVM, ``CatchUpConsumers.java``, one thread and consumer per partition) read partitions 0..N-1 from
the start together, all but the active segment through the plugin.

Plugins (``--only``, repeatable; default all but aiven):
  local           Kafka's LocalTieredStorage (plain files; the limit every ratio is taken to)
  ours-sidecar    this plugin, the README's S3 configuration (4 MiB chunks, zstd with the heuristic, AES-256-GCM
                  under an RSA key pair) on SeaweedFS, sidecar transport
  ours-inprocess  the same, in-process transport (the JVM inside our Python process)
  ours-iceberg    the same, the topic in Iceberg mode (rows of one Iceberg table, SQLite catalog, on SeaweedFS)
  aiven           Aiven's plugin built from its source (jvm-shim/aiven/build.sh; --aiven-dir), the same S3 store,
                  chunk size, zstd and AES, a 128 MiB memory chunk cache with 4 MiB prefetch as ours has
  iceberg-commits the Iceberg phase below (ours, sidecar)

Per plugin it prints: copy MB/s (segment bytes, as on disk); catch-up MB/s of all consumers together (key and
value bytes over the slowest consumer's time) and each consumer's rate, starved when outside 2x the median; fetch
latency p50/p99 from the broker's own timer of its remote reads (``kafka.log.remote:type=RemoteLogManager,
name=RemoteLogReaderFetchRateAndTimeMs``, read over JMX at the end: a reservoir biased to the last 5 minutes, so
the catch-up's reads); CPU seconds per GB of the broker JVM and sidecar together (from /proc), in each phase, and
the store's (SeaweedFS) beside it; the plugin's peak memory: for the sidecar its peak RSS (VmHWM, the shared
region included, as it is mapped whole), for every JVM the heap in use after a collection at its highest minus
the idle broker's after a full GC (``jstat -gc`` each second, ``jcmd GC.run``), for the in-process transport the
process's peak RSS minus its RSS when idle plus that heap growth (its broker starts with the whole heap touched,
``-Xms`` = ``-Xmx`` and ``-XX:+AlwaysPreTouch``, so that RSS growth is Python's and the JVM's native memory, not
the heap filling up). Each phase also gives the share of the host's cores that were busy (from /proc/stat): near
all of them, the phase was bound by CPU. Ratios are to LocalTieredStorage in the same run.

Aiven's plugin 1.0.0 runs on Kafka 3.x to 4.2: Kafka 4.3 moved ``FileRecords`` to ``...record.internal``, which
it loads on every copy (the error is thrown in Kafka's copier thread and never logged, so no copy ends). Compare
all plugins on 4.2.1, the newest 4.x whose LocalTieredStorage jar Maven Central serves: ``--kafka 4.2.1``.

Iceberg phase (``iceberg-commits``): ``--partitions`` partitions of one Iceberg-mode topic, each rolling a segment
every ``--roll-s`` seconds (``segment.ms``) under a steady ``--iceberg-rate`` of records, for
``--iceberg-minutes``: every copy commits to the one table. It prints the copy latency (the broker's ``Copying``
to ``Copied`` log lines: Parquet write, upload and commit) p50/p99, pyiceberg's commit retries per copy (its
"Commit failed due to a concurrent update" warnings in the broker's log), whether the copies kept up (segments
left uncopied), and the copy latency around the 10th commit against the last 10.

    make bench-broker-scale
    python benchmarks/bench_broker_scale.py [--mb 640] [--partitions 20] [--consumers 10]
        [--only local --only ours-sidecar ...] [--roll-s 60] [--iceberg-minutes 5]
    python benchmarks/bench_broker_scale.py --smoke       # about 3 minutes: small topic, short Iceberg phase

Not part of CI. The machine's load average is printed with each phase: a loaded machine lowers every rate.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # kafka_dist (the broker from Maven Central), kraft_cluster

import broker_harness as bh  # noqa: E402 - benchmarks/ is sys.path[0]
import kafka_dist as kd  # noqa: E402 - tests/support is on sys.path
import kraft_cluster as kc  # noqa: E402
from bench_config import encryption_config  # noqa: E402

from rsm.cli.emulators import StoreServer, start_seaweedfs  # noqa: E402
from rsm.cli.memory_budget import COPY, FETCH, PYTHON_BASELINE, MemoryBudget, memory_budget  # noqa: E402

SEGMENT_BYTES = 8 * 1024 * 1024
RECORD_SIZE = 1000
TOPIC = "t"
ICEBERG_TOPIC = "ice"
PLUGINS = ["local", "ours-sidecar", "ours-inprocess", "ours-iceberg", "aiven", "iceberg-commits"]
DEFAULT_PLUGINS = ["local", "ours-sidecar", "ours-inprocess", "ours-iceberg", "iceberg-commits"]
AIVEN_TAG = "v1.0.0"
AIVEN_JAR = f"tiered-storage-for-apache-kafka-{AIVEN_TAG[1:]}.jar"
MIB = 1024 * 1024
SMOKE = {"mb": 80, "partitions": 4, "consumers": 2, "roll_s": 10, "iceberg_minutes": 0.5}
"""--smoke's defaults: about 3 minutes on 2 quiet cores."""


def default_aiven_dir() -> Path:
    """Where jvm-shim/aiven/build.sh leaves Aiven's plugin (KTS_AIVEN_CACHE overrides it, as for the script)."""
    cache = os.environ.get("KTS_AIVEN_CACHE")
    return Path(cache) if cache else Path.home() / ".cache" / "kafka-tiered-storage" / f"aiven-{AIVEN_TAG}"


def aiven_class_path(directory: Path) -> str:
    """The plugin class path of Aiven's build in ``directory``; SystemExit naming the build step when absent."""
    jar = directory / AIVEN_JAR
    if not jar.is_file():
        raise SystemExit(
            f"Aiven's plugin is not built: no {jar}. Build it from source with jvm-shim/aiven/build.sh (it prints "
            f"the folder), then pass --aiven-dir FOLDER or set KTS_AIVEN_CACHE"
        )
    return f"{jar}:{directory / 'lib'}/*"


AIVEN_NEEDS = "org/apache/kafka/common/record/FileRecords.class"
"""A class Aiven's plugin 1.0.0 loads on every copy; Kafka 4.3 moved it to ``...record.internal``."""


def aiven_runs_on(kafka: Path, version: str) -> None:
    """Refuses a Kafka release whose kafka-clients jar lacks a class Aiven's copies need: there its copier threads
    fail with a NoClassDefFoundError that Kafka never logs, and the run would wait for copies that never end."""
    jars = sorted((kafka / "libs").glob("kafka-clients-*.jar"))
    if not jars:
        raise SystemExit(f"no kafka-clients jar in {kafka / 'libs'}")
    with zipfile.ZipFile(jars[0]) as jar:
        if AIVEN_NEEDS not in jar.namelist():
            raise SystemExit(
                f"Aiven's plugin {AIVEN_TAG} cannot copy on Kafka {version}: its {jars[0].name} has no "
                f"{AIVEN_NEEDS.removesuffix('.class').replace('/', '.')} (Kafka 4.3 moved it). Run the comparison on "
                "a release it runs on, e.g. --kafka 4.2.1"
            )


def _s3_lines(prefix: str, store: StoreServer, key_prefix: str) -> list[str]:
    return [f"rsm.config.{prefix}{k}={v}" for k, v in store.config().items()] + [f"rsm.config.key.prefix={key_prefix}"]


def plugin_properties(kind: str, work: Path, store: StoreServer | None, aiven_dir: Path | None) -> str:
    """The broker's remote.log.storage.manager.* and rsm.config.* lines for ``kind``."""
    if kind == "local":
        return (
            "remote.log.storage.manager.class.name=org.apache.kafka.server.log.remote.storage.LocalTieredStorage\n"
            f"rsm.config.dir={work / 'remote'}\n"
        )
    assert store is not None
    keys = encryption_config(work)
    transform = [
        "rsm.config.chunk.size=4194304",
        "rsm.config.compression.enabled=true",
        "rsm.config.compression.heuristic.enabled=true",
        *(f"rsm.config.{k}={v}" for k, v in keys.items() if k != "compression.enabled"),
    ]
    if kind == "aiven":
        assert aiven_dir is not None
        lines = [
            "remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager",
            f"remote.log.storage.manager.class.path={aiven_class_path(aiven_dir)}",
            "rsm.config.storage.backend.class=io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
            *_s3_lines("storage.", store, "aiven/"),
            *transform,
            "rsm.config.fetch.chunk.cache.class=io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
            "rsm.config.fetch.chunk.cache.size=134217728",
            "rsm.config.fetch.chunk.cache.prefetch.max.size=4194304",
        ]
        return "\n".join(lines) + "\n"
    transport = "inprocess" if kind == "ours-inprocess" else "sidecar"
    lines = [
        "remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager",
        f"rsm.config.python.executable={sys.executable}",
        f"rsm.config.python.path={ROOT}",
        f"rsm.config.jvm.transport={transport}",
        "rsm.config.storage.backend.class=s3",
        *_s3_lines("storage.", store, f"{kind}/"),
        *transform,
    ]
    if kind in ("ours-iceberg", "iceberg-commits"):
        topic = TOPIC if kind == "ours-iceberg" else ICEBERG_TOPIC
        lines += [
            f"rsm.config.iceberg.mode.topics.regex={topic}",
            f"rsm.config.iceberg.mode.catalog.sqlite.path={work / 'catalog.db'}",
        ]
    if transport == "sidecar":
        lines.append(f"remote.log.storage.manager.class.path={ROOT / 'rsm' / '_jars'}/*")
    return "\n".join(lines) + "\n"


def server_lines(copiers: int, readers: int) -> str:
    return f"remote.log.manager.copier.thread.pool.size={copiers}\nremote.log.reader.threads={readers}\n"


# --- measuring a running broker ------------------------------------------------------------------------


class HeapWatch:
    """``jstat -gc PID 1000`` running beside a phase; its samples once stopped."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        self._file = out.open("w")
        self.proc = subprocess.Popen(["jstat", "-gc", str(pid), "1000"], stdout=self._file, stderr=subprocess.STDOUT)

    def stop(self) -> list[bh.JstatSample]:
        self.proc.terminate()
        self.proc.wait(30)
        self._file.close()
        return bh.parse_jstat_gc(self.out.read_text(errors="replace"))


def idle_heap(pid: int) -> int | None:
    """The heap in use outside Eden right after a full collection (``jcmd GC.run``), bytes; None when the JVM
    cannot be attached to."""
    gc = subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, text=True, timeout=120)
    if gc.returncode != 0:
        return None
    r = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=120)
    samples = bh.parse_jstat_gc(r.stdout)
    return samples[-1].retained_bytes if samples else None


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def closed_segment_bytes(data: Path, topic: str, partitions: int) -> tuple[int, int]:
    """Bytes and number of the closed (all but the newest) ``.log`` segments of ``topic``'s partitions."""
    total = count = 0
    for p in range(partitions):
        logs = sorted((data / f"{topic}-{p}").glob("*.log"))
        total += sum(f.stat().st_size for f in logs[:-1])
        count += len(logs) - 1
    return total, count


def wait_for(what: str, done: object, timeout: float, node: kc.Node, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if not node.alive():
            raise RuntimeError(f"the broker exited while waiting for {what}; see {node.out}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done in {timeout:.0f} s; see {node.out}")
        time.sleep(every)


def configs_alter(cluster: kc.Cluster, topic: str, setting: str) -> None:
    args = ["--bootstrap-server", cluster.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", topic]
    cluster.tool("configs", *args, "--add-config", setting)


@dataclass
class Result:
    """One plugin's broker: the two phases and its memory."""

    kind: str
    copy_bytes: int = 0
    copy_seconds: float = float("nan")
    copy_cpu: dict[str, float] = field(default_factory=dict)
    read_bytes: int = 0
    read_seconds: float = float("nan")
    read_cpu: dict[str, float] = field(default_factory=dict)
    consumers: list[bh.ConsumerRun] = field(default_factory=list)
    fetch_ms: dict[str, float] = field(default_factory=dict)
    sidecar_peak: int | None = None
    sidecar_shmem: int | None = None
    heap_idle: int | None = None
    heap_peak: int | None = None
    rss_idle: int | None = None
    rss_peak: int | None = None
    load: list[str] = field(default_factory=list)
    wall: dict[str, float] = field(default_factory=dict)
    """Seconds each phase's CPU was counted over (copy: from the switch to the last copy seen)."""
    budget: int | None = None
    """What ``kts config check`` budgets for our plugin at this broker's settings, bytes."""
    budget_sides: dict[str, int | None] = field(default_factory=dict)
    """Phase -> the budget's terms for that work alone (``copies only``, ``fetches only``)."""
    peaks: dict[str, dict[str, int]] = field(default_factory=dict)
    """Phase -> the plugin's process (the sidecar, or the in-process broker): each /proc size's sampled peak."""
    busy: dict[str, float] = field(default_factory=dict)
    """Phase -> the share of the host's cores that were busy (0..1), every process on the host counted."""
    gil: dict[str, tuple[float, list[tuple[str, int]]]] = field(default_factory=dict)
    """--pyspy: phase -> the share of it the plugin's Python held the GIL, and its top innermost frames."""

    @property
    def copy_mbs(self) -> float:
        return self.copy_bytes / 1e6 / self.copy_seconds

    @property
    def read_mbs(self) -> float:
        return self.read_bytes / 1e6 / self.read_seconds

    def cpu_per_gb(self, phase: str) -> float:
        cpu = self.copy_cpu if phase == "copy" else self.read_cpu
        moved = self.copy_bytes if phase == "copy" else self.read_bytes
        return (cpu.get("broker", 0.0) + cpu.get("sidecar", 0.0)) / (moved / 1e9) if moved else float("nan")

    def store_cpu_per_gb(self, phase: str) -> float:
        cpu = self.copy_cpu if phase == "copy" else self.read_cpu
        moved = self.copy_bytes if phase == "copy" else self.read_bytes
        return cpu.get("store", 0.0) / (moved / 1e9) if moved else float("nan")

    def summary(self) -> str:
        return (
            f"{self.kind}: copy {self.copy_mbs:.1f} MB/s, catch-up {self.read_mbs:.1f} MB/s, remote fetch p50 "
            f"{self.fetch_ms.get('50thPercentile', float('nan')):.1f} ms p99 "
            f"{self.fetch_ms.get('99thPercentile', float('nan')):.1f} ms, CPU s/GB copy {self.cpu_per_gb('copy'):.1f} "
            f"catch-up {self.cpu_per_gb('read'):.1f}, plugin memory {_mib(self.plugin_memory)}"
        )

    def phase_peak(self, phase: str) -> int | None:
        """The plugin's own process at its highest in ``phase`` (what the budget counts): the sidecar's RSS, its
        shared region included, or the in-process broker's RSS over its idle RSS."""
        rss = self.peaks.get(phase, {}).get("VmRSS")
        if rss is None:
            return None
        if self.kind == "ours-inprocess":
            return None if self.rss_idle is None else rss - self.rss_idle
        return rss

    @property
    def heap_growth(self) -> int | None:
        if self.heap_peak is None or self.heap_idle is None:
            return None
        return max(0, self.heap_peak - self.heap_idle)

    @property
    def plugin_memory(self) -> int | None:
        """The plugin's peak memory beside the broker: see the module's docstring."""
        heap = self.heap_growth
        if self.kind == "ours-inprocess":
            if self.rss_peak is None or self.rss_idle is None:
                return None
            return self.rss_peak - self.rss_idle + (heap or 0)
        if self.sidecar_peak is not None:
            return self.sidecar_peak + (heap or 0)
        return heap


def _cpu(broker: int, store: StoreServer | None) -> dict[str, float]:
    cpu = bh.tree_cpu(broker)
    if store is not None and store.process is not None:
        cpu["store"] = bh.pid_cpu(store.process.pid)
    return cpu


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def plugin_pid(kind: str, broker: int) -> int | None:
    """Our Python's process: the in-process broker itself, or the broker's sidecar; None for the Java plugins."""
    return broker if kind == "ours-inprocess" else bh.sidecar_pid(broker)


def _spy(kind: str, broker: int, prefix: str | None, phase: str) -> bh.PySpy | None:
    """py-spy on our Python (the sidecar, or the in-process broker's own process) when ``--pyspy`` asks for it."""
    if prefix is None or kind in ("local", "aiven"):
        return None
    pid = plugin_pid(kind, broker)
    if pid is None:
        raise RuntimeError(f"{kind}: no sidecar under the broker {broker} to profile")
    spy = bh.PySpy(pid, Path(f"{prefix}.{kind}.{phase}.txt"))
    time.sleep(1)  # py-spy attaches
    return spy


def config_check_budget(plugin: str, args: argparse.Namespace) -> MemoryBudget | None:
    """``kts config check``'s budget for the plugin lines ``plugin`` at this run's thread counts."""
    prefix = "rsm.config."
    configs = {
        k[len(prefix) :]: v for k, _, v in (line.partition("=") for line in plugin.splitlines()) if k.startswith(prefix)
    }
    broker = server_lines(args.copier_threads, args.reader_threads)
    return memory_budget(configs, dict(line.split("=", 1) for line in broker.splitlines()))


def start_broker(kind: str, kafka: Path, work: Path, args: argparse.Namespace, store: StoreServer | None) -> kc.Cluster:
    plugin = plugin_properties(kind, work, store, args.aiven_dir)
    cluster = kc.make_cluster(kafka, work / "kafka", 1, plugin, server_lines(args.copier_threads, args.reader_threads))
    cluster.heap = "-Xmx1g"
    cluster.jvm_options = kc.BENCHMARK_JVM_OPTIONS
    if kind == "ours-inprocess":  # the heap resident from the start: the RSS it grows by is the plugin's
        cluster.jvm_options = (*kc.BENCHMARK_JVM_OPTIONS, "-Xms1g", "-XX:+AlwaysPreTouch")
    cluster.rlm_log_level = "INFO"
    cluster.inprocess = kind == "ours-inprocess"
    try:
        cluster.start(timeout=300)
    except BaseException:
        cluster.stop()
        _cleanup(work)
        raise
    return cluster


def _cleanup(work: Path) -> None:
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"  kept {work}")


def run_plugin(kind: str, kafka: Path, args: argparse.Namespace, store: StoreServer | None, classes: Path) -> Result:
    """One broker with ``kind``'s plugin: the copy phase, then the catch-up phase."""
    work = Path(tempfile.mkdtemp(prefix=f"kts-scale-{kind}-"))
    result = Result(kind)
    if kind.startswith("ours"):
        budget = config_check_budget(plugin_properties(kind, work, store, args.aiven_dir), args)
        if budget is not None:
            result.budget = budget.total
            sides = {"copy": budget.side_total(COPY), "catch-up": budget.side_total(FETCH)}
            if kind == "ours-inprocess":  # the interpreter is in the idle broker's RSS the peaks are taken over
                sides = {k: None if v is None else v - PYTHON_BASELINE for k, v in sides.items()}
            result.budget_sides = sides
    cluster = start_broker(kind, kafka, work, args, store if kind != "local" else None)
    node = cluster.nodes[0]
    try:
        assert node.process is not None
        broker = node.process.pid
        cluster.create_topic(
            TOPIC,
            args.partitions,
            1,
            segment_bytes=str(SEGMENT_BYTES),
        )
        result.heap_idle = idle_heap(broker)
        result.rss_idle = bh.proc_status(broker).get("VmRSS")
        records = args.mb * 1_000_000 // RECORD_SIZE
        cluster.tool(
            "producer-perf",
            *["--topic", TOPIC, "--num-records", str(records), "--record-size", str(RECORD_SIZE)],
            *["--throughput", "-1", "--producer-props", f"bootstrap.servers={cluster.bootstrap}", "acks=1"],
            *["linger.ms=20", "batch.size=262144"],
            timeout=1800,
        )
        data = node.work / "data"
        result.copy_bytes, segments = closed_segment_bytes(data, TOPIC, args.partitions)
        heap = HeapWatch(broker, work / "jstat.txt")
        python = plugin_pid(kind, broker)

        def watch() -> bh.StatusWatch | None:
            return None if python is None else bh.StatusWatch(python)

        if python is not None:
            result.peaks["idle"] = bh.peak_sizes([bh.proc_status(python)], bh.StatusWatch.FIELDS)
        sizes = watch()
        result.load.append(load_average())
        spy = _spy(kind, broker, args.pyspy, "copy")
        before, started, host = _cpu(broker, store), time.monotonic(), bh.host_cpu()
        configs_alter(cluster, TOPIC, "remote.storage.enable=true,local.retention.bytes=1")

        def copied() -> bool:
            return len(bh.parse_copy_times(node.out.read_text(errors="replace"))) >= segments

        wait_for(f"{kind}: {segments} segments copied", copied, 1800, node, every=0.5)
        result.copy_cpu = _delta(_cpu(broker, store), before)
        if sizes is not None:
            result.peaks["copy"] = sizes.stop()
        result.busy["copy"] = bh.busy_share(host, bh.host_cpu())
        result.wall["copy"] = time.monotonic() - started
        if spy is not None:
            result.gil["copy"] = spy.stop()
        copies = bh.parse_copy_times(node.out.read_text(errors="replace"))
        result.copy_seconds = max(c[1] for c in copies) - min(c[0] for c in copies)

        def tiered() -> bool:  # every closed segment deleted locally: the consumers' reads go to the plugin
            dirs = [data / f"{TOPIC}-{p}" for p in range(args.consumers)]
            return all(len(list(d.glob("*.log"))) == 1 and not list(d.glob("*.deleted")) for d in dirs)

        wait_for(f"{kind}: local segments deleted", tiered, 600, node)
        result.load.append(load_average())
        spy = _spy(kind, broker, args.pyspy, "catch-up")
        sizes = watch()
        before, started, host = _cpu(broker, store), time.monotonic(), bh.host_cpu()
        java = kc.java_command(kafka, "CatchUpConsumers", "-Xmx512m", cluster._log4j("tools", "WARN", "WARN"))
        java[2] = f"{classes}:{java[2]}"  # the class path: the compiled consumers first
        r = subprocess.run(
            [*java, cluster.bootstrap, TOPIC, str(args.consumers)], capture_output=True, text=True, timeout=1800
        )
        if r.returncode != 0:
            raise RuntimeError(f"{kind}: the consumers failed ({r.returncode}):\n{r.stderr[-4000:]}")
        result.read_cpu = _delta(_cpu(broker, store), before)
        result.busy["catch-up"] = bh.busy_share(host, bh.host_cpu())
        result.wall["catch-up"] = time.monotonic() - started
        if spy is not None:
            result.gil["catch-up"] = spy.stop()
        result.consumers = bh.parse_consumers(r.stdout)
        if len(result.consumers) != args.consumers:
            raise RuntimeError(f"{kind}: {len(result.consumers)} consumer results of {args.consumers}:\n{r.stdout}")
        result.read_bytes = sum(c.bytes for c in result.consumers)
        result.read_seconds = max(c.seconds for c in result.consumers)
        result.heap_peak = bh.heap_after_gc_peak(heap.stop())
        if sizes is not None:
            result.peaks["catch-up"] = sizes.stop()
        attrs = "Count,50thPercentile,99thPercentile,Mean"
        jmx = cluster.tool(
            "jmx",
            *["--jmx-url", f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{node.jmx_port}/jmxrmi"],
            *["--object-name", bh.READER_TIMER, "--attributes", attrs, "--one-time", "true"],
            *["--report-format", "properties"],
        )
        result.fetch_ms = bh.parse_jmx_properties(jmx).get(bh.READER_TIMER, {})
        side = bh.sidecar_pid(broker)
        if side is not None:
            status = bh.proc_status(side)
            result.sidecar_peak, result.sidecar_shmem = status.get("VmHWM"), status.get("RssShmem")
        result.rss_peak = bh.proc_status(broker).get("VmHWM")
        if re.search(r"\] ERROR ", node.out.read_text(errors="replace")):
            print(f"  note: {kind}: ERROR lines in {node.out}")
    finally:
        cluster.stop()
        _cleanup(work)
    return result


@dataclass
class IcebergResult:
    latencies: list[float]
    retries: int
    left: int
    expected: int
    load: str


def run_iceberg_commits(kafka: Path, args: argparse.Namespace, store: StoreServer) -> IcebergResult:
    """``--partitions`` partitions of one Iceberg-mode topic rolling a segment every ``--roll-s`` seconds."""
    work = Path(tempfile.mkdtemp(prefix="kts-scale-iceberg-"))
    cluster = start_broker("iceberg-commits", kafka, work, args, store)
    node = cluster.nodes[0]
    try:
        cluster.create_topic(
            ICEBERG_TOPIC,
            args.partitions,
            1,
            remote_storage_enable="true",
            segment_ms=str(args.roll_s * 1000),
            local_retention_bytes="1",
        )
        seconds = int(args.iceberg_minutes * 60)
        rate = args.iceberg_rate
        cluster.tool(
            "producer-perf",
            *["--topic", ICEBERG_TOPIC, "--num-records", str(rate * seconds), "--record-size", str(RECORD_SIZE)],
            *["--throughput", str(rate), "--producer-props", f"bootstrap.servers={cluster.bootstrap}", "acks=1"],
            *["linger.ms=100", "partitioner.ignore.keys=true"],
            timeout=seconds + 600,
        )
        load = load_average()
        time.sleep(min(args.roll_s, 60) + 5)  # the last rolls' copies
        data = node.work / "data"
        _, left = closed_segment_bytes(data, ICEBERG_TOPIC, args.partitions)
        log = node.out.read_text(errors="replace")
        copies = bh.parse_copy_times(log)
        retries = len(re.findall(r"Commit failed due to a concurrent update, retrying", log))
        if re.search(r"\] ERROR ", log):
            print(f"  note: iceberg-commits: ERROR lines in {node.out}")
    finally:
        cluster.stop()
        _cleanup(work)
    expected = args.partitions * seconds // args.roll_s
    return IcebergResult([(end - start) * 1000 for start, end, _ in copies], retries, left, expected, load)


# --- the report ---------------------------------------------------------------------------------------------


def _ratio(value: float, limit: float | None) -> str:
    if limit is None or limit != limit or limit == 0 or value != value:
        return ""
    return f" ({value / limit:.2f}x)"


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:,.0f} MiB"


LABELS = {
    "local": "LocalTieredStorage (files)",
    "ours-sidecar": "ours, S3, sidecar",
    "ours-inprocess": "ours, S3, in-process",
    "ours-iceberg": "ours, S3, Iceberg mode, sidecar",
    "aiven": "Aiven, S3",
}


def report(results: list[Result], args: argparse.Namespace) -> None:
    local = next((r for r in results if r.kind == "local"), None)
    print(
        f"\n{args.partitions} partitions tiered at once ({args.copier_threads} copier threads), then {args.consumers} "
        f"consumers catching up together ({args.reader_threads} reader threads); {args.mb} MB produced, 8 MiB "
        f"segments; ratios (in brackets) to LocalTieredStorage in this run; {os.cpu_count()} cores"
    )
    for r in results:
        p50, p99 = r.fetch_ms.get("50thPercentile", float("nan")), r.fetch_ms.get("99thPercentile", float("nan"))
        lp50 = local.fetch_ms.get("50thPercentile") if local else None
        lp99 = local.fetch_ms.get("99thPercentile") if local else None
        rates = {c.partition: c.mbs for c in r.consumers}
        hungry = bh.starved(rates)
        print(f"  {LABELS[r.kind]}  (load average at the copy, at the catch-up: {'; '.join(r.load)})")
        print(
            f"    copy {r.copy_mbs:7.1f} MB/s{_ratio(r.copy_mbs, local.copy_mbs if local else None)}"
            f" ({r.copy_bytes / 1e6:.0f} MB in {r.copy_seconds:.1f} s); catch-up {r.read_mbs:7.1f} MB/s"
            f"{_ratio(r.read_mbs, local.read_mbs if local else None)} ({r.read_bytes / 1e6:.0f} MB in "
            f"{r.read_seconds:.1f} s)"
        )
        print(
            f"    remote fetch (broker's RemoteLogReaderFetchRateAndTimeMs, {r.fetch_ms.get('Count', 0):.0f} reads): "
            f"p50 {p50:.1f} ms{_ratio(p50, lp50)}, p99 {p99:.1f} ms{_ratio(p99, lp99)}"
        )
        print(
            "    consumers MB/s: "
            + ", ".join(f"{c.partition}:{c.mbs:.1f}" for c in sorted(r.consumers))
            + f"; median {statistics.median(rates.values()):.1f}; "
            + (f"STARVED (outside 2x the median): {hungry}" if hungry else "none starved")
        )
        cg, rg = r.cpu_per_gb("copy"), r.cpu_per_gb("read")
        lcg = local.cpu_per_gb("copy") if local else None
        lrg = local.cpu_per_gb("read") if local else None
        store = ""
        if "store" in r.copy_cpu:
            store = f"; the store (SeaweedFS) besides: copy {r.store_cpu_per_gb('copy'):.1f}, "
            store += f"catch-up {r.store_cpu_per_gb('read'):.1f}"
        print(
            f"    CPU s per GB, broker + sidecar: copy {cg:.1f}{_ratio(cg, lcg)}, catch-up {rg:.1f}{_ratio(rg, lrg)}"
            + store
        )
        if "sidecar" in r.copy_cpu:
            cw, rw = r.wall["copy"], r.wall["catch-up"]
            side, jvm = (
                (r.copy_cpu["sidecar"] / cw, r.read_cpu.get("sidecar", 0.0) / rw),
                (
                    r.copy_cpu.get("broker", 0.0) / cw,
                    r.read_cpu.get("broker", 0.0) / rw,
                ),
            )
            print(
                f"    cores busy, sidecar: copy {side[0]:.2f}, catch-up {side[1]:.2f}; "
                f"broker JVM: copy {jvm[0]:.2f}, catch-up {jvm[1]:.2f}"
            )
        if r.busy:
            cores = os.cpu_count() or 1
            print(
                "    host cores busy, every process: "
                + ", ".join(f"{phase} {share * cores:.2f} of {cores}" for phase, share in r.busy.items())
            )
        for phase, (held, top) in r.gil.items():
            frames = ", ".join(f"{frame} {count}" for frame, count in top)
            print(f"    py-spy: the GIL held {held:.0%} of the {phase}; innermost frames holding it: {frames}")
        parts = [f"heap after GC over idle {_mib(r.heap_growth)} (idle {_mib(r.heap_idle)})"]
        if r.sidecar_peak is not None:
            parts.append(f"sidecar peak RSS {_mib(r.sidecar_peak)} (shared region resident {_mib(r.sidecar_shmem)})")
        if r.kind == "ours-inprocess":
            parts.append(f"process peak RSS {_mib(r.rss_peak)} over idle {_mib(r.rss_idle)}")
        for phase, peaks in r.peaks.items():
            parts.append(f"{phase}: " + ", ".join(f"{k} {_mib(v)}" for k, v in peaks.items()))
        if r.budget is not None:
            parts.append(f"kts config check budgets {_mib(r.budget)}{_ratio(r.plugin_memory or 0, r.budget)}")
        for phase, side in r.budget_sides.items():
            peak = r.phase_peak(phase)
            if side is not None and peak is not None:
                parts.append(
                    f"{phase}: the plugin's process peaked at {_mib(peak)}, its budget for that work alone is "
                    f"{_mib(side)} ({side / peak:.2f}x)"
                )
        print(f"    plugin memory {_mib(r.plugin_memory)}: " + "; ".join(parts))


def sizing_rows(results: list[Result], args: argparse.Namespace) -> list[str]:
    """docs/operations.md's sizing table, one row per plugin of this run (Markdown)."""
    rows = []
    for r in results:
        rows.append(
            f"| {args.partitions} / {args.consumers} | {args.copier_threads} / {args.reader_threads} | "
            f"{LABELS[r.kind]} | {_mib(r.plugin_memory)} | {_mib(r.budget) if r.budget is not None else '-'} | "
            f"{r.cpu_per_gb('copy'):.0f} | {r.cpu_per_gb('read'):.0f} |"
        )
    return rows


def report_iceberg(ice: IcebergResult, args: argparse.Namespace) -> None:
    lat = ice.latencies
    print(
        f"\nIceberg mode: {args.partitions} partitions rolling a segment every {args.roll_s} s into one table for "
        f"{args.iceberg_minutes} min ({args.iceberg_rate} records/s; load average {ice.load})"
    )
    if not lat:
        print("  no copies were logged")
        return
    print(
        f"  {len(lat)} copies (about {ice.expected} segments rolled); copy latency, commit included: p50 "
        f"{bh.percentile(lat, 0.5):.0f} ms, p99 {bh.percentile(lat, 0.99):.0f} ms, max {max(lat):.0f} ms; "
        f"pyiceberg commit retries {ice.retries} ({ice.retries / len(lat):.2f} per copy); "
        f"{ice.left} closed segments not yet copied at the end"
    )
    if len(lat) >= 25:
        early = statistics.median(lat[5:15])
        late = statistics.median(lat[-10:])
        print(
            f"  table age: copies 6-15 median {early:.0f} ms, the last 10 (commits {len(lat) - 9}-{len(lat)}) "
            f"median {late:.0f} ms = {late / early:.2f}x"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kafka", help="Kafka release to assemble from Maven Central (default: kafka_dist.NEWEST_4X)")
    p.add_argument("--kafka-home", help="an existing Kafka installation (its libs/) instead; --kafka names its release")
    p.add_argument(
        "--only", action="append", choices=PLUGINS, help="run this plugin (repeatable); default: all but aiven"
    )
    p.add_argument("--mb", type=int, default=640, help="MB produced to the topic before the copies (default 640)")
    p.add_argument("--partitions", type=int, default=20, help="partitions tiered at once (default 20)")
    p.add_argument("--consumers", type=int, default=10, help="consumers catching up together (default 10)")
    p.add_argument("--copier-threads", type=int, default=10, help="remote.log.manager.copier.thread.pool.size")
    p.add_argument("--reader-threads", type=int, default=10, help="remote.log.reader.threads")
    p.add_argument("--roll-s", type=int, default=60, help="Iceberg phase: segment.ms in seconds (default 60)")
    p.add_argument("--iceberg-minutes", type=float, default=5, help="Iceberg phase: minutes of traffic (default 5)")
    p.add_argument("--iceberg-rate", type=int, default=1000, help="Iceberg phase: records per second (1000 bytes)")
    p.add_argument("--aiven-dir", type=Path, help="Aiven's build (default: where jvm-shim/aiven/build.sh puts it)")
    p.add_argument(
        "--pyspy",
        metavar="FILE",
        help="record the sidecar with py-spy --gil (only samples holding the GIL) in each phase: "
        "FILE.<plugin>.<phase>.txt, collapsed stacks",
    )
    p.add_argument("--smoke", action="store_true", help=f"a short run: the defaults become {SMOKE}")
    if "--smoke" in sys.argv[1:]:
        p.set_defaults(**SMOKE)  # flags given still win
    args = p.parse_args()
    if args.consumers > args.partitions:
        p.error(f"--consumers {args.consumers} is more than --partitions {args.partitions}")
    kinds = list(dict.fromkeys(args.only or DEFAULT_PLUGINS))
    version = args.kafka or kd.NEWEST_4X
    kafka = Path(args.kafka_home) if args.kafka_home else kd.kafka_home(version)
    if "aiven" in kinds:  # a missing build or a release it cannot run on is an error before anything starts
        args.aiven_dir = args.aiven_dir or default_aiven_dir()
        aiven_class_path(args.aiven_dir)
        aiven_runs_on(kafka, version)
    print(f"Kafka {version} from {kafka}; load average {load_average()}")
    if "local" in kinds:
        print(f"LocalTieredStorage from {bh.local_tiered_storage_jar(kafka).name}")
    build = Path(tempfile.mkdtemp(prefix="kts-scale-build-"))
    store = None
    results: list[Result] = []
    ice = None
    failed: list[str] = []
    try:
        classes = bh.compile_java(kafka, ROOT / "benchmarks" / "CatchUpConsumers.java", build)
        if any(k != "local" for k in kinds):
            store = start_seaweedfs(build / "seaweedfs", credentials=True)
        for kind in kinds:
            if kind == "iceberg-commits":
                assert store is not None
                print(f"running {kind} ...", flush=True)
                ice = run_iceberg_commits(kafka, args, store)
                continue
            print(f"running {kind} ...", flush=True)
            try:
                r = run_plugin(kind, kafka, args, store if kind != "local" else None, classes)
            except (RuntimeError, subprocess.SubprocessError) as e:  # the other plugins still run
                print(f"  {kind} FAILED: {e}", flush=True)
                failed.append(kind)
                continue
            results.append(r)
            print(f"  {r.summary()}", flush=True)  # a line that survives a run stopped before the report
    finally:
        if store is not None:
            store.stop()
        shutil.rmtree(build, ignore_errors=True)
    if results:
        report(results, args)
        print(
            "\nsizing rows (partitions / consumers, copier / reader threads, plugin, peak memory, budget, CPU s/GB "
            "copy, catch-up):"
        )
        print("\n".join(sizing_rows(results, args)))
    if ice is not None:
        report_iceberg(ice, args)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
