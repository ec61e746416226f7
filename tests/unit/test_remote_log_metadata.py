"""The ``__remote_log_metadata`` record codec: round trips of every message at every version (hypothesis), values
byte for byte as Kafka lays them out, unknown tags skipped, and damaged or newer values refused by name."""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.kafka.remote_log_metadata import (
    PartitionDeleteRecord,
    RemoteLogMetadataError,
    RemotePartitionDeleteState,
    SegmentRecord,
    SegmentSnapshotRecord,
    SegmentUpdateRecord,
    decode,
    encode,
    uuid_to_str,
)
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

pytestmark = pytest.mark.unit

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.binary(min_size=16, max_size=16).map(uuid_to_str)
topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789._-", min_size=1, max_size=249)
tips = st.builds(TopicIdPartition, uuids, topics, st.integers(0, 2**31 - 1))
segment_ids = st.builds(RemoteLogSegmentId, tips, uuids)
states = st.sampled_from(list(RemoteLogSegmentState))
customs = st.none() | st.binary(max_size=128)
epochs = st.dictionaries(i32, i64, min_size=1, max_size=5)
versions = st.integers(0, 1)


@st.composite
def segment_records(draw: st.DrawFn) -> SegmentRecord:
    version = draw(versions)
    meta = RemoteLogSegmentMetadata(
        draw(segment_ids), draw(i64), draw(i64), draw(i64), draw(i32), draw(i64), draw(i32), draw(epochs),
        draw(customs), draw(states), draw(st.booleans()),
    )  # fmt: skip
    return SegmentRecord(meta, draw(st.none() | i32) if version else None, version)


@st.composite
def update_records(draw: st.DrawFn) -> SegmentUpdateRecord:
    version = draw(versions)
    epoch, end = (draw(st.none() | i32), draw(st.none() | i64)) if version else (None, None)
    return SegmentUpdateRecord(
        draw(segment_ids), draw(i32), draw(i64), draw(states), draw(customs), epoch, end, version
    )


@st.composite
def delete_records(draw: st.DrawFn) -> PartitionDeleteRecord:
    version = draw(versions)
    epoch, end = (draw(st.none() | i32), draw(st.none() | i64)) if version else (None, None)
    state = draw(st.sampled_from(list(RemotePartitionDeleteState)))
    return PartitionDeleteRecord(draw(tips), draw(i32), draw(i64), state, epoch, end, version)


@st.composite
def snapshot_records(draw: st.DrawFn) -> SegmentSnapshotRecord:
    version = draw(versions)
    return SegmentSnapshotRecord(
        draw(uuids), draw(i64), draw(i64), draw(i32), draw(i64), draw(i64), draw(epochs), draw(i32), draw(customs),
        draw(states), draw(st.booleans()), draw(st.none() | i32) if version else None, version,
    )  # fmt: skip


records = segment_records() | update_records() | delete_records() | snapshot_records()


@settings(deadline=None)  # a loaded machine must not fail a round trip on time
@given(records)
def test_every_record_round_trips(record: object) -> None:
    assert decode(encode(record)) == record  # type: ignore[arg-type]


@settings(deadline=None)
@given(records, st.data())
def test_a_cut_value_is_an_error_never_a_record(record: object, data: st.DataObject) -> None:
    raw = encode(record)  # type: ignore[arg-type]
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(RemoteLogMetadataError):
        decode(raw[:cut])


@st.composite
def damaged_values(draw: st.DrawFn) -> bytes:
    """A record's value with one byte changed: most still get past the frame and the api key."""
    raw = bytearray(encode(draw(records)))  # type: ignore[arg-type]
    raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw)


@settings(deadline=None)
@given(st.binary(max_size=200) | damaged_values())
def test_any_bytes_decode_or_fail_with_the_format_error(raw: bytes) -> None:
    try:
        record = decode(raw)
    except RemoteLogMetadataError:
        return
    # What decodes is a record the codec writes again and reads back the same.
    assert decode(encode(record)) == record


TIP = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAQ", "t", 3)
SID = RemoteLogSegmentId(TIP, "AAAAAAAAAAAAAAAAAAAAAg")


def test_an_update_is_laid_out_as_kafka_writes_it() -> None:
    # frame 1, api key 1, version 0; TopicIdPartition {name "t", uuid, partition 3, no tags}, segment uuid, no
    # tags; broker 7, event time 9, null custom metadata, state 1; no tags
    expected = bytes([1, 1, 0, 2]) + b"t" + bytes(15) + b"\x01" + struct.pack(">i", 3) + b"\x00"
    expected += bytes(15) + b"\x02" + b"\x00" + struct.pack(">iq", 7, 9) + b"\x00" + b"\x01" + b"\x00"
    record = SegmentUpdateRecord(SID, 7, 9, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, version=0)
    assert encode(record) == expected
    assert decode(expected) == record


def test_unknown_tags_are_skipped_and_known_ones_read() -> None:
    record = SegmentUpdateRecord(SID, 7, 9, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, None, 4, 99, 1)
    raw = encode(record)
    assert raw[-1:] != b"\x00"
    # append an unknown tag 5 (3 bytes) to the message's tag section: count 2 -> 3
    body, count_at = raw, raw.rindex(b"\x02\x00\x04")
    with_unknown = body[:count_at] + b"\x03" + body[count_at + 1 :] + b"\x05\x03abc"
    assert decode(with_unknown) == record


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (bytes([0, 1, 0]), "frame version 0"),
        (bytes([1, 9, 0]), "unknown record type (api key) 9"),
        (bytes([1, 1, 2]), "RemoteLogSegmentMetadataUpdateRecord v2: version 2 is newer than this kts reads"),
    ],
)
def test_unknown_framing_and_versions_are_named(header: bytes, message: str) -> None:
    raw = encode(SegmentUpdateRecord(SID, 7, 9, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, version=0))
    with pytest.raises(RemoteLogMetadataError, match=re.escape(message)):
        decode(header + raw[3:])


def test_an_unknown_state_is_named() -> None:
    raw = bytearray(encode(SegmentUpdateRecord(SID, 7, 9, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, version=0)))
    raw[-2] = 7
    with pytest.raises(RemoteLogMetadataError, match="unknown remote log segment state 7"):
        decode(bytes(raw))
