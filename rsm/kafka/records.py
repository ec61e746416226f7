"""Reading Kafka ``.log`` segments: record-batch headers (magic v2), CRC-32C checks, and record decoding.

Why a reader of our own: the plugin must look inside segments without a JVM (the compression heuristic
samples batch codecs, the tests check that what we store and return is byte-for-byte a valid Kafka log,
and an offline Spark reader decodes records). The layout follows Kafka's ``DefaultRecordBatch`` /
``DefaultRecord`` (see the reference §6): a 61-byte big-endian header, then the records, which are one
compressed stream when the codec bits are non-zero.

Scanning headers never reads record bodies, so walking a 1 GiB segment costs one small read per batch.
"""

from __future__ import annotations

import enum
import gzip
import io
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import crc32c as _crc32c

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
    "iter_batch_headers",
    "iter_batches",
    "parse_batch_header",
    "parse_control_key",
    "parse_end_txn_marker",
    "read_batch",
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


class KafkaFormatError(Exception):
    """Base class for every problem found in Kafka-format bytes."""


class CorruptRecordBatch(KafkaFormatError):
    """A batch header is impossible (or cut short); ``position`` is the byte offset of the batch in the log.

    Callers that walk a log to its end (a fetch stream cut at ``endPosition``, a segment still being
    written) catch :class:`TruncatedBatch` separately; everything else is genuine damage.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (batch at position {position})")
        self.position = position
        self.reason = message


class TruncatedBatch(CorruptRecordBatch):
    """The last batch runs past the end of the data: ``available`` bytes of ``needed`` are present.

    ``needed`` is ``None`` when not even the batch length could be read.
    """

    def __init__(self, position: int, available: int, needed: int | None) -> None:
        want = "an unknown number of" if needed is None else str(needed)
        super().__init__(f"truncated batch: {available} bytes present, {want} needed", position)
        self.available = available
        self.needed = needed


class UnsupportedFormat(KafkaFormatError):
    """Legacy message sets (magic 0 or 1), which brokers only keep for very old topics; we do not parse them."""

    def __init__(self, message: str, position: int | None = None, magic: int | None = None) -> None:
        where = "" if position is None else f" (at position {position})"
        super().__init__(message + where)
        self.position = position
        self.magic = magic


class CompressionType(enum.IntEnum):
    """The codec id in attribute bits 0-2. An ``IntEnum`` so ``header.compression == 4`` also works."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def codec_name(self) -> str:
        """Kafka's ``compression.type`` spelling: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Parse Kafka's ``compression.type`` spelling (case-insensitive)."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown compression codec {name!r}; expected none, gzip, snappy, lz4 or zstd")


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
# Varints (zigzag LEB128, protobuf sint32/sint64 style)
# --------------------------------------------------------------------------------------------------------


def zigzag_encode(n: int) -> int:
    """Map a signed int to an unsigned one so small magnitudes stay short: 0,-1,1,-2 -> 0,1,2,3."""
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def zigzag_decode(u: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (u >> 1) ^ -(u & 1)


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Kafka ``ByteUtils.writeVarint``: a zigzag varint for an int32 (1..5 bytes)."""
    if not -(1 << 31) <= n < (1 << 31):
        raise ValueError(f"varint out of int32 range: {n}")
    return _encode_unsigned(zigzag_encode(n))


def encode_varlong(n: int) -> bytes:
    """Kafka ``ByteUtils.writeVarlong``: a zigzag varint for an int64 (1..10 bytes)."""
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"varlong out of int64 range: {n}")
    return _encode_unsigned(zigzag_encode(n))


