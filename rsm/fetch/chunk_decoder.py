"""Turning a chunk's stored bytes into its original bytes, checked.

The stored bytes are detransformed (decrypted, decompressed) into the caller's buffer. An encrypted chunk is
checked by its GCM tag and zstd checks its frame size; an unencrypted chunk with a CRC-32C in its manifest is
checked against it. Any mismatch is a ``CorruptDataException`` naming the chunk, and is counted.
"""

from __future__ import annotations

import threading

from chunking.chunk_index import Chunk
from chunking.errors import ChunkingError
from chunking.transform import crc32c
from encryption.errors import DecryptionError
from rsm.errors import CorruptDataException
from rsm.fetch.source import SegmentSource


class ChunkDecoder:
    """Decodes stored chunks into buffers and counts the ones that fail their integrity check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.integrity_failures = 0

    def decode(self, src: SegmentSource, chunk: Chunk, stored: bytes | memoryview, out: memoryview) -> None:
        """Write ``chunk``'s original bytes to the start of ``out``, or raise ``CorruptDataException``."""
        what = src.what(chunk)
        view = out[: chunk.original_size]
        try:
            if src.transformer.is_identity:
                if len(stored) != chunk.original_size:
                    self._count_failure()
                    raise CorruptDataException(
                        f"{what}: the manifest says the chunk is stored untransformed, but gives "
                        f"{len(stored)} stored bytes for {chunk.original_size} original ones"
                    )
                view[:] = stored
            else:
                src.transformer.detransform_into(stored, view, what)
        except (ChunkingError, DecryptionError) as e:
            self._count_failure()
            raise CorruptDataException(f"{e}; the stored chunk is corrupt (run kts verify)") from None
        # The GCM tag has already checked an encrypted chunk: a CRC pass would only read the bytes again.
        if src.chunk_crcs is not None and src.transformer.cipher is None and crc32c(view) != src.chunk_crcs[chunk.id]:
            self._count_failure()
            raise CorruptDataException(
                f"{what}: CRC-32C mismatch (expected {src.chunk_crcs[chunk.id]:#010x}); the stored chunk is "
                f"corrupt (run kts verify)"
            )

    def _count_failure(self) -> None:
        with self._lock:
            self.integrity_failures += 1
