"""A deleted topic's rows in its latest-per-key table, on a real SQLite catalog and filesystem warehouse: the
cluster reconciliation lists them on the dead-topic evidence, ``delete_garbage`` removes exactly them into the
warehouse's quarantine (never a live topic's rows, nor those of the topic created again under the same name),
and ``kts gc restore`` puts them back, never over a row written since."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from iceberg_testing import iceberg_config, load_table, new_tip

from rsm import RemoteStorageManager
from rsm.cli.main import main
from rsm.deletion.rules import RECORD_COMPLETE, RULES, TOPIC_GONE_CONFIRMED, Evidence
from rsm.kafka.batch_builder import build_batch
from rsm.kafka.remote_log_metadata import SegmentRecord, SegmentUpdateRecord, decode, encode
from rsm.kafka.writer import write_entries_segment
from rsm.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from rsm.operator_tools.garbage_removal import delete_garbage, warehouse_quarantine
from rsm.operator_tools.latest_rows import DEAD_TOPIC_LATEST, restore_held
from rsm.operator_tools.reconcile import reconcile, segments_from_records

S = RemoteLogSegmentState
T0 = 1_767_225_600_000
WHOLE = Evidence(RECORD_COMPLETE, "read whole")
SETTINGS = {
    "iceberg.mode.table.orders.latest.enabled": "true",
    "iceberg.mode.table.other.latest.enabled": "true",
    "iceberg.mode.maintenance.enabled": "false",
}


def _copy(
    m: RemoteStorageManager, tip: TopicIdPartition, work: Path, first: int, plan: list[tuple[bytes, bytes]]
) -> RemoteLogSegmentMetadata:
    entries = [build_batch([(T0 + first + i, k, v, [])], base_offset=first + i) for i, (k, v) in enumerate(plan)]
    seg = write_entries_segment(work / f"{tip.topic_id}-{tip.partition}-{first}", entries)
    meta = seg.to_metadata(tip)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    return meta


def _finished(meta: RemoteLogSegmentMetadata) -> list[Any]:
    at = int(time.time() * 1000) - 7_200_000
    first = SegmentRecord(replace(meta, state=S.COPY_SEGMENT_STARTED, event_timestamp_ms=at, custom_metadata=None))
    done = SegmentUpdateRecord(meta.remote_log_segment_id, 0, at, S.COPY_SEGMENT_FINISHED, meta.custom_metadata)
    return [decode(encode(first)), decode(encode(done))]


def _rows(config: dict[str, str], topic: str) -> list[tuple[str, int, bytes, bytes]]:
    table = load_table(config, topic).catalog.load_table(("kafka", f"{topic}_latest"))
    return sorted(
        (r["_kafka"]["topic_id"], r["_kafka"]["partition"], r["_kafka"]["key"], r["value_raw"])
        for r in table.scan().to_arrow().to_pylist()
    )


def _snapshot(config: dict[str, str], topic: str) -> int:
    return load_table(config, topic).catalog.load_table(("kafka", f"{topic}_latest")).current_snapshot().snapshot_id


@pytest.fixture
def tiered(tmp_path: Path) -> tuple[dict[str, str], TopicIdPartition, TopicIdPartition, TopicIdPartition, list[Any]]:
    """``orders`` deleted (its old topic id wrote keys a, b, c in two partitions) and created again (its new id
    wrote key a of partition 0), and ``other``, live, with keys a and b: each with its latest table."""
    config = iceberg_config(tmp_path, topics="orders|other", **SETTINGS)
    old, new, other = new_tip("orders"), new_tip("orders"), new_tip("other")
    old1 = TopicIdPartition(old.topic_id, "orders", 1)
    records: list[Any] = []
    with RemoteStorageManager() as m:
        m.configure(config)
        for tip, plan in (
            (old, [(b"a", b"old-a"), (b"b", b"old-b"), (b"c", b"old-c")]),
            (old1, [(b"a", b"old-a1")]),
            (new, [(b"a", b"new-a")]),
            (other, [(b"a", b"other-a"), (b"b", b"other-b")]),
        ):
            records += _finished(_copy(m, tip, tmp_path, 0, plan))
    return config, old, new, other, records


def test_a_dead_topics_rows_go_on_its_evidence_and_come_back(tmp_path: Path, tiered: Any) -> None:
    config, old, new, other, records = tiered
    before = _rows(config, "orders")
    assert before == sorted(
        [
            (new.topic_id, 0, b"a", b"new-a"),  # the new topic's record replaced the old one's row of key a
            (old.topic_id, 0, b"b", b"old-b"),
            (old.topic_id, 0, b"c", b"old-c"),
            (old.topic_id, 1, b"a", b"old-a1"),
        ]
    )
    other_rows, other_snapshot = _rows(config, "other"), _snapshot(config, "other")
    log_rows = load_table(config, "orders").scan().to_arrow().num_rows
    gone = {old.topic_id: Evidence(TOPIC_GONE_CONFIRMED, "two reads")}
    segments = segments_from_records(records)
    with RemoteStorageManager() as m:
        m.configure(config)
        live = [new.topic_id, other.topic_id]
        # Without the topic's absence confirmed: listed, but kept by the rule.
        found = reconcile(m, segments, live, 0.0, reread=dict, complete=WHOLE)
        unconfirmed = [i for i in found.items if i.kind == DEAD_TOPIC_LATEST]
        assert [(i.key, i.rows) for i in unconfirmed] == [(f"kafka.orders_latest _kafka.topic_id={old.topic_id}", 3)]
        assert RULES[DEAD_TOPIC_LATEST].missing(unconfirmed[0].evidence) == [TOPIC_GONE_CONFIRMED]
        report = delete_garbage(m, unconfirmed)
        assert not report.deleted and len(report.skipped) == 1 and "topic-gone-confirmed" in report.skipped[0][1]
        assert _rows(config, "orders") == before  # listing and a refused removal change nothing

        found = reconcile(m, segments, live, 0.0, reread=dict, complete=WHOLE, gone=gone)
        items = [i for i in found.items if i.kind == DEAD_TOPIC_LATEST]
        assert len(items) == 1 and not RULES[DEAD_TOPIC_LATEST].missing(items[0].evidence)
        assert items[0].dead_topic == (old.topic_id, "orders")
        report = delete_garbage(m, items)
        assert report.deleted == items and not report.failed and not report.skipped
        assert _rows(config, "orders") == [(new.topic_id, 0, b"a", b"new-a")]
        # Another topic's table, and the log tables, are untouched.
        assert _rows(config, "other") == other_rows and _snapshot(config, "other") == other_snapshot
        assert load_table(config, "orders").scan().to_arrow().num_rows == log_rows
        # What went is held in the warehouse's quarantine, with the evidence.
        quarantine = warehouse_quarantine(m)
        assert quarantine is not None
        held = quarantine.held(run=report.run)
        assert [(h.kind, h.topic) for h in held] == [(DEAD_TOPIC_LATEST, "orders")]
        assert any(line.startswith("topic-gone-confirmed") for line in held[0].evidence)
        # Nothing of the dead topic is left to list.
        again = reconcile(m, segments, live, 0.0, reread=dict, complete=WHOLE, gone=gone)
        assert not [i for i in again.items if i.kind == DEAD_TOPIC_LATEST]
    sets = [arg for k, v in config.items() for arg in ("--set", f"{k}={v}")]
    assert main(["gc", "restore", "--run", report.run, *sets]) == 0
    assert _rows(config, "orders") == before
    with RemoteStorageManager() as m:
        m.configure(config)
        assert warehouse_quarantine(m).held(run=report.run) == []  # type: ignore[union-attr]


def test_a_restore_never_replaces_a_row_written_since(tmp_path: Path, tiered: Any) -> None:
    config, old, new, other, records = tiered
    gone = {old.topic_id: Evidence(TOPIC_GONE_CONFIRMED, "two reads")}
    with RemoteStorageManager() as m:
        m.configure(config)
        found = reconcile(
            m,
            segments_from_records(records),
            [new.topic_id, other.topic_id],
            0.0,
            reread=dict,
            complete=WHOLE,
            gone=gone,
        )
        report = delete_garbage(m, [i for i in found.items if i.kind == DEAD_TOPIC_LATEST])
        assert len(report.deleted) == 1
        _copy(m, new, tmp_path / "later", 1, [(b"b", b"new-b")])  # the live topic writes key b meanwhile
        quarantine = warehouse_quarantine(m)
        assert quarantine is not None
        restored = restore_held(m, quarantine, quarantine.held(run=report.run))
        assert not restored.restored and len(restored.refused) == 1
        assert "2 rows put back; 1 rows whose key has a row now stay held" in restored.refused[0][1]
        assert _rows(config, "orders") == sorted(
            [
                (new.topic_id, 0, b"a", b"new-a"),
                (new.topic_id, 0, b"b", b"new-b"),
                (old.topic_id, 0, b"c", b"old-c"),
                (old.topic_id, 1, b"a", b"old-a1"),
            ]
        )
        still = quarantine.held(run=report.run)
        assert len(still) == 1 and still[0].kind == DEAD_TOPIC_LATEST  # the one row left out stays held
