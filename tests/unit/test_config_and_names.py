"""Defects 5-7 of issue 12: config rejected cleanly, no false cleanup ERROR, 249-character topics tier."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import TIP, encryption_configs

from backends.filesystem import FileSystemBackend
from rsm import ConfigException, RemoteStorageException, RemoteStorageManager
from rsm.metadata import TopicIdPartition


def _configure(tmp_path: Path, **extra: str) -> RemoteStorageManager:
    configs = {"chunk.size": "65536", "storage.root": str(tmp_path / "store"), **extra}
    m = RemoteStorageManager()
    m.configure(configs)
    return m


def test_backend_class_that_is_not_a_class_is_never_called(tmp_path: Path) -> None:
    marker = tmp_path / "called"
    with pytest.raises(ConfigException, match="not a class implementing StorageBackend"):
        _configure(tmp_path, **{"storage.backend.class": "os:system", "storage.root": f"touch {marker}"})
    assert not marker.exists()


def test_backend_class_that_is_not_a_storage_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigException, match="'dict' does not implement StorageBackend"):
        _configure(tmp_path, **{"storage.backend.class": "builtins:dict"})


def test_storage_root_that_is_a_file(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigException, match="storage.root: it .* is a file"):
        _configure(tmp_path, **{"storage.root": str(a_file)})
    with pytest.raises(ConfigException, match="storage.root"):
        _configure(tmp_path, **{"storage.root": str(a_file / "below")})


def test_inline_key_and_key_file_together(tmp_path: Path, key_pairs: Any) -> None:
    configs = encryption_configs(key_pairs)
    configs["encryption.key.pairs.kek1.private.key"] = key_pairs["kek1"][1].read_text()
    with pytest.raises(ConfigException, match="both encryption.key.pairs.kek1.private.key .inline. and"):
        _configure(tmp_path, **configs)


@pytest.mark.parametrize("prefix", ["../", "/abs/", "a//b/", "./x", "a/../b"])
def test_key_prefix_that_no_store_can_hold(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(ConfigException, match="key.prefix"):
        _configure(tmp_path, **{"key.prefix": prefix})


@pytest.mark.parametrize("prefix", ["", "tiered/", "tiered/cluster-1/", "flat-"])
def test_key_prefix_accepted(tmp_path: Path, prefix: str) -> None:
    _configure(tmp_path, **{"key.prefix": prefix}).close()


def test_refused_key_logs_no_false_cleanup_error(
    tmp_path: Path, segment_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A key the store refuses outright (here a prefix set on a manager subclass, bypassing configure's check)
    fails the copy, but nothing was stored, so no 'could not delete the partial upload' ERROR may appear."""
    seg = segment_factory(target_bytes=50_000, seed=3)
    m = _configure(tmp_path)
    m.config.values["key.prefix"] = "../"  # as an older config would have let through
    with (
        caplog.at_level(logging.DEBUG, logger="rsm"),
        pytest.raises(RemoteStorageException, match="invalid object key"),
    ):
        m.copy_log_segment_data(seg.to_metadata(TIP), seg.to_log_segment_data())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "nothing to clean up" in caplog.text
    m.close()


def test_topic_of_249_characters_tiers_on_the_filesystem(tmp_path: Path, segment_factory: Any) -> None:
    seg = segment_factory(target_bytes=50_000, seed=3)
    tip = TopicIdPartition(TIP.topic_id, "t" * 240 + "a.-_xyz12", 3)
    assert len(tip.topic) == 249
    m = _configure(tmp_path)
    meta = seg.to_metadata(tip)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read() == seg.log.read_bytes()
    keys = list(m.backend.list(""))
    assert len(keys) == 3 and all(k.startswith(f"{tip.topic}-{tip.topic_id}/3/") for k in keys), keys
    assert [s.keys.manifest for s in m.catalog().segments()] == [k for k in keys if k.endswith(".rsm-manifest")]
    m.delete_log_segment_data(meta)
    assert list(m.backend.list("")) == []
    assert list((tmp_path / "store").iterdir()) == []
    m.close()


def test_filesystem_refuses_reserved_names(tmp_path: Path) -> None:
    import io

    from backends.base import InvalidKey

    b = FileSystemBackend(tmp_path)
    for key in ["a.~cont/b", ".kts-partial.x"]:
        with pytest.raises(InvalidKey):
            b.upload(key, io.BytesIO(b"x"))
