"""Listing what is tiered: manifest keys parsed back into segments, and each segment's metadata recovered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsm.core.catalog import parse_manifest_key
from rsm.errors import RemoteResourceNotFoundException
from rsm.kafka.writer import write_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid


def test_manifest_keys_parse_and_foreign_keys_are_ignored() -> None:
    tid, sid = random_kafka_uuid(), random_kafka_uuid()
    key = f"pre/my-topic-x-{tid}/12/{42:020d}-{sid}.rsm-manifest"
    seg = parse_manifest_key(key, "pre/")
    assert seg is not None
    assert (seg.topic, seg.topic_id, seg.partition, seg.start_offset, seg.segment_id) == (
        "my-topic-x",
        tid,
        12,
        42,
        sid,
    )
    assert seg.keys.manifest == key
    for foreign in [
        key[: -len(".rsm-manifest")] + ".log",
        f"pre/my-topic-{tid}/x/{42:020d}-{sid}.rsm-manifest",
        f"pre/my-topic-{tid}/1/42-{sid}.rsm-manifest",
        f"pre/my-topic-{tid}/1/extra/{42:020d}-{sid}.rsm-manifest",
        f"other/my-topic-{tid}/1/{42:020d}-{sid}.rsm-manifest",
        f"pre/{tid}/1/{42:020d}-{sid}.rsm-manifest",
    ]:
        assert parse_manifest_key(foreign, "pre/") is None, foreign


def test_catalog_lists_segments_and_recovers_their_metadata(make_manager: Callable[..., Any], tmp_path: Path) -> None:
    m = make_manager(key_prefix="tiered/")
    orders = TopicIdPartition(random_kafka_uuid(), "orders", 0)
    orders_eu = TopicIdPartition(random_kafka_uuid(), "orders-eu", 3)
    copied = []
    for i, (tip, base) in enumerate([(orders, 0), (orders, 500), (orders_eu, 100)]):
        files = write_segment(tmp_path / f"s{i}", base_offset=base, num_batches=5, seed=i, leader_epochs={base: 2})
        meta = files.to_metadata(tip)
        m.copy_log_segment_data(meta, files.to_log_segment_data())
        copied.append(meta)
    catalog = m.catalog()
    assert catalog.topics() == {"orders": [orders.topic_id], "orders-eu": [orders_eu.topic_id]}
    found = catalog.segments("orders")
    assert [s.start_offset for s in found] == [0, 500]
    assert [s.start_offset for s in catalog.partition_segments(orders_eu)] == [100]
    assert catalog.segments("orders", partition=3) == []
    for seg, meta in zip([*found, *catalog.segments("orders-eu")], copied, strict=True):
        got = m.segment_metadata(seg)
        assert got.remote_log_segment_id == meta.remote_log_segment_id
        assert (got.start_offset, got.end_offset, got.max_timestamp_ms) == (
            meta.start_offset,
            meta.end_offset,
            meta.max_timestamp_ms,
        )
        assert got.segment_leader_epochs == meta.segment_leader_epochs
        assert got.segment_size_in_bytes == meta.segment_size_in_bytes
        # the same metadata read without the manager: no key ring, no unwrap (what kts ls and inspect use)
        manifest, recorded = catalog.metadata(seg)
        assert recorded == got and manifest.chunk_index.original_file_size == meta.segment_size_in_bytes
    m.delete_log_segment_data(copied[0])
    assert [s.start_offset for s in catalog.segments("orders")] == [500]
    with pytest.raises(RemoteResourceNotFoundException):
        m.segment_metadata(found[0])
    with pytest.raises(RemoteResourceNotFoundException, match="was deleted since it was listed"):
        catalog.metadata(found[0])