def _decode_unsigned(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise ValueError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError(f"varint longer than {max_bytes} bytes")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int32 varint at ``pos``; returns ``(value, next_pos)``. Raises ``ValueError`` if malformed."""
    u, pos = _decode_unsigned(buf, pos, 5)
    if u >> 32:
        raise ValueError("varint does not fit in 32 bits")
    return zigzag_decode(u), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int64 varint at ``pos``; returns ``(value, next_pos)``. Raises ``ValueError`` if malformed."""
    u, pos = _decode_unsigned(buf, pos, 10)
    if u >> 64:
        raise ValueError("varlong does not fit in 64 bits")
    return zigzag_decode(u), pos


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


def _as_reader(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
) -> tuple[BinaryIO, bool]:
    """Open a path (we close it) or use a caller's binary file/bytes (left open)."""
    if isinstance(path_or_file, (bytes, bytearray, memoryview)):
        return io.BytesIO(path_or_file), True
    if isinstance(path_or_file, (str, os.PathLike)):
        return open(path_or_file, "rb"), True  # noqa: SIM115 - closed by the generator
    return path_or_file, False


def _stream_size(f: BinaryIO) -> int | None:
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        pass
    try:
        if f.seekable():
            here = f.tell()
            end = f.seek(0, io.SEEK_END)
            f.seek(here)
            return end
    except (OSError, AttributeError, io.UnsupportedOperation):
        pass
    return None


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Read up to ``n`` bytes, looping over short reads (pipes and HTTP bodies return less than asked)."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _iter_raw(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
    start_position: int,
    want_body: bool,
    stop_on_truncated_tail: bool,
) -> Iterator[tuple[BatchHeader, bytes | None]]:
    """Shared walker: seekable inputs skip bodies with ``seek``; streams read them and drop them."""
    f, owned = _as_reader(path_or_file)
    try:
        seekable = False
        try:
            seekable = f.seekable()
        except (AttributeError, ValueError):
            seekable = False
        size = _stream_size(f) if seekable else None
        if seekable:
            f.seek(start_position)
        elif start_position:
            skipped = _read_exact(f, start_position)
            if len(skipped) < start_position:
                return
        pos = start_position
        while True:
            if size is not None and pos >= size:
                return
            head = _read_exact(f, BATCH_HEADER_SIZE)
            if not head:
                return
            try:
                header = parse_batch_header(head, pos)
            except TruncatedBatch:
                if stop_on_truncated_tail:
                    return
                raise
            total = header.size
            if size is not None and pos + total > size:
                if stop_on_truncated_tail:
                    return
                raise TruncatedBatch(pos, size - pos, total)
            body: bytes | None = None
            if want_body or not seekable:
                rest = _read_exact(f, total - BATCH_HEADER_SIZE)
                if len(rest) < total - BATCH_HEADER_SIZE:
                    if stop_on_truncated_tail:
                        return
                    raise TruncatedBatch(pos, BATCH_HEADER_SIZE + len(rest), total)
                if want_body:
                    body = head + rest
            else:
                f.seek(pos + total)
            yield header, body
            pos += total
    finally:
        if owned:
            f.close()


def iter_batch_headers(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
    start_position: int = 0,
    *,
    stop_on_truncated_tail: bool = False,
) -> Iterator[BatchHeader]:
    """Yield the header of every batch from ``start_position`` (a batch start) to the end of the log.

    Accepts a path, a binary file object (seekable or a plain stream) or bytes. An impossible header raises
    :class:`CorruptRecordBatch` carrying ``.position``; a batch cut off by the end of the data raises its
    subclass :class:`TruncatedBatch`, unless ``stop_on_truncated_tail=True``, which ends the iteration
    quietly instead (what a reader of a fetch stream cut at ``endPosition`` wants). Magic 0/1 raises
    :class:`UnsupportedFormat`. Bodies are skipped, not read, when the input is seekable.
    """
    for header, _ in _iter_raw(path_or_file, start_position, False, stop_on_truncated_tail):
        yield header


