"""Tiering real segments of an Iceberg-mode topic through the plugin, and opening what it wrote, for the tests
and benchmarks of the Iceberg readers."""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import fastavro
from pyiceberg.io import FileIO, InputFile, OutputFile

from rsm import RemoteStorageManager
from rsm.iceberg.duckdb_reader import duckdb_with_iceberg  # noqa: F401 - for the tests
from rsm.kafka.batch_builder import build_batch
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_entries_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid

REPO = Path(__file__).resolve().parents[2]

ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": ["null", "int"], "default": None},
    ],
}


def avro_bytes(schema: Any, datum: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def order_records(first: int, count: int, *, garbage_every: int = 0) -> list[Rec]:
    """Records of orders: Avro values of ``ORDER_SCHEMA`` (every ``garbage_every``-th value is not Avro)."""
    out = []
    for off in range(first, first + count):
        if garbage_every and off % garbage_every == 0:
            value: bytes | None = b"not avro \xff"
        else:
            value = avro_bytes(ORDER_SCHEMA, {"id": off, "item": f"item-{off % 7}", "qty": None if off % 5 else off})
        out.append(Rec(off, f"k{off % 11}".encode(), value, 1_767_225_600_000 + off * 1000, (("h", b"%d" % off),)))
    return out


def segment_of(directory: Path, recs: list[Rec], per_batch: int = 10, codec: str = "zstd") -> SegmentFiles:
    entries = []
    for i in range(0, len(recs), per_batch):
        part = recs[i : i + per_batch]
        specs = [(r.timestamp, r.key, r.value, list(r.headers)) for r in part]
        entries.append(build_batch(specs, base_offset=part[0].offset, codec=codec))  # type: ignore[arg-type]
    return write_entries_segment(directory, entries)


def filesystem_config(root: Path) -> dict[str, str]:
    """A plugin configuration over the filesystem store at ``root``: 4 MiB chunks, no fsync."""
    return {
        "chunk.size": str(4 << 20),
        "storage.backend.class": "filesystem",
        "storage.root": str(root),
        "storage.fsync.enabled": "false",
    }


def iceberg_config(work: Path, topics: str = "orders", **extra: str) -> dict[str, str]:
    """Iceberg mode for the topics ``topics`` matches, over a SQLite catalog and a warehouse in ``work``, on the
    filesystem store ``work/store``; ``extra`` keys (dots as in the key) override or add."""
    config = {
        **filesystem_config(work / "store"),
        "iceberg.mode.topics.regex": topics,
        "iceberg.mode.catalog.sqlite.path": str(work / "catalog.db"),
        "iceberg.mode.warehouse": f"file://{work / 'warehouse'}",
        **extra,
    }
    if config["storage.backend.class"] != "filesystem":  # the filesystem backend's keys: others refuse them
        del config["storage.root"], config["storage.fsync.enabled"]
    return config


def tier(config: Mapping[str, str], tip: TopicIdPartition, segments: list[SegmentFiles]) -> None:
    with RemoteStorageManager() as m:
        m.configure(dict(config))
        for files in segments:
            m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())


