"""Reading Kafka ``.log`` segments: record-batch headers (magic v2), CRC-32C checks, and record decoding.

Why a reader of our own: the plugin must look inside segments without a JVM (the compression heuristic
samples batch codecs, the tests check that what we store and return is byte-for-byte a valid Kafka log,
and an offline Spark reader decodes records). The layout follows Kafka's ``DefaultRecordBatch`` /
``DefaultRecord`` (see the reference §6): a 61-byte big-endian header, then the records, which are one
compressed stream when the codec bits are non-zero.

Walking a whole log batch by batch (headers only, or whole batches) is :mod:`rsm.kafka.log_scan`.

Around this module: the codecs (``rsm.kafka.compression``), the legacy v0/v1 message format
(``rsm.kafka.legacy``), varints (``rsm.kafka.varint``) and the error family (``rsm.kafka.errors``) have modules
of their own; their public names are re-exported here, so ``from rsm.kafka.records import ...`` reaches them all.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c as _crc32c

from rsm.kafka.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    DecompressionLimitExceeded,
    decompress,
    lz4_legacy_v0_decompress,
)
from rsm.kafka.errors import CorruptRecordBatch, KafkaFormatError, TruncatedBatch, UnsupportedFormat
from rsm.kafka.legacy import LegacyMessage, decode_legacy_entry
from rsm.kafka.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    zigzag_decode,
    zigzag_encode,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "CompressionType",
    "ControlRecordType",
    "CorruptRecordBatch",
    "KafkaFormatError",
    "Record",
    "TruncatedBatch",
    "UnsupportedFormat",
    "compute_crc",
    "decode_records",
    "decode_legacy_entry",
    "LegacyMessage",
    "decode_varint",
    "decode_varlong",
    "decompress",
    "lz4_legacy_v0_decompress",
    "DecompressionLimitExceeded",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "encode_varint",
    "encode_varlong",
    "parse_batch_header",
    "parse_control_key",
    "parse_end_txn_marker",
    "verify_crc",
    "zigzag_decode",
    "zigzag_encode",
]

#: Bytes before the part counted by ``batchLength``: baseOffset int64 + batchLength int32.
LOG_OVERHEAD = 12
#: The fixed v2 header (offsets 0..60); records start at 61.
BATCH_HEADER_SIZE = 61
#: The smallest legal ``batchLength`` for magic 2 (a header with zero records).
MIN_V2_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
#: Bytes needed to see baseOffset, batchLength, partitionLeaderEpoch and magic (enough to tell formats apart).
_PREFIX_SIZE = 17
_CRC_START = 21  # the CRC covers [attributes, end of batch)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiib")

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40


class ControlRecordType(enum.IntEnum):
    """The ``type`` in a control record key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte v2 header of one batch plus where it sits in the log.

    ``batch_length`` is the raw field (bytes after it); ``size`` is the whole batch including the 12-byte
    offset+length prefix, i.e. how far to advance to the next batch.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch (``batch_length + 12``)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end_position(self) -> int:
        """Position just after this batch, where the next one starts."""
        return self.position + self.size

    @property
    def compression(self) -> CompressionType:
        """The batch codec; compare with ``CompressionType.ZSTD`` or with the int 0..4."""
        return CompressionType(self.attributes & _CODEC_MASK)

    @property
    def compression_name(self) -> str:
        """``none`` / ``gzip`` / ``snappy`` / ``lz4`` / ``zstd``."""
        return self.compression.codec_name

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime (then every record's timestamp is ``max_timestamp``)."""
        return 1 if self.attributes & _TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """When set, ``base_timestamp`` holds the compaction delete horizon instead of the first timestamp."""
        return bool(self.attributes & _DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (``-1`` when the batch carries no sequence); wraps like Kafka's."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


# --------------------------------------------------------------------------------------------------------
# Batch headers
# --------------------------------------------------------------------------------------------------------


def _check_prefix(base_offset: int, batch_length: int, magic: int, position: int) -> None:
    """Reject headers that cannot be a batch, before trusting ``batch_length`` to skip ahead."""
    if magic in (0, 1):
        raise UnsupportedFormat(f"legacy message set (magic {magic}) is not supported", position, magic)
    if magic != 2:
        raise CorruptRecordBatch(f"invalid magic byte {magic}", position)
    if batch_length < MIN_V2_BATCH_LENGTH:
        raise CorruptRecordBatch(f"batch length {batch_length} is below the v2 minimum {MIN_V2_BATCH_LENGTH}", position)
    if base_offset < 0:
        raise CorruptRecordBatch(f"negative base offset {base_offset}", position)


def parse_batch_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the 61-byte v2 header at the start of ``buf`` (``position`` is only recorded, for messages).

    Raises :class:`TruncatedBatch` if ``buf`` is shorter than the header, :class:`UnsupportedFormat` for
    magic 0/1 and :class:`CorruptRecordBatch` for an impossible header.
    """
    if len(buf) < _PREFIX_SIZE:
        raise TruncatedBatch(position, len(buf), None)
    base_offset, batch_length, _epoch, magic = _PREFIX.unpack_from(buf, 0)
    _check_prefix(base_offset, batch_length, magic, position)
    if len(buf) < BATCH_HEADER_SIZE:
        raise TruncatedBatch(position, len(buf), batch_length + LOG_OVERHEAD)
    fields = _HEADER.unpack_from(buf, 0)
    header = BatchHeader(position, *fields)
    attributes = header.attributes
    if attributes & _CODEC_MASK > CompressionType.ZSTD:
        raise CorruptRecordBatch(f"unknown compression codec id {attributes & _CODEC_MASK}", position)
    if header.last_offset_delta < 0:
        raise CorruptRecordBatch(f"negative lastOffsetDelta {header.last_offset_delta}", position)
    if header.records_count < 0:
        raise CorruptRecordBatch(f"negative record count {header.records_count}", position)
    return header


def verify_crc(batch: bytes | bytearray | memoryview) -> bool:
    """True when the stored CRC equals CRC-32C over bytes [21, end of batch) (Kafka's ``isValid``).

    ``batch`` must start at a batch boundary; bytes past the batch's own length are ignored, so a buffer
    holding several batches checks only the first. Short or non-v2 input returns ``False``.
    """
    view = memoryview(batch)
    if len(view) < BATCH_HEADER_SIZE or view[16] != 2:
        return False
    (batch_length,) = struct.unpack_from(">i", view, 8)
    end = batch_length + LOG_OVERHEAD
    if batch_length < MIN_V2_BATCH_LENGTH or end > len(view):
        return False
    (stored,) = struct.unpack_from(">I", view, 17)
    return _crc32c.crc32c(view[_CRC_START:end]) == stored


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C a v2 batch should carry (over [21, end)); used by writers that patch CRC-covered fields."""
    view = memoryview(batch)
    (batch_length,) = struct.unpack_from(">i", view, 8)
    return _crc32c.crc32c(view[_CRC_START : batch_length + LOG_OVERHEAD])


# --------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded v2 record with its absolute offset and timestamp (``sequence`` is -1 without a producer)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    offset_delta: int
    timestamp_delta: int
    sequence: int
    attributes: int = 0
    is_control: bool = False


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ValueError("field runs past the end of the record")
    return buf[pos:end], end


def _parse_records(header: BatchHeader, payload: bytes) -> list[Record]:
    records: list[Record] = []
    pos = 0
    end = len(payload)
    log_append = header.timestamp_type == 1
    base_ts = header.base_timestamp
    base_off = header.base_offset
    base_seq = header.base_sequence
    control = header.is_control
    for _ in range(header.records_count):
        length, pos = decode_varint(payload, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise ValueError(f"record length {length} runs past the batch")
        attributes = payload[pos]
        pos += 1
        ts_delta, pos = decode_varlong(payload, pos)
        off_delta, pos = decode_varint(payload, pos)
        key, pos = _read_bytes(payload, pos)
        value, pos = _read_bytes(payload, pos)
        n_headers, pos = decode_varint(payload, pos)
        if n_headers < 0:
            raise ValueError(f"negative header count {n_headers}")
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            hkey, pos = _read_bytes(payload, pos)
            if hkey is None:
                raise ValueError("null header key")
            hval, pos = _read_bytes(payload, pos)
            headers.append((hkey.decode("utf-8"), hval))
        if pos != rec_end:
            raise ValueError(f"record body is {pos - (rec_end - length)} bytes, length says {length}")
        sequence = -1 if base_seq < 0 else (base_seq + off_delta) % (1 << 31)
        records.append(
            Record(
                offset=base_off + off_delta,
                timestamp=header.max_timestamp if log_append else base_ts + ts_delta,
                key=key,
                value=value,
                headers=tuple(headers),
                offset_delta=off_delta,
                timestamp_delta=ts_delta,
                sequence=sequence,
                attributes=attributes,
                is_control=control,
            )
        )
    if pos != end:
        raise ValueError(f"{end - pos} trailing bytes after {header.records_count} records")
    return records


def decode_records(
    batch_bytes: bytes | bytearray | memoryview,
    *,
    verify: bool = False,
    position: int = 0,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode every record of one whole v2 batch (decompressing if needed).

    ``verify=True`` checks the CRC first. Any inconsistency (bad varint, lengths that do not add up, wrong
    record count, codec failure) raises :class:`CorruptRecordBatch` with ``position`` (the caller's log
    position of the batch, 0 by default). Magic 0/1 raises :class:`UnsupportedFormat`.
    """
    view = memoryview(batch_bytes)
    header = parse_batch_header(view, position)
    if len(view) < header.size:
        raise TruncatedBatch(position, len(view), header.size)
    if verify and not verify_crc(view):
        raise CorruptRecordBatch("CRC-32C mismatch", position)
    body = view[BATCH_HEADER_SIZE : header.size]
    try:
        payload = decompress(header.compression, body, max_decompressed)
    except Exception as exc:  # codec libraries raise assorted types
        raise CorruptRecordBatch(f"cannot decompress {header.compression_name} records: {exc}", position)
    try:
        return _parse_records(header, payload)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordBatch(f"malformed records: {exc}", position)


_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


def parse_control_key(key: bytes | None) -> tuple[int, ControlRecordType | int]:
    """``(version, type)`` from a control record's key; unknown types come back as a plain int."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise ValueError("control record key must hold version int16 and type int16")
    version, kind = _CONTROL_KEY.unpack_from(key, 0)
    try:
        return version, ControlRecordType(kind)
    except ValueError:
        return version, kind


def parse_end_txn_marker(value: bytes | None) -> tuple[int, int]:
    """``(version, coordinator_epoch)`` from a COMMIT/ABORT marker's value."""
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise ValueError("end-transaction marker value must hold version int16 and coordinatorEpoch int32")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value, 0)
    return version, coordinator_epoch
