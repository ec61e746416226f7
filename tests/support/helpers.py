"""Helpers the tests share: the test partition, waiting for background work, encryption configs, a buffer
supply, damaging a stored index."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsm.metadata import TopicIdPartition

TIP = TopicIdPartition(topic_id="MWJ6FHTfRYy67jzwZdeqSQ", topic="orders", partition=7)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether ``predicate`` became true within ``timeout`` seconds: for what background threads finish."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def damage_stored_index(store: Path, manager: Any, meta: Any, index_type: Any) -> None:
    """Flip one bit in the middle of one index inside the segment's ``.indexes`` object on a filesystem store."""
    from rsm.core.object_keys import segment_keys

    entry = manager.fetch_manifest(meta).segment_indexes[index_type]
    path = store / segment_keys("", meta).indexes
    damaged = bytearray(path.read_bytes())
    damaged[entry.position + entry.size // 2] ^= 0x10
    path.write_bytes(bytes(damaged))


def encryption_configs(
    key_pairs: dict[str, tuple[Path, Path]], active: str = "kek1", ring: tuple[str, ...] = ("kek1",)
) -> dict[str, str]:
    configs = {"encryption.enabled": "true", "encryption.key.pair.id": active, "encryption.key.pairs": ",".join(ring)}
    for key_id in ring:
        pub, priv = key_pairs[key_id]
        configs[f"encryption.key.pairs.{key_id}.public.key.file"] = str(pub)
        configs[f"encryption.key.pairs.{key_id}.private.key.file"] = str(priv)
    return configs


class FixedChunkBuffers:
    """A ``ChunkBufferSupply`` of one given pool (a region-backed one, say), as a transport supplies its own."""

    def __init__(self, pool: Any, max_cached_bytes: int | None = None) -> None:
        self.pool = pool
        self.max_cached_bytes = max_cached_bytes

    def chunk_buffers(self, buffer_size: int) -> Any:
        from rsm.fetch.chunk_cache import SuppliedBuffers

        assert buffer_size == self.pool.buffer_size, "the supplied pool must have the manager's chunk size"
        return SuppliedBuffers(self.pool, self.max_cached_bytes)
