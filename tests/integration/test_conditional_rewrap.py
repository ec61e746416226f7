"""Key rotation never brings a deleted segment back, on every backend.

Rotation reads a manifest, re-wraps its data key and writes it back. The write is conditional on the manifest
being the one it read (S3 If-Match, GCS ifGenerationMatch, Azure If-Match, a locked compare on the filesystem):
a segment that retention deletes in between stays deleted and is reported gone; the rotation goes on with the
other segments.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from emulators import EVERY_STORE, empty_store_config
from helpers import TIP, encryption_configs

from backends.base import BackendCapabilities, KeyNotFound, PreconditionFailed
from rsm import RemoteStorageManager
from rsm.core.object_keys import segment_keys
from rsm.operator_tools.garbage import find_garbage
from rsm.operator_tools.rotation import rewrap_all

BACKENDS = EVERY_STORE


def _store(flavour: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    return empty_store_config(flavour, request, tmp_path, "rot")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flavour", BACKENDS)
def test_conditional_replace(flavour: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    m = RemoteStorageManager()
    m.configure({"chunk.size": "1024", **_store(flavour, request, tmp_path)})
    try:
        writes = m.backend_capabilities.conditional_writes
        assert writes is not None and BackendCapabilities.of(m.backend).conditional_writes is m.backend
        m.backend.upload("k/a", io.BytesIO(b"one"))
        first = writes.fetch_versioned("k/a", 100)
        assert first.data == b"one"
        writes.replace_if_unchanged("k/a", b"two", first.version)
        with m.backend.fetch("k/a") as f:
            assert f.read() == b"two"
        with pytest.raises(PreconditionFailed):  # the version read before the last write is stale now
            writes.replace_if_unchanged("k/a", b"three", first.version)
        second = writes.fetch_versioned("k/a", 100)
        m.backend.upload("k/a", io.BytesIO(b"someone else"))
        with pytest.raises(PreconditionFailed):
            writes.replace_if_unchanged("k/a", b"lost update", second.version)
        third = writes.fetch_versioned("k/a", 100)
        assert third.data == b"someone else"
        m.backend.delete("k/a")
        with pytest.raises(PreconditionFailed):
            writes.replace_if_unchanged("k/a", b"resurrected", third.version)
        assert list(m.backend.list("k/")) == []
        with pytest.raises(KeyNotFound):
            writes.fetch_versioned("k/a", 100)
        assert writes.fetch_versioned.__self__ is m.backend  # type: ignore[attr-defined]
    finally:
        m.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flavour", BACKENDS)
def test_a_segment_deleted_mid_rotation_stays_deleted(
    flavour: str,
    request: pytest.FixtureRequest,
    segment_factory: Any,
    key_pairs: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seg = segment_factory(target_bytes=32 * 1024, seed=5)
    store = {"chunk.size": "8192", **_store(flavour, request, tmp_path)}
    if flavour == "filesystem":
        store["storage.fsync.enabled"] = "false"  # a key of the filesystem backend only: others refuse it
    broker = RemoteStorageManager()
    broker.configure({**store, **encryption_configs(key_pairs)})
    rotator = RemoteStorageManager()
    rotator.configure({**store, **encryption_configs(key_pairs, active="kek2", ring=("kek1", "kek2"))})
    try:
        metas = [seg.to_metadata(TIP) for _ in range(3)]
        for meta in metas:
            broker.copy_log_segment_data(meta, seg.to_log_segment_data())
        doomed, rewrapped_by_other = metas[0], metas[1]
        doomed_key = segment_keys("", doomed).manifest
        other_key = segment_keys("", rewrapped_by_other).manifest
        backend = rotator.backend
        real_fetch = backend.fetch_versioned
        done: set[str] = set()

        def read_then_race(key: str, max_bytes: int) -> Any:
            got = real_fetch(key, max_bytes)
            if key not in done:
                done.add(key)
                if key == doomed_key:
                    broker.delete_log_segment_data(doomed)  # retention, between the read and the write
                elif key == other_key:
                    other = RemoteStorageManager()  # a second rotation, run at the same time
                    other.configure({**store, **encryption_configs(key_pairs, active="kek2", ring=("kek1", "kek2"))})
                    try:
                        assert other.rewrap_data_key(key).rewrapped
                    finally:
                        other.close()
            return got

        monkeypatch.setattr(backend, "fetch_versioned", read_then_race)
        report = rewrap_all(rotator)
        assert report.gone == [doomed_key], report
        assert report.failed == {} and report.rewrapped == {"kek1": 1} and report.already_current == 1, report
        assert not [k for k in rotator.backend.list("") if doomed.remote_log_segment_id.id in k], "it came back"
        assert not [i for i in find_garbage(rotator, 0) if i.kind != "cache-entry"]
        for meta in metas[1:]:
            assert rotator.fetch_manifest(meta).encryption.key_pair_id == "kek2"  # type: ignore[union-attr]
            with rotator.fetch_log_segment(meta, 0) as f:
                assert f.read() == seg.log.read_bytes()
    finally:
        broker.close()
        rotator.close()
