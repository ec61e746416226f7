"""What recording metrics costs on the hot path, as a share of the call it is recorded for.

A warm fetch (manifest and chunk cached, the cheapest fetch there is, so the worst case for the share) is
timed with the manager as it is, and the manager's own recording for one fetch (``RsmRecorder.fetch_requested``)
is timed alone; the ratio is the share of a fetch spent on metrics. A full snapshot (what one JMX read burst or
one Prometheus scrape costs Python) is timed too. The whole-pipeline figure is bench_copy_fetch.py's; on a
shared machine its run-to-run noise is far larger than this share.

    python benchmarks/bench_metrics.py [--fetches 20000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rsm import RemoteStorageManager  # noqa: E402
from rsm.kafka.writer import write_segment  # noqa: E402
from rsm.metadata import TopicIdPartition  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetches", type=int, default=20000)
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
            }
        )
        try:
            meta = seg.to_metadata(TopicIdPartition("MWJ6FHTfRYy67jzwZdeqSQ", "orders", 7))
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            with m.fetch_log_segment(meta, 0, 1023) as f:
                f.read()
            n = args.fetches
            t0 = time.perf_counter()
            for _ in range(n):
                with m.fetch_log_segment(meta, 0, 1023) as f:
                    f.read()
            fetch_s = (time.perf_counter() - t0) / n
            recorder = m.rsm_metrics
            t0 = time.perf_counter()
            for _ in range(n):
                recorder.fetch_requested("orders", 7, 1024, 0.0)
            record_s = (time.perf_counter() - t0) / n
            t0 = time.perf_counter()
            for _ in range(200):
                rows = m.metrics_snapshot()
            snapshot_s = (time.perf_counter() - t0) / 200
        finally:
            m.close()
    print(f"warm 1 KiB fetch        : {fetch_s * 1e6:8.1f} us per call")
    print(f"its metrics recording   : {record_s * 1e6:8.2f} us per call   ratio {record_s / fetch_s:.3f}x of the fetch")
    print(f"full snapshot ({len(rows)} beans): {snapshot_s * 1e3:8.2f} ms (one JMX read burst or one scrape)")


if __name__ == "__main__":
    main()
