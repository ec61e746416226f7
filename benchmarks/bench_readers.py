"""Many readers at once: consumers catching up, each on its own partition, through the sidecar on S3 behind the
latency store (every request waits ``--delay-ms``, 20 ms by default, as a cloud store's first byte does).

    .venv/bin/python benchmarks/bench_readers.py [--readers 10] [--segment-mb 64] [--delay-ms 20]

A broker serves lagging consumers from ``remote.log.reader.threads`` threads (10 by default). Here each of
``--readers`` Java threads plays one: it reads its partition's segment front to back the broker's way, opening
``fetchLogSegment`` at a position, reading ``--fetch-bytes`` (``max.partition.fetch.bytes``) and closing, through
the shim's sidecar with the plugin's default caches, zstd + AES-256-GCM. Each run starts a fresh sidecar (a cold
memory tier); the store is SeaweedFS behind ``latency_store``'s proxy, which counts the requests.

Printed, in one run: one reader's MB/s, all readers' total MB/s next to it and next to the raw decode limit (zstd +
AES-GCM over the same chunks in memory, as many threads as cores), GETs per MB, the chunk cache's hit ratio, and
the slowest reader against the median one. Targets (issue 31): readers >= 1.6x one reader on 2 cores; slowest >=
0.5x the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # jvm_testing: the shim tests' helpers

import jvm_testing as jt  # noqa: E402 - tests/ is on sys.path
from bench_config import encryption_config  # noqa: E402 - benchmarks/ is sys.path[0]
from latency_store import LatencyStore, latency_store  # noqa: E402

CHUNK_CACHE_BEAN = "aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics"
TOPIC_ID = "Rd8rsBnChQ0-mAnYrEaDeA"


@dataclass(frozen=True)
class Partition:
    files: Any  # rsm.kafka.segment_files.SegmentFiles
    meta: Any  # RemoteLogSegmentMetadata

    @property
    def size(self) -> int:
        return int(self.files.size)


@dataclass(frozen=True)
class Run:
    readers: int
    seconds: float
    bytes: int
    per_reader_mbs: list[float]
    gets_log: int
    gets_all: int
    hit_ratio: float
    cpu: dict[str, float]  # CPU seconds per process during the run
    runqueue_wait: float  # seconds the processes' threads waited for a core during the run

    @property
    def total_mbs(self) -> float:
        return self.bytes / self.seconds / 1e6


def _partitions(work: Path, count: int, segment_mb: int) -> list[Partition]:
    from rsm.kafka.large_segment import write_large_segment
    from rsm.metadata import TopicIdPartition

    out = []
    for p in range(count):
        files = write_large_segment(work / f"p{p}", segment_mb * 1024 * 1024, seed=100 + p)
        out.append(Partition(files, files.to_metadata(TopicIdPartition(TOPIC_ID, "readers", p))))
    return out


def _plugin_config(work: Path, chunk_size: int) -> dict[str, str]:
    return {"chunk.size": str(chunk_size), "compression.level": "3", **encryption_config(work)}


def _copy_all(store: LatencyStore, work: Path, chunk_size: int, parts: list[Partition]) -> None:
    """Tiered at local speed (straight to the server, not through the proxy), by the plugin's own copy path."""
    from rsm import RemoteStorageManager

    with RemoteStorageManager() as m:
        m.configure({**store.direct_config(), **_plugin_config(work, chunk_size)})
        for part in parts:
            m.copy_log_segment_data(part.meta, part.files.to_log_segment_data())


