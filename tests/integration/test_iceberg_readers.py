"""The table the plugin writes for an Iceberg-mode topic, read by pyiceberg, DuckDB (its iceberg extension) and
Spark (Iceberg's own runtime): the same rows, with the parsed Avro ``value`` beside ``value_raw``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from iceberg_testing import (
    ORDER_SCHEMA,
    SPARK_SESSION,
    SPARK_SQL,
    Rec,
    duckdb_with_iceberg,
    iceberg_config,
    load_table,
    new_tip,
    order_records,
    run_iceberg_spark,
    segment_of,
    spark_jdbc_catalog,
    sql_summary,
    tier,
)


def _expected_value(r: Rec) -> dict[str, Any] | None:
    if r.value is None or r.value.startswith(b"not avro"):
        return None
    off = r.offset
    return {"id": off, "item": f"item-{off % 7}", "qty": None if off % 5 else off}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[Rec]]:
    work = tmp_path_factory.mktemp("iceberg-readers")
    config = iceberg_config(work, **{"iceberg.value.schema.orders.avro": json.dumps(ORDER_SCHEMA)})
    tip = new_tip()
    recs0, recs1 = order_records(0, 120, garbage_every=13), order_records(120, 80, garbage_every=13)
    tier(config, tip, [segment_of(work / "s0", recs0), segment_of(work / "s1", recs1)])
    return config, recs0 + recs1


def test_pyiceberg_scan_reads_every_row_with_its_parsed_value(tiered: tuple[dict[str, str], list[Rec]]) -> None:
    config, recs = tiered
    table = load_table(config)
    assert "value" in {f.name for f in table.schema().fields}
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [r["kafka"]["offset"] for r in rows] == [r.offset for r in recs]
    for row, rec in zip(rows, recs, strict=True):
        assert row["kafka"]["partition"] == 0
        assert row["key_raw"] == rec.key
        assert row["value_raw"] == rec.value
        assert row["value"] == _expected_value(rec)
        assert row["headers"] == [{"key": "h", "value": b"%d" % rec.offset}]
    # An offset range, as a reader of one segment asks for it.
    some = table.scan(row_filter="kafka.offset >= 100 and kafka.offset < 130").to_arrow()
    assert sorted(some.column("kafka").combine_chunks().field("offset").to_pylist()) == list(range(100, 130))


def test_duckdb_iceberg_extension_reads_the_same_rows(tiered: tuple[dict[str, str], list[Rec]]) -> None:
    config, recs = tiered
    table = load_table(config)
    con = duckdb_with_iceberg()
    got = con.execute(
        "SELECT count(*), sum(octet_length(value_raw)), count(DISTINCT key_raw), count(value), "
        'sum(value.id), min(kafka."offset"), max(kafka."offset") FROM iceberg_scan(?)',
        [table.metadata_location],
    ).fetchone()
    parsed = [_expected_value(r) for r in recs]
    assert got == (
        len(recs),
        sum(len(r.value or b"") for r in recs),
        len({r.key for r in recs}),
        sum(p is not None for p in parsed),
        sum(p["id"] for p in parsed if p is not None),
        recs[0].offset,
        recs[-1].offset,
    )
    items = con.execute(
        "SELECT value.item, count(*) FROM iceberg_scan(?) WHERE value IS NOT NULL GROUP BY 1 ORDER BY 1",
        [table.metadata_location],
    ).fetchall()
    want: dict[str, int] = {}
    for p in parsed:
        if p is not None:
            want[p["item"]] = want.get(p["item"], 0) + 1
    assert items == sorted(want.items())


SPARK_QUERY = (
    SPARK_SESSION
    + """
df = spark.read.format("iceberg").load(sys.argv[3])
row = df.selectExpr("count(*) AS n", "sum(length(value_raw)) AS b", "count(distinct key_raw) AS k",
                    "count(value) AS parsed", "sum(value.id) AS ids", "max(kafka.offset) AS last").collect()[0]
first = df.where("kafka.offset = 15").select("value.item", "value.qty", "headers").collect()[0]
print(json.dumps({**row.asDict(), "item15": first["item"], "qty15": first["qty"],
                  "h15": bytes(first["headers"][0]["value"]).decode()}))
spark.stop()
"""
)


@pytest.mark.timeout(1200)  # a JVM start and Iceberg's runtime; minutes on a loaded machine
def test_spark_with_iceberg_runtime_reads_the_same_rows(tiered: tuple[dict[str, str], list[Rec]]) -> None:
    config, recs = tiered
    table = load_table(config)
    out = json.loads(run_iceberg_spark(SPARK_QUERY, "{}", table.metadata_location).strip().splitlines()[-1])
    parsed = [_expected_value(r) for r in recs]
    assert out == {
        "n": len(recs),
        "b": sum(len(r.value or b"") for r in recs),
        "k": len({r.key for r in recs}),
        "parsed": sum(p is not None for p in parsed),
        "ids": sum(p["id"] for p in parsed if p is not None),
        "last": recs[-1].offset,
        "item15": "item-1",
        "qty15": 15,
        "h15": "15",
    }


@pytest.mark.timeout(1200)
def test_spark_opens_the_sqlite_catalog_as_iceberg_jdbc_catalog(
    tiered: tuple[dict[str, str], list[Rec]],
) -> None:
    """What docs/iceberg.md tells a Spark user: the plugin's SQLite catalog is Iceberg's JDBC catalog, so tables
    are queried by name (no metadata file to look up)."""
    config, recs = tiered
    settings = spark_jdbc_catalog(
        f"jdbc:sqlite:{config['iceberg.mode.catalog.sqlite.path']}", config["iceberg.mode.warehouse"]
    )
    out = json.loads(run_iceberg_spark(SPARK_SQL, json.dumps(settings), "kafka_tiered.kafka.orders").splitlines()[-1])
    assert out == sql_summary(recs)


def test_unknown_topic_tiered_classic_has_no_table(tmp_path: Path) -> None:
    config = iceberg_config(tmp_path)
    tier(config, new_tip("logs"), [segment_of(tmp_path / "s", order_records(0, 20))])
    from pyiceberg.exceptions import NoSuchTableError

    with pytest.raises(NoSuchTableError):
        load_table(config, "logs")
