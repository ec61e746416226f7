"""A segment's indexes, as ``fetch_index`` serves them: from the index cache, else read from the segment's
``.indexes`` object, decrypted and checked against the CRC-32C the manifest recorded at copy time.

The broker fetches three indexes of a segment before its first read there (``BROKER_INDEX_SET``); prefetch loads
them ahead with the segment's chunks (``load_ahead``), in one ranged read, so the consumer's first fetch of the
next segment waits for no index read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from backends.base import InvalidRange, KeyNotFound, RangeReader, StorageBackendException
from chunking.transform import crc32c
from encryption.errors import DecryptionError
from rsm.errors import (
    CorruptDataException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    storage_failure,
)
from rsm.fetch.lru import TimedLru
from rsm.fetch.source import SegmentSource, SegmentSources, StoredSpan
from rsm.metadata import BROKER_INDEX_SET, IndexType, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

LoadIndex = Callable[[], bytes]

INDEX_READ_GAP_MAX = 1024 * 1024
"""Indexes loaded ahead come in one ranged read when the bytes between them (other indexes) are at most this many."""


class IndexReader:
    """Owns the index cache (``fetch.indexes.cache.*``), keyed by segment copy and index type, and the count of
    indexes that failed their integrity check (both on the index cache's bean, ``stats``)."""

    def __init__(
        self,
        sources: SegmentSources,
        ranges: RangeReader,
        capacity: int,
        retention_s: float | None,
        get_timeout_s: float,
    ) -> None:
        self.sources = sources
        self.ranges = ranges
        self.cache: TimedLru[tuple[str, IndexType], bytes] = TimedLru(
            "segment-indexes", capacity, retention_s, weigher=len
        )
        self.get_timeout_s = get_timeout_s
        self.integrity_failures = 0
        self._lock = threading.Lock()

    def read(self, meta: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The index's bytes; ``RemoteResourceNotFoundException`` when the segment has none of this type."""
        src = self.sources.source(meta)
        entry = src.indexes.get(index_type)
        if entry is None:
            raise RemoteResourceNotFoundException(f"{meta.describe()} has no {index_type.name} index")
        if entry.size == 0:
            return b""
        what = src.index_what(index_type)
        return self._cached(src, index_type, what, lambda: self._load(src, entry, index_type, what))

    def load_ahead(self, src: SegmentSource) -> None:
        """Bring the indexes a broker fetches before a segment's first read into the cache, with one ranged read
        (on S3, one GET fewer per index on the consumer's path). Best effort: a failure leaves the indexes to
        the broker's own request, which then reports it."""
        wanted = [
            (index_type, entry)
            for index_type in BROKER_INDEX_SET
            if (entry := src.indexes.get(index_type)) is not None
            and 0 < entry.size <= self.cache.capacity  # one the cache cannot keep would be read at every pass
            and not self.cache.contains((src.cache_id, index_type))
        ]
        if not wanted:
            return
        start = min(entry.position for _, entry in wanted)
        end = max(entry.position + entry.size for _, entry in wanted)
        if end - start - sum(entry.size for _, entry in wanted) > INDEX_READ_GAP_MAX:
            wanted = wanted[:1]  # far apart (a foreign layout): not worth reading what lies between
            start, end = wanted[0][1].position, wanted[0][1].position + wanted[0][1].size
        what = f"the indexes of {src.meta.describe()} in {src.shown_indexes_key}"
        try:
            span = memoryview(self._read(src, start, end, what))
            for index_type, entry in wanted:
                stored = span[entry.position - start : entry.position + entry.size - start]
                one = src.index_what(index_type)
                self._cached(src, index_type, one, lambda t=index_type, b=stored, w=one: self._decode(src, b, t, w))
        except RemoteStorageException as e:
            log.debug("prefetch of %s skipped: %s", what, e)

    def forget(self, segment_key: str) -> None:
        """Drop every cached index of every copy of the segment whose manifest is ``segment_key``."""
        self.cache.invalidate_where(lambda k: k[0].startswith(segment_key + "@"))

    def stats(self) -> dict[str, float]:
        """The index cache's bean: the LRU's own counters and the indexes that failed their integrity check."""
        return {**self.cache.stats(), "integrity-failures-total": self.integrity_failures}

    def _cached(self, src: SegmentSource, index_type: IndexType, what: str, load: LoadIndex) -> bytes:
        """The index from the cache, loaded once by ``load`` whoever asks at the same time."""
        return self.cache.get_or_load((src.cache_id, index_type), load, self.get_timeout_s, what)

    def _load(self, src: SegmentSource, entry: StoredSpan, index_type: IndexType, what: str) -> bytes:
        stored = self._read(src, entry.position, entry.position + entry.size, what)
        return self._decode(src, stored, index_type, what)

    def _read(self, src: SegmentSource, start: int, end: int, what: str) -> bytes:
        try:
            return self.ranges.read(src.indexes_key, start, end - 1)
        except KeyNotFound:
            raise RemoteStorageException(
                f"{what}: the .indexes object is missing although the manifest exists"
            ) from None
        except InvalidRange as e:
            raise CorruptDataException(f"{what}: the .indexes object is shorter than its manifest says: {e}") from None
        except StorageBackendException as e:
            raise storage_failure(f"cannot read the {what}: {e}", e) from e

    def _decode(self, src: SegmentSource, stored: bytes | memoryview, index_type: IndexType, what: str) -> bytes:
        cipher = src.transformer.cipher
        try:
            data = cipher.decrypt(stored, what) if cipher is not None else stored
        except DecryptionError as e:
            self._count_integrity_failure()
            raise CorruptDataException(f"{e}; the stored index is corrupt (run kts verify)") from None
        expected = src.index_crcs.get(index_type) if src.index_crcs is not None else None
        if expected is not None and crc32c(data) != expected:
            self._count_integrity_failure()
            raise CorruptDataException(f"{what}: CRC-32C mismatch; the stored index is corrupt (run kts verify)")
        return bytes(data)

    def _count_integrity_failure(self) -> None:
        with self._lock:
            self.integrity_failures += 1
