"""The rows of an Iceberg-mode segment: the compiled walk (``segment_row_tables``) gives exactly the rows of the
Python reference walk (``reference_row_tables``, a ``Record`` per record) on random segments, and refuses the
segments the reference refuses."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rsm.iceberg.rows import (
    NotRepresentable,
    RowOrigin,
    SegmentSummary,
    reference_row_tables,
    segment_row_tables,
)
from rsm.kafka.batch_builder import build_batch, build_control_batch
from rsm.kafka.indexes import AbortedTxn
from rsm.kafka.records import BATCH_HEADER_SIZE, ControlRecordType

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=40))
_header = st.tuples(st.text(max_size=8), _bytes_or_none)
_record = st.tuples(st.integers(-5_000, 10_000), _bytes_or_none, _bytes_or_none, st.lists(_header, max_size=3))
_batch = st.fixed_dictionaries(
    {
        "records": st.lists(_record, min_size=1, max_size=6),
        "codec": st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
        "txn": st.sampled_from([None, "commit", "abort", "open"]),
        "producer": st.integers(-1, 2),
        "log_append_time": st.booleans(),
        # base timestamps: ordinary, before 1970, and past what a microsecond timestamp holds (a null timestamp)
        "base_ts": st.sampled_from([1_700_000_000_000, -86_400_000, (1 << 62) + 12_345, -(1 << 62)]),
    }
)


def _with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _log_append_time(batch: bytes) -> bytes:
    """The batch as a broker with LogAppendTime rewrites it: timestamp type 1, max timestamp the append time."""
    buf = bytearray(batch)
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | 0x08)
    struct.pack_into(">q", buf, 35, 1_800_000_000_000)
    return _with_crc(buf)


def _segment(batches: list[dict[str, object]]) -> tuple[list[bytes], list[AbortedTxn]]:
    entries: list[bytes] = []
    aborted: list[AbortedTxn] = []
    offset = 7
    seq: dict[int, int] = {}
    for b in batches:
        records = b["records"]
        assert isinstance(records, list)
        pid = -1 if b["producer"] == -1 else 4000 + int(b["producer"])  # type: ignore[call-overload]
        txn = b["txn"] if pid >= 0 else None
        sequence = seq.get(pid, 0) if pid >= 0 else -1
        batch = build_batch(
            [(int(b["base_ts"]) + ts, k, v, h) for ts, k, v, h in records],  # type: ignore[call-overload]
            base_offset=offset,
            codec=str(b["codec"]),
            producer_id=pid,
            producer_epoch=1 if pid >= 0 else -1,
            base_sequence=sequence,
            transactional=txn is not None,
        )
        entries.append(_log_append_time(batch) if b["log_append_time"] else batch)
        first = offset
        offset += len(records)
        if pid >= 0:
            seq[pid] = sequence + len(records)
        if txn in ("commit", "abort"):
            kind = ControlRecordType.COMMIT if txn == "commit" else ControlRecordType.ABORT
            entries.append(
                build_control_batch(
                    kind, base_offset=offset, timestamp_ms=1_700_000_000_000, producer_id=pid, producer_epoch=1
                )
            )
            if txn == "abort":
                aborted.append(AbortedTxn(pid, first, offset, offset))
            offset += 1
    return entries, aborted


_ORIGIN = RowOrigin(topic_id="LA1sCgeCRnGhPvNPHYSiVw", segment_id="9ZlSVN2VQPGMqyBk7S7ZBw")


def _rows(
    fn: Callable[..., Iterator[pa.Table]], path: Path, aborted: list[AbortedTxn], max_bytes: int
) -> tuple[list[pa.Table], SegmentSummary]:
    """The tables ``fn`` gives for the segment at ``path`` (as partition 5), and its summary."""
    summary = SegmentSummary()
    tables = list(fn(path, 5, aborted, max_bytes, summary, origin=_ORIGIN))
    return tables, summary


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_batch, min_size=1, max_size=8), max_bytes=st.sampled_from([1, 300, 1 << 20]))
def test_compiled_rows_are_the_reference_rows(
    batches: list[dict[str, object]], max_bytes: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Random segments (every codec, transactions committed, aborted and open, control batches, headers, null keys
    and values, LogAppendTime, timestamps outside what the table's timestamp holds): the same tables, cut at the
    same batches, the same summary, and every row names the segment and topic that wrote it."""
    entries, aborted = _segment(batches)
    path = tmp_path_factory.mktemp("rows") / "00000000000000000007.log"
    path.write_bytes(b"".join(entries))
    got, got_summary = _rows(segment_row_tables, path, aborted, max_bytes)
    want, want_summary = _rows(reference_row_tables, path, aborted, max_bytes)
    assert [t.num_rows for t in got] == [t.num_rows for t in want]
    for g, w in zip(got, want, strict=True):
        assert g.schema.equals(w.schema)
        assert g.to_pylist() == w.to_pylist()
        assert g.equals(w)
    assert got_summary == want_summary
    for t in got:
        kafka = t.column("kafka")
        assert set(pc.struct_field(kafka, "segment_id").to_pylist()) == {_ORIGIN.segment_id}
        assert set(pc.struct_field(kafka, "topic_id").to_pylist()) == {_ORIGIN.topic_id}