def _read_partition(rsm: Any, jmeta: Any, size: int, fetch_bytes: int) -> int:
    """The broker's catch-up on one partition: open at a position, read up to ``fetch_bytes``, close, go on."""
    import jpype

    buf = jpype.JArray(jpype.JByte)(64 * 1024)
    pos = 0
    while pos < size:
        stream = rsm.fetchLogSegment(jmeta, pos)
        got = 0
        try:
            while got < fetch_bytes:
                n = stream.read(buf, 0, min(len(buf), fetch_bytes - got))
                if n < 0:
                    break
                got += n
        finally:
            stream.close()
        if got == 0:
            raise RuntimeError(f"no bytes at position {pos} of {size}: the stream ended early")
        pos += got
    return pos


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a whole process (all its threads) so far, from /proc; 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _runqueue_wait_seconds(pid: int | None) -> float:
    """Time the process's live threads spent ready to run but waiting for a core (/proc/<pid>/task/*/schedstat):
    on a shared machine, what separates waiting for the neighbours from waiting for the store."""
    if pid is None:
        return 0.0
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def _hit_ratio() -> float:
    import jpype

    server = jpype.JClass("java.lang.management.ManagementFactory").getPlatformMBeanServer()
    name = jpype.JClass("javax.management.ObjectName")(CHUNK_CACHE_BEAN)
    hits = float(server.getAttribute(name, "cache-hits-total"))
    misses = float(server.getAttribute(name, "cache-misses-total"))
    return hits / (hits + misses) if hits + misses else 0.0


def run_readers(
    store: LatencyStore,
    work: Path,
    chunk_size: int,
    parts: list[Partition],
    fetch_bytes: int,
    overrides: dict[str, str],
) -> Run:
    """Every partition read at once, one Java thread each, through a fresh sidecar configured with ``overrides``."""
    import jpype

    cfg = {
        **{k: v for k, v in jt.base_config(work).items() if not k.startswith("storage.")},  # the sidecar's Python
        **store.plugin_config(),
        **_plugin_config(work, chunk_size),
        "jvm.transport": "sidecar",
        **overrides,
    }
    jcfg = jpype.JClass("java.util.HashMap")()
    for k, v in cfg.items():
        jcfg.put(k, v)
    rsm = jpype.JClass(jt.HARNESS_CLASS).create(jt.SHIM_CLASS, jcfg)
    try:
        jmetas = [jt.java_meta(p.meta) for p in parts]
        offset_index = jpype.JClass("org.apache.kafka.server.log.remote.storage.RemoteStorageManager$IndexType").OFFSET
        for jmeta in jmetas:  # as a broker does before its first fetch: the offset index (and so the manifest)
            rsm.fetchIndex(jmeta, offset_index).close()
        pids = {
            "sidecar": int(rsm.sidecarPid()),
            "JVM (broker threads)": os.getpid(),
            "latency proxy": store.process.pid,
            "S3 server": store.server.process.pid if store.server.process is not None else None,
        }
        cpu_before = {k: _cpu_seconds(pid) for k, pid in pids.items()}
        wait_before = sum(_runqueue_wait_seconds(pid) for pid in pids.values())
        before = store.stats()
        elapsed = [0.0] * len(parts)
        failures: list[BaseException] = []
        start = threading.Barrier(len(parts) + 1)

        def reader(i: int) -> None:
            try:
                start.wait()
                t0 = time.perf_counter()
                _read_partition(rsm, jmetas[i], parts[i].size, fetch_bytes)
                elapsed[i] = time.perf_counter() - t0
            except BaseException as e:  # noqa: BLE001 - reported after the join
                failures.append(e)

        threads = [threading.Thread(target=reader, args=(i,), name=f"reader-{i}") for i in range(len(parts))]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        if failures:
            raise failures[0]
        used = store.stats().minus(before)
        cpu = {k: _cpu_seconds(pid) - cpu_before[k] for k, pid in pids.items()}
        waited = sum(_runqueue_wait_seconds(pid) for pid in pids.values()) - wait_before
        time.sleep(1.1)  # the shim's metrics snapshot is cached for a second: read a fresh one
        ratio = _hit_ratio()
    finally:
        rsm.close()
    total = sum(p.size for p in parts)
    return Run(
        len(parts),
        seconds,
        total,
        [p.size / e / 1e6 for p, e in zip(parts, elapsed, strict=True)],
        used.get("log"),
        sum(v for k, v in used.by_kind.items() if k.startswith("GET")),
        ratio,
        cpu,
        waited,
    )


