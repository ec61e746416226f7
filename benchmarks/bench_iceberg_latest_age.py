"""Iceberg mode: the cost of a latest-per-key table's commit as the table ages.

One partition's copies applied to a topic's latest table (``LatestWriter.apply``, SQLite catalog, filesystem
warehouse), up to ``--commits`` commits, each of ``--records`` records whose keys are drawn uniformly from
``--keys`` keys (spread over the whole table: every commit touches most buckets), one in ``--tombstone-every``
a tombstone. Maintenance runs as the plugin's maintainer runs it between full passes: snapshot expiry (by count,
the default ``snapshot.max.keep``) and the manifest rewrite every ``snapshot.max.keep // 2`` commits, timed
apart from the commits. The log table is not written: its own age cost is bench_iceberg_age.py's.

It prints the median commit time of the 20 commits around the 10th and around every ``--every``-th commit, with
the table's shape (snapshots, metadata JSON size, manifests, data files, rows), and the ratio of the last
checkpoint to the first.

    .venv/bin/python benchmarks/bench_iceberg_latest_age.py [--commits 10000] [--keys 20000] [--records 200]

With ``--workdir DIR`` the table stays in DIR and a second run goes on from its last commit (a long run can be
stopped and resumed; each checkpoint's window then holds the commits of the run that reached it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402

from rsm.iceberg.config import MaintenanceSettings  # noqa: E402
from rsm.iceberg.latest_config import LatestTable  # noqa: E402
from rsm.iceberg.latest_table import LatestChanges, LatestWriter  # noqa: E402
from rsm.iceberg.maintenance.expiry import expire_snapshots  # noqa: E402
from rsm.iceberg.maintenance.manifests import rewrite_manifests  # noqa: E402
from rsm.iceberg.schema import arrow_schema  # noqa: E402

AROUND = 20
T0_US = 1_767_225_600_000_000


def log_rows(first: int, keys: list[bytes], values: list[bytes | None]) -> pa.Table:
    """Log rows of one copy in the log table's layout (the fields the latest table reads filled)."""
    schema = arrow_schema()
    kafka_type = schema.field("kafka").type
    n = len(keys)
    offsets = range(first, first + n)
    filled: dict[str, list[Any]] = {
        "partition": [0] * n,
        "offset": list(offsets),
        "timestamp": [T0_US + o * 1000 for o in offsets],
        "topic_id": ["bench"] * n,
        "is_control": [False] * n,
        "aborted": [False] * n,
    }
    kafka = pa.StructArray.from_arrays(
        [pa.array(filled.get(f.name, [None] * n), type=f.type) for f in kafka_type], fields=list(kafka_type)
    )
    return pa.Table.from_pydict(
        {
            "kafka": kafka,
            "headers": pa.array([[] for _ in keys], type=schema.field("headers").type),
            "key_raw": pa.array(keys, type=pa.binary()),
            "value_raw": pa.array(values, type=pa.binary()),
        },
        schema=schema,
    )


def shape(catalog: SqlCatalog, ident: tuple[str, str]) -> str:
    table = catalog.load_table(ident)
    snap = table.current_snapshot()
    manifests = len(snap.manifests(table.io)) if snap else 0
    tasks = list(table.scan().plan_files()) if snap else []
    rows = sum(t.file.record_count for t in tasks)
    meta = Path(table.metadata_location.removeprefix("file://")).stat().st_size
    return (
        f"snapshots {len(table.metadata.snapshots)}, metadata {meta / 1024:.0f} KiB, manifests {manifests}, "
        f"data files {len(tasks)}, rows {rows}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--keys", type=int, default=20_000, help="distinct keys the records are drawn from")
    ap.add_argument("--records", type=int, default=200, help="records per copy")
    ap.add_argument("--buckets", type=int, default=16)
    ap.add_argument("--tombstone-every", type=int, default=10)
    ap.add_argument("--every", type=int, default=1000, help="a checkpoint every this many commits")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--workdir",
        type=Path,
        help="keep the table here and go on from its last commit when run again (default: a temp folder, removed)",
    )
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-latest-age-"))
    work.mkdir(parents=True, exist_ok=True)
    progress = work / "progress.json"
    done = json.loads(progress.read_text()) if progress.exists() else {"commits": 0, "maintenance_s": 0.0}
    catalog = SqlCatalog("bench", uri=f"sqlite:///{work / 'catalog.db'}", warehouse=f"file://{work / 'wh'}")
    catalog.create_namespace_if_not_exists("kafka")  # a run stopped before its first commit made it already
    # the keys of a run that goes on are drawn from where it stopped
    rng = random.Random(f"{args.seed}/{done['commits']}")
    spec = LatestTable("orders", "kafka", "orders_latest", buckets=args.buckets)
    writer = LatestWriter(lambda: catalog, 10)
    settings = MaintenanceSettings()
    every_maintenance = max(1, settings.snapshot_max_keep // 2)
    checkpoints = sorted({AROUND // 2, *range(args.every, args.commits + 1, args.every), args.commits})
    times: dict[int, float] = {}
    maintenance_s = float(done["maintenance_s"])
    medians: dict[int, float] = {}
    started = time.monotonic()
    try:
        for commit in range(done["commits"] + 1, args.commits + 1):
            first = (commit - 1) * args.records
            keys = [b"key-%d" % rng.randrange(args.keys) for _ in range(args.records)]
            values = [None if rng.randrange(args.tombstone_every) == 0 else b"v" * 80 for _ in keys]
            pending = LatestChanges(spec)
            pending.add(log_rows(first, keys, values))
            t0 = time.perf_counter()
            writer.apply(pending, "kafka.orders", f"commit {commit}")
            times[commit] = time.perf_counter() - t0
            if commit % every_maintenance == 0:
                t1 = time.perf_counter()
                table = catalog.load_table(spec.identifier)
                expire_snapshots(table, settings)
                rewrite_manifests(catalog.load_table(spec.identifier), settings)
                maintenance_s += time.perf_counter() - t1
            if args.workdir:
                progress.write_text(json.dumps({"commits": commit, "maintenance_s": maintenance_s}))
            for point in checkpoints:
                if commit == min(point + AROUND // 2, args.commits):
                    window = [t for c, t in times.items() if point - AROUND // 2 < c <= point + AROUND // 2]
                    medians[point] = statistics.median(window)
                    print(
                        f"commit {point}: median of {len(window)} commits around it {medians[point] * 1000:.1f} ms; "
                        f"{shape(catalog, spec.identifier)}; maintenance so far {maintenance_s:.0f} s; "
                        f"{time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    if not medians:
        return
    first_point, last_point = min(medians), max(medians)
    print(
        f"latest table: commit {first_point} {medians[first_point] * 1000:.1f} ms, commit {last_point} "
        f"{medians[last_point] * 1000:.1f} ms ({medians[last_point] / medians[first_point]:.2f}x; the table "
        f"grows until it holds every key, {args.keys} at most); load {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
