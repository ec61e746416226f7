"""Where each original chunk of a segment lives inside the stored ``.log`` object.

The segment is cut into chunks of ``original_chunk_size`` bytes (the last one shorter). Each is transformed on
its own, so the stored object is the concatenation of transformed chunks of possibly different sizes. The
index maps an original byte position to a chunk and a chunk to its stored byte range. Two encodings exist in
Aiven's manifest: ``fixed`` (every transformed chunk has the same size except the last: no compression) and
``variable`` (a list of every transformed size: compression on).
"""

from __future__ import annotations

import base64
import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import zstandard

from chunking.errors import ChunkingError
from chunking.size_codec import decode_chunk_sizes, encode_chunk_sizes

MAX_ENCODED_SIZES = 10 * 1024 * 1024
# Kafka's segments are capped by ``log.segment.bytes``, a Java int: no original file or index is larger.
MAX_FILE_SIZE = 2**31 - 1
# The largest ``chunk.size`` the configuration accepts; a manifest claiming more is hostile or corrupt.
MAX_CHUNK_SIZE = 2**30 - 1
# A variable index keeps one stored offset per chunk; 2^20 chunks (a 2 GiB segment in 2 KiB chunks) bounds it to
# 8 MiB whatever the manifest claims. A fixed index needs no per-chunk memory at all.
MAX_VARIABLE_CHUNKS = 2**20
# zstd's worst-case expansion (ZSTD_compressBound) plus AES-GCM's IV and tag, with room to spare.
_TRANSFORM_SLACK = 64 * 1024 + 128


class ChunkIndexError(ChunkingError):
    """The chunk index in a manifest is inconsistent or malformed."""


def max_transformed_size(original_chunk_size: int) -> int:
    """The largest stored size a chunk of ``original_chunk_size`` bytes can have after compression and encryption;
    anything above it cannot have been written by a plugin, so it is refused before a buffer is allocated."""
    return original_chunk_size + (original_chunk_size >> 8) + _TRANSFORM_SLACK


