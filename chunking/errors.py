"""The chunking layer's own failures. The plugin turns them into ``CorruptDataException`` at its boundary,
where it can name the segment and the object; this layer only knows a chunk by the label it was given."""

from __future__ import annotations


class ChunkingError(ValueError):
    """Base of every failure of this layer (a ``ValueError``: each one is bad input, never a bug elsewhere)."""


class CorruptChunkError(ChunkingError):
    """A stored chunk does not decode to what its chunk index says: bad zstd frame, wrong size, truncation."""