def new_tip(topic: str = "orders", partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(random_kafka_uuid(), topic, partition)


def load_table(config: Mapping[str, str], topic: str = "orders") -> Any:
    from rsm.iceberg.catalog import CatalogHandle, catalog_properties
    from rsm.iceberg.config import IcebergConfig

    cfg = IcebergConfig.from_map(config)
    props = catalog_properties(cfg, config["storage.backend.class"], _storage(config), "")
    handle = CatalogHandle(cfg, props)
    return handle.catalog.load_table(handle.table_identifier(topic))


def remove_unlisted_data_files(config: Mapping[str, str]) -> int:
    """What orphan removal does, at once: every data file the current snapshot does not list is deleted. The
    number deleted."""
    table = load_table(config)
    live = {urlparse(t.file.file_path).path for t in table.scan().plan_files()}
    removed = 0
    for path in Path(urlparse(table.location()).path, "data").rglob("*.parquet"):
        if str(path) not in live:
            path.unlink()
            removed += 1
    return removed


def age_ledger(table_dir: Path, seconds: float) -> int:
    """Make every file in the ledger of unreferenced files (rsm.iceberg.maintenance.orphans.UnreferencedLedger) of the
    table at ``table_dir`` (its location on disk) first seen, and written, ``seconds`` earlier, as time passing
    would; the number of files in it."""
    from rsm.iceberg.maintenance.orphans import LEDGER_PATH

    path = table_dir / LEDGER_PATH
    if not path.exists():  # no pass saw an unreferenced file
        return 0
    raw = json.loads(path.read_text())
    raw["first_seen"] = {k: v - seconds for k, v in raw["first_seen"].items()}
    path.write_text(json.dumps(raw))
    for relative in raw["first_seen"]:  # and the files too: a file written after it was first seen starts over
        stat = (table_dir / relative).stat()
        os.utime(table_dir / relative, (stat.st_atime - seconds, stat.st_mtime - seconds))
    return len(raw["first_seen"])


def rewrite_sorted(config: Mapping[str, str], row_group_rows: int = 97) -> None:
    """What a compaction does: every row read and written again, sorted by partition and offset, into new files
    whose row groups (``row_group_rows``) mix segments and partitions; then the old snapshots expire and every
    data file no snapshot names is deleted."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = load_table(config)
    rows = table.scan().to_arrow()
    kafka = rows.column("kafka")
    order = pc.sort_indices(
        pa.table({"p": pc.struct_field(kafka, "partition"), "o": pc.struct_field(kafka, "offset")}),
        sort_keys=[("p", "ascending"), ("o", "ascending")],
    )
    with table.transaction() as txn:
        txn.set_properties({"write.parquet.row-group-limit": str(row_group_rows)})
    table = load_table(config)
    before = {t.file.file_path for t in table.scan().plan_files()}
    table.overwrite(rows.take(order))
    table = load_table(config)
    after = {t.file.file_path for t in table.scan().plan_files()}
    assert before.isdisjoint(after) and after, "the rewrite kept a file"
    table.maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    assert remove_unlisted_data_files(config), "the rewrite left no file to remove"


def _storage(config: Mapping[str, str]) -> dict[str, str]:
    return {k[len("storage.") :]: v for k, v in config.items() if k.startswith("storage.")}


# --------------------------------------------------------------------------------------------------- DuckDB


# ---------------------------------------------------------------------------------------------------- Spark


def iceberg_spark() -> tuple[Path, str]:
    """(python, jars) of the Spark that Iceberg's own runtime loads into (.ci/iceberg_spark_env.sh): the jars are
    Iceberg's runtime and the JDBC drivers, comma-separated as ``spark.jars`` takes them."""
    out = subprocess.run(
        ["bash", str(REPO / ".ci" / "iceberg_spark_env.sh")], check=True, capture_output=True, text=True, timeout=1200
    )
    return REPO / ".venv-iceberg-spark" / "bin" / "python", out.stdout.strip().splitlines()[-1]


class IcebergSpark:
    """The session's one Spark with Iceberg's runtime: a worker process (iceberg_spark_worker.py) in the Iceberg
    Spark environment, started at the first script and stopped when the test process exits."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.log = Path(tempfile.mkstemp(prefix="kts-iceberg-spark-", suffix=".log")[1])

    def start(self) -> subprocess.Popen[str]:
        python, jars = iceberg_spark()
        env = {
            **os.environ,
            "PYSPARK_PYTHON": str(python),
            "PYSPARK_DRIVER_PYTHON": str(python),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(python), str(Path(__file__).with_name("iceberg_spark_worker.py")), jars],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        atexit.register(self.stop)
        return self.proc

    def run(self, script: str, args: Sequence[str], timeout: float) -> str:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self.start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"script": script, "args": list(args)}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(
                f"the Iceberg Spark worker gave no answer within {timeout} s (log {self.log}):\n{tail}"
            )
        answer = json.loads(line)
        if not answer["ok"]:
            error = answer["error"]
            causes = [line for line in error.splitlines() if "Caused by" in line or "Exception:" in line]
            raise AssertionError("Spark script failed:\n" + "\n".join(causes[:12]) + f"\n...\n{error[-3000:]}")
        return str(answer["stdout"])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the worker stops its Spark and exits
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


ICEBERG_SPARK = IcebergSpark()


def run_iceberg_spark(script: str, *args: str, timeout: float = 900) -> str:
    """Run ``script`` (Python source) in the session's Spark with Iceberg's runtime; its stdout. ``sys.argv[1]``
    is the jars, the rest ``args``. The script runs in a session of its own; ``SPARK_SESSION`` starts it."""
    return ICEBERG_SPARK.run(script, args, timeout)


SPARK_SESSION = """
import json, sys
from pyspark.sql import SparkSession
builder = (SparkSession.builder.master("local[2]").config("spark.jars", sys.argv[1])
           .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
           .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"))
for key, value in json.loads(sys.argv[2]).items():  # e.g. a catalog
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
"""
"""Starts ``spark``: ``sys.argv[2]`` is a JSON object of more Spark settings (``{}`` for none)."""


SPARK_SQL = (
    SPARK_SESSION
    + """
namespace = sys.argv[3].rsplit(".", 1)[0]
tables = [r.tableName for r in spark.sql(f"SHOW TABLES IN {namespace}").collect()]
row = spark.sql("SELECT count(*) AS n, sum(length(value_raw)) AS b, count(DISTINCT key_raw) AS k, "
                f"min(kafka.offset) AS first, max(kafka.offset) AS last FROM {sys.argv[3]}").collect()[0]
print(json.dumps({"tables": tables, **row.asDict()}))
spark.stop()
"""
)
"""Prints the tables of the namespace of ``sys.argv[3]`` (a table named catalog.namespace.table) and a summary
of the table's rows, as ``sql_summary`` computes it from the records."""


def sql_summary(recs: Sequence[Rec], tables: Sequence[str] = ("orders",)) -> dict[str, Any]:
    return {
        "tables": list(tables),
        "n": len(recs),
        "b": sum(len(r.value or b"") for r in recs),
        "k": len({r.key for r in recs}),
        "first": min(r.offset for r in recs),
        "last": max(r.offset for r in recs),
    }


def spark_jdbc_catalog(uri: str, warehouse: str, name: str = "kafka_tiered", **jdbc: str) -> dict[str, str]:
    """Spark settings that open the plugin's SQL catalog as Iceberg's JDBC catalog ``name`` (the catalog name the
    plugin writes into its rows, ``iceberg.mode.catalog.name``). ``jdbc``: driver properties (user, password)."""
    prefix = f"spark.sql.catalog.{name}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": uri,
        f"{prefix}.warehouse": warehouse,
        **{f"{prefix}.jdbc.{k}": v for k, v in jdbc.items()},
    }


def iter_rows(table: Any) -> Iterator[dict[str, Any]]:
    yield from table.scan().to_arrow().to_pylist()


SPARK_MAINTAIN = (
    SPARK_SESSION
    + """
import time
catalog, namespace, name = sys.argv[3].split(".", 2)
ident = f"{namespace}.`{name}`"
table = f"{catalog}.{ident}"
spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.parquet.row-group-size-bytes'='65536')")
out = {}
time.sleep(1.5)  # the files the copies wrote are older than the cut-off below
out["rewrite"] = spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{ident}', strategy => 'sort', "
                           "sort_order => 'kafka.partition ASC NULLS FIRST, kafka.offset ASC NULLS FIRST', "
                           "options => map('rewrite-all', 'true'))").collect()[0].asDict()
time.sleep(1.5)  # the rewritten files too
now = spark.sql("SELECT current_timestamp() AS t").collect()[0]["t"]
out["expire"] = spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{ident}', "
                          f"older_than => TIMESTAMP '{now}', retain_last => 1)").collect()[0].asDict()
# The procedure refuses a cut-off under 24 hours; its action (what the procedure runs) takes any.
jvm = spark._jvm
iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
cutoff = spark.sql(f"SELECT unix_millis(TIMESTAMP '{now}') AS ms").collect()[0]["ms"]
result = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
          .deleteOrphanFiles(iceberg_table).olderThan(cutoff).execute())
out["orphans"] = len(list(result.orphanFileLocations()))
out["rows"] = spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0]["n"]
print(json.dumps(out, default=str))
spark.stop()
"""
)
"""Runs Spark's maintenance on ``sys.argv[3]`` (catalog.namespace.table): prints what each step returned."""


def spark_maintain(sqlite_path: str, warehouse: str, table: str = "kafka_tiered.kafka.orders") -> dict[str, Any]:
    """Spark's rewrite_data_files (sorted by partition and offset, every file), expire_snapshots and
    orphan-file removal (its action: the procedure refuses a cut-off under 24 hours), both older than now, on
    the plugin's table through Iceberg's JDBC catalog over the plugin's SQLite file; what each step returned
    and the table's row count after."""
    settings = spark_jdbc_catalog(f"jdbc:sqlite:{sqlite_path}", warehouse)
    out = run_iceberg_spark(SPARK_MAINTAIN, json.dumps(settings), table)
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


SPARK_STATEMENTS = (
    SPARK_SESSION
    + """
catalog, namespace, name = sys.argv[3].split(".", 2)
table = f"{catalog}.{namespace}.`{name}`"
for statement in json.loads(sys.argv[4]):
    spark.sql(statement.format(table=table)).collect()
print(json.dumps({"rows": spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0]["n"]}))
spark.stop()
"""
)


def spark_sql_statements(
    sqlite_path: str, warehouse: str, statements: Sequence[str], table: str = "kafka_tiered.kafka.orders"
) -> dict[str, Any]:
    """Run ``statements`` (``{table}`` stands for the table) in Spark over the plugin's catalog; the row count
    after."""
    settings = spark_jdbc_catalog(f"jdbc:sqlite:{sqlite_path}", warehouse)
    out = run_iceberg_spark(SPARK_STATEMENTS, json.dumps(settings), table, json.dumps(list(statements)))
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


class CountingIO(FileIO):
    """A table's FileIO that records every location read through it (``table.io = CountingIO(table.io)``)."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.properties)
        self.inner = inner
        self.reads: list[str] = []

    def new_input(self, location: str) -> InputFile:
        self.reads.append(location)
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self.inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)
