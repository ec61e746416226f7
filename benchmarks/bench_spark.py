"""Spark reader benchmark: records/s of the Spark scan, the bare reader and the parser over raw ``.log`` files.

In one run, over the same real segments (``write_large_segment``, tiered through the plugin onto the
filesystem backend):

- ``raw parser``: :class:`rsm.kafka.columnar.LogBatchDecoder` over the local ``.log`` files (no storage at all);
- ``fetch path``: ``fetch_log_segment`` read to the end (bytes only, the ceiling for any tiered reader);
- ``bare reader``: :class:`rsm.spark.reader.TieredReader` columns (fetch + decode), and the same plus the
  Arrow record batches Spark receives;
- ``spark local[2]``: ``spark.read.format("kafka-tiered")`` summing ``length(value)`` (every row decoded and
  shipped), after one warm-up query.

Prints records/s and MB/s (10^6 B/s of segment bytes) with the ratios the issue sets: spark / bare reader
(target >= 0.7 on 2 cores), bare reader / raw parser and bare reader MB/s / fetch path MB/s.

    .venv/bin/python benchmarks/bench_spark.py [--segments 4] [--segment-mib 16] [--codec zstd] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rsm import RemoteStorageManager
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.writer import write_large_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid
from rsm.spark.reader import TieredReader, to_record_batch


def _best(reps: int, fn: Callable[[], int]) -> tuple[float, int]:
    best = float("inf")
    rows = 0
    for _ in range(reps):
        t = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - t)
    return best, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--segment-mib", type=int, default=16)
    ap.add_argument("--codec", default="zstd")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:  # ~130 MB of segments and store
        _run(args, Path(tmp))


def _run(args: argparse.Namespace, work: Path) -> None:
    config = {
        "chunk.size": str(4 << 20),
        "storage.backend.class": "filesystem",
        "storage.root": str(work / "store"),
        "storage.fsync.enabled": "false",
    }
    tip = TopicIdPartition(random_kafka_uuid(), "bench", 0)
    logs: list[Path] = []
    total_bytes = 0
    with RemoteStorageManager() as m:
        m.configure(config)
        for i in range(args.segments):
            files = write_large_segment(
                work / f"s{i}", args.segment_mib << 20, seed=i, base_offset=i * 10_000_000, codec=args.codec
            )
            m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
            logs.append(files.log)
            total_bytes += files.size

    def raw_parser() -> int:
        rows = 0
        for log in logs:
            decoder = LogBatchDecoder(ReadBounds())
            cols = decoder.new_columns()
            with open(log, "rb") as f:
                for pos, entry in iter_log_entries(f, 0, None):
                    decoder.feed(pos, entry, cols)
                    if len(cols) >= 8192:
                        rows += len(cols)
                        cols = decoder.new_columns()
            rows += len(cols)
        return rows

    reader = TieredReader({**config, "topic": "bench"})

    def fetch_path() -> int:
        n = 0
        for piece in reader.plan():
            with reader.manager.fetch_log_segment(piece.segment.metadata_stub(), 0) as f:
                while chunk := f.read(1 << 20):
                    n += len(chunk)
        return n

    def bare() -> int:
        return sum(len(cols) for _, cols in reader.columns())

    def bare_arrow() -> int:
        return sum(to_record_batch(c, p.topic, p.partition).num_rows for p, c in reader.columns())

    results: dict[str, tuple[float, int]] = {}
    for name, fn in [
        ("raw parser", raw_parser),
        ("fetch path", fetch_path),
        ("bare reader", bare),
        ("bare + arrow", bare_arrow),
    ]:
        results[name] = _best(args.reps, fn)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rsm.spark.datasource import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    register(spark)
    df = spark.read.format("kafka-tiered").options(**config, topic="bench").load()

    def spark_scan() -> int:
        row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").first()
        return int(row.n)

    spark_scan()  # warm-up: Python workers start, classes load
    results["spark local[2]"] = _best(args.reps, spark_scan)
    spark.stop()

    mb = total_bytes / 1e6
    print(
        f"{args.segments} segments x {args.segment_mib} MiB, codec {args.codec}: {mb:.1f} MB, "
        f"{results['raw parser'][1]:,} records; best of {args.reps}"
    )
    print(f"{'path':<16} {'seconds':>8} {'records/s':>12} {'MB/s':>8}")
    for name, (secs, _) in results.items():
        rows = results["raw parser"][1]
        rate = "" if name == "fetch path" else f"{rows / secs:>12,.0f}"
        print(f"{name:<16} {secs:>8.2f} {rate:>12} {mb / secs:>8.1f}")
    t = {k: v[0] for k, v in results.items()}
    print(f"spark / bare reader (records/s)      = {t['bare reader'] / t['spark local[2]']:.2f}  (target >= 0.7)")
    print(f"spark / bare + arrow (records/s)     = {t['bare + arrow'] / t['spark local[2]']:.2f}")
    print(f"bare reader / raw parser (records/s) = {t['raw parser'] / t['bare reader']:.2f}")
    print(f"bare reader / fetch path (MB/s)      = {t['fetch path'] / t['bare reader']:.2f}")


if __name__ == "__main__":
    main()
