"""Shared fixtures: real Kafka segments, RSA key pairs on disk, and configured managers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from Crypto.PublicKey import RSA
from hypothesis import settings

from rsm.kafka.writer import SegmentFiles, write_segment
from rsm.metadata import TopicIdPartition

# The suite is a gate: the same examples on every run, so a red CI is a change's fault, not a new draw. Searching
# for new examples is a separate job: KTS_FUZZ_RANDOM=1 (and KTS_LONG_FUZZ=1 for many more examples).
settings.register_profile("gate", derandomize=True)
settings.register_profile("search", derandomize=False)
settings.load_profile(
    "search" if os.environ.get("KTS_FUZZ_RANDOM") == "1" or os.environ.get("KTS_LONG_FUZZ") == "1" else "gate"
)

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


@pytest.fixture(scope="session")
def segment_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., SegmentFiles]:
    """Real segments, written once per distinct argument set and shared by the session (they are read-only)."""
    cache: dict[tuple[Any, ...], SegmentFiles] = {}

    def make(**kwargs: Any) -> SegmentFiles:
        key = tuple(sorted(kwargs.items()))
        if key not in cache:
            cache[key] = write_segment(tmp_path_factory.mktemp("segment"), **kwargs)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def key_pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Two RSA-2048 key pairs as PEM files: id -> (public, private)."""
    out = tmp_path_factory.mktemp("keys")
    pairs = {}
    for key_id in ("kek1", "kek2"):
        key = RSA.generate(2048)
        pub, priv = out / f"{key_id}.pub.pem", out / f"{key_id}.priv.pem"
        pub.write_bytes(key.public_key().export_key())
        priv.write_bytes(key.export_key(pkcs=8))
        pairs[key_id] = (pub, priv)
    return pairs


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


@pytest.fixture
def make_manager(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Configured filesystem-backed managers over one store directory; all closed at teardown. ``chunk_buffers``:
    a ``ChunkBufferSupply`` the manager gets before ``configure()``, as from a transport."""
    from rsm import RemoteStorageManager

    managers: list[Any] = []

    def make(extra: dict[str, str] | None = None, chunk_buffers: Any = None, **configs: Any) -> Any:
        base = {
            "chunk.size": "65536",
            "storage.backend.class": "filesystem",
            "storage.root": str(tmp_path / "store"),
            "storage.fsync.enabled": "false",
        }
        base.update(
            {k.replace("_", "."): str(v).lower() if isinstance(v, bool) else str(v) for k, v in configs.items()}
        )
        base.update(extra or {})
        m = RemoteStorageManager()
        if chunk_buffers is not None:
            m.use_chunk_buffers(chunk_buffers)
        m.configure(base)
        managers.append(m)
        return m

    yield make
    for m in managers:
        m.close()
