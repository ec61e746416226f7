"""Legacy message sets (magic 0 and 1), which brokers keep only for very old topics.

An entry is ``offset int64, size int32, crc uint32, magic int8, attributes int8``, a timestamp in v1 only, then
key and value with int32 lengths (the reference, section 6). A compressed entry is a wrapper whose value is an
inner message set. Its attributes byte has its own layout: bits 0-2 the codec, bit 3 (v1) the timestamp type.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from rsm.kafka.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    DecompressionLimitExceeded,
    decompress,
    lz4_legacy_v0_decompress,
)
from rsm.kafka.errors import CorruptRecordBatch

_ENTRY_OVERHEAD = 12  # offset int64 + size int32, before the part counted by ``size``
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08

#: ``offset int64, size int32, crc uint32, magic int8, attributes int8``: what every legacy entry starts with.
_LEGACY_HEAD = struct.Struct(">qiIbb")
LEGACY_MIN_SIZE = 4 + 1 + 1 + 4 + 4  # crc, magic, attributes, key length, value length (v0, both null)


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One record of a magic 0/1 message set, flattened out of its compressed wrapper if it had one.

    ``timestamp`` is -1 for magic 0, which has none; ``timestamp_type`` is 1 for LogAppendTime.
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    magic: int


def _legacy_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise ValueError("length field runs past the message")
    (n,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise ValueError(f"field of {n} bytes runs past the message")
    return buf[pos : pos + n], pos + n


def _legacy_entries(
    buf: bytes, position: int, verify: bool
) -> Iterator[tuple[int, int, int, int, bytes | None, bytes | None]]:
    """``(offset, magic, attributes, timestamp, key, value)`` of each whole entry in a legacy message set."""
    pos = 0
    end = len(buf)
    while pos + _ENTRY_OVERHEAD <= end:
        offset, size = struct.unpack_from(">qi", buf, pos)
        if size < LEGACY_MIN_SIZE or pos + _ENTRY_OVERHEAD + size > end:
            raise CorruptRecordBatch(f"legacy message size {size} is impossible here", position + pos)
        stop = pos + _ENTRY_OVERHEAD + size
        _, _, crc, magic, attributes = _LEGACY_HEAD.unpack_from(buf, pos)
        if magic not in (0, 1):
            raise CorruptRecordBatch(f"legacy message with magic {magic}", position + pos)
        if verify and zlib.crc32(memoryview(buf)[pos + 16 : stop]) != crc:
            raise CorruptRecordBatch("legacy message CRC-32 mismatch", position + pos)
        cur = pos + 18
        timestamp = -1
        if magic == 1:
            (timestamp,) = struct.unpack_from(">q", buf, cur)
            cur += 8
        try:
            key, cur = _legacy_bytes(buf, cur, stop)
            value, cur = _legacy_bytes(buf, cur, stop)
        except ValueError as exc:
            raise CorruptRecordBatch(f"malformed legacy message: {exc}", position + pos) from None
        yield offset, magic, attributes, timestamp, key, value
        pos = stop


def decode_legacy_entry(
    entry: bytes,
    *,
    verify: bool = False,
    position: int = 0,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[LegacyMessage]:
    """Decode one top-level magic 0/1 entry (a plain message or a compressed wrapper) into its records.

    A wrapper's value is an inner message set. Inner offsets are absolute for magic 0 and relative for magic 1
    (the wrapper carries the last inner offset); with LogAppendTime a v1 wrapper's timestamp applies to all.
    ``verify`` checks each message's CRC-32 (over magic..end, as Kafka's ``LegacyRecord`` does).
    """
    out: list[LegacyMessage] = []
    for offset, magic, attributes, timestamp, key, value in _legacy_entries(entry, position, verify):
        codec = attributes & _CODEC_MASK
        ts_type = 1 if magic == 1 and attributes & _TIMESTAMP_TYPE_MASK else 0
        if codec == 0:
            out.append(LegacyMessage(offset, timestamp, ts_type, key, value, magic))
            continue
        if codec > CompressionType.LZ4:
            raise CorruptRecordBatch(f"codec id {codec} is not valid in a magic {magic} message", position)
        try:
            if codec == CompressionType.LZ4 and magic == 0:
                inner_set = lz4_legacy_v0_decompress(value or b"", max_decompressed)
            else:
                inner_set = decompress(codec, value or b"", max_decompressed)
        except DecompressionLimitExceeded as exc:
            raise CorruptRecordBatch(str(exc), position) from None
        except Exception as exc:  # codec libraries raise assorted types
            raise CorruptRecordBatch(
                f"cannot decompress {CompressionType(codec).codec_name} legacy wrapper: {exc}", position
            ) from None
        inner = list(_legacy_entries(inner_set, position, verify))
        last_relative = inner[-1][0] if inner else 0
        for i_offset, i_magic, _i_attr, i_ts, i_key, i_value in inner:
            absolute = offset - last_relative + i_offset if magic == 1 else i_offset
            ts = timestamp if ts_type == 1 else i_ts
            out.append(LegacyMessage(absolute, ts, ts_type, i_key, i_value, i_magic))
    return out
