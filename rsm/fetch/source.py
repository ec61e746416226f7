"""What the read path knows of one segment: its source (one copy of it, as its manifest describes it), and the
protocol through which it asks the plugin for one.

Nothing in ``rsm.fetch`` reads a manifest: the plugin (``rsm.core.manifest_store.ManifestStore``) builds a
``SegmentSource`` from it, and the segment reader, the index reader and the next-segment finder ask for one
through ``SegmentSources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from chunking.chunk_index import Chunk, ChunkIndex
from chunking.transform import ChunkTransformer
from rsm.metadata import IndexType, RemoteLogSegmentMetadata


class StoredSpan(Protocol):
    """Where one index lies in the segment's ``.indexes`` object (the manifest's ``SegmentIndexEntry``)."""

    @property
    def position(self) -> int: ...

    @property
    def size(self) -> int: ...


@dataclass(frozen=True)
class SegmentSource:
    """What it takes to read one copy of a segment: its chunks and its indexes, with the keys of their objects."""

    meta: RemoteLogSegmentMetadata
    segment_key: str  # the manifest's key: names the segment whatever copy of it is current
    cache_id: str  # ``segment_key@<tag from the manifest>``: names this copy
    log_key: str
    shown_log_key: str  # the key as logs and errors show it (``key.prefix.mask``)
    index: ChunkIndex
    transformer: ChunkTransformer  # holds the segment's unwrapped data key
    chunk_crcs: list[int] | None
    indexes_key: str
    shown_indexes_key: str
    indexes: Mapping[IndexType, StoredSpan | None]  # None, or no entry: the segment has no such index
    index_crcs: Mapping[IndexType, int] | None
    has_chunks: bool = True  # False: an Iceberg-mode segment, whose rows are read from its table's data files

    def what(self, chunk: Chunk) -> str:
        return f"chunk {chunk.id} of {self.shown_log_key} ({self.meta.describe()})"

    def index_what(self, index_type: IndexType) -> str:
        return f"{index_type.name} index of {self.meta.describe()} in {self.shown_indexes_key}"


class SegmentSources(Protocol):
    """The plugin's side of the read path: the current copy of a segment."""

    def source(self, meta: RemoteLogSegmentMetadata) -> SegmentSource:
        """The segment's source, from its manifest (read once and cached by the plugin). Raises the public family:
        ``RemoteResourceNotFoundException`` when the segment is not tiered, ``RemoteStorageException`` and its
        kinds otherwise."""
        ...
