"""Encoding one Kafka v2 record batch from its fields and records (the inverse of ``records.decode_records``).

Every field is given, not derived: a batch rebuilt from what was decoded (base offset, leader epoch, attributes,
timestamps, producer fields, each record's attributes and deltas) is the same batch; only a compressed records
section may differ in bytes (a codec's output is not unique), never in content. The CRC-32C is computed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


def _encode_records_py(
    attributes: Sequence[int],
    timestamp_deltas: Sequence[int],
    offset_deltas: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Any] | None],
) -> bytes:
    def pairs(hs: Sequence[Any] | None) -> list[tuple[str, bytes | None]]:
        return [(h["key"], h["value"]) if isinstance(h, dict) else (h[0], h[1]) for h in hs or ()]

    return b"".join(
        encode_record(RecordFields(a, t, o, k, v, pairs(h)))
        for a, t, o, k, v, h in zip(attributes, timestamp_deltas, offset_deltas, keys, values, headers, strict=True)
    )


try:
    from rsm.kafka._batchencode import encode_records as _encode_records_c
except ImportError:  # the package was installed without a C compiler
    _encode_records_c = None

encode_records = _encode_records_c or _encode_records_py
"""``encode_records(attributes, timestamp_deltas, offset_deltas, keys, values, headers) -> bytes``: the records
section of a batch, uncompressed, from one sequence per field (a header list holds ``(name, value)`` pairs or
``{"key": name, "value": value}`` dicts). Compiled (``rsm/kafka/_batchencode.c``) where the package was built
with a C compiler; the same bytes as joining :func:`encode_record` of each record."""


def encode_batch(fields: BatchFields, records: Sequence[RecordFields], level: int | None = None) -> bytes:
    """The whole batch (offset and length prefix included), its records compressed with the codec of
    ``fields.attributes``."""
    return encode_batch_payload(fields, b"".join(encode_record(r) for r in records), len(records), level)


def encode_batch_payload(fields: BatchFields, records: bytes, count: int, level: int | None = None) -> bytes:
    """The whole batch around ``count`` already encoded, uncompressed ``records`` (see :data:`encode_records`),
    compressed with the codec of ``fields.attributes``."""
    payload = compress(fields.attributes & _CODEC_MASK, records, level)
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
        count,
    )
    buf[_HEADER.size :] = payload
    struct.pack_into(">I", buf, 17, _crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)
