"""The demo's Spark job: three questions analysts ask of a tiered topic, answered straight from the bucket.

``kts demo`` calls :func:`example_query` with the demo's plugin configuration; ``demo/spark_example.py`` runs it
from the command line. The session must have ``spark.sql.python.filterPushdown.enabled=true`` for the time-range
query to prune segments (it is correct either way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rsm.spark.datasource import FORMAT, register

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["example_query", "local_session"]


def local_session(app_name: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A ``local[2]`` session as the demo and its script use it: no UI, filter pushdown on (so the time-range
    question prunes segments), executors on this interpreter (which has ``rsm`` installed). ``conf``: more
    Spark settings, applied when the session starts."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def example_query(
    spark: SparkSession, config: Mapping[str, str], topic: str = "orders", top: int = 5
) -> dict[str, Any]:
    """Count by key, a time-range query over the middle third of the topic's time span, and the keys (producers
    of records) writing the most value bytes. Returns a plain summary the demo prints."""
    from pyspark.sql import functions as F

    register(spark)
    df = spark.read.format(FORMAT).options(**config, topic=topic).load()
    df = df.withColumn("k", F.col("key").cast("string")).cache()
    total = df.count()
    by_key = df.groupBy("k").count().orderBy(F.desc("count"), F.asc_nulls_first("k")).limit(top).collect()
    span = df.agg(F.min(F.unix_millis("timestamp")).alias("lo"), F.max(F.unix_millis("timestamp")).alias("hi")).first()
    lo, hi = (span.lo or 0), (span.hi or 0)
    start, end = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
    in_range = (
        spark.read.format(FORMAT)
        .options(**config, topic=topic)
        .load()
        .filter(
            (F.col("timestamp") >= F.timestamp_millis(F.lit(start)))
            & (F.col("timestamp") < F.timestamp_millis(F.lit(end)))
        )
        .count()
    )
    producers = (
        df.groupBy("k")
        .agg(F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("bytes"))
        .orderBy(F.desc("bytes"), F.asc_nulls_first("k"))
        .limit(top)
        .collect()
    )
    df.unpersist()
    return {
        "topic": topic,
        "records": total,
        "count_by_key": [(r.k, r["count"]) for r in by_key],
        "time_range": {"from_ms": start, "to_ms": end, "records": in_range},
        "top_producers_by_bytes": [(r.k, int(r.bytes)) for r in producers],
    }
