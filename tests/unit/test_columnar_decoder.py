"""The columnar decoder agrees with the reference record decoder on arbitrary batches, in both formats."""

from __future__ import annotations

import io
import os
import struct

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_data import kafka_lz4_frame, kafka_lz4_wrapper, legacy_entry, xxh32

from rsm.kafka.batch_builder import build_batch
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.records import (
    CorruptRecordBatch,
    decode_legacy_entry,
    decode_records,
    lz4_legacy_v0_decompress,
)

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.tuples(st.integers(0, 10**6), _bytes, _bytes, st.lists(_header, max_size=3))


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(_record, min_size=1, max_size=20), min_size=1, max_size=4),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    bounds=st.tuples(st.integers(0, 90), st.integers(0, 90)),
)
def test_v2_batches_decode_like_the_reference(
    batches: list[list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]],
    codec: str,
    bounds: tuple[int, int],
) -> None:
    log = b""
    offset = 0
    expected = []
    lo, hi = min(bounds), max(bounds)
    for specs in batches:
        specs = [(1_700_000_000_000 + ts, k, v, h) for ts, k, v, h in specs]
        batch = build_batch(specs, base_offset=offset, codec=codec)
        expected += [
            (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
            for r in decode_records(batch, verify=True)
            if lo <= r.offset <= hi
        ]
        log += batch
        offset += len(specs)
    decoder = LogBatchDecoder(ReadBounds(lo, hi), include_headers=True)
    cols = decoder.new_columns()
    for pos, entry in iter_log_entries(io.BytesIO(log), 0, None):
        if not decoder.feed(pos, entry, cols):
            break
    assert cols.headers is not None
    got = list(zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers, strict=True))
    assert got == expected


@settings(max_examples=40, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([0, 1, 2, 3]),
    specs=st.lists(st.tuples(st.integers(0, 10**6), _bytes, _bytes), min_size=1, max_size=10),
    base=st.integers(0, 10**9),
)
def test_legacy_message_sets_keep_absolute_offsets(
    magic: int, codec: int, specs: list[tuple[int, bytes | None, bytes | None]], base: int
) -> None:
    entry = legacy_entry(magic, codec, base, specs)
    messages = decode_legacy_entry(entry, verify=True)
    assert [m.offset for m in messages] == list(range(base, base + len(specs)))
    assert [(m.key, m.value) for m in messages] == [(k, v) for _, k, v in specs]
    if magic == 1:
        assert [m.timestamp for m in messages] == [ts for ts, _, _ in specs]
    decoder = LogBatchDecoder(ReadBounds(base + 1, base + 3))
    cols = decoder.new_columns()
    decoder.feed(0, entry, cols)
    assert cols.offsets == [o for o in range(base, base + len(specs)) if base + 1 <= o <= base + 3]


def test_the_test_xxh32_agrees_with_liblz4() -> None:
    """The fixtures below compute Kafka's lz4 header checksums with this hash; liblz4 is the referee."""
    data = os.urandom(1000)
    for framed in (lz4.frame.compress(data, content_checksum=True), lz4.frame.compress(data, store_size=False)):
        n = 7 + (8 if framed[4] & 0x08 else 0)
        assert framed[n - 1] == (xxh32(framed[4 : n - 1]) >> 8) & 0xFF
    assert struct.unpack("<I", lz4.frame.compress(data, content_checksum=True)[-4:])[0] == xxh32(data)


def test_magic_0_lz4_wrappers_with_kafkas_broken_header_checksum_decode() -> None:
    # Several 64 KiB blocks: compressible values, and random ones that Kafka's writer stores raw.
    specs = [
        (1_700_000_000_000 + i, f"k{i}".encode(), (b"x" * 40_000 if i % 2 else os.urandom(140_000))) for i in range(6)
    ]
    v0 = kafka_lz4_wrapper(0, 500, specs)
    frame = v0[12 + 4 + 2 + 4 + 4 :]
    assert frame[6] == (xxh32(frame[:6]) >> 8) & 0xFF != (xxh32(frame[4:6]) >> 8) & 0xFF  # Kafka's v0 checksum
    assert any(struct.unpack_from("<I", frame, p)[0] & 0x80000000 for p in _block_starts(frame))  # a raw block
    assert len(list(_block_starts(frame))) >= 4
    with pytest.raises(RuntimeError, match="[Cc]hecksum"):
        lz4.frame.decompress(frame)  # what a standard frame reader makes of it
    expected = [
        (o, None if m == 0 else ts, k, v) for o, (ts, k, v), m in ((500 + i, s, 0) for i, s in enumerate(specs))
    ]
    got = [
        (m.offset, None if m.magic == 0 else m.timestamp, m.key, m.value) for m in decode_legacy_entry(v0, verify=True)
    ]
    assert got == expected
    decoder = LogBatchDecoder(ReadBounds(501, 503))
    cols = decoder.new_columns()
    decoder.feed(0, v0, cols)
    assert (cols.offsets, cols.values) == ([501, 502, 503], [v for _, _, v in specs[1:4]])
    # Kafka skips the header checksum for magic 0 only, so a v0 frame with a correct one reads too ...
    fixed = kafka_lz4_wrapper(0, 500, specs, broken_header_checksum=False)
    assert [m.value for m in decode_legacy_entry(fixed, verify=True)] == [v for _, _, v in specs]
    # ... while magic 1 frames carry the standard checksum, and a wrong one there is corruption.
    v1 = kafka_lz4_wrapper(1, 500, specs)
    assert [(m.offset, m.timestamp) for m in decode_legacy_entry(v1, verify=True)] == [
        (500 + i, s[0]) for i, s in enumerate(specs)
    ]
    with pytest.raises(CorruptRecordBatch, match="lz4"):
        decode_legacy_entry(kafka_lz4_wrapper(1, 500, specs, broken_header_checksum=True), position=77)
    # The decompression cap holds on this path too, and a damaged frame is reported, not crashed on.
    with pytest.raises(CorruptRecordBatch, match="decompression cap"):
        decode_legacy_entry(v0, max_decompressed=100_000)
    broken_block = bytearray(v0)
    struct.pack_into("<I", broken_block, 12 + 4 + 2 + 4 + 4 + 7, 0x7FFFFFF0)
    with pytest.raises(CorruptRecordBatch, match="lz4 legacy wrapper"):
        decode_legacy_entry(bytes(broken_block))
    with pytest.raises(ValueError, match="bad magic"):
        lz4_legacy_v0_decompress(b"\x00" * 16)
    assert lz4_legacy_v0_decompress(kafka_lz4_frame(b"", broken_header_checksum=True)) == b""


def _block_starts(frame: bytes) -> list[int]:
    """Byte positions of each block's size field in a Kafka lz4 frame (7-byte header, no block checksums)."""
    starts, pos = [], 7
    while (size := struct.unpack_from("<I", frame, pos)[0]) != 0:
        starts.append(pos)
        pos += 4 + (size & 0x7FFFFFFF)
    return starts
