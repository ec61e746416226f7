"""Iceberg mode benchmark: Spark over a topic's Iceberg table against a plain Parquet copy and against the
``kafka-tiered`` source over classic segments of the same records, and the cost of tiering a segment each way.

In one run, over the same segments (``write_large_segment``, producer-compressed):

- copy cost: ``copy_log_segment_data`` of each segment into the classic format (chunks on the filesystem
  backend) and into Iceberg mode (rows -> Parquet data files -> one commit to the SQLite catalog);
- the table compacted as the plugin's maintenance does within its first passes (a copy writes one data file
  per ``iceberg.mode.write.batch.bytes`` of records; how far the background thread got during the copies
  depends on timing, so the bench finishes it);
- Spark ``local[2]`` with Iceberg's own runtime (``spark.read.format("iceberg")``), each query run over three
  sources in the same session, alternating, after a warm-up of each: the Iceberg table; ``parquet copy``, the
  same records written once as one Parquet file per segment (the Kafka source's columns, Spark's default
  snappy; bench_spark.py's yardstick); and ``kafka-tiered`` over the classic segments.
  Queries: ``count(*) + sum(length(value))`` and ``count(distinct key)`` (the table's columns are ``value_raw``
  and ``key_raw``).

Prints seconds per source and the ratios the issue sets: Iceberg vs the Parquet copy (target >= 0.9) and vs
``kafka-tiered`` (target >= 2.5), and Iceberg copy time vs classic copy time. Runs in the Spark that Iceberg's
runtime loads into (.ci/iceberg_spark_env.sh makes it):

    .venv-iceberg-spark/bin/python benchmarks/bench_iceberg.py [--segments 4] [--segment-mib 16] [--codec zstd]
        [--reps 3] [--variant KEY=VALUE,...] [--diagnose] [--read-option KEY=VALUE,...] [--rewrite COLUMN=ENCODING,...]
        [--no-tiered]

``--diagnose`` adds the table as copied (before compaction), the data files read by Spark's own Parquet reader,
and each scan's physical plan (whether Spark gets columnar batches). ``--read-option`` adds the table itself read
with Spark read options (``vectorization-enabled=false``: Iceberg's row reader); ``--rewrite`` a table whose data
files are the table's own rewritten by pyarrow with the table's Parquet settings and some columns in other
encodings or row-group sizes (``key_raw=DELTA_BYTE_ARRAY``, ``rows=1048576``; ``same`` rewrites with the settings
alone, the control); ``--no-tiered`` leaves out kafka-tiered. Every source's answers are checked against the
Parquet copy's at the warm-up.

``--copy`` measures only the copies, without Spark (any venv with pyiceberg): each rep copies every segment into
a fresh catalog and classic root, and the medians of all copies after each rep's first (which creates the table)
are printed as MB/s and s/segment for the classic copy, the Iceberg copy and its phases (rows, Parquet encode,
commit, other), and for pyarrow's bare ``pq.write_table`` of the Arrow tables the copy built (pyarrow's defaults,
and the table's Parquet properties):

    .venv/bin/python benchmarks/bench_iceberg.py --copy [--segments 4] [--segment-mib 16] [--reps 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

from iceberg_testing import filesystem_config, iceberg_config  # noqa: E402 - tests/support is on sys.path

from rsm import RemoteStorageManager  # noqa: E402
from rsm.kafka.large_segment import write_large_segment  # noqa: E402
from rsm.metadata import TopicIdPartition, random_kafka_uuid  # noqa: E402
from rsm.spark.reader import TieredReader, read_slice  # noqa: E402

QUERIES: dict[str, dict[str, tuple[str, ...]]] = {
    "count + sum(length(value))": {
        "kafka": ("count(*) AS n", "sum(length(value)) AS b"),
        "iceberg": ("count(*) AS n", "sum(length(value_raw)) AS b"),
    },
    "count(distinct key)": {"kafka": ("count(distinct key) AS n",), "iceberg": ("count(distinct key_raw) AS n",)},
}


def _properties(spec: str) -> dict[str, str]:
    """``KEY=VALUE[,KEY=VALUE...]`` as a dict of table properties."""
    items = [item.split("=", 1) for item in spec.split(",")]
    if any(len(kv) != 2 or not kv[0] for kv in items):
        raise argparse.ArgumentTypeError(f"{spec!r}: expected KEY=VALUE[,KEY=VALUE...]")
    return dict(items)


ENCODINGS = (
    "PLAIN",
    "DELTA_LENGTH_BYTE_ARRAY",
    "DELTA_BYTE_ARRAY",
    "BYTE_STREAM_SPLIT",
    "DELTA_BINARY_PACKED",
    "DICTIONARY",  # dictionary pages up to pyarrow's 1 MiB; the columns not named then get none
)


def _encodings(spec: str) -> dict[str, str]:
    """``COLUMN=ENCODING[,...]`` (Parquet encodings pyarrow writes) and ``rows=N`` (rows per row group), or
    ``same`` for none."""
    if spec == "same":
        return {}
    items = _properties(spec)
    if not items.get("rows", "1").isdigit():
        raise argparse.ArgumentTypeError(f"{spec!r}: rows must be a number of rows")
    if bad := [v for k, v in items.items() if k != "rows" and v.upper() not in ENCODINGS]:
        raise argparse.ArgumentTypeError(f"{spec!r}: {bad} not one of {', '.join(ENCODINGS)}")
    return {k: v if k == "rows" else v.upper() for k, v in items.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--segment-mib", type=int, default=16)
    ap.add_argument("--codec", default="zstd")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        type=_properties,
        metavar="KEY=VALUE[,KEY=VALUE...]",
        help="also query a copy of the table written with its own properties and these (e.g. "
        "write.parquet.compression-codec=zstd): one data file per segment, like the plugin's",
    )
    ap.add_argument(
        "--diagnose",
        action="store_true",
        help="also read the data files of the table (and of each --variant) with Spark's Parquet reader, not "
        "Iceberg's: what the file layout costs apart from Iceberg's reader",
    )
    ap.add_argument(
        "--read-option",
        action="append",
        default=[],
        type=_properties,
        metavar="KEY=VALUE[,KEY=VALUE...]",
        help="also query the table itself with these Spark read options (e.g. vectorization-enabled=false)",
    )
    ap.add_argument(
        "--rewrite",
        action="append",
        default=[],
        type=_encodings,
        metavar="COLUMN=ENCODING[,...]|same",
        help="also query the table's data files rewritten by pyarrow with the table's Parquet settings, these "
        "top-level columns in these encodings without dictionary (same: no column changed, the control)",
    )
    ap.add_argument(
        "--no-tiered", action="store_true", help="leave out kafka-tiered (the slowest source) from the queries"
    )
    ap.add_argument("--copy", action="store_true", help="measure only the copies (no Spark); see the docstring")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-iceberg-") as tmp:
        if args.copy:
            _copy_bench(args, Path(tmp))
        else:
            _run(args, Path(tmp))


def _copy_all(config: dict[str, str], tip: TopicIdPartition, segs: list[Any]) -> list[float]:
    secs = []
    with RemoteStorageManager() as m:
        m.configure(config)
        for files in segs:
            t = time.perf_counter()
            m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
            secs.append(time.perf_counter() - t)
    return secs


def _segments(args: argparse.Namespace, work: Path) -> list[Any]:
    return [
        write_large_segment(
            work / f"s{i}", args.segment_mib << 20, seed=i, base_offset=i * 10_000_000, codec=args.codec
        )
        for i in range(args.segments)
    ]


class _Phases:
    """Seconds spent in each phase of the Iceberg copies, per copy: the functions ``TableWriter.write`` calls,
    wrapped where it looks them up. Phases that overlap (a pipelined copy) can add up to more than the copy."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.tables: list[Any] = []  # the Arrow tables of the rows, of the last copy
        self.keep_tables = False

    def _add(self, phase: str, secs: float) -> None:
        self.current[phase] = self.current.get(phase, 0.0) + secs

    def install(self) -> Callable[[], None]:
        from rsm.iceberg import replace, table_writer

        rows, encode, commit = table_writer.segment_row_tables, table_writer.write_data_files, replace.Replacer.replace

        def timed_rows(*a: Any, **kw: Any) -> Iterator[Any]:
            it = rows(*a, **kw)
            while True:
                t = time.perf_counter()
                chunk = next(it, None)
                self._add("rows", time.perf_counter() - t)
                if chunk is None:
                    return
                if self.keep_tables:
                    self.tables.append(chunk)
                yield chunk

        def timed(phase: str, f: Callable[..., Any]) -> Callable[..., Any]:
            def run(*a: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return f(*a, **kw)
                finally:
                    self._add(phase, time.perf_counter() - t)

            return run

        table_writer.segment_row_tables = timed_rows  # type: ignore[assignment]
        table_writer.write_data_files = timed("encode", encode)  # type: ignore[assignment]
        replace.Replacer.replace = timed("commit", commit)  # type: ignore[method-assign]

        def uninstall() -> None:
            table_writer.segment_row_tables = rows  # type: ignore[assignment]
            table_writer.write_data_files = encode  # type: ignore[assignment]
            replace.Replacer.replace = commit  # type: ignore[method-assign]

        return uninstall


def _copy_bench(args: argparse.Namespace, work: Path) -> None:
    """The copies alone (``--copy``): classic, Iceberg with its phases, and pyarrow's bare write of the rows."""
    import pyarrow.parquet as pq

    from rsm.iceberg import tables

    segs = _segments(args, work)
    seg_bytes = [f.size for f in segs]
    tip = TopicIdPartition(random_kafka_uuid(), "bench", 0)
    phases = _Phases()
    uninstall = phases.install()
    classic: list[float] = []
    iceberg: list[float] = []
    split: dict[str, list[float]] = {"rows": [], "encode": [], "commit": [], "other": []}
    try:
        for rep in range(args.reps):
            root = work / f"rep{rep}"
            config = filesystem_config(root / "classic")
            classic += _copy_all(config, tip, segs)[1:]
            times: list[float] = []
            with RemoteStorageManager() as m:
                m.configure(_iceberg_config(root))
                for n, files in enumerate(segs):
                    phases.current = {}
                    phases.keep_tables = rep == 0 and n > 0
                    t = time.perf_counter()
                    m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
                    times.append(time.perf_counter() - t)
                    if n:
                        for name in ("rows", "encode", "commit"):
                            split[name].append(phases.current.get(name, 0.0))
                        split["other"].append(times[-1] - sum(phases.current.values()))
            iceberg += times[1:]
    finally:
        uninstall()
    bare: dict[str, list[float]] = {"pyarrow defaults": [], "the table's properties": []}
    table_options = {
        "compression": tables.TABLE_CODEC,
        "row_group_size": tables.ROW_GROUP_ROWS,
        "write_batch_size": tables.PAGE_ROWS,
        "dictionary_pagesize_limit": tables.DICTIONARY_BYTES,
    }
    per_segment = len(phases.tables) // max(1, len(segs) - 1)
    for _ in range(args.reps):
        for i in range(0, len(phases.tables), max(1, per_segment)):
            for name, options in (("pyarrow defaults", {}), ("the table's properties", table_options)):
                t = time.perf_counter()
                for chunk in phases.tables[i : i + per_segment]:
                    pq.write_table(chunk, work / "bare.parquet", **options)  # type: ignore[arg-type]
                bare[name].append(time.perf_counter() - t)
    mb = statistics.median(seg_bytes[1:] or seg_bytes) / 1e6
    rows = sum(t.num_rows for t in phases.tables) // max(1, len(segs) - 1)
    print(
        f"{args.segments} segments x {args.segment_mib} MiB, codec {args.codec}, {rows:,} rows a segment; medians "
        f"of {len(iceberg)} copies ({args.reps} reps, each rep's first Iceberg copy left out); load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"{'':<40} {'s/segment':>9} {'MB/s':>8}")

    def line(name: str, samples: list[float]) -> None:
        s = statistics.median(samples)
        print(f"{name:<40} {s:>9.3f} {mb / s if s > 0 else float('inf'):>8.1f}")

    line("classic copy", classic)
    line("iceberg copy", iceberg)
    for name, samples in split.items():
        line(f"  {name}", samples)
    for name, samples in bare.items():
        line(f"pyarrow pq.write_table, {name}", samples)


def _iceberg_config(work: Path) -> dict[str, str]:
    """The bench topic in Iceberg mode, its segments' store in ``work/iceberg`` beside the classic one."""
    return iceberg_config(work, "bench", **{"storage.root": str(work / "iceberg")})


def _settle(table: Any, settings: Any) -> Any:
    """The table once the plugin's maintenance has compacted it (as a broker's does within its first passes):
    a copy writes one data file per ``iceberg.mode.write.batch.bytes`` of records, and what the background
    thread merged during the copies depends on timing. Old files stay, so the copied state can still be read."""
    from rsm.iceberg.maintenance.compaction import compact, plan_compaction

    while plan_compaction(table, settings):
        compact(table, settings)
        table = table.catalog.load_table(table.name())
    return table


def _rewrite(table: Any, name: str, encodings: dict[str, str]) -> str:
    """A table with ``table``'s schema, spec and properties whose data files are ``table``'s, each rewritten by
    pyarrow as pyiceberg writes them (same codec, row groups, pages, dictionary limit, field ids) except that
    the columns of ``encodings`` get those encodings and no dictionary. Returns its metadata location."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        _get_parquet_writer_kwargs,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table import TableProperties

    copy = table.catalog.create_table(
        ("kafka", name), schema=table.schema(), partition_spec=table.spec(), properties=table.properties
    )
    kwargs: dict[str, Any] = _get_parquet_writer_kwargs(table.properties)
    encodings = dict(encodings)
    rows = int(
        encodings.pop("rows", None)
        or table.properties.get(
            TableProperties.PARQUET_ROW_GROUP_LIMIT, TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT
        )
    )
    files = []
    for n, task in enumerate(table.scan().plan_files()):
        source = task.file.file_path.removeprefix("file://")
        data = pq.read_table(source)  # field ids stay in the fields' metadata
        if encodings:
            leaves = [(c.path, encodings.get(c.path.split(".")[0])) for c in pq.ParquetFile(source).schema]
            if "DICTIONARY" in encodings.values():
                kwargs["use_dictionary"] = [c for c, e in leaves if e == "DICTIONARY"]
                kwargs["dictionary_pagesize_limit"] = 1 << 20
            else:
                kwargs["use_dictionary"] = [c for c, e in leaves if e is None]
            kwargs["column_encoding"] = {c: e for c, e in leaves if e not in (None, "DICTIONARY")}
        where = f"{copy.location()}/data/rewrite-{n:05d}.parquet"
        with copy.io.new_output(where).create() as out:
            pq.write_table(data, out, row_group_size=rows, store_decimal_as_integer=True, **kwargs)
        meta = pq.read_metadata(where.removeprefix("file://"))
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=meta,
            stats_columns=compute_statistics_plan(copy.schema(), copy.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(copy.schema()),
        )
        files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=where,
                file_format=FileFormat.PARQUET,
                partition=task.file.partition,  # pyiceberg keeps no bounds of struct fields to derive it from
                file_size_in_bytes=len(copy.io.new_input(where)),
                sort_order_id=None,
                spec_id=task.file.spec_id,
                equality_ids=None,
                key_metadata=None,
                **stats.to_serialized_dict(),
            )
        )
    with copy.transaction() as txn, txn.update_snapshot().fast_append() as append:
        for f in files:
            append.append_data_file(f)
    return copy.refresh().metadata_location


def _run(args: argparse.Namespace, work: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    jar = subprocess.run(
        ["bash", str(REPO / ".ci" / "iceberg_spark_env.sh")], check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    segs = []
    total_bytes = 0
    for i in range(args.segments):
        files = write_large_segment(
            work / f"s{i}", args.segment_mib << 20, seed=i, base_offset=i * 10_000_000, codec=args.codec
        )
        segs.append(files)
        total_bytes += files.size

    classic = filesystem_config(work / "classic")
    iceberg = _iceberg_config(work)
    tip = TopicIdPartition(random_kafka_uuid(), "bench", 0)
    classic_secs = _copy_all(classic, tip, segs)
    iceberg_secs = _copy_all(iceberg, tip, segs)

    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import StaticTable

    from rsm.iceberg.catalog import CatalogHandle, catalog_properties
    from rsm.iceberg.config import IcebergConfig

    cfg = IcebergConfig.from_map(iceberg)
    storage = {k[len("storage.") :]: v for k, v in iceberg.items() if k.startswith("storage.")}
    handle = CatalogHandle(cfg, catalog_properties(cfg, "filesystem", storage, ""))
    table = handle.catalog.load_table(handle.table_identifier("bench"))
    as_copied = table.metadata_location
    copied_files = len(list(table.scan().plan_files()))
    table = _settle(table, cfg.maintenance)
    iceberg_mb = sum(f.file_size_in_bytes for t in table.scan().plan_files() for f in [t.file]) / 1e6
    iceberg_files = len(list(table.scan().plan_files()))

    variants = {}
    for n, props in enumerate(args.variant):
        variant = handle.catalog.create_table(  # the table's own properties, these ones changed
            ("kafka", f"bench_variant_{n}"),
            schema=table.schema(),
            partition_spec=table.spec(),
            properties={**table.properties, **props},
        )
        for task in table.scan().plan_files():  # one append per data file: the same files per segment
            variant.append(ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=[task]))
        variants[f"variant {n}"] = variant.refresh().metadata_location
        variant_mb = sum(t.file.file_size_in_bytes for t in variant.scan().plan_files()) / 1e6
        print(f"variant {n}: data files {variant_mb:.1f} MB against {iceberg_mb:.1f} MB")

    for n, encodings in enumerate(args.rewrite):
        variants[f"rewrite {n}"] = _rewrite(table, f"bench_rewrite_{n}", encodings)
        rewrite_mb = (
            sum(
                t.file.file_size_in_bytes
                for t in StaticTable.from_metadata(variants[f"rewrite {n}"]).scan().plan_files()
            )
            / 1e6
        )
        first = next(iter(StaticTable.from_metadata(variants[f"rewrite {n}"]).scan().plan_files())).file.file_path
        group = pq.read_metadata(first.removeprefix("file://")).row_group(0)
        used = {group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)}
        print(
            f"rewrite {n}: data files {rewrite_mb:.1f} MB against {iceberg_mb:.1f} MB; encodings key_raw "
            f"{used['key_raw']}, value_raw {used['value_raw']}"
        )

    options = {**classic, "topic": "bench"}
    reader = TieredReader(options)
    parquet_dir = work / "parquet"
    parquet_dir.mkdir()
    records = 0
    for i, piece in enumerate(reader.plan()):
        batches = list(read_slice(reader.manager, piece, reader.options))
        tbl = pa.Table.from_batches(batches)
        records += tbl.num_rows
        pq.write_table(tbl, parquet_dir / f"segment-{i}.parquet")
    parquet_mb = sum(p.stat().st_size for p in parquet_dir.iterdir()) / 1e6

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from rsm.spark.datasource import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", jar)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    sources: dict[str, tuple[str, Any]] = {
        "iceberg table": ("iceberg", spark.read.format("iceberg").load(table.metadata_location)),
        "parquet copy": ("kafka", spark.read.parquet(str(parquet_dir))),
        **{name: ("iceberg", spark.read.format("iceberg").load(where)) for name, where in variants.items()},
        **{
            f"read {n}": ("iceberg", spark.read.format("iceberg").options(**opts).load(table.metadata_location))
            for n, opts in enumerate(args.read_option)
        },
    }
    if not args.no_tiered:
        sources["kafka-tiered"] = ("kafka", spark.read.format("kafka-tiered").options(**options).load())
    if args.diagnose:
        sources["iceberg table, as copied"] = ("iceberg", spark.read.format("iceberg").load(as_copied))
        diagnosed = {"iceberg table": table.metadata_location, **variants}
        for name, where in diagnosed.items():
            paths = [t.file.file_path for t in StaticTable.from_metadata(where).scan().plan_files()]
            sources[f"{name} files, Spark's Parquet reader"] = ("iceberg", spark.read.parquet(*paths))
    if args.diagnose:  # whether each scan hands Spark columnar batches (ColumnarToRow) or rows
        for (title, exprs), (name, (kind, df)) in itertools.product(QUERIES.items(), sources.items()):
            query = df.selectExpr(*exprs[kind])
            query.collect()  # the plan is final once run
            plan = query._jdf.queryExecution().executedPlan().toString().splitlines()
            print(f"plan of {title} over {name}:", *(f"    {line}" for line in plan), sep="\n")
    secs: dict[tuple[str, str], float] = {}
    for query, exprs in QUERIES.items():
        answers = {  # the warm-up, and every source's answer checked against the copy's
            name: [tuple(r) for r in df.selectExpr(*exprs[kind]).collect()] for name, (kind, df) in sources.items()
        }
        if wrong := {name: got for name, got in answers.items() if got != answers["parquet copy"]}:
            raise SystemExit(f"{query}: {wrong} differ from the Parquet copy's {answers['parquet copy']}")
        for name in sources:
            secs[(query, name)] = float("inf")
        for _ in range(args.reps):
            for name, (kind, df) in sources.items():
                t = time.perf_counter()
                df.selectExpr(*exprs[kind]).collect()
                secs[(query, name)] = min(secs[(query, name)], time.perf_counter() - t)
    spark.stop()

    mb = total_bytes / 1e6
    print(
        f"{args.segments} segments x {args.segment_mib} MiB, codec {args.codec}: {mb:.1f} MB, {records:,} records; "
        f"Iceberg data files {iceberg_mb:.1f} MB ({iceberg_files} files; {copied_files} as copied, before "
        f"compaction), Parquet copy {parquet_mb:.1f} MB ({args.segments} files); best of {args.reps}"
    )
    for n, props in enumerate(args.variant):
        print(f"variant {n}: the table written again with {','.join(f'{k}={v}' for k, v in props.items())}")
    for n, encodings in enumerate(args.rewrite):
        said = ",".join(f"{k}={v}" for k, v in encodings.items()) or "the same settings"
        print(f"rewrite {n}: the table's data files rewritten by pyarrow with {said}")
    for n, opts in enumerate(args.read_option):
        print(f"read {n}: the table read with {','.join(f'{k}={v}' for k, v in opts.items())}")
    c, i = sum(classic_secs), sum(iceberg_secs)
    print(
        f"copy: classic {c:.2f} s ({mb / c:.1f} MB/s), iceberg {i:.2f} s ({mb / i:.1f} MB/s); iceberg / classic "
        f"time = {i / c:.2f}"
    )
    if len(segs) > 1:  # the first Iceberg copy also imports pyiceberg and creates the catalog and the table
        c1, i1 = sum(classic_secs[1:]), sum(iceberg_secs[1:])
        print(
            f"copy after the first segment: classic {c1:.2f} s, iceberg {i1:.2f} s; iceberg / classic time = "
            f"{i1 / c1:.2f}; per segment: classic {' '.join(f'{x:.2f}' for x in classic_secs)}, iceberg "
            f"{' '.join(f'{x:.2f}' for x in iceberg_secs)}"
        )
    print(f"{'query':<28} {'source':<16} {'seconds':>8} {'records/s':>12}")
    for (query, name), s in secs.items():
        print(f"{query:<28} {name:<16} {s:>8.2f} {records / s:>12,.0f}")
    for query in QUERIES:
        for name in [n for n in sources if n not in ("iceberg table", "parquet copy", "kafka-tiered")]:
            print(f"{query}: {name} vs parquet copy = {secs[(query, 'parquet copy')] / secs[(query, name)]:.2f}")
    for query in QUERIES:
        ice = secs[(query, "iceberg table")]
        tiered = secs.get((query, "kafka-tiered"))
        print(
            f"{query}: iceberg vs parquet copy = {secs[(query, 'parquet copy')] / ice:.2f} (target >= 0.9)"
            + (f"; iceberg vs kafka-tiered = {tiered / ice:.2f} (target >= 2.5)" if tiered else "")
        )


if __name__ == "__main__":
    main()
