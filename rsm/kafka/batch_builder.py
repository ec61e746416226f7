"""Build real v2 record batches with kafka-python, as a producer would and as the broker then stores them.

kafka-python's ``DefaultRecordBatchBuilder`` is an implementation independent of our reader, so reader bugs cannot
cancel writer bugs. We only patch the fields a broker assigns after the producer built the batch (baseOffset and
partitionLeaderEpoch, both outside the CRC) and, for control batches, the attributes inside the CRC followed by a
CRC recomputation. Needs kafka-python (a test dependency), imported lazily.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Literal

import crc32c as _crc32c

from rsm.kafka.records import CompressionType, ControlRecordType

__all__ = ["Codec", "RecordSpec", "build_batch", "build_control_batch", "codec_of"]

Codec = Literal["none", "gzip", "snappy", "lz4", "zstd"]

_BATCH_SIZE_LIMIT = 64 << 20  # builder refuses appends beyond this; we never want it to
_CONTROL_MASK = 0x20

#: One record to append: ``(timestamp_ms, key, value, headers)``; offsets are assigned consecutively.
RecordSpec = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


def _builder(
    codec: CompressionType, transactional: bool, producer_id: int, producer_epoch: int, base_sequence: int
) -> Any:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=_BATCH_SIZE_LIMIT,
    )


def _assign(buf: bytearray, base_offset: int, leader_epoch: int) -> bytes:
    """What the broker does on append: set baseOffset and partitionLeaderEpoch (neither is CRC-covered)."""
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    return bytes(buf)


def codec_of(codec: str | int | CompressionType) -> CompressionType:
    if isinstance(codec, str):
        return CompressionType.from_name(codec)
    return CompressionType(codec)


def build_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: int = 0,
    codec: str | int = "none",
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One v2 batch built by kafka-python, with the broker-assigned base offset and leader epoch filled in.

    Note kafka-python (unlike the Java producer) falls back to an uncompressed batch when compression does
    not shrink it, so a ``zstd`` request over random bytes may yield codec 0.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    b = _builder(codec_of(codec), transactional, producer_id, producer_epoch, base_sequence)
    for delta, (ts, key, value, headers) in enumerate(records):
        if b.append(delta, ts, key, value, list(headers)) is None:
            raise ValueError("record does not fit in one batch")
    return _assign(b.build(), base_offset, leader_epoch)


def build_control_batch(
    kind: ControlRecordType,
    *,
    base_offset: int,
    timestamp_ms: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    leader_epoch: int = 0,
) -> bytes:
    """A COMMIT/ABORT marker batch as the broker writes it (one record, uncompressed, no sequence).

    kafka-python cannot set the control bit, so we build the record with it, set bit 5 and recompute the CRC.
    """
    b = _builder(CompressionType.NONE, True, producer_id, producer_epoch, -1)
    key = struct.pack(">hh", 0, int(kind))
    value = struct.pack(">hi", 0, coordinator_epoch)
    b.append(0, timestamp_ms, key, value, [])
    buf = b.build()
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | _CONTROL_MASK)
    struct.pack_into(">I", buf, 17, _crc32c.crc32c(memoryview(buf)[21:]))
    return _assign(buf, base_offset, leader_epoch)
