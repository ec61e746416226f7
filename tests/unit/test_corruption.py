"""Bit flips and truncation in every stored object type: a precise exception of the documented family, or (for a
flip that changes nothing a reader uses, e.g. in the manifest's broker metadata) exactly the original bytes.
Never wrong bytes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from helpers import TIP, encryption_configs

from rsm import IndexType, RemoteStorageException
from rsm.core.object_keys import Suffix, segment_keys

FLIPS = 12


def _read_everything(m: Any, meta: Any) -> tuple[bytes, dict[IndexType, bytes]]:
    with m.fetch_log_segment(meta, 0) as f:
        log = f.read()
    indexes = {}
    for t in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.PRODUCER_SNAPSHOT, IndexType.LEADER_EPOCH):
        indexes[t] = m.fetch_index(meta, t).read()
    return log, indexes


@pytest.mark.parametrize("suffix", ["log", "indexes", "rsm-manifest"])
@pytest.mark.parametrize("mode", ["plain", "compressed+encrypted"])
def test_flips_and_truncation_in_every_object(
    suffix: str, mode: str, segment_factory: Any, key_pairs: Any, make_manager: Any, tmp_path: Path
) -> None:
    seg = segment_factory(target_bytes=150_000, seed=4)
    extra = encryption_configs(key_pairs) if mode != "plain" else {}
    m = make_manager(extra, compression_enabled=mode != "plain", chunk_size=16384)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    expected = _read_everything(m, meta)
    path = tmp_path / "store" / segment_keys("", meta).key(Suffix(suffix))
    pristine = path.read_bytes()
    rng = random.Random(f"{suffix}{mode}")
    damaged = []
    for _ in range(FLIPS):
        data = bytearray(pristine)
        bit = rng.randrange(len(data) * 8)
        data[bit // 8] ^= 1 << (bit % 8)
        damaged.append(bytes(data))
    damaged += [pristine[: len(pristine) // 2], pristine[:-1], b""]
    outcomes = {"error": 0, "identical": 0}
    for data in damaged:
        path.write_bytes(data)
        reader = make_manager(extra, compression_enabled=mode != "plain", chunk_size=16384)  # no cached manifest
        try:
            got = _read_everything(reader, meta)
        except RemoteStorageException:  # the documented family: CorruptData, KeyRing, ResourceNotFound...
            outcomes["error"] += 1
            continue
        assert got == expected, "wrong bytes served from a damaged object"
        outcomes["identical"] += 1
    path.write_bytes(pristine)
    assert outcomes["error"] >= 3, outcomes  # at least the truncations are caught
