"""Hostile record bytes in the Python walk of ``LogBatchDecoder``: every one is a ``CorruptRecordBatch`` naming
the batch's position, and a batch Kafka reads is read the way Kafka reads it. (The compiled walk is checked
against this walk in test_columnar_walk.py.)"""

from __future__ import annotations

import struct

import crc32c
import pytest

from rsm.kafka.batch_builder import build_batch
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds
from rsm.kafka.record_columns import Columns
from rsm.kafka.records import BATCH_HEADER_SIZE, CorruptRecordBatch, encode_varint, encode_varlong


def _decode(entry: bytes, **options: object) -> Columns:
    decoder = LogBatchDecoder(ReadBounds(), native=False, **options)  # type: ignore[arg-type]
    cols = decoder.new_columns()
    decoder.feed(0, entry, cols)
    assert isinstance(cols, Columns)
    return cols


def _uncompressed(specs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    return build_batch([(1_700_000_000_000 + ts, k, v, h) for ts, k, v, h in specs], base_offset=100)


def _record_bytes(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    "record",
    [
        # the header count is the record's last byte and says "more follows": its varint ends past the records
        _record_bytes(b"\x00\x00\x00\x02k\x02v\x80"),
        # one header whose key-length varint runs off the end of the records
        _record_bytes(b"\x00\x00\x00\x02k\x02v\x02\xff"),
        # a key length close to 2**63: adding it to the read position overflows a signed 64-bit sum
        _record_bytes(b"\x00\x00\x00" + encode_varlong((1 << 63) - 10) + b"kv"),
        # a header key that is not UTF-8
        _record_bytes(b"\x00\x00\x00\x02k\x02v\x02\x04\xff\xfe\x00"),
        # an offset delta that needs 64 bits (Kafka's is an int32)
        _record_bytes(b"\x00\x00" + encode_varlong(1 << 40) + b"\x02k\x02v\x00"),
    ],
)
def test_hostile_records_are_corrupt_batches(record: bytes) -> None:
    header = bytearray(_uncompressed([(0, b"k", b"v", [])])[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(record))
    struct.pack_into(">i", header, 57, 1)
    entry = bytes(header) + record
    decoder = LogBatchDecoder(ReadBounds(), verify_crc=False, include_headers=True)
    with pytest.raises(CorruptRecordBatch, match="malformed records") as info:
        decoder.feed(4096, entry, decoder.new_columns())
    assert info.value.position == 4096
    skipping = LogBatchDecoder(ReadBounds(), verify_crc=False, fail_on_corruption=False, include_headers=True)
    cols = skipping.new_columns()
    assert skipping.feed(4096, entry, cols)
    assert len(cols) == 0 and skipping.skipped_batches == 1


def test_an_attributes_byte_above_0x7f_reads_as_kafka_reads_it() -> None:
    # Kafka reads a record's attributes as one byte and ignores its value: any value there gives the same rows.
    clean = _uncompressed([(0, b"k0", b"v0", [("h", b"x")]), (5, b"k1", None, [])])
    buf = bytearray(clean)
    first_attributes = BATCH_HEADER_SIZE + 1  # after the record's one-byte length varint
    assert buf[first_attributes] == 0
    buf[first_attributes] = 0x80
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    expected = _decode(clean, include_headers=True)
    assert expected.offsets == [100, 101] and expected.keys == [b"k0", b"k1"]
    assert _decode(bytes(buf), include_headers=True) == expected