def _reference_outcome(path: Path) -> object:
    try:
        return _rows(reference_row_tables, path, [], 1 << 20)[0]
    except NotRepresentable:
        return NotRepresentable
    except (pa.ArrowException, OverflowError):  # a value the reference cannot put in its Arrow column
        return NotRepresentable


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(_record, min_size=1, max_size=4),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=3),
)
def test_damaged_records_are_refused_like_the_reference(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    flips: list[tuple[int, int]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Bytes of the records section changed (and the CRC made to match, as a producer's own bad encoder would):
    the compiled walk refuses the segment exactly when the reference does, and otherwise gives its rows."""
    batch = bytearray(build_batch([(1_700_000_000_000 + ts, k, v, h) for ts, k, v, h in records], base_offset=3))
    for where, xor in flips:
        batch[BATCH_HEADER_SIZE + where % (len(batch) - BATCH_HEADER_SIZE)] ^= xor
    path = tmp_path_factory.mktemp("damaged") / "00000000000000000003.log"
    path.write_bytes(_with_crc(batch))
    want = _reference_outcome(path)
    event("refused" if want is NotRepresentable else "read")
    if want is NotRepresentable:
        with pytest.raises(NotRepresentable):
            _rows(segment_row_tables, path, [], 1 << 20)
    else:
        got = _rows(segment_row_tables, path, [], 1 << 20)[0]
        assert isinstance(want, list)
        assert [t.to_pylist() for t in got] == [t.to_pylist() for t in want]


def test_a_header_count_longer_than_kafka_allows_is_refused(tmp_path: Path) -> None:
    """Kafka reads header counts and lengths as int32 varints (at most 5 bytes): a 6-byte encoding of 0 is
    refused by both walks, though the analytical walk (int64 varints) would read it."""
    body = b"\x00\x00\x00\x02k\x02v" + b"\x80\x80\x80\x80\x80\x00"
    record = bytes([len(body) << 1]) + body
    head = bytearray(build_batch([(1_700_000_000_000, b"k", b"v", [])], base_offset=0)[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", head, 8, BATCH_HEADER_SIZE - 12 + len(record))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_with_crc(head + record))
    assert _reference_outcome(path) is NotRepresentable
    with pytest.raises(NotRepresentable, match="malformed records"):
        _rows(segment_row_tables, path, [], 1 << 20)


@pytest.mark.parametrize("fn", [segment_row_tables, reference_row_tables])
def test_a_compressed_segment_is_cut_by_its_decompressed_bytes(fn: Any, tmp_path: Path) -> None:
    """The rows hold the records decompressed: ``max_bytes`` (iceberg.mode.write.batch.bytes) counts those, so a
    segment that zstd shrinks 100-fold is not turned into rows all at once."""
    entries = [
        build_batch([(1_700_000_000_000, b"k", b"x" * 10_000, [])] * 10, base_offset=i * 10, codec="zstd")
        for i in range(20)
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(entries))
    assert path.stat().st_size < 20 * 10_000  # the whole segment is smaller than one batch decompressed
    tables, summary = _rows(fn, path, [], 200_000)
    assert [t.num_rows for t in tables] == [20] * 10  # two batches of ~100 kB each
    assert summary.rows == 200
