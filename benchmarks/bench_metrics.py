"""What recording metrics costs on the hot path, as a share of the call it is recorded for.

A warm fetch (manifest and chunk cached, the cheapest fetch there is, so the worst case for the share) is
timed with the manager as it is, and the manager's own recording for one fetch (``RsmRecorder.fetch_requested``)
is timed alone; the ratio is the share of a fetch spent on metrics. A full snapshot (what one JMX read burst or
one Prometheus scrape costs Python) is timed too. The whole-pipeline figure is bench_copy_fetch.py's; on a
shared machine its run-to-run noise is far larger than this share.

    python benchmarks/bench_metrics.py [--fetches 20000] [--rounds 5] [--recording-level DEBUG]

At the default INFO level the per-fetch timing sensor (DEBUG) records nothing; DEBUG shows its cost too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rsm import RemoteStorageManager  # noqa: E402
from rsm.kafka.writer import write_segment  # noqa: E402
from rsm.metadata import TopicIdPartition  # noqa: E402


def best_of(rounds: int, run: Callable[[], None]) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetches", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each loop; the fastest is reported")
    parser.add_argument("--recording-level", default="INFO", choices=["INFO", "DEBUG", "TRACE"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        seg = write_segment(work / "seg", target_bytes=1_000_000, seed=5)
        m = RemoteStorageManager()
        m.configure(
            {
                "chunk.size": "262144",
                "storage.backend.class": "filesystem",
                "storage.root": str(work / "store"),
                "fetch.chunk.cache.prefetch.max.size": "0",
                "metrics.recording.level": args.recording_level,
            }
        )
        try:
            meta = seg.to_metadata(TopicIdPartition("MWJ6FHTfRYy67jzwZdeqSQ", "orders", 7))
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            with m.fetch_log_segment(meta, 0, 1023) as f:
                f.read()
            n = args.fetches
            recorder = m.rsm_metrics

            def fetches() -> None:
                for _ in range(n):
                    with m.fetch_log_segment(meta, 0, 1023) as f:
                        f.read()

            def recordings() -> None:
                for _ in range(n):
                    recorder.fetch_requested("orders", 7, 1024, 0.00042)  # a warm open, 0.42 ms

            # Best of several rounds: on a shared machine the minimum is the figure least moved by others' load.
            fetch_s = best_of(args.rounds, fetches) / n
            record_s = best_of(args.rounds, recordings) / n
            t0 = time.perf_counter()
            for _ in range(200):
                rows = m.metrics_snapshot()
            snapshot_s = (time.perf_counter() - t0) / 200
        finally:
            m.close()
    print(f"recording level {args.recording_level}")
    print(f"warm 1 KiB fetch        : {fetch_s * 1e6:8.1f} us per call")
    print(f"its metrics recording   : {record_s * 1e6:8.2f} us per call   ratio {record_s / fetch_s:.3f}x of the fetch")
    print(f"full snapshot ({len(rows)} beans): {snapshot_s * 1e3:8.2f} ms (one JMX read burst or one scrape)")


if __name__ == "__main__":
    main()
