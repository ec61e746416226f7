"""Spark reader benchmark: the Spark scan against the bare reader, a Parquet copy of the same records, and the floor.

In one run, over the same real segments (``write_large_segment``, tiered through the plugin onto the
filesystem backend):

- ``raw parser``: :class:`rsm.kafka.columnar.LogBatchDecoder` over the local ``.log`` files (no storage at all),
  into the same columns the reader builds (the compiled walk's Arrow buffers, or lists where it is not built);
- ``fetch path``: ``fetch_log_segment`` read to the end (bytes only, the ceiling for any tiered reader);
- ``bare reader``: :class:`rsm.spark.reader.TieredReader` columns (fetch + decode), and the same plus the
  Arrow record batches Spark receives;
- Spark ``local[2]``, each query run over these sources in the same session, alternating, after a warm-up of each:

  - ``kafka-tiered``: ``spark.read.format("kafka-tiered")`` over the tiered segments; with ``--pruned`` also
    the same source given only the query's columns as its schema (``.schema("value binary")``), since
    Spark's Python data sources are never told which columns a query needs;
  - ``parquet copy``: the yardstick a data team reaches for, a columnar second copy. The same rows (the
    Kafka source's columns, from the bare reader) are written once, one Parquet file per segment (Spark's
    default snappy), before any timing; the write time is printed apart;
  - ``arrow floor``: a Python data source whose ``read()`` yields the very Arrow batches ``kafka-tiered``
    would, already built (memory-mapped from an Arrow IPC file per segment). Its time is what Spark's Python
    data source path costs with no decoding at all: what ``kafka-tiered`` pays on top of it is ours;
  - ``decode floor``: the same, after fetching, framing, CRC-checking and inflating every batch as
    ``kafka-tiered`` does. What ``kafka-tiered`` pays above it is the record walk and building the Arrow
    columns (with the compiled walk, writing the buffers; without it, per-row Python objects copied into Arrow).

  Queries: ``count(*) + sum(length(value))`` (every row and every value byte), ``count(distinct key)``, and
  ``nothing`` (a pushed ``offset < 0`` that prunes every segment and every row group: the fixed cost of a query).

With ``--iceberg`` the segments are tiered in Iceberg mode (a SQLite catalog and a filesystem warehouse), and the
run also times the two ways ``kafka-tiered`` reads them, bare and in Spark: ``rows`` (the default, the table's
rows converted to the source's columns) and ``batches`` (``icebergRead=batches``: Kafka batches rebuilt from the
rows, then decoded, as before), printing seconds, MB/s of segment bytes and their ratio.

Prints which record walk read the batches, then seconds and records/s with the ratios the issue sets, all
measured in this run: Spark / bare reader
(targets: >= 0.5 uncompressed, >= 0.85 zstd), also net of the fixed cost of a query (the per-row cost), and
each source against the Parquet copy (target for kafka-tiered: >= 0.5).

    .venv/bin/python benchmarks/bench_spark.py [--segments 4] [--segment-mib 16] [--codec zstd] [--reps 3]
        [--rows-per-batch N] [--pruned] [--iceberg]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rsm import RemoteStorageManager
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.large_segment import write_large_segment
from rsm.kafka.record_columns import COMPILED_WALK
from rsm.metadata import TopicIdPartition, random_kafka_uuid
from rsm.spark.arrow_batches import to_record_batch
from rsm.spark.reader import TieredReader, read_slice

FLOOR_FORMAT = "kts-bench-arrow-floor"
QUERIES: dict[str, tuple[str, ...]] = {
    "count + sum(length(value))": ("count(*) AS n", "sum(length(value)) AS b"),
    "count(distinct key)": ("count(distinct key) AS n",),
    "nothing (fixed cost)": ("count(*) AS n",),
}
#: The columns each query reads (the schema a pruned read is given).
PRUNED: dict[str, str] = {
    "count + sum(length(value))": "value binary",
    "count(distinct key)": "key binary",
    "nothing (fixed cost)": "offset long",
}


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
    ap.add_argument("--rows-per-batch", type=int, default=None, help="kafka-tiered's rowsPerBatch (default its own)")
    ap.add_argument("--pruned", action="store_true", help="also time kafka-tiered given only the query's columns")
    ap.add_argument("--iceberg", action="store_true", help="tier in Iceberg mode; time rows against rebuilt batches")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:  # ~130 MB of segments and store, + copies
        _run(args, Path(tmp))


def _floor_source() -> type:
    """The floor data sources (defined here so that they travel to the Python workers by value).

    ``path``: a folder of Arrow IPC files, one per slice of the tiered read in planning order, holding the very
    batches kafka-tiered yields for it. With ``decode=true`` (and kafka-tiered's own options) each task first
    does the part of kafka-tiered's work that a compiled record walk could not remove: fetch the slice, frame
    its batches, check their CRCs and inflate them.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rsm.spark.datasource import SCHEMA

    class ArrowFile(InputPartition):
        def __init__(self, path: str, piece: Any) -> None:
            super().__init__(path)
            self.path = path
            self.piece = piece

    class FloorReader(DataSourceReader):
        def __init__(self, directory: str, tiered: dict[str, str] | None) -> None:
            self.directory = directory
            self.tiered = tiered

        def partitions(self) -> list[InputPartition]:
            files = [os.path.join(self.directory, f) for f in sorted(os.listdir(self.directory))]
            if self.tiered is None:
                return [ArrowFile(f, None) for f in files]
            pieces = TieredReader(self.tiered).plan()
            return [ArrowFile(f, p) for f, p in zip(files, pieces, strict=True)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            from rsm.kafka.records import BATCH_HEADER_SIZE, parse_batch_header, verify_crc
            from rsm.spark.options import TieredReadOptions
            from rsm.spark.reader import manager_for

            piece = partition.piece  # type: ignore[attr-defined]
            if piece is not None and self.tiered is not None:
                opts = TieredReadOptions.from_options(self.tiered)
                decoder = LogBatchDecoder(ReadBounds(), max_decompressed=opts.max_batch_bytes)
                manager = manager_for(opts.plugin_config)
                with manager.fetch_log_segment(piece.segment.metadata_stub(), piece.start_position) as f:
                    for pos, entry in iter_log_entries(f, piece.start_position, piece.end_position):
                        header = parse_batch_header(entry, pos)
                        verify_crc(entry)
                        if header.compression:
                            decoder.inflate(header.compression, memoryview(entry)[BATCH_HEADER_SIZE : header.size])
            with pa.memory_map(partition.path) as source:  # type: ignore[attr-defined]
                ipc = pa.ipc.open_file(source)
                for i in range(ipc.num_record_batches):
                    yield ipc.get_batch(i)

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FLOOR_FORMAT

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            options = dict(self.options)
            directory = options.pop("path")
            return FloorReader(directory, options if options.pop("decode", "false") == "true" else None)

    return FloorSource


def _run(args: argparse.Namespace, work: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    config = {
        "chunk.size": str(4 << 20),
        "storage.backend.class": "filesystem",
        "storage.root": str(work / "store"),
        "storage.fsync.enabled": "false",
    }
    if args.iceberg:
        config["iceberg.mode.topics.regex"] = "bench"
        config["iceberg.mode.catalog.sqlite.path"] = str(work / "catalog.db")
        config["iceberg.mode.warehouse"] = f"file://{work / 'warehouse'}"
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

    options = {**config, "topic": "bench"}
    if args.rows_per_batch:
        options["rowsPerBatch"] = str(args.rows_per_batch)
    reader = TieredReader(options)

    # The second copies, written once from the bare reader's batches and never timed with the reads.
    parquet_dir, floor_dir = work / "parquet", work / "arrow"
    parquet_dir.mkdir()
    floor_dir.mkdir()
    write_secs = 0.0
    decoded = dataclasses.replace(reader.options, iceberg_rows=False)  # decoded batches, Iceberg mode or not
    for i, piece in enumerate(reader.plan()):
        batches = list(read_slice(reader.manager, piece, decoded))
        t = time.perf_counter()
        pq.write_table(pa.Table.from_batches(batches), parquet_dir / f"segment-{i}.parquet")
        write_secs += time.perf_counter() - t
        with pa.OSFile(str(floor_dir / f"segment-{i}.arrow"), "wb") as f, pa.ipc.new_file(f, batches[0].schema) as w:
            for b in batches:
                w.write_batch(b)
    parquet_mb = sum(p.stat().st_size for p in parquet_dir.iterdir()) / 1e6

    def raw_parser() -> int:
        rows = 0
        for log in logs:
            decoder = LogBatchDecoder(ReadBounds())
            cols = decoder.new_columns(arrow=True)
            with open(log, "rb") as f:
                for pos, entry in iter_log_entries(f, 0, None):
                    decoder.feed(pos, entry, cols)
                    if len(cols) >= reader.options.rows_per_batch:
                        rows += len(cols)
                        cols = decoder.new_columns(arrow=True)
            rows += len(cols)
        return rows

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

    rows_reader = TieredReader(options)  # Iceberg-mode segments as rows (record_batches; columns() decodes)

    def bare_rows() -> int:
        return sum(b.num_rows for b in rows_reader.record_batches())

    results: dict[str, tuple[float, int]] = {}
    for name, fn in [
        ("raw parser", raw_parser),
        ("fetch path", fetch_path),
        ("bare reader", bare),
        ("bare + arrow", bare_arrow),
        *([("bare rows", bare_rows)] if args.iceberg else []),
    ]:
        results[name] = _best(args.reps, fn)
    records = results["raw parser"][1]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rsm.spark.datasource import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(_floor_source())
    sources: dict[str, Any] = {
        "kafka-tiered": spark.read.format("kafka-tiered").options(**options).load(),
        "parquet copy": spark.read.parquet(str(parquet_dir)),
        "arrow floor": spark.read.format(FLOOR_FORMAT).option("path", str(floor_dir)).load(),
        "decode floor": spark.read.format(FLOOR_FORMAT).options(**options, path=str(floor_dir), decode="true").load(),
    }
    if args.iceberg:
        batches = spark.read.format("kafka-tiered").options(**options, icebergRead="batches").load()
        sources["kafka-tiered batches"] = batches
    spark_secs: dict[tuple[str, str], float] = {}
    for query, exprs in QUERIES.items():
        frames = dict(sources)
        if args.pruned:
            pruned = spark.read.format("kafka-tiered").schema(PRUNED[query]).options(**options).load()
            frames["kafka-tiered pruned"] = pruned
        if query.startswith("nothing"):  # the floor sources have no pushdown: they would read everything
            frames = {k: df.where("offset < 0") for k, df in frames.items() if "floor" not in k}

        def run(df: Any, exprs: tuple[str, ...] = exprs) -> None:
            df.selectExpr(*exprs).collect()

        for df in frames.values():
            run(df)  # warm-up: Python workers start, classes load, files reach the page cache
        for k in frames:
            spark_secs[(query, k)] = float("inf")
        for _ in range(args.reps):  # alternating, so a busy moment on the shared machine hits every source
            for k, df in frames.items():
                t = time.perf_counter()
                run(df)
                spark_secs[(query, k)] = min(spark_secs[(query, k)], time.perf_counter() - t)
    spark.stop()

    mb = total_bytes / 1e6
    print(
        f"{args.segments} segments x {args.segment_mib} MiB, codec {args.codec}: {mb:.1f} MB, {records:,} records; "
        f"Parquet copy {parquet_mb:.1f} MB, written in {write_secs:.2f} s (not in any figure); best of {args.reps}"
    )
    walk = "compiled, into Arrow buffers" if COMPILED_WALK else "pure Python"
    print(f"record walk: {walk}; rowsPerBatch {reader.options.rows_per_batch}")
    print(f"{'path':<16} {'seconds':>8} {'records/s':>12} {'MB/s':>8}")
    for name, (secs, _) in results.items():
        rate = "" if name == "fetch path" else f"{records / secs:>12,.0f}"
        print(f"{name:<16} {secs:>8.2f} {rate:>12} {mb / secs:>8.1f}")
    t = {k: v[0] for k, v in results.items()}
    if args.iceberg:
        print("  (Iceberg mode: bare reader and bare + arrow rebuild batches and decode them; bare rows reads rows)")
    print(f"bare reader / raw parser (records/s) = {t['raw parser'] / t['bare reader']:.2f}")
    print(f"bare reader / fetch path (MB/s)      = {t['fetch path'] / t['bare reader']:.2f}")
    print()
    head = f"{'query':<28} {'source':<20} {'seconds':>8} {'records/s':>12} {'net s':>7} {'vs parquet':>10}"
    print(f"{'Spark local[2]:':<16}{head}")
    fixed = {k: secs for (query, k), secs in spark_secs.items() if query.startswith("nothing")}
    for (query, k), secs in spark_secs.items():
        if query.startswith("nothing"):
            print(f"{'':<16}{query:<28} {k:<20} {secs:>8.2f}")
            continue
        net = f"{secs - fixed[k]:>7.2f}" if k in fixed else f"{'':>7}"
        vs = spark_secs[(query, "parquet copy")] / secs
        print(f"{'':<16}{query:<28} {k:<20} {secs:>8.2f} {records / secs:>12,.0f} {net} {vs:>10.2f}")
    q1, q2 = "count + sum(length(value))", "count(distinct key)"
    tiered = spark_secs[(q1, "kafka-tiered")]
    net_tiered = tiered - fixed["kafka-tiered"]
    target = 0.5 if args.codec == "none" else 0.85
    print()
    print(f"spark / bare reader (records/s, {q1})      = {t['bare reader'] / tiered:.2f}  (target >= {target})")
    print(f"  net of the fixed cost of a query         = {t['bare reader'] / net_tiered:.2f}")
    print(f"spark / bare + arrow                        = {t['bare + arrow'] / tiered:.2f}")
    for query in (q1, q2):
        parquet = spark_secs[(query, "parquet copy")]
        print(f"spark / parquet copy ({query}) = {parquet / spark_secs[(query, 'kafka-tiered')]:.2f}  (target >= 0.5)")
        others = ["arrow floor", "decode floor"] + (["kafka-tiered pruned"] if args.pruned else [])
        print("  " + "; ".join(f"{k} / parquet = {parquet / spark_secs[(query, k)]:.2f}" for k in others))
    if args.iceberg:
        print()
        print("Iceberg-mode segments, rows against rebuilt batches (MB of segment bytes per second; speed-up):")
        pairs = [("bare reader, to Arrow", t["bare + arrow"], t["bare rows"])]
        for query in (q1, q2):
            pairs.append(
                (f"Spark, {query}", spark_secs[(query, "kafka-tiered batches")], spark_secs[(query, "kafka-tiered")])
            )
        for what, old, new in pairs:
            print(
                f"  {what:<40} batches {old:>6.2f} s {mb / old:>7.1f} MB/s   rows {new:>6.2f} s {mb / new:>7.1f} MB/s"
                f"   x{old / new:.2f}"
            )


if __name__ == "__main__":
    main()
