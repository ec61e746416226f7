"""The core end to end over each cloud backend: copy a real segment, fetch ranges and indexes, delete.

The filesystem matrix in ``test_rsm_e2e.py`` covers the transform combinations; this runs one encrypted
configuration through ``storage.backend.class=s3/gcs/azure`` against the emulators, with a segment larger
than the (small) part size so the manager's stream goes through multipart / resumable / staged uploads.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from emulators import FIXTURE_FOR, StoreServer
from helpers import TIP, encryption_configs

from rsm import IndexType, RemoteResourceNotFoundException, RemoteStorageManager
from rsm.core.object_keys import segment_keys

PART = {
    "s3": ("s3.multipart.upload.part.size", 5 * 1024 * 1024),
    "gcs": ("gcs.resumable.upload.chunk.size", 1024 * 1024),
    "azure": ("azure.upload.block.size", 1024 * 1024),
}


@pytest.mark.parametrize("flavour", ["s3-seaweedfs", "gcs-fake", "azure-azurite"])
def test_core_end_to_end_over_cloud_backend(
    flavour: str, request: pytest.FixtureRequest, segment_factory: Callable[..., Any], key_pairs: Any
) -> None:
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    part_key, part_size = PART[server.backend]
    seg = segment_factory(target_bytes=6_000_000, seed=21, transactional=True)
    assert seg.size > part_size
    prefix = f"e2e-{uuid.uuid4().hex[:8]}/"
    configs = {
        "chunk.size": "262144",
        "compression.enabled": "false",
        "key.prefix": prefix,
        "storage.backend.class": server.backend,
        **{f"storage.{k}": v for k, v in server.config(**{part_key: str(part_size)}).items()},
        **encryption_configs(key_pairs),
    }
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        keys = segment_keys(prefix, meta)
        stored = sorted(m.backend.list(prefix))
        assert set(keys.all()) >= set(stored) and keys.log in stored and keys.manifest in stored

        original = seg.log.read_bytes()
        size = len(original)
        rng = random.Random(7)
        ranges: list[tuple[int, int | None]] = [
            (0, None),
            (0, 0),
            (size - 1, size - 1),
            (262143, 262144),
            (part_size - 3, part_size + 3),
            (size - 1000, size + 5000),
        ]
        ranges += [(a, rng.randrange(a, size)) for a in (rng.randrange(size) for _ in range(4))]
        for start, end in ranges:
            with m.fetch_log_segment(meta, start, end) as f:
                got = f.read()
            stop = size if end is None else min(end + 1, size)
            assert got == original[start:stop], (flavour, start, end)

        for index_type, path in [
            (IndexType.OFFSET, seg.offset_index),
            (IndexType.TIMESTAMP, seg.time_index),
            (IndexType.PRODUCER_SNAPSHOT, seg.producer_snapshot),
            (IndexType.TRANSACTION, seg.txn_index),
        ]:
            with m.fetch_index(meta, index_type) as f:
                assert f.read() == path.read_bytes(), index_type
        with m.fetch_index(meta, IndexType.LEADER_EPOCH) as f:
            assert f.read() == seg.leader_epoch_bytes

        counters = m.backend.metrics()
        assert counters["bytes-uploaded"] > size and counters["errors-other"] == 0

        m.delete_log_segment_data(meta)
        assert list(m.backend.list(prefix)) == []
        m.delete_log_segment_data(meta)  # idempotent
        with pytest.raises(RemoteResourceNotFoundException):
            m.fetch_log_segment(meta, 0)
    finally:
        m.close()