def iter_batches(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
    start_position: int = 0,
    *,
    stop_on_truncated_tail: bool = False,
    verify: bool = False,
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Like :func:`iter_batch_headers` but also yields each whole batch's bytes.

    With ``verify=True`` a CRC mismatch raises :class:`CorruptRecordBatch` at that batch's position.
    """
    for header, body in _iter_raw(path_or_file, start_position, True, stop_on_truncated_tail):
        assert body is not None
        if verify and not verify_crc(body):
            raise CorruptRecordBatch("CRC-32C mismatch", header.position)
        yield header, body


def read_batch(f: BinaryIO, header: BatchHeader) -> bytes:
    """Read the whole batch described by ``header`` from a seekable file (e.g. one found by an index lookup)."""
    f.seek(header.position)
    data = _read_exact(f, header.size)
    if len(data) < header.size:
        raise TruncatedBatch(header.position, len(data), header.size)
    return data


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
# Decompression
# --------------------------------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class DecompressionLimitExceeded(ValueError):
    """A batch inflates past the caller's cap: a hostile or corrupt batch must not exhaust an executor's memory."""


#: Default cap on one batch's decompressed records (Kafka's own batches stay far below; 64 MiB leaves headroom).
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 << 20


def _over(limit: int, codec: str) -> DecompressionLimitExceeded:
    return DecompressionLimitExceeded(f"{codec} records inflate beyond the {limit}-byte decompression cap")


def _snappy_block_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading unsigned varint), read before inflating."""
    n, _ = _decode_unsigned(block, 0, 5)
    return n


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    """Kafka (snappy-java's ``SnappyOutputStream``) writes xerial framing: a 16-byte header, then
    ``int32 length + raw snappy block`` repeated. Raw (unframed) snappy is accepted too, for other clients.
    Each block declares its inflated length up front, so the cap is checked before any block is inflated."""
    import snappy  # optional dependency (python-snappy)

    if not data.startswith(_XERIAL_MAGIC):
        if _snappy_block_length(data) > limit:
            raise _over(limit, "snappy")
        return snappy.decompress(data)
    out: list[bytes] = []
    total = 0
    pos = 16
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise ValueError("truncated or invalid xerial snappy block")
        block = data[pos : pos + n]
        total += _snappy_block_length(block)
        if total > limit:
            raise _over(limit, "snappy")
        out.append(snappy.decompress(block))
        pos += n
    return b"".join(out)


def _read_capped(reader: BinaryIO, limit: int, codec: str) -> bytes:
    """Read a decompressing stream to its end, refusing to hold more than ``limit`` bytes."""
    data = reader.read(limit + 1)
    if len(data) > limit:
        raise _over(limit, codec)
    return data


def _zstd_decompress(data: bytes, limit: int) -> bytes:
    """zstd-jni streams do not record the content size, so decompress as a stream, across frames."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    with reader:
        return _read_capped(reader, limit, "zstd")  # type: ignore[arg-type]


def _gzip_decompress(data: bytes, limit: int) -> bytes:
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as reader:
        return _read_capped(reader, limit, "gzip")  # type: ignore[arg-type]


def _lz4_decompress(data: bytes, limit: int) -> bytes:
    import lz4.frame  # optional dependency

    with lz4.frame.LZ4FrameFile(io.BytesIO(data)) as reader:
        return _read_capped(reader, limit, "lz4")  # type: ignore[arg-type]


_LZ4_FRAME_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def lz4_legacy_v0_decompress(data: bytes, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Inflate the lz4 frame of a magic 0 wrapper, whose header checksum Kafka computed over the wrong bytes.

    Kafka's ``KafkaLZ4BlockOutputStream`` hashed the frame magic along with the flag and block descriptors for
    magic 0 messages (the 0.8/0.9 format), and its reader skips that byte for magic 0 only; a standard lz4 frame
    reader refuses it. The frame is therefore walked here block by block, ignoring the header checksum byte
    (as Kafka does for magic 0, so a correct one is fine too) while every other field is checked. The
    message's CRC-32 already covers the whole frame. Linked blocks decode against the previous 64 KiB.
    """
    import lz4.block  # optional dependency

    if len(data) < 7 or int.from_bytes(data[:4], "little") != _LZ4_FRAME_MAGIC:
        raise ValueError("not an lz4 frame (bad magic number)")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise ValueError(f"lz4 frame version {flg >> 6} is not 1")
    if flg & 0x02 or bd & 0x8F:
        raise ValueError("lz4 frame descriptor has reserved bits set")
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
    if block_max is None:
        raise ValueError(f"lz4 frame block size id {(bd >> 4) & 0x07} is not 4..7")
    independent = bool(flg & 0x20)
    block_checksum = 4 if flg & 0x10 else 0
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1  # content size, dict id, header checksum
    out = bytearray()
    while True:
        if pos + 4 > len(data):
            raise ValueError("lz4 frame ends without its end mark")
        size = int.from_bytes(data[pos : pos + 4], "little")
        pos += 4
        if size == 0:
            break  # end mark; a content checksum may follow, covered by the message CRC already
        stored = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        if size > block_max or pos + size + block_checksum > len(data):
            raise ValueError(f"lz4 block of {size} bytes runs past the frame or its {block_max}-byte maximum")
        block = data[pos : pos + size]
        pos += size + block_checksum
        if stored:
            chunk = block
        elif independent or not out:
            chunk = lz4.block.decompress(block, uncompressed_size=block_max)
        else:
            chunk = lz4.block.decompress(block, uncompressed_size=block_max, dict=bytes(out[-(64 << 10) :]))
        if len(out) + len(chunk) > limit:
            raise _over(limit, "lz4")
        out += chunk
    return bytes(out)


def decompress(
    codec: int | CompressionType,
    data: bytes | bytearray | memoryview,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress a batch's records section written with Kafka's codec ``codec``.

    Raises :class:`DecompressionLimitExceeded` when the output would pass ``max_size`` bytes; nothing larger
    than the cap (plus one read step) is ever held.
    """
    codec = CompressionType(codec)
    raw = bytes(data)
    if codec is CompressionType.NONE:
        return raw
    if codec is CompressionType.GZIP:
        return _gzip_decompress(raw, max_size)
    if codec is CompressionType.SNAPPY:
        return _snappy_decompress(raw, max_size)
    if codec is CompressionType.LZ4:
        return _lz4_decompress(raw, max_size)
    return _zstd_decompress(raw, max_size)


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


# --------------------------------------------------------------------------------------------------------
# Legacy message sets (magic 0 and 1)
# --------------------------------------------------------------------------------------------------------

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
    while pos + LOG_OVERHEAD <= end:
        offset, size = struct.unpack_from(">qi", buf, pos)
        if size < LEGACY_MIN_SIZE or pos + LOG_OVERHEAD + size > end:
            raise CorruptRecordBatch(f"legacy message size {size} is impossible here", position + pos)
        stop = pos + LOG_OVERHEAD + size
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
