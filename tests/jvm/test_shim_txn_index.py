"""Kafka 4.0 added ``isTxnIdxEmpty()`` to ``RemoteLogSegmentMetadata``; 3.x has no such method. The shim reads it
by reflection, so one jar serves both: in a real JVM on a 4.x release's own jars the metadata Python receives says
the transaction index is empty; on a 3.x release's jars it says not (there is nothing to say), and everything else
arrives the same (each release in ``jvm_testing.releases_under_test``). A segment without a transaction index
(``LogSegmentData.transactionIndex()`` empty) goes through copy, fetchIndex and delete in the shim lifecycle tests
(``jvm_testing.make_test_segments`` has two such segments)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import jvm_testing as jt
import pytest

from rsm.jvm import codec as wire
from rsm.metadata import RemoteLogSegmentState

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
TOPIC_ID, TOPIC, PARTITION = jt.TEST_TIP
SEGMENT_ID = "r1Yof1fxSiyiQh_eoaOGdw"


def encoded(classpath: list[Path]) -> tuple[str, bytes]:
    jt.ensure_built()
    r = subprocess.run(
        ["java", "-cp", os.pathsep.join(map(str, classpath)), "io.kts.shim.MetadataWireCheck"]
        + [TOPIC_ID, TOPIC, str(PARTITION), SEGMENT_ID],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    hex_bytes, shape = r.stdout.split()
    return shape, bytes.fromhex(hex_bytes)


def check_common(raw: bytes) -> None:
    meta = wire.decode_metadata(raw)
    tip = meta.topic_id_partition
    assert (tip.topic_id, tip.topic, tip.partition) == (TOPIC_ID, TOPIC, PARTITION)
    assert meta.remote_log_segment_id.id == SEGMENT_ID
    assert (meta.start_offset, meta.end_offset, meta.segment_size_in_bytes) == (0, 999, 4096)
    assert meta.segment_leader_epochs == {0: 0, 3: 500}
    assert meta.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert meta.custom_metadata is None


@jt.on_each_kafka_release
def test_kafka_4_brokers_say_the_transaction_index_is_empty_and_3_x_brokers_send_false(version: str) -> None:
    release = jt.kafka_release(version)
    shape, raw = encoded(release.classpath())
    assert shape == ("4.0" if release.has_txn_idx_empty else "3.x")
    check_common(raw)
    assert wire.decode_metadata(raw).txn_idx_empty is release.has_txn_idx_empty


def test_the_default_releases_include_3_x_and_4_x() -> None:
    assert {jt.KafkaRelease(v, (), Path()).has_txn_idx_empty for v in jt.DEFAULT_RELEASES} == {True, False}


def test_segments_without_a_transaction_index_are_in_the_lifecycle_specs(tmp_path: Path) -> None:
    segments = jt.make_test_segments(tmp_path, batches=5)
    assert [s.txn_index is None for s in segments] == [True, False, True, False]
