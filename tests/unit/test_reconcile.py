"""``rsm.operator_tools.reconcile`` on a real store of the demo's segments (filesystem backend) against records as Kafka
writes them: each kind found for the state that makes it, lost segments named, unknown ones left alone, and
removal taking exactly the segments listed, into the quarantine, and only on every signal its rule needs."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from rsm.cli.main import main
from rsm.cli.settings import open_manager
from rsm.core.object_keys import segment_keys
from rsm.deletion.rules import RECORD_COMPLETE, RULES, STORE_AGE, TOPIC_GONE_CONFIRMED, Evidence
from rsm.formats.iceberg import iceberg_format
from rsm.kafka.remote_log_metadata import SegmentRecord, SegmentUpdateRecord, decode, encode
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, random_kafka_uuid
from rsm.operator_tools.garbage import GarbageItem
from rsm.operator_tools.garbage_removal import delete_garbage, quarantine_of
from rsm.operator_tools.reconcile import (
    DEAD_TOPIC_ICEBERG,
    DEAD_TOPIC_SEGMENT,
    DELETED_SEGMENT,
    UNFINISHED_COPY,
    reconcile,
    segments_from_records,
)

pytestmark = pytest.mark.unit
S = RemoteLogSegmentState
HOUR_MS = 3_600_000
WHOLE = Evidence(RECORD_COMPLETE, "read whole")


def observed(items: list[GarbageItem], *lacking: str) -> list[GarbageItem]:
    """``items`` with every signal their rule needs but ``lacking``, as the cluster's record and the store show
    them to the reconciliation."""
    return [
        replace(i, evidence=tuple(Evidence(s, "by hand") for s in RULES[i.kind].signals if s not in lacking))
        for i in items
    ]


def history(meta: RemoteLogSegmentMetadata, *states: RemoteLogSegmentState, at_ms: int) -> list[object]:
    """The records a broker writes for ``meta`` going through ``states`` (the first is COPY_SEGMENT_STARTED),
    through Kafka's serialization and back."""
    first = SegmentRecord(replace(meta, state=S.COPY_SEGMENT_STARTED, event_timestamp_ms=at_ms, custom_metadata=None))
    out: list[object] = [first]
    for state in states[1:]:
        out.append(SegmentUpdateRecord(meta.remote_log_segment_id, 0, at_ms, state, meta.custom_metadata))
    return [decode(encode(r)) for r in out]  # type: ignore[arg-type]


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    d = tmp_path / "demo"
    args = ["demo", "--dir", str(d), "--segments", "4", "--segment-mb", "0.2", "--no-spark", "--no-iceberg"]
    assert main(args) == 0
    return d


