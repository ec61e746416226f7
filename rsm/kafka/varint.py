"""Kafka's varints: zigzag LEB128, as protobuf's sint32/sint64 (the reference, section 6).

Records, their headers and the record-length prefixes of a v2 batch use them; snappy blocks declare their length
with a plain (unsigned) one.
"""

from __future__ import annotations


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


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most ``max_bytes`` bytes at ``pos``: ``(value, next_pos)``."""
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
    u, pos = decode_uvarint(buf, pos, 5)
    if u >> 32:
        raise ValueError("varint does not fit in 32 bits")
    return zigzag_decode(u), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int64 varint at ``pos``; returns ``(value, next_pos)``. Raises ``ValueError`` if malformed."""
    u, pos = decode_uvarint(buf, pos, 10)
    if u >> 64:
        raise ValueError("varlong does not fit in 64 bits")
    return zigzag_decode(u), pos
