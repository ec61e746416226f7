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
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import zstandard

from chunking.errors import ChunkingError
from chunking.size_codec import decode_chunk_sizes, encode_chunk_sizes

MAX_ENCODED_SIZES = 10 * 1024 * 1024


class ChunkIndexError(ChunkingError):
    """The chunk index in a manifest is inconsistent or malformed."""


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


class ChunkRange(Sequence[Chunk]):
    """Chunks ``first..last`` of an index, each built when it is asked for."""

    def __init__(self, index: ChunkIndex, first: int, last: int) -> None:
        self._index = index
        self._first = first
        self._len = last - first + 1

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> Chunk: ...

    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...

    def __getitem__(self, i: int | slice) -> Chunk | list[Chunk]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"chunk {i} outside a range of {self._len}")
        return self._index.chunk(self._first + i)


class ChunkIndex:
    """A chunk index over a list of transformed sizes (both encodings share the lookup logic)."""

    def __init__(
        self,
        original_chunk_size: int,
        original_file_size: int,
        transformed_sizes: list[int],
        nominal_transformed_chunk_size: int | None = None,
    ) -> None:
        """``nominal_transformed_chunk_size`` is the stored size of a *full* chunk; a ``fixed`` index records it
        even when the segment is a single short chunk (it is never used for lookups)."""
        if original_chunk_size <= 0:
            raise ChunkIndexError(f"originalChunkSize must be positive, got {original_chunk_size}")
        if original_file_size < 0:
            raise ChunkIndexError(f"originalFileSize must not be negative, got {original_file_size}")
        expected = max(1, -(-original_file_size // original_chunk_size))
        if len(transformed_sizes) != expected:
            raise ChunkIndexError(
                f"a file of {original_file_size} bytes in chunks of {original_chunk_size} has "
                f"{expected} chunks, but the index lists {len(transformed_sizes)}"
            )
        self.original_chunk_size = original_chunk_size
        self.original_file_size = original_file_size
        self.transformed_sizes = list(transformed_sizes)
        self.nominal_transformed_chunk_size = (
            nominal_transformed_chunk_size if nominal_transformed_chunk_size is not None else self.transformed_sizes[0]
        )
        self._starts = [0, *itertools.accumulate(self.transformed_sizes)]

    @property
    def chunk_count(self) -> int:
        return len(self.transformed_sizes)

    @property
    def transformed_file_size(self) -> int:
        return self._starts[-1]

    def chunk(self, chunk_id: int) -> Chunk:
        if not 0 <= chunk_id < self.chunk_count:
            raise IndexError(f"chunk {chunk_id} out of range 0..{self.chunk_count - 1}")
        pos = chunk_id * self.original_chunk_size
        size = max(0, min(self.original_chunk_size, self.original_file_size - pos))
        return Chunk(chunk_id, pos, size, self._starts[chunk_id], self.transformed_sizes[chunk_id])

    def chunks(self) -> list[Chunk]:
        return [self.chunk(i) for i in range(self.chunk_count)]

    def chunk_for_position(self, original_position: int) -> Chunk:
        if not 0 <= original_position < self.original_file_size:
            raise IndexError(f"position {original_position} outside file of {self.original_file_size} bytes")
        return self.chunk(original_position // self.original_chunk_size)

    def chunks_for_range(self, start: int, end_inclusive: int) -> ChunkRange:
        """The chunks covering ``[start, end_inclusive]``, made on demand: the broker opens a stream to the end of
        the segment for every 1 MiB it reads, so listing every chunk up front would cost more than the read."""
        first = self.chunk_for_position(start).id
        last = self.chunk_for_position(end_inclusive).id
        return ChunkRange(self, first, last)

    def chunk_id_for_transformed_position(self, position: int) -> int:
        return bisect.bisect_right(self._starts, position) - 1

    # --- manifest JSON -------------------------------------------------------------------------------------

    def is_fixed(self) -> bool:
        sizes = self.transformed_sizes
        return len(sizes) <= 1 or all(s == sizes[0] for s in sizes[:-1])

    def to_json(self, variable: bool) -> dict[str, Any]:
        """Aiven's JSON: ``fixed`` (all chunks but the last of one stored size) or ``variable`` (every size)."""
        if not variable:
            if not self.is_fixed():
                raise ChunkIndexError("a fixed chunk index needs equal transformed sizes for all but the last chunk")
            return {
                "type": "fixed",
                "originalChunkSize": self.original_chunk_size,
                "originalFileSize": self.original_file_size,
                "transformedChunkSize": self.transformed_sizes[0]
                if self.chunk_count > 1
                else self.nominal_transformed_chunk_size,
                "finalTransformedChunkSize": self.transformed_sizes[-1],
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
            c = int(obj["originalChunkSize"])
            f = int(obj["originalFileSize"])
            if kind == "fixed":
                t = int(obj["transformedChunkSize"])
                final = int(obj["finalTransformedChunkSize"])
                n = max(1, -(-f // c))
                return ChunkIndex(c, f, [t] * (n - 1) + [final], nominal_transformed_chunk_size=t)
            if kind == "variable":
                raw = base64.b64decode(obj["transformedChunks"], validate=True)
                params = zstandard.get_frame_parameters(raw)
                if params.content_size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
                    raise ChunkIndexError("transformedChunks zstd frame has no content size")
                if params.content_size > MAX_ENCODED_SIZES:
                    raise ChunkIndexError(
                        f"transformedChunks decompresses to {params.content_size} bytes (max {MAX_ENCODED_SIZES})"
                    )
                sizes = decode_chunk_sizes(zstandard.ZstdDecompressor().decompress(raw))
                return ChunkIndex(c, f, sizes)
        except ChunkIndexError:
            raise
        except (KeyError, TypeError, ValueError, zstandard.ZstdError) as e:
            raise ChunkIndexError(f"malformed {kind!r} chunkIndex: {type(e).__name__}: {e}") from e
        raise ChunkIndexError(f"unknown chunkIndex type {kind!r} (expected 'fixed' or 'variable')")
