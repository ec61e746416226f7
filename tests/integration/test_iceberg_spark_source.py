"""The ``kafka-tiered`` reader over a mixed topic: classic segments tiered before the topic was switched to
Iceberg mode and Iceberg-mode segments after it; every record comes back once, with its bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from iceberg_testing import iceberg_config, new_tip, order_records, segment_of, tier

from rsm.spark.reader import TieredReader


def test_mixed_topic_reads_every_record_once(tmp_path: Path) -> None:
    tip = new_tip()
    recs = order_records(0, 300, garbage_every=17)
    classic = iceberg_config(tmp_path, topics="nothing")
    switched = iceberg_config(tmp_path, topics="orders")
    tier(classic, tip, [segment_of(tmp_path / "s0", recs[:100])])
    tier(switched, tip, [segment_of(tmp_path / "s1", recs[100:220]), segment_of(tmp_path / "s2", recs[220:])])
    got = list(TieredReader({**switched, "topic": "orders"}).records())
    assert [r["offset"] for r in got] == [r.offset for r in recs]
    assert [(r["key"], r["value"], r["timestamp"]) for r in got] == [(r.key, r.value, r.timestamp) for r in recs]
    some = list(TieredReader({**switched, "topic": "orders"}).records(first_offset=90, last_offset=230))
    assert [r["offset"] for r in some] == list(range(90, 231))
    # what Spark gets: the Iceberg-mode segments as rows, the classic one decoded; the same as rebuilt batches
    options = {**switched, "topic": "orders", "includeHeaders": "true"}
    rows = pa.Table.from_batches(list(TieredReader(options).record_batches()))
    rebuilt = pa.Table.from_batches(list(TieredReader({**options, "icebergRead": "batches"}).record_batches()))
    assert rows.column("offset").to_pylist() == [r.offset for r in recs]
    assert rows.to_pylist() == rebuilt.to_pylist()
