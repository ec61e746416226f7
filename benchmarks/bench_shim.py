"""Overhead of the JVM shim: copy and sequential fetch of a large real segment, and tiny fetchIndex latency,
through the sidecar and in-process transports versus calling the Python manager directly, in one run.

    .venv/bin/python benchmarks/bench_shim.py               # 1 GiB segment, both profiles
    .venv/bin/python benchmarks/bench_shim.py --size-mb 256 # quicker

Targets: sidecar <= 10% overhead and < 100 us per tiny fetchIndex; in-process <= 3% and < 10 us.

Two storage profiles, each in the same run as its direct-Python baseline:

* ``raw``: no compression, no encryption, the store on /dev/shm (when present). Python's fetch is then little
  more than a memory copy (~5 GB/s here), so this is the harshest test of what the transport adds.
* ``production``: zstd level 3 + AES-256-GCM (RSA key pair), as an operator would run it.

The tiny-call latency is measured twice: against the real manager (a leader-epoch index read from the
filesystem store) and against ``InMemoryIndexManager`` (answers from memory), which isolates the transport's
own cost per call. Java callers run on a fresh Java thread, as broker threads do. Numbers on a shared 2-core
VM vary by 10-30% between runs: compare within one run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))  # jvm_testing: the shim tests' helpers

import jvm_testing as jt  # noqa: E402 - tests/ is on sys.path
from bench_config import encryption_config  # noqa: E402 - benchmarks/ is sys.path[0]


def direct(manager_cfg: dict[str, str], seg: jt.SpecSegment, index_calls: int) -> tuple[float, float, float, int]:
    from rsm import IndexType, LogSegmentData, RemoteStorageManager

    m = RemoteStorageManager()
    m.configure(manager_cfg)
    data = LogSegmentData(
        log_segment=seg.log,
        offset_index=seg.offset_index,
        time_index=seg.time_index,
        transaction_index=seg.txn_index,
        producer_snapshot_index=seg.producer_snapshot,
        leader_epoch_index=seg.leader_epoch_bytes,
    )
    t0 = time.perf_counter()
    m.copy_log_segment_data(seg.meta, data)
    t1 = time.perf_counter()
    total = 0
    buf = bytearray(1 << 20)
    with m.fetch_log_segment(seg.meta, 0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            total += n
    t2 = time.perf_counter()
    for _ in range(min(200, index_calls)):
        with m.fetch_index(seg.meta, IndexType.LEADER_EPOCH) as f:
            f.read()
    t3 = time.perf_counter()
    for _ in range(index_calls):
        with m.fetch_index(seg.meta, IndexType.LEADER_EPOCH) as f:
            f.read()
    t4 = time.perf_counter()
    m.delete_log_segment_data(seg.meta)
    m.close()
    return t1 - t0, t2 - t1, (t4 - t3) / index_calls * 1e6, total


def _direct_tiny(calls: int) -> float:
    from rsm.metadata import IndexType

    m = jt.InMemoryIndexManager()
    for _ in range(200):
        m.fetch_index(None, IndexType.LEADER_EPOCH).read()
    t = time.perf_counter()
    for _ in range(calls):
        with m.fetch_index(None, IndexType.LEADER_EPOCH) as f:  # type: ignore[attr-defined]
            f.read()
    return (time.perf_counter() - t) / calls * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="segment size in MiB (default 1024)")
    ap.add_argument("--index-calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of each is reported")
    ap.add_argument("--profiles", default="raw,production", help="comma-separated: raw, production")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir on /dev/shm if present)")
    args = ap.parse_args()

    import jpype

    from rsm.jvm import inprocess as jvm_inprocess
    from rsm.kafka.large_segment import write_large_segment
    from rsm.metadata import TopicIdPartition

    jt.ensure_built()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    base.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        files = write_large_segment(base / "seg", args.size_mb * 1024 * 1024)
        seg = jt.spec_segment(files, files.to_metadata(TopicIdPartition(*jt.TEST_TIP)))
        spec = jt.write_spec(base / "spec.tsv", [seg])
        print(f"segment: {files.size / 2**20:.0f} MiB written in {time.perf_counter() - t:.1f} s; store on {base}")
        profiles = {
            "raw": {"compression.enabled": "false"},
            "production": encryption_config(base),
        }

        jpype.startJVM(
            "-Xmx1g",
            "-XX:+ExplicitGCInvokesConcurrent",
            classpath=jt.classpath_list(),
            convertStrings=False,
        )
        jvm_inprocess.install(adopt_hooks=False)
        harness = jpype.JClass(jt.HARNESS_CLASS)
        hashmap = jpype.JClass("java.util.HashMap")

        def shim(cfg: dict[str, str], transport: str) -> object:
            jcfg = hashmap()
            for k, v in {**cfg, "jvm.transport": transport}.items():
                jcfg.put(k, v)
            return harness.create(jt.SHIM_CLASS, jcfg)

        def through(cfg: dict[str, str], transport: str) -> tuple[float, float, float, int]:
            rsm = shim(cfg, transport)
            try:
                c, f, i, n = str(harness.bench(rsm, str(spec), args.index_calls)).split()
            finally:
                rsm.close()  # type: ignore[attr-defined]
            return float(c), float(f), float(i), int(n)

        mib = files.size / 2**20
        for profile in [p.strip() for p in args.profiles.split(",") if p.strip()]:
            cfg = jt.base_config(base / f"store-{profile}", **{"chunk.size": str(4 << 20), **profiles[profile]})
            runs: dict[str, list[tuple[float, float, float, int]]] = {"python": [], "sidecar": [], "inprocess": []}
            for _ in range(args.rounds):
                runs["python"].append(direct(cfg, seg, args.index_calls))
                runs["sidecar"].append(through(cfg, "sidecar"))
                runs["inprocess"].append(through(cfg, "inprocess"))
            for name, rs in runs.items():
                assert all(r[3] == files.size for r in rs), f"{name} fetched the wrong number of bytes"
            best = {k: (min(r[0] for r in v), min(r[1] for r in v), min(r[2] for r in v)) for k, v in runs.items()}
            py = best["python"]
            print(f"\nprofile {profile} ({mib:.0f} MiB, best of {args.rounds})")
            print(
                f"{'path':<10} {'copy s':>8} {'copy x':>7} {'fetch s':>8} {'MiB/s':>7} {'fetch x':>8} "
                f"{'fetchIndex us':>14}"
            )
            for name, (c, f, i) in best.items():
                print(f"{name:<10} {c:8.3f} {c / py[0]:7.3f} {f:8.3f} {mib / f:7.0f} {f / py[1]:8.3f} {i:14.1f}")
            for name, target in (("sidecar", 0.10), ("inprocess", 0.03)):
                c, f, i = best[name]
                print(
                    f"  {name:<9} copy {100 * (c / py[0] - 1):+6.1f}%  fetch {100 * (f / py[1] - 1):+6.1f}%  "
                    f"(target <= {100 * target:.0f}%);  fetchIndex +{i - py[2]:.1f} us over direct"
                )

        tiny_cfg = jt.base_config(
            base / "store-tiny", **{"python.manager.class": "rsm.jvm_testing:InMemoryIndexManager"}
        )
        direct_us = min(_direct_tiny(args.index_calls) for _ in range(args.rounds))
        print(f"\ntiny fetchIndex, manager answering from memory (transport cost only), best of {args.rounds}:")
        print(f"  python     {direct_us:7.1f} us per call (direct)")
        for name, target in (("sidecar", 100.0), ("inprocess", 10.0)):
            rsm = shim(tiny_cfg, name)
            try:
                us = min(float(harness.timeIndex(rsm, str(spec), args.index_calls)) for _ in range(args.rounds))
            finally:
                rsm.close()  # type: ignore[attr-defined]
            print(
                f"  {name:<10} {us:7.1f} us per call, +{us - direct_us:.1f} us over direct (target < {target:.0f} us)"
            )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
