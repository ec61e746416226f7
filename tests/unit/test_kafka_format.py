"""Kafka on-disk format: our reader against kafka-python's writer (and reader), index codecs, segment writers."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import crc32c
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from rsm.kafka.batch_builder import build_batch, build_control_batch
from rsm.kafka.indexes import (
    AbortedTxn,
    EpochEntry,
    IndexCorrupt,
    OffsetIndex,
    OffsetPosition,
    ProducerSnapshotEntry,
    TimeIndex,
    TimestampOffset,
    collect_aborted_txns,
    decode_leader_epoch_checkpoint,
    decode_offset_index,
    decode_producer_snapshot,
    decode_time_index,
    decode_txn_index,
    encode_leader_epoch_checkpoint,
    encode_offset_index,
    encode_producer_snapshot,
    encode_time_index,
    encode_txn_index,
    segment_file_name,
    segment_leader_epochs,
)
from rsm.kafka.large_segment import write_large_segment
from rsm.kafka.log_scan import iter_batch_headers, iter_batches
from rsm.kafka.records import (
    CompressionType,
    ControlRecordType,
    CorruptRecordBatch,
    TruncatedBatch,
    UnsupportedFormat,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    parse_batch_header,
    parse_control_key,
    parse_end_txn_marker,
    verify_crc,
    zigzag_decode,
    zigzag_encode,
)
from rsm.kafka.writer import write_empty_segment, write_segment, write_single_batch_segment
from rsm.metadata import LogSegmentData, RemoteLogSegmentState, TopicIdPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TIP = TopicIdPartition("6tQd4DX3Qp2cPqg9xd4zvA", "orders", 3)


def _records(n: int, base_ts: int = 1_700_000_000_000) -> list[tuple[int, bytes | None, bytes | None, list]]:
    """Compressible records with a null key, a null value, headers (one null-valued) and a repeated timestamp."""
    out: list[tuple[int, bytes | None, bytes | None, list]] = []
    for i in range(n):
        key = None if i == 1 else f"user-{i}".encode()
        value = None if i == 2 else (b'{"service":"checkout","level":"INFO","n":%d}' % i) * 4
        headers = [("h1", b"x" * i), ("null", None)] if i % 3 == 0 else []
        out.append((base_ts + i * 7 - (5 if i == 4 else 0), key, value, headers))
    return out


# ---------------------------------------------------------------------------------------------------------
# Batches: our reader vs kafka-python's writer
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batch_parses_with_every_codec(codec: str) -> None:
    codec_id = CompressionType.from_name(codec)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec_id),
        is_transactional=False,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=100,
        batch_size=1 << 20,
    )
    specs = _records(40)
    for i, (ts, key, value, headers) in enumerate(specs):
        assert builder.append(i, ts, key, value, headers) is not None
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, 5_000)  # broker-assigned base offset and epoch, both outside the CRC
    struct.pack_into(">i", buf, 12, 7)

    h = parse_batch_header(buf, position=123)
    assert h.position == 123 and h.base_offset == 5_000 and h.partition_leader_epoch == 7
    assert h.magic == 2 and h.size == len(buf) and h.batch_length == len(buf) - 12
    assert h.compression == codec_id and h.compression_name == codec and h.compression == int(codec_id)
    assert h.records_count == 40 and h.last_offset_delta == 39 and h.last_offset == 5_039
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (4242, 3, 100, 139)
    assert h.base_timestamp == specs[0][0] and h.max_timestamp == max(s[0] for s in specs)
    assert not h.is_transactional and not h.is_control and h.timestamp_type == 0
    assert verify_crc(buf)
    assert h.crc == crc32c.crc32c(bytes(buf[21:]))

    records = decode_records(buf, verify=True)
    assert [(r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in records] == specs
    assert [r.offset for r in records] == list(range(5_000, 5_040))
    assert [r.sequence for r in records] == list(range(100, 140))
    # kafka-python's own reader agrees record by record
    theirs = list(DefaultRecordBatch(bytes(buf)))
    assert [(t.offset, t.timestamp, t.key, t.value) for t in theirs] == [
        (r.offset, r.timestamp, r.key, r.value) for r in records
    ]


def test_snappy_batches_use_xerial_framing() -> None:
    batch = build_batch([(1, b"k", b"abc" * 500, [])], codec="snappy")
    assert batch[61:69] == b"\x82SNAPPY\x00"
    assert decode_records(batch)[0].value == b"abc" * 500


def test_control_batch_marker() -> None:
    batch = build_control_batch(
        ControlRecordType.ABORT,
        base_offset=77,
        timestamp_ms=9,
        producer_id=55,
        producer_epoch=2,
        coordinator_epoch=12,
        leader_epoch=4,
    )
    h = parse_batch_header(batch)
    assert h.is_control and h.is_transactional and h.base_sequence == -1 and h.records_count == 1
    assert verify_crc(batch) and DefaultRecordBatch(batch).validate_crc()
    (rec,) = decode_records(batch, verify=True)
    assert rec.is_control and rec.offset == 77
    assert parse_control_key(rec.key) == (0, ControlRecordType.ABORT)
    assert parse_end_txn_marker(rec.value) == (0, 12)


def test_log_append_time_uses_max_timestamp() -> None:
    buf = bytearray(build_batch([(10, b"a", b"1", []), (20, b"b", b"2", [])]))
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | 0x08)
    struct.pack_into(">q", buf, 35, 99)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    assert parse_batch_header(buf).timestamp_type == 1
    assert [r.timestamp for r in decode_records(buf, verify=True)] == [99, 99]


def test_flipped_bit_fails_crc(tmp_path: Path) -> None:
    seg = write_segment(tmp_path, num_batches=4, codec="zstd", seed=3)
    data = bytearray(seg.log.read_bytes())
    headers = list(iter_batch_headers(seg.log))
    victim = headers[2]
    data[victim.position + victim.size - 5] ^= 0x10
    assert not verify_crc(memoryview(data)[victim.position :])
    assert verify_crc(memoryview(data)[headers[1].position :])
    with pytest.raises(CorruptRecordBatch) as exc:
        list(iter_batches(bytes(data), verify=True))
    assert exc.value.position == victim.position
    with pytest.raises(CorruptRecordBatch):
        decode_records(memoryview(data)[victim.position : victim.end_position], verify=True)
    # the base offset and leader epoch are outside the CRC by design: changing them keeps it valid
    data = bytearray(seg.log.read_bytes())
    data[victim.position + 7] ^= 0x01
    data[victim.position + 15] ^= 0x01
    assert verify_crc(memoryview(data)[victim.position :])


def test_truncated_log_raises_with_position(tmp_path: Path) -> None:
    seg = write_segment(tmp_path, num_batches=5, seed=1)
    headers = list(iter_batch_headers(seg.log))
    last = headers[-1]
    data = seg.log.read_bytes()
    for cut in (last.position + 10, last.position + 40, last.position + last.size - 1):
        p = tmp_path / f"cut{cut}.log"
        p.write_bytes(data[:cut])
        with pytest.raises(TruncatedBatch) as exc:
            list(iter_batch_headers(p))
        assert isinstance(exc.value, CorruptRecordBatch)
        assert exc.value.position == last.position and exc.value.available == cut - last.position
        assert str(last.position) in str(exc.value)
        assert list(iter_batch_headers(p, stop_on_truncated_tail=True)) == headers[:-1]


def test_insane_and_legacy_headers_are_rejected() -> None:
    good = build_batch([(1, b"k", b"v", [])])
    two = good + good
    bad_len = bytearray(two)
    struct.pack_into(">i", bad_len, len(good) + 8, 5)
    with pytest.raises(CorruptRecordBatch) as exc:
        list(iter_batch_headers(bytes(bad_len)))
    assert exc.value.position == len(good) and not isinstance(exc.value, TruncatedBatch)
    bad_magic = bytearray(two)
    bad_magic[len(good) + 16] = 7
    with pytest.raises(CorruptRecordBatch, match="magic"):
        list(iter_batch_headers(bytes(bad_magic)))
    legacy = bytearray(two)
    legacy[16] = 1
    with pytest.raises(UnsupportedFormat) as uexc:
        list(iter_batch_headers(bytes(legacy)))
    assert uexc.value.magic == 1 and uexc.value.position == 0
    bad_codec = bytearray(good)
    struct.pack_into(">h", bad_codec, 21, 6)
    with pytest.raises(CorruptRecordBatch, match="codec"):
        parse_batch_header(bad_codec)


def test_reader_accepts_paths_files_streams_and_start_position(tmp_path: Path) -> None:
    seg = write_segment(tmp_path, num_batches=12, codec="lz4", seed=2)
    from_path = list(iter_batch_headers(seg.log))
    with open(seg.log, "rb") as f:
        assert list(iter_batch_headers(f)) == from_path

    class Stream(io.RawIOBase):
        """A non-seekable body that returns short reads, like an HTTP response."""

        def __init__(self, data: bytes) -> None:
            self._buf = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            return self._buf.read(min(n, 1000) if n >= 0 else 1000)

    start = from_path[5].position
    assert list(iter_batch_headers(Stream(seg.log.read_bytes()), start)) == from_path[5:]
    assert list(iter_batch_headers(seg.log, start)) == from_path[5:]
    assert [h.position for h in from_path[1:]] == [h.end_position for h in from_path[:-1]]


# ---------------------------------------------------------------------------------------------------------
# Varints
# ---------------------------------------------------------------------------------------------------------

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@given(INT64)
def test_zigzag_round_trip_and_order(n: int) -> None:
    u = zigzag_encode(n)
    assert u >= 0 and zigzag_decode(u) == n
    assert u == ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)


@given(INT32)
def test_varint_matches_kafka_python(n: int) -> None:
    ours = encode_varint(n)
    theirs = bytearray()
    kp_encode_varint(n, theirs.append)
    assert ours == bytes(theirs) and len(ours) <= 5
    assert decode_varint(ours + b"\xff") == (n, len(ours))
    assert kp_decode_varint(ours, 0)[0] == n


@given(INT64)
def test_varlong_round_trip(n: int) -> None:
    enc = encode_varlong(n)
    assert len(enc) <= 10
    assert decode_varlong(b"\x00" + enc, 1) == (n, 1 + len(enc))


def test_varint_rejects_malformed() -> None:
    for bad in (b"", b"\x80", b"\xff\xff\xff\xff\x7f", b"\xff" * 6):
        with pytest.raises(ValueError):
            decode_varint(bad)
    with pytest.raises(ValueError):
        decode_varlong(b"\xff" * 11)
    with pytest.raises(ValueError):
        encode_varint(1 << 31)
    assert encode_varint(-1) == b"\x01" and encode_varint(1) == b"\x02" and encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"


# ---------------------------------------------------------------------------------------------------------
# Index codecs
# ---------------------------------------------------------------------------------------------------------


@st.composite
def offset_entries(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    base = draw(st.integers(0, 1 << 50))
    deltas = draw(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 1 << 20)), max_size=40))
    entries: list[tuple[int, int]] = []
    off, pos = base, 0
    for d_off, d_pos in deltas:
        off += d_off
        pos += d_pos
        entries.append((off, pos))
    return base, entries


@settings(max_examples=60)
@given(offset_entries(), st.integers(-10, 300_000))
def test_offset_index_round_trip_and_lookup(case: tuple[int, list[tuple[int, int]]], probe: int) -> None:
    base, entries = case
    data = encode_offset_index(entries, base)
    assert len(data) == 8 * len(entries)
    assert decode_offset_index(data, base) == entries
    assert decode_offset_index(data + bytes(8 * 3), base) == entries  # preallocated tail is ignored
    idx = OffsetIndex.from_bytes(data, base)
    target = base + probe
    below = [e for e in entries if e[0] <= target]
    assert idx.lookup(target) == (below[-1] if below else OffsetPosition(base, 0))
    assert idx.to_bytes() == data


@settings(max_examples=60)
@given(offset_entries(), st.integers(0, 1 << 40))
def test_time_index_round_trip_and_lookup(case: tuple[int, list[tuple[int, int]]], ts0: int) -> None:
    base, offs = case
    entries = [(ts0 + pos + i, off) for i, (off, pos) in enumerate(offs)]
    data = encode_time_index(entries, base)
    assert len(data) == 12 * len(entries)
    assert decode_time_index(data, base) == entries
    idx = TimeIndex.from_bytes(data, base)
    assert idx.lookup(ts0 - 1) == TimestampOffset(-1, base)
    if entries:
        assert idx.lookup(entries[-1][0] + 5) == entries[-1]


@given(
    st.lists(
        st.tuples(
            st.integers(0, (1 << 63) - 1), st.integers(0, 1 << 40), st.integers(0, 1 << 20), st.integers(0, 1 << 40)
        ),
        max_size=20,
    )
)
def test_txn_index_round_trip(raw: list[tuple[int, int, int, int]]) -> None:
    entries = [AbortedTxn(pid, first, first + span, lso) for pid, first, span, lso in raw]
    data = encode_txn_index(entries)
    assert len(data) == 34 * len(entries)
    assert decode_txn_index(data) == entries


def test_index_layout_is_big_endian_relative() -> None:
    assert encode_offset_index([(1_000_005, 4096)], 1_000_000) == struct.pack(">ii", 5, 4096)
    assert encode_time_index([(1_700_000_000_123, 1_000_007)], 1_000_000) == struct.pack(">qi", 1_700_000_000_123, 7)
    assert encode_txn_index([AbortedTxn(9, 10, 20, 15)]) == struct.pack(">hqqqq", 0, 9, 10, 20, 15)
    with pytest.raises(ValueError):
        encode_offset_index([(10, 0), (10, 5)], 0)
    with pytest.raises(IndexCorrupt):
        decode_offset_index(b"\x00" * 7, 0)
    with pytest.raises(IndexCorrupt):
        decode_offset_index(struct.pack(">iiii", 5, 100, 3, 200), 0)
    with pytest.raises(IndexCorrupt):
        decode_txn_index(struct.pack(">hqqqq", 1, 9, 10, 20, 15))
    assert segment_file_name(42, ".log") == "00000000000000000042.log"


def test_collect_aborted_txns() -> None:
    txns = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 20, 30, 31), AbortedTxn(3, 40, 50, 51)]
    assert collect_aborted_txns(txns, 11, 40) == [txns[1]]
    assert collect_aborted_txns(txns, 10, 41) == txns


def test_producer_snapshot_round_trip_and_crc() -> None:
    entries = [
        ProducerSnapshotEntry(1000, 0, 99, 5000, 19, 1_700_000_000_000, -1, -1),
        ProducerSnapshotEntry(1001, 3, 7, 5100, 0, 1_700_000_000_500, 12, 5050),
    ]
    data = encode_producer_snapshot(entries)
    assert len(data) == 10 + 46 * 2
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1 and count == 2 and crc == crc32c.crc32c(data[6:])
    assert decode_producer_snapshot(data) == entries
    assert decode_producer_snapshot(encode_producer_snapshot([])) == []
    flipped = bytearray(data)
    flipped[30] ^= 1
    with pytest.raises(IndexCorrupt, match="CRC"):
        decode_producer_snapshot(bytes(flipped))
    with pytest.raises(IndexCorrupt):
        decode_producer_snapshot(data[:-1])


def test_leader_epoch_checkpoint() -> None:
    data = encode_leader_epoch_checkpoint({0: 0, 2: 150, 5: 900})
    assert data == b"0\n3\n0 0\n2 150\n5 900\n"
    assert decode_leader_epoch_checkpoint(data) == [EpochEntry(0, 0), EpochEntry(2, 150), EpochEntry(5, 900)]
    assert decode_leader_epoch_checkpoint(b"0\n1\n7\t  42\n") == [EpochEntry(7, 42)]
    with pytest.raises(IndexCorrupt):
        decode_leader_epoch_checkpoint(b"0\n2\n1 0\n")
    assert segment_leader_epochs({0: 0, 2: 150, 5: 900}, 200, 899) == {2: 200}
    assert segment_leader_epochs({0: 0, 2: 150, 5: 900}, 100, 1000) == {0: 100, 2: 150, 5: 900}


# ---------------------------------------------------------------------------------------------------------
# Segment writer
# ---------------------------------------------------------------------------------------------------------


def _check_segment_consistency(seg: object) -> list:
    """Every batch valid (per us and per kafka-python), offsets contiguous, indexes pointing at batch starts."""
    from rsm.kafka.segment_files import SegmentFiles

    assert isinstance(seg, SegmentFiles)
    batches = list(iter_batches(seg.log, verify=True))
    headers = [h for h, _ in batches]
    assert sum(h.size for h in headers) == seg.size == seg.log.stat().st_size
    assert headers[0].base_offset == seg.base_offset and headers[-1].last_offset == seg.end_offset
    for prev, cur in zip(headers, headers[1:], strict=False):
        assert cur.base_offset == prev.next_offset
    assert max(h.max_timestamp for h in headers) == seg.max_timestamp_ms
    theirs = list(MemoryRecords(seg.log.read_bytes()))  # an independent reader walks the same batches
    assert [b.base_offset for b in theirs] == [h.base_offset for h in headers]

    by_pos = {h.position: h for h in headers}
    oidx = OffsetIndex.from_bytes(seg.offset_index.read_bytes(), seg.base_offset)
    for e in oidx.entries:
        assert e.position in by_pos and by_pos[e.position].last_offset == e.offset
    for h in headers[:: max(1, len(headers) // 20)]:
        for target in (h.base_offset, h.last_offset):
            start = oidx.lookup(target).position
            found = next(x for x in iter_batch_headers(seg.log, start) if x.last_offset >= target)
            assert found == h
    tidx = TimeIndex.from_bytes(seg.time_index.read_bytes(), seg.base_offset)
    assert all(a.timestamp < b.timestamp for a, b in zip(tidx.entries, tidx.entries[1:], strict=False))
    assert tidx.entries[-1].timestamp == seg.max_timestamp_ms
    assert seg.producer_snapshot.name == segment_file_name(seg.end_offset + 1, ".snapshot")
    decode_producer_snapshot(seg.producer_snapshot.read_bytes())
    return batches


@pytest.mark.parametrize("codec", CODECS)
def test_written_segment_is_consistent(tmp_path: Path, codec: str) -> None:
    seg = write_segment(
        tmp_path, base_offset=10_000, num_batches=25, codec=codec, seed=11, leader_epochs={0: 0, 4: 11_000}
    )
    batches = _check_segment_consistency(seg)
    assert seg.log.name == "00000000000000010000.log" and seg.txn_index is None
    assert {h.compression_name for h, _ in batches} == {codec}
    assert all(h.partition_leader_epoch == (4 if h.base_offset >= 11_000 else 0) for h, _ in batches)
    assert any(h.base_offset == 11_000 for h, _ in batches)  # batches are cut at the epoch boundary
    assert seg.leader_epoch_bytes == b"0\n2\n0 0\n4 11000\n"
    assert sum(len(decode_records(b)) for _, b in batches) == seg.num_records
    assert len(decode_offset_index(seg.offset_index.read_bytes(), seg.base_offset)) > 0
    snap = decode_producer_snapshot(seg.producer_snapshot.read_bytes())
    last_batch_of = {h.producer_id: h for h, _ in batches}
    assert {(s.producer_id, s.last_offset, s.last_sequence) for s in snap} == {
        (pid, h.last_offset, h.last_sequence) for pid, h in last_batch_of.items()
    }


def test_transactional_segment_has_markers_and_txnindex(tmp_path: Path) -> None:
    seg = write_segment(tmp_path, num_batches=40, codec="zstd", transactional=True, seed=5)
    batches = _check_segment_consistency(seg)
    assert seg.txn_index is not None
    aborted = decode_txn_index(seg.txn_index.read_bytes())
    assert aborted and aborted == list(seg.aborted_txns)
    by_offset = {h.base_offset: (h, b) for h, b in batches}
    for txn in aborted:
        marker_h, marker_b = by_offset[txn.last_offset]
        assert marker_h.is_control and marker_h.producer_id == txn.producer_id
        assert parse_control_key(decode_records(marker_b)[0].key)[1] == ControlRecordType.ABORT
        first_h, _ = by_offset[txn.first_offset]
        assert first_h.is_transactional and not first_h.is_control and first_h.producer_id == txn.producer_id
        # the LSO is the marker's next offset, or the start of another producer's still-open transaction
        assert txn.last_stable_offset <= txn.last_offset + 1
        if txn.last_stable_offset != txn.last_offset + 1:
            other, _ = by_offset[txn.last_stable_offset]
            assert other.is_transactional and not other.is_control and other.producer_id != txn.producer_id
    markers = [h for h, _ in batches if h.is_control]
    assert len(markers) > len(aborted)  # commits too
    assert all(h.is_transactional for h, _ in batches)
    assert seg.to_metadata(TIP).txn_idx_empty is False


def test_json_values_compress_like_real_logs(tmp_path: Path) -> None:
    seg = write_segment(tmp_path, target_bytes=1 << 20, seed=9)
    assert seg.size >= 1 << 20 and seg.num_batches < 100
    raw = seg.log.read_bytes()
    ratio = len(raw) / len(zstandard.ZstdCompressor(level=3).compress(raw))
    assert 3.0 < ratio < 7.0
    values = [r.value for _, b in list(iter_batches(seg.log))[:3] for r in decode_records(b)]
    assert all(v is not None and 320 < len(v) < 420 and v.startswith(b'{"ts":') for v in values)


def test_large_segment_replicates_valid_batches(tmp_path: Path) -> None:
    size = 8 << 20
    seg = write_large_segment(tmp_path, size, seed=7, base_offset=500, num_templates=40)
    assert size - 200_000 < seg.size <= size
    batches = _check_segment_consistency(seg)
    assert len(batches) > 40  # templates were replicated
    headers = [h for h, _ in batches]
    assert all(a.max_timestamp < b.base_timestamp for a, b in zip(headers, headers[1:], strict=False))
    assert all(b.base_sequence == a.base_sequence + a.records_count for a, b in zip(headers, headers[1:], strict=False))
    for h, b in batches[::37]:
        assert DefaultRecordBatch(b).validate_crc()
        recs = decode_records(b, verify=True)
        assert recs[0].offset == h.base_offset and recs[-1].offset == h.last_offset
        assert recs[-1].timestamp <= h.max_timestamp
    (snap,) = decode_producer_snapshot(seg.producer_snapshot.read_bytes())
    assert snap.last_offset == seg.end_offset and snap.last_sequence == headers[-1].last_sequence


def test_empty_segment(tmp_path: Path) -> None:
    seg = write_empty_segment(tmp_path, base_offset=300)
    assert seg.size == 0 and seg.log.read_bytes() == b"" and seg.end_offset == 299
    assert seg.offset_index.read_bytes() == b"" and seg.time_index.read_bytes() == b""
    assert decode_producer_snapshot(seg.producer_snapshot.read_bytes()) == []
    assert list(iter_batch_headers(seg.log)) == []
    assert seg.to_metadata(TIP).segment_leader_epochs == {0: 300}


def test_single_batch_segment_and_metadata(tmp_path: Path) -> None:
    seg = write_single_batch_segment(tmp_path, base_offset=7, records=1, codec="gzip")
    (h,) = list(iter_batch_headers(seg.log))
    assert h.records_count == 1 and seg.end_offset == 7 and seg.offset_index.read_bytes() == b""
    assert decode_time_index(seg.time_index.read_bytes(), 7) == [TimestampOffset(seg.max_timestamp_ms, 7)]
    lsd = seg.to_log_segment_data()
    assert isinstance(lsd, LogSegmentData) and lsd.log_segment == seg.log and lsd.transaction_index is None
    assert lsd.leader_epoch_index == b"0\n1\n0 0\n"
    meta = seg.to_metadata(TIP, "AAAAAAAAAAAAAAAAAAAAAA", broker_id=2, event_timestamp_ms=5)
    assert meta.remote_log_segment_id.id == "AAAAAAAAAAAAAAAAAAAAAA" and meta.topic_id_partition == TIP
    assert (meta.start_offset, meta.end_offset, meta.segment_size_in_bytes) == (7, 7, seg.size)
    assert meta.max_timestamp_ms == h.max_timestamp and meta.segment_leader_epochs == {0: 7}
    assert meta.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED and meta.txn_idx_empty
    assert meta.broker_id == 2 and meta.event_timestamp_ms == 5


def test_writer_is_deterministic(tmp_path: Path) -> None:
    a = write_segment(tmp_path / "a", num_batches=5, seed=4, codec="snappy")
    b = write_segment(tmp_path / "b", num_batches=5, seed=4, codec="snappy")
    assert a.log.read_bytes() == b.log.read_bytes()
    assert a.offset_index.read_bytes() == b.offset_index.read_bytes()