def test_each_state_gives_its_kind_and_delete_takes_exactly_those(demo: Path) -> None:
    props = str(demo / "server.properties")
    long_ago = int(time.time() * 1000) - 2 * HOUR_MS
    with open_manager(props, (), keys=False) as manager:
        segs = sorted(manager.catalog().segments(), key=lambda s: s.metadata_stub().start_offset)
        assert len(segs) == 4
        metas = [s.metadata_stub() for s in segs]
        tip = metas[0].topic_id_partition
        never_stored = replace(metas[0], remote_log_segment_id=RemoteLogSegmentId(tip, random_kafka_uuid()))
        records = (
            history(metas[0], S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, at_ms=long_ago)
            + history(metas[1], *S, at_ms=long_ago)  # its delete finished, yet its objects are there
            + history(metas[2], S.COPY_SEGMENT_STARTED, at_ms=long_ago)  # a copy that never finished
            + history(never_stored, S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, at_ms=long_ago)
        )  # metas[3]: unknown to the record
        segments = segments_from_records(records)
        assert {sid: s.state for sid, s in segments.items()} == {
            metas[0].remote_log_segment_id.id: S.COPY_SEGMENT_FINISHED,
            metas[1].remote_log_segment_id.id: S.DELETE_SEGMENT_FINISHED,
            metas[2].remote_log_segment_id.id: S.COPY_SEGMENT_STARTED,
            never_stored.remote_log_segment_id.id: S.COPY_SEGMENT_FINISHED,
        }
        time.sleep(0.05)
        result = reconcile(
            manager, segments, [tip.topic_id], older_than_seconds=0.01, reread=lambda: segments, complete=WHOLE
        )
        kinds = {i.segment.remote_log_segment_id.id: i.kind for i in result.items if i.segment}
        assert kinds == {
            metas[1].remote_log_segment_id.id: DELETED_SEGMENT,
            metas[2].remote_log_segment_id.id: UNFINISHED_COPY,
        }
        assert [lost.segment.metadata.remote_log_segment_id.id for lost in result.lost] == [
            never_stored.remote_log_segment_id.id
        ]
        assert len(result.lost[0].missing) == 2  # its manifest and .indexes (the .log is asked only beside them)
        assert result.unknown_bytes > 0 and result.states == {"COPY_SEGMENT_FINISHED": 2, **{
            "DELETE_SEGMENT_FINISHED": 1, "COPY_SEGMENT_STARTED": 1}}  # fmt: skip
        # within the grace period nothing is listed, whatever the record says
        assert not reconcile(manager, segments, [tip.topic_id], older_than_seconds=3600, reread=lambda: segments).items

        # The topic is gone from the cluster: every segment the record knows is a dead topic's, none is lost.
        dead = reconcile(manager, segments, [], older_than_seconds=0.01, reread=lambda: segments)
        assert {i.kind for i in dead.items} == {DEAD_TOPIC_SEGMENT} and len(dead.items) == 3 and not dead.lost

        # an item lacking one of its rule's signals is kept, whatever the others say
        for lacking in (RECORD_COMPLETE, STORE_AGE):
            report = delete_garbage(manager, observed(result.items, lacking))
            assert not report.deleted and not report.held and len(report.skipped) == 2
            assert all(f"lacks the signal(s) {lacking}" in why for _item, why in report.skipped)
        dead_refused = delete_garbage(manager, observed(dead.items, TOPIC_GONE_CONFIRMED))
        assert not dead_refused.deleted and len(dead_refused.skipped) == 3
        assert {s.metadata_stub().remote_log_segment_id.id for s in manager.catalog().segments()} == {
            m.remote_log_segment_id.id for m in metas
        }

        report = delete_garbage(manager, observed(result.items))
        assert len(report.deleted) == 2 and not report.failed
        left = {s.metadata_stub().remote_log_segment_id.id for s in manager.catalog().segments()}
        assert left == {metas[0].remote_log_segment_id.id, metas[3].remote_log_segment_id.id}
        held = quarantine_of(manager).held(run=report.run)
        assert sorted(h.original for h in held) == sorted(
            k for m in metas[1:3] for k in segment_keys(manager.config["key.prefix"], m).all()
        )
        assert {h.kind for h in held} == {DELETED_SEGMENT, UNFINISHED_COPY}
        assert all("record-complete: by hand" in h.evidence for h in held)
    store_files = [p.name for p in (demo / "store").rglob("*") if p.is_file() and "kts-quarantine" not in p.parts]
    for meta in metas[1:3]:
        assert not [n for n in store_files if meta.remote_log_segment_id.id in n], store_files
    for meta in (metas[0], metas[3]):
        assert len([n for n in store_files if meta.remote_log_segment_id.id in n]) == 3


def test_an_iceberg_topics_segments_are_named_and_their_rows_go_with_them(tmp_path: Path) -> None:
    pytest.importorskip("pyiceberg")
    from rsm.cli import demo_iceberg

    d = tmp_path / "demo"
    assert main(["demo", "--dir", str(d), "--segments", "2", "--segment-mb", "0.2", "--no-spark"]) == 0
    props = str(d / "server.properties")
    long_ago = int(time.time() * 1000) - 2 * HOUR_MS
    rows_on = ("iceberg.mode.delete.rows.enabled=true",)
    with open_manager(props, rows_on, keys=True) as manager:  # the rows' offsets are in the encrypted manifest
        metas = [s.metadata_stub() for s in manager.catalog().segments(demo_iceberg.TOPIC)]
        assert metas
        records = [
            r for m in metas for r in history(m, S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, at_ms=long_ago)
        ]
        time.sleep(0.05)
        gone = {metas[0].topic_id_partition.topic_id: Evidence(TOPIC_GONE_CONFIRMED, "two reads")}
        segments = segments_from_records(records)
        result = reconcile(manager, segments, [], older_than_seconds=0.01, reread=dict, complete=WHOLE, gone=gone)
        assert all(not RULES[i.kind].missing(i.evidence) for i in result.items)  # the reconciliation's own
        assert {i.kind for i in result.items} == {DEAD_TOPIC_ICEBERG} and len(result.items) == len(metas)
        assert not result.iceberg_rows_kept
        table = iceberg_format(manager).mode().handle.catalog.load_table((demo_iceberg.NAMESPACE, demo_iceberg.TOPIC))
        assert table.scan().to_arrow().num_rows > 0
        report = delete_garbage(manager, observed(result.items))
        assert len(report.deleted) == len(metas) and not report.failed
        assert not manager.catalog().segments(demo_iceberg.TOPIC)
        assert table.refresh().scan().to_arrow().num_rows == 0
        # the manifests and .indexes are held; an Iceberg-mode segment has no .log
        assert len(quarantine_of(manager).held(run=report.run, topic=demo_iceberg.TOPIC)) == 2 * len(metas)
