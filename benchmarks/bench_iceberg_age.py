"""Iceberg mode: the copy time of a segment as the table ages, with the plugin's maintenance on.

One partition of one Iceberg-mode topic, small segments copied one after another through the plugin
(``copy_log_segment_data``; filesystem backend, SQLite catalog), up to ``--commits`` commits. The plugin's
maintenance thread runs beside the copies (every ``--interval`` seconds), as on a broker. Time is compressed
(10,000 commits take minutes here, a week of a segment a minute on a broker), so snapshot expiry is by count
(the default ``snapshot.max.keep``), not by age.

Prints the median copy time of the first 20 copies (around the 10th) and of the last 20 (around the
``--commits``-th), their ratio (target <= 1.5), and every ``--every`` commits the median of the last 20 and
the table's shape: snapshots, metadata JSON size, data manifests of the current snapshot, live data files.

    .venv/bin/python benchmarks/bench_iceberg_age.py [--commits 10000] [--records 200] [--interval 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rsm import RemoteStorageManager  # noqa: E402
from rsm.kafka.writer import build_batch, write_entries_segment  # noqa: E402
from rsm.metadata import TopicIdPartition, random_kafka_uuid  # noqa: E402

DAY_MS = 1_767_225_600_000


def segment(directory: Path, first: int, records: int) -> object:
    entries = []
    for i in range(first, first + records, 50):
        specs = [
            (DAY_MS + o * 10, b"k%d" % (o % 17), b"v" * 80 + b"%d" % o, [])
            for o in range(i, min(i + 50, first + records))
        ]
        entries.append(build_batch(specs, base_offset=i, codec="zstd"))  # type: ignore[arg-type]
    return write_entries_segment(directory, entries)


def shape(m: RemoteStorageManager) -> str:
    table = m.iceberg.mode().handle.catalog.load_table(("kafka", "aging"))
    snap = table.current_snapshot()
    manifests = len(snap.manifests(table.io)) if snap else 0
    files = len(list(table.scan().plan_files())) if snap else 0
    meta = Path(table.metadata_location.removeprefix("file://")).stat().st_size
    return (
        f"snapshots {len(table.metadata.snapshots)}, metadata {meta / 1024:.0f} KiB, "
        f"manifests {manifests}, data files {files}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=200, help="records per segment")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between maintenance passes")
    ap.add_argument("--every", type=int, default=500, help="print the table's shape every this many commits")
    ap.add_argument("--no-maintenance", action="store_true", help="the same run with maintenance off")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-age-"))
    configs = {
        "chunk.size": str(4 << 20),
        "storage.backend.class": "filesystem",
        "storage.root": str(work / "store"),
        "storage.fsync.enabled": "false",
        "iceberg.mode.topics.regex": "aging",
        "iceberg.mode.catalog.sqlite.path": str(work / "catalog.db"),
        "iceberg.mode.maintenance.enabled": str(not args.no_maintenance).lower(),
        "iceberg.mode.maintenance.interval.ms": str(int(args.interval * 1000)),
    }
    tip = TopicIdPartition(random_kafka_uuid(), "aging", 0)
    times: list[float] = []
    started = time.monotonic()
    try:
        with RemoteStorageManager() as m:
            m.configure(configs)
            for n in range(args.commits):
                d = work / "seg"
                files = segment(d, n * args.records, args.records)
                t0 = time.perf_counter()
                m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())  # type: ignore[attr-defined]
                times.append(time.perf_counter() - t0)
                shutil.rmtree(d)
                if (n + 1) % args.every == 0 or n + 1 == args.commits:
                    recent = statistics.median(times[-20:])
                    print(
                        f"commit {n + 1}: median of last 20 {recent * 1000:.1f} ms "
                        f"({recent / statistics.median(times[:20]):.2f}x the first 20); {shape(m)}; "
                        f"{time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
            stats = m.iceberg.maintenance_stats()
            if stats is not None:
                print("maintenance:", {k: round(v, 1) for k, v in stats.stats().items()})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    early, late = statistics.median(times[:20]), statistics.median(times[-20:])
    print(f"first 20 copies: median {early * 1000:.1f} ms; last 20 (around {args.commits}): {late * 1000:.1f} ms")
    print(f"ratio last/first: {late / early:.2f} (target <= 1.5); load {os.getloadavg()}")


if __name__ == "__main__":
    main()
