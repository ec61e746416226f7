"""Catch-up through the plugin's fetch of Iceberg-mode segments: rows found through the table's current snapshot
against the data files the manifest lists (the path before) and against the same segments tiered classic, then
again after the plugin's compaction (every row rewritten, sorted by partition and offset, in row groups of up to
1,048,576 rows read a slice at a time; old files deleted).

In one process (filesystem backend, SQLite catalog), uncompressed segments; a pass reads every segment the way a
broker catching up does: a fetch from a batch position, 1 MiB read, the next fetch from the first batch not
read whole. Each pass starts with an empty row-group cache; after a warm-up pass of each, modes alternate,
``--reps`` passes each, medians. After the compaction, ``whole-groups`` reads the compacted row groups whole
instead of a slice at a time (the fetch path before slices; its row-group cache holds what fits):

    .venv/bin/python benchmarks/bench_iceberg_fetch.py [--segments 3] [--segment-mib 8] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

import pyarrow.parquet as pq  # noqa: E402
from iceberg_testing import iceberg_config  # noqa: E402 - tests/support is on sys.path

from rsm import RemoteStorageManager  # noqa: E402
from rsm.formats.iceberg import iceberg_format, iceberg_section  # noqa: E402
from rsm.iceberg.config import MaintenanceSettings  # noqa: E402
from rsm.iceberg.fetch_plan import SegmentRows  # noqa: E402
from rsm.iceberg.maintenance.compaction import compact  # noqa: E402
from rsm.iceberg.segment_fetch import RowGroupCache  # noqa: E402
from rsm.iceberg.segment_stream import open_segment_stream  # noqa: E402
from rsm.kafka.large_segment import write_large_segment  # noqa: E402
from rsm.kafka.log_scan import iter_batches  # noqa: E402
from rsm.kafka.segment_files import SegmentFiles  # noqa: E402
from rsm.metadata import TopicIdPartition, random_kafka_uuid  # noqa: E402

PIECE = 1 << 20


def _catch_up(open_at: Any, positions: list[int]) -> int:
    """Bytes read catching up one segment 1 MiB at a time, each fetch from the first batch the last one did not
    give whole (the broker's next offset, through the offset index)."""
    total = 0
    position = 0
    while True:
        with open_at(position) as stream:
            data = stream.read(PIECE)
        total += len(data)
        if len(data) < PIECE:
            return total
        end = position + len(data)
        nxt = max(p for p in positions if p <= end)
        position = nxt if nxt > position else min(p for p in positions if p > position)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=3)
    ap.add_argument("--segment-mib", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-fetch-"))
    config = iceberg_config(work, topics="ice")
    m = RemoteStorageManager()
    m.configure(config)
    topic_id = random_kafka_uuid()
    segs: list[SegmentFiles] = []
    base = 0
    for i in range(args.segments):
        seg = write_large_segment(work / f"s{i}", args.segment_mib << 20, seed=i, base_offset=base)
        segs.append(seg)
        base = seg.end_offset + 1
    metas: dict[str, list[Any]] = {"ice": [], "classic": []}
    for topic in metas:
        for seg in segs:
            meta = seg.to_metadata(TopicIdPartition(topic_id, topic, 0))
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            metas[topic].append(meta)
    positions = [[h.position for h, _ in iter_batches(seg.log.read_bytes())] for seg in segs]
    mode = iceberg_format(m).mode()

    def run(name: str) -> float:
        # "whole-groups": compacted row groups read whole, as fetches read them before slices
        whole = name == "whole-groups"
        mode.row_groups = RowGroupCache(mode.cfg.fetch_cache_bytes, **({"max_slice_rows": 0} if whole else {}))
        started = time.perf_counter()
        total = 0
        for i, pos in enumerate(positions):
            if name == "classic":
                meta = metas["classic"][i]
                total += _catch_up(lambda p, meta=meta: m.fetch_log_segment(meta, p), pos)
            elif name in ("iceberg", "whole-groups"):
                meta = metas["ice"][i]
                total += _catch_up(lambda p, meta=meta: m.fetch_log_segment(meta, p), pos)
            else:  # the data files the manifest lists, as fetches read them before
                section = iceberg_section(m.fetch_manifest(metas["ice"][i]))
                assert section is not None
                rows = SegmentRows(
                    mode.handle.io,
                    tuple(f.path for f in section.files),
                    section.partition,
                    section.first_offset,
                    section.last_offset,
                    None,
                    None,
                )
                total += _catch_up(
                    lambda p, rows=rows: open_segment_stream(rows, p, None, "bench", mode.row_groups), pos
                )
        return total / 1e6 / (time.perf_counter() - started)

    def measure(names: list[str]) -> dict[str, float]:
        got: dict[str, list[float]] = {n: [] for n in names}
        for n in names:  # warm-up: imports, the first table load and plan
            run(n)
        for _ in range(args.reps):
            for n in names:
                got[n].append(run(n))
        return {n: statistics.median(v) for n, v in got.items()}

    before = measure(["classic", "iceberg", "manifest-files"])
    # The plugin's compaction (rows sorted by partition and offset, large row groups), then the old files deleted.
    table = mode.handle.catalog.load_table(("kafka", "ice"))
    old = {t.file.file_path for t in table.scan().plan_files()}
    compact(table, MaintenanceSettings(min_input_files=2))
    table = mode.handle.catalog.load_table(("kafka", "ice"))
    new = [t.file.file_path for t in table.scan().plan_files()]
    groups = [pq.ParquetFile(f.removeprefix("file://")).metadata.num_row_groups for f in new]
    print(f"compacted {len(old)} data files into {len(new)} ({sum(groups)} row groups)")
    for path in old:
        Path(path.removeprefix("file://")).unlink()
    after = measure(["classic", "iceberg", "whole-groups"])
    seg_mb = sum(s.size for s in segs) / 1e6
    print(f"{args.segments} segments, {seg_mb:.1f} MB uncompressed, {args.reps} passes each (medians, MB/s)")
    for label, res in (("before compaction", before), ("after compaction", after)):
        line = ", ".join(f"{n} {v:.0f}" for n, v in res.items())
        ratio = f"iceberg/classic {res['iceberg'] / res['classic']:.2f}"
        for other in ("manifest-files", "whole-groups"):
            if other in res:
                ratio += f", iceberg/{other} {res['iceberg'] / res[other]:.2f}"
        print(f"{label}: {line}; {ratio}")
    m.close()


if __name__ == "__main__":
    main()
