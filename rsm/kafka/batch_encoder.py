"""Encoding one Kafka v2 record batch from its fields and records (the inverse of ``records.decode_records``).

Every field is given, not derived: a batch rebuilt from what was decoded (base offset, leader epoch, attributes,
timestamps, producer fields, each record's attributes and deltas) is the same batch; only a compressed records
section may differ in bytes (a codec's output is not unique), never in content. The CRC-32C is computed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c as _crc32c

from rsm.kafka.compression import compress
from rsm.kafka.varint import encode_varint, encode_varlong

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CODEC_MASK = 0x07


@dataclass(frozen=True, slots=True)
class BatchFields:
    """The header fields of a v2 batch that are not derived from its records section."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass(frozen=True, slots=True)
class RecordFields:
    """One record as written: its attributes byte, deltas, key, value and headers."""

    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


def _bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + data


def encode_record(r: RecordFields) -> bytes:
    body = bytearray()
    body.append(r.attributes & 0xFF)
    body += encode_varlong(r.timestamp_delta)
    body += encode_varint(r.offset_delta)
    body += _bytes_field(r.key)
    body += _bytes_field(r.value)
    body += encode_varint(len(r.headers))
    for name, value in r.headers:
        body += _bytes_field(name.encode("utf-8"))
        body += _bytes_field(value)
    return encode_varint(len(body)) + bytes(body)


def encode_batch(fields: BatchFields, records: Sequence[RecordFields], level: int | None = None) -> bytes:
    """The whole batch (offset and length prefix included), its records compressed with the codec of
    ``fields.attributes``."""
    payload = b"".join(encode_record(r) for r in records)
    payload = compress(fields.attributes & _CODEC_MASK, payload, level)
    batch_length = _HEADER.size - 12 + len(payload)
    buf = bytearray(_HEADER.size + len(payload))
    _HEADER.pack_into(
        buf,
        0,
        fields.base_offset,
        batch_length,
        fields.partition_leader_epoch,
        2,
        0,
        fields.attributes,
        fields.last_offset_delta,
        fields.base_timestamp,
        fields.max_timestamp,
        fields.producer_id,
        fields.producer_epoch,
        fields.base_sequence,
        len(records),
    )
    buf[_HEADER.size :] = payload
    struct.pack_into(">I", buf, 17, _crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)
