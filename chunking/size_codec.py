"""Aiven's ``ChunkSizesBinaryCodec``: the compact list of transformed chunk sizes in a variable chunk index.

Layout (big-endian): ``count:int32``; for one value just ``value:int32``; for two or more, ``base:int32`` =
min of all values but the last, ``width:int8`` = bytes needed for the largest ``value - base`` (at least 1),
then each value but the last as ``value - base`` in ``width`` bytes, then the last value as a full int32.
The last value is kept apart because the final chunk is usually much smaller than the others.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from chunking.errors import ChunkingError

INT32_MAX = 2**31 - 1


class ChunkSizeCodecError(ChunkingError):
    """The encoded size list is malformed or a value is out of range."""


def _width(delta: int) -> int:
    if delta <= 0xFF:
        return 1
    if delta <= 0xFFFF:
        return 2
    if delta <= 0xFFFFFF:
        return 3
    return 4


def encode_chunk_sizes(values: Sequence[int]) -> bytes:
    for v in values:
        if v < 0 or v > INT32_MAX:
            raise ChunkSizeCodecError(f"chunk size {v} is outside 0..{INT32_MAX}")
    n = len(values)
    if n == 0:
        return struct.pack(">i", 0)
    if n == 1:
        return struct.pack(">ii", 1, values[0])
    body = values[:-1]
    base = min(body)
    width = max(_width(v - base) for v in body)
    out = bytearray(struct.pack(">iib", n, base, width))
    for v in body:
        out += (v - base).to_bytes(4, "big")[4 - width :]
    out += struct.pack(">i", values[-1])
    return bytes(out)


def decode_chunk_sizes(data: bytes) -> list[int]:
    mv = memoryview(data)
    if len(mv) < 4:
        raise ChunkSizeCodecError(f"chunk size list too short: {len(mv)} bytes")
    (n,) = struct.unpack_from(">i", mv, 0)
    if n < 0:
        raise ChunkSizeCodecError(f"negative chunk count {n}")
    if n == 0:
        if len(mv) != 4:
            raise ChunkSizeCodecError("trailing bytes after an empty chunk size list")
        return []
    if n == 1:
        if len(mv) != 8:
            raise ChunkSizeCodecError(f"one chunk size needs 8 bytes, got {len(mv)}")
        (v,) = struct.unpack_from(">i", mv, 4)
        if v < 0:
            raise ChunkSizeCodecError(f"negative chunk size {v}")
        return [v]
    if len(mv) < 9:
        raise ChunkSizeCodecError(f"chunk size list of {n} values is truncated")
    base, width = struct.unpack_from(">ib", mv, 4)
    if width not in (1, 2, 3, 4):
        raise ChunkSizeCodecError(f"invalid value width {width}")
    expected = 9 + (n - 1) * width + 4
    if len(mv) != expected:
        raise ChunkSizeCodecError(
            f"chunk size list of {n} values with width {width} needs {expected} bytes, got {len(mv)}"
        )
    out = []
    pos = 9
    for _ in range(n - 1):
        v = int.from_bytes(mv[pos : pos + width], "big") + base
        if v < 0 or v > INT32_MAX:
            raise ChunkSizeCodecError(f"decoded chunk size {v} out of range")
        out.append(v)
        pos += width
    (last,) = struct.unpack_from(">i", mv, pos)
    if last < 0:
        raise ChunkSizeCodecError(f"negative chunk size {last}")
    out.append(last)
    return out
