"""The disk tier of the chunk cache: chunks exactly as they are stored remotely, kept across restarts.

Why stored bytes and not decoded ones: they are about 4x smaller with compression, and a chunk of an encrypted
segment stays encrypted, so no plaintext of it ever lands on the broker's disk (Aiven's disk cache writes
decrypted chunks and wipes them at every start). Each entry is verified when it is decoded (GCM tag, or the
manifest's CRC-32C): the caller drops a bad entry and fetches the chunk again, so a corrupt or truncated file
is never served.

diskcache does the hard parts: an SQLite index that survives a crash, atomic writes, eviction by size (least
recently used) and per-entry expiry, and one store safely shared by threads and processes. Entries are
tagged with their segment's manifest key so a deleted segment's chunks are dropped with one indexed query.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import diskcache

from rsm.errors import ConfigException


class DiskChunkStore:
    """Stored chunk bytes under ``path``, at most ``size_bytes`` of them, each expiring ``retention_s`` after
    its last read."""

    def __init__(self, path: str, size_bytes: int, retention_s: float | None) -> None:
        directory = Path(path)
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(directory, 0o700)
            self._cache = diskcache.Cache(
                str(directory),
                size_limit=size_bytes,
                eviction_policy="least-recently-used",
                tag_index=True,
                cull_limit=16,
                statistics=False,
            )
        except (OSError, diskcache.Timeout) as e:
            raise ConfigException(
                f"Invalid value {path!r} for configuration fetch.chunk.cache.path: cannot open the disk chunk "
                f"cache there ({e}); give a writable directory on a local disk"
            ) from None
        self.path = str(directory)
        self.retention_s = retention_s
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self.dropped = 0

    @staticmethod
    def key(cache_id: str, chunk_id: int) -> str:
        return f"{cache_id}/{chunk_id}"

    def get(self, cache_id: str, chunk_id: int) -> bytes | None:
        key = self.key(cache_id, chunk_id)
        value = self._cache.get(key, default=None, retry=True)
        if value is None:
            with self._lock:
                self.misses += 1
            return None
        if self.retention_s is not None:
            self._cache.touch(key, expire=self.retention_s, retry=True)
        with self._lock:
            self.hits += 1
        return bytes(value)

    def contains(self, cache_id: str, chunk_id: int) -> bool:
        return self.key(cache_id, chunk_id) in self._cache

    def put(self, cache_id: str, chunk_id: int, stored: bytes | memoryview, segment_key: str) -> None:
        self._cache.set(
            self.key(cache_id, chunk_id), bytes(stored), expire=self.retention_s, tag=segment_key, retry=True
        )
        with self._lock:
            self.writes += 1

    def drop(self, cache_id: str, chunk_id: int) -> None:
        """Forget a bad entry (it failed verification)."""
        self._cache.delete(self.key(cache_id, chunk_id), retry=True)
        with self._lock:
            self.dropped += 1

    def drop_segment(self, segment_key: str) -> int:
        """Drop every chunk of a segment (deleted, or copied again): one query on the tag index."""
        return int(self._cache.evict(segment_key, retry=True))

    def segment_keys(self) -> set[str]:
        """The manifest keys of every segment with chunks on disk (for ``kts gc``: those no longer tiered)."""
        return {str(key).rsplit("@", 1)[0] for key in self._cache.iterkeys()}

    def expire(self) -> int:
        """Remove expired entries now (diskcache otherwise removes them lazily, when it culls on a write)."""
        return int(self._cache.expire(retry=True))

    @property
    def volume(self) -> int:
        return int(self._cache.volume())

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._cache.close()
