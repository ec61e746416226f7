"""Kafka's record compression codecs: gzip, snappy (xerial framing), lz4 (frames, and the magic 0 variant whose
header checksum Kafka computed over the wrong bytes) and zstd, each inflated under a cap.

A batch's records (or a legacy wrapper's inner message set) are one compressed stream. A hostile or damaged
batch can claim any size, so nothing larger than the caller's cap (plus one read step) is ever held.
"""

from __future__ import annotations

import enum
import gzip
import io
import struct
from typing import BinaryIO

from rsm.kafka.varint import decode_uvarint


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


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class DecompressionLimitExceeded(ValueError):
    """A batch inflates past the caller's cap: a hostile or corrupt batch must not exhaust an executor's memory."""


#: Default cap on one batch's decompressed records (Kafka's own batches stay far below; 64 MiB leaves headroom).
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 << 20


def _over(limit: int, codec: str) -> DecompressionLimitExceeded:
    return DecompressionLimitExceeded(f"{codec} records inflate beyond the {limit}-byte decompression cap")


def _snappy_block_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading unsigned varint), read before inflating."""
    n, _ = decode_uvarint(block, 0, 5)
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


_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 << 10


def compress(codec: int | CompressionType, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress a batch's records section as Kafka's producer does with ``codec``: gzip, snappy in xerial framing
    (snappy-java's ``SnappyOutputStream``, 32 KiB blocks), an lz4 frame of independent 64 KiB blocks without
    content size (what ``KafkaLZ4BlockInputStream`` reads), or a zstd frame. ``level``: the codec's own level
    (None: its default)."""
    codec = CompressionType(codec)
    raw = bytes(data)
    if codec is CompressionType.NONE:
        return raw
    if codec is CompressionType.GZIP:
        return gzip.compress(raw, compresslevel=6 if level is None else level, mtime=0)
    if codec is CompressionType.SNAPPY:
        import snappy  # optional dependency (python-snappy)

        parts = [_XERIAL_HEADER]
        for start in range(0, len(raw), _XERIAL_BLOCK):
            block = snappy.compress(raw[start : start + _XERIAL_BLOCK])
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec is CompressionType.LZ4:
        import lz4.frame  # optional dependency

        return lz4.frame.compress(  # type: ignore[no-any-return]
            raw,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    import zstandard

    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(raw)