def _measure(
    store: LatencyStore, work: Path, parts: list[Partition], args: argparse.Namespace, variant: str
) -> tuple[Run, Run]:
    """One reader, then all of them, ``args.rounds`` times alternately; the best run of each."""
    overrides = dict(kv.split("=", 1) for kv in variant.split(",") if kv)
    one: Run | None = None
    many: Run | None = None
    for _ in range(args.rounds):
        r1 = run_readers(store, work, args.chunk_size, parts[:1], args.fetch_bytes, overrides)
        rn = run_readers(store, work, args.chunk_size, parts, args.fetch_bytes, overrides)
        one = r1 if one is None or r1.total_mbs > one.total_mbs else one
        many = rn if many is None or rn.total_mbs > many.total_mbs else many
    assert one is not None and many is not None
    return one, many


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readers", type=int, default=10)
    p.add_argument("--segment-mb", type=int, default=64, help="each partition's segment, in MiB")
    p.add_argument("--chunk-size", type=int, default=4 * 1024 * 1024)
    p.add_argument("--fetch-bytes", type=int, default=1024 * 1024, help="bytes per stream (max.partition.fetch.bytes)")
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=1, help="alternating one-reader and many-reader runs; best of each")
    p.add_argument("--work-dir", default=None)
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help="also run with these plugin/shim settings (repeatable); the defaults always run first",
    )
    args = p.parse_args()
    cores = os.cpu_count() or 2

    import jpype
    from bench_copy_fetch import phase_raw

    jt.ensure_built()
    with tempfile.TemporaryDirectory(prefix="kts-readers-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        parts = _partitions(work, args.readers, args.segment_mb)
        print(
            f"{args.readers} partitions x {parts[0].size / 1e6:.0f} MB of real Kafka batches, written in "
            f"{time.perf_counter() - t0:.1f} s; chunk {args.chunk_size} B, zstd L3 + AES-256-GCM, sidecar, "
            f"S3 (SeaweedFS) with {args.delay_ms:.0f} ms per request, {cores} cores"
        )
        raw = phase_raw(parts[0].files.log, args.chunk_size, cores)["fetch_mbs"]
        jpype.startJVM("-Xmx512m", classpath=jt.classpath_list())
        with latency_store(work / "store", delay_ms=args.delay_ms) as store:
            _copy_all(store, work, args.chunk_size, parts)
            variants = [""] + args.variant
            results = {v: _measure(store, work, parts, args, v) for v in variants}
        print(f"raw decode limit (zstd + AES-GCM in memory, {cores} threads): {raw:7.1f} MB/s")
        for variant, (one, many) in results.items():
            print(f"\nsettings: {variant or 'defaults'}")
            for run in (one, many):
                mb = run.bytes / 1e6
                print(
                    f"{run.readers:3d} reader(s): {run.total_mbs:7.1f} MB/s total  "
                    f"{run.total_mbs / raw:.2f}x raw decode  "
                    f"GETs per MB: .log {run.gets_log / mb:.3f}, all {run.gets_all / mb:.3f}   "
                    f"chunk cache hit ratio {run.hit_ratio:.2f}"
                )
                busy = sum(run.cpu.values())
                print(
                    f"      CPU during the run: {busy / run.seconds:.2f} of {cores} cores busy, threads waiting for a "
                    f"core {run.runqueue_wait / run.seconds:.2f} s per s; "
                    + ", ".join(f"{k} {v / mb * 1000:.1f} ms/MB" for k, v in run.cpu.items())
                )
            median = statistics.median(many.per_reader_mbs)
            slowest = min(many.per_reader_mbs)
            print(
                f"{many.readers} readers / 1 reader: {many.total_mbs / one.total_mbs:.2f}x (target >= 1.6x)   slowest "
                f"reader {slowest:.1f} MB/s, median {median:.1f} MB/s: {slowest / median:.2f}x (target >= 0.5x)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