def expected_chunk_count(original_chunk_size: int, original_file_size: int) -> int:
    """Chunks of a file (an empty file still has one empty chunk, as Aiven writes it)."""
    return max(1, -(-original_file_size // original_chunk_size))


@dataclass(frozen=True)
class Chunk:
    """One chunk: its id, its original byte range and its stored (transformed) byte range, ends exclusive."""

    id: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int

    @property
    def original_end(self) -> int:
        return self.original_position + self.original_size

    @property
    def transformed_end(self) -> int:
        return self.transformed_position + self.transformed_size


def json_int(name: str, value: Any, low: int, high: int) -> int:
    """A JSON integer in ``[low, high]``: floats (``65536.7``), booleans and strings are refused, not rounded."""
    if type(value) is not int:
        raise ChunkIndexError(f"{name} must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
    if not low <= value <= high:
        raise ChunkIndexError(f"{name} {value} is outside {low}..{high}")
    return value


class ChunkIndex:
    """Where each chunk is stored. A fixed index is pure arithmetic (no per-chunk memory, whatever the chunk
    count); a variable one keeps a compact array of stored start offsets, bounded by ``MAX_VARIABLE_CHUNKS``."""

    def __init__(
        self,
        original_chunk_size: int,
        original_file_size: int,
        transformed_sizes: Sequence[int],
        nominal_transformed_chunk_size: int | None = None,
    ) -> None:
        """``nominal_transformed_chunk_size`` is the stored size of a *full* chunk; a ``fixed`` index records it
        even when the segment is a single short chunk (it is never used for lookups)."""
        self._check_sizes(original_chunk_size, original_file_size)
        expected = expected_chunk_count(original_chunk_size, original_file_size)
        if len(transformed_sizes) != expected:
            raise ChunkIndexError(
                f"a file of {original_file_size} bytes in chunks of {original_chunk_size} has "
                f"{expected} chunks, but the index lists {len(transformed_sizes)}"
            )
        limit = max_transformed_size(original_chunk_size)
        starts = array("q", [0])
        total = 0
        for i, size in enumerate(transformed_sizes):
            if not 0 <= size <= limit:
                raise ChunkIndexError(
                    f"chunk {i} has a stored size of {size} bytes; a chunk of {original_chunk_size} bytes is "
                    f"stored in 0..{limit}"
                )
            total += size
            starts.append(total)
        self.original_chunk_size = original_chunk_size
        self.original_file_size = original_file_size
        self._count = expected
        self._starts: array[int] | None = starts
        self._fixed_size = 0
        self._final_size = 0
        self.nominal_transformed_chunk_size = (
            nominal_transformed_chunk_size if nominal_transformed_chunk_size is not None else transformed_sizes[0]
        )

    @staticmethod
    def _check_sizes(original_chunk_size: int, original_file_size: int) -> None:
        if not 0 < original_chunk_size <= MAX_CHUNK_SIZE:
            raise ChunkIndexError(f"originalChunkSize {original_chunk_size} is outside 1..{MAX_CHUNK_SIZE}")
        if not 0 <= original_file_size <= MAX_FILE_SIZE:
            raise ChunkIndexError(
                f"originalFileSize {original_file_size} is outside 0..{MAX_FILE_SIZE} (Kafka's segment size cap)"
            )

    @classmethod
    def fixed(
        cls, original_chunk_size: int, original_file_size: int, transformed_chunk_size: int, final_size: int
    ) -> ChunkIndex:
        """A fixed index: every stored chunk has ``transformed_chunk_size`` bytes but the last (``final_size``).
        Offsets are computed, so a hostile chunk count costs no memory."""
        cls._check_sizes(original_chunk_size, original_file_size)
        limit = max_transformed_size(original_chunk_size)
        for name, value in (
            ("transformedChunkSize", transformed_chunk_size),
            ("finalTransformedChunkSize", final_size),
        ):
            if not 0 <= value <= limit:
                raise ChunkIndexError(
                    f"{name} {value} is outside 0..{limit} for chunks of {original_chunk_size} original bytes"
                )
        self = cls.__new__(cls)
        self.original_chunk_size = original_chunk_size
        self.original_file_size = original_file_size
        self._count = expected_chunk_count(original_chunk_size, original_file_size)
        self._starts = None
        self._fixed_size = transformed_chunk_size
        self._final_size = final_size
        self.nominal_transformed_chunk_size = transformed_chunk_size
        return self

    @property
    def chunk_count(self) -> int:
        return self._count

    def _start(self, chunk_id: int) -> int:
        if self._starts is not None:
            return self._starts[chunk_id]
        return chunk_id * self._fixed_size

    def _size(self, chunk_id: int) -> int:
        if self._starts is not None:
            return self._starts[chunk_id + 1] - self._starts[chunk_id]
        return self._final_size if chunk_id == self._count - 1 else self._fixed_size

    @property
    def transformed_sizes(self) -> list[int]:
        """Every stored chunk size (materialised on demand; for small indexes, tests and tools)."""
        return [self._size(i) for i in range(self._count)]

    @property
    def transformed_file_size(self) -> int:
        if self._starts is not None:
            return self._starts[-1]
        return (self._count - 1) * self._fixed_size + self._final_size

    def chunk(self, chunk_id: int) -> Chunk:
        if not 0 <= chunk_id < self.chunk_count:
            raise IndexError(f"chunk {chunk_id} out of range 0..{self.chunk_count - 1}")
        pos = chunk_id * self.original_chunk_size
        size = max(0, min(self.original_chunk_size, self.original_file_size - pos))
        return Chunk(chunk_id, pos, size, self._start(chunk_id), self._size(chunk_id))

    def chunks(self) -> list[Chunk]:
        return [self.chunk(i) for i in range(self.chunk_count)]

    def chunk_for_position(self, original_position: int) -> Chunk:
        if not 0 <= original_position < self.original_file_size:
            raise IndexError(f"position {original_position} outside file of {self.original_file_size} bytes")
        return self.chunk(original_position // self.original_chunk_size)

    def chunks_for_range(self, start: int, end_inclusive: int) -> ChunkRange:
        """The chunks covering ``[start, end_inclusive]`` as a lazy sequence: a manifest may claim 10^8 chunks,
        and a fetch must cost only the chunks it actually reads."""
        first = self.chunk_for_position(start).id
        last = self.chunk_for_position(end_inclusive).id
        return ChunkRange(self, first, last + 1)

    def chunk_id_for_transformed_position(self, position: int) -> int:
        if self._starts is not None:
            return bisect.bisect_right(self._starts, position) - 1
        if self._fixed_size == 0:
            return self._count - 1
        return min(position // self._fixed_size, self._count - 1)

    # --- manifest JSON -------------------------------------------------------------------------------------

    def is_fixed(self) -> bool:
        if self._starts is None or self._count <= 1:
            return True
        first = self._size(0)
        return all(self._size(i) == first for i in range(self._count - 1))

    def to_json(self, variable: bool) -> dict[str, Any]:
        """Aiven's JSON: ``fixed`` (all chunks but the last of one stored size) or ``variable`` (every size)."""
        if not variable:
            if not self.is_fixed():
                raise ChunkIndexError("a fixed chunk index needs equal transformed sizes for all but the last chunk")
            return {
                "type": "fixed",
                "originalChunkSize": self.original_chunk_size,
                "originalFileSize": self.original_file_size,
                "transformedChunkSize": self._size(0) if self.chunk_count > 1 else self.nominal_transformed_chunk_size,
                "finalTransformedChunkSize": self._size(self._count - 1),
            }
        encoded = zstandard.ZstdCompressor(write_content_size=True).compress(encode_chunk_sizes(self.transformed_sizes))
        return {
            "type": "variable",
            "originalChunkSize": self.original_chunk_size,
            "originalFileSize": self.original_file_size,
            "transformedChunks": base64.b64encode(encoded).decode("ascii"),
        }

    @staticmethod
    def from_json(obj: Any) -> ChunkIndex:
        if not isinstance(obj, dict):
            raise ChunkIndexError("chunkIndex must be a JSON object")
        kind = obj.get("type")
        try:
            c = json_int("originalChunkSize", obj["originalChunkSize"], 1, MAX_CHUNK_SIZE)
            f = json_int("originalFileSize", obj["originalFileSize"], 0, MAX_FILE_SIZE)
            if kind == "fixed":
                t = json_int("transformedChunkSize", obj["transformedChunkSize"], 0, MAX_FILE_SIZE)
                final = json_int("finalTransformedChunkSize", obj["finalTransformedChunkSize"], 0, MAX_FILE_SIZE)
                return ChunkIndex.fixed(c, f, t, final)
            if kind == "variable":
                n = expected_chunk_count(c, f)
                if n > MAX_VARIABLE_CHUNKS:
                    raise ChunkIndexError(
                        f"a variable chunk index of {n} chunks ({f} bytes in chunks of {c}) exceeds the limit of "
                        f"{MAX_VARIABLE_CHUNKS} chunks; use a larger chunk.size"
                    )
                encoded = obj["transformedChunks"]
                if not isinstance(encoded, str) or len(encoded) > 2 * MAX_ENCODED_SIZES:
                    raise ChunkIndexError("transformedChunks must be a base64 string of bounded length")
                raw = base64.b64decode(encoded, validate=True)
                params = zstandard.get_frame_parameters(raw)
                if params.content_size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
                    raise ChunkIndexError("transformedChunks zstd frame has no content size")
                # The codec's exact size for n values is 13 + (n - 1) * width bytes (8 for one value).
                limit = min(MAX_ENCODED_SIZES, 13 + (n - 1) * 4)
                if params.content_size > limit:
                    raise ChunkIndexError(
                        f"transformedChunks decompresses to {params.content_size} bytes; {n} chunk sizes take at "
                        f"most {limit}"
                    )
                decoded = zstandard.ZstdDecompressor().decompress(raw, max_output_size=limit)
                if len(decoded) > limit:
                    raise ChunkIndexError(f"transformedChunks decompresses to more than {limit} bytes")
                return ChunkIndex(c, f, decode_chunk_sizes(decoded))
        except ChunkIndexError:
            raise
        except (KeyError, TypeError, ValueError, OverflowError, MemoryError, zstandard.ZstdError) as e:
            raise ChunkIndexError(f"malformed {kind!r} chunkIndex: {type(e).__name__}: {e}") from e
        raise ChunkIndexError(f"unknown chunkIndex type {kind!r} (expected 'fixed' or 'variable')")


class ChunkRange(Sequence[Chunk]):
    """Chunks ``first..end-1`` of an index, each built when it is asked for."""

    def __init__(self, index: ChunkIndex, first: int, end: int) -> None:
        self._index = index
        self._ids = range(first, end)

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, i: int) -> Chunk: ...

    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...

    def __getitem__(self, i: int | slice) -> Chunk | list[Chunk]:
        if isinstance(i, slice):
            return [self._index.chunk(j) for j in self._ids[i]]
        return self._index.chunk(self._ids[i])
