"""Bad input gets a precise error and nothing is lost: keys, corruption, missing objects, config, failures."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from helpers import TIP, encryption_configs

from backends.filesystem import FileSystemBackend
from rsm import (
    ConfigException,
    CorruptDataException,
    IndexType,
    KeyRingException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
)
from rsm.core.object_keys import segment_keys


class FailingBackend(FileSystemBackend):
    """A real filesystem backend that fails the upload whose key ends with ``fail_suffix`` (a user backend, loaded
    through ``storage.backend.class=test_bad_input:FailingBackend`` like any module:Class)."""

    fail_suffix = ".rsm-manifest"

    def upload(self, key: str, data: BinaryIO) -> int:
        if key.endswith(self.fail_suffix):
            raise OSError(f"injected failure uploading {key}")
        return super().upload(key, data)


def _copy(m: Any, seg: Any) -> Any:
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    return meta


def _store_file(tmp_path: Path, key: str) -> Path:
    return tmp_path / "store" / key


@pytest.fixture
def seg(segment_factory: Any) -> Any:
    return segment_factory(target_bytes=200_000, seed=21)


def test_wrong_key_pair_same_id(seg: Any, key_pairs: Any, make_manager: Any) -> None:
    writer = make_manager(encryption_configs(key_pairs))
    meta = _copy(writer, seg)
    swapped = {"kek1": key_pairs["kek2"]}  # id kek1, but kek2's key material
    reader = make_manager(encryption_configs(swapped))
    with pytest.raises(KeyRingException, match="not the one the segment was written with"):
        reader.fetch_log_segment(meta, 0)


def test_missing_key_id(seg: Any, key_pairs: Any, make_manager: Any) -> None:
    meta = _copy(make_manager(encryption_configs(key_pairs)), seg)
    reader = make_manager(encryption_configs(key_pairs, active="kek2", ring=("kek2",)))
    with pytest.raises(KeyRingException, match="'kek1', which is not on the key ring"):
        reader.fetch_index(meta, IndexType.OFFSET)
    plain_reader = make_manager()
    with pytest.raises(KeyRingException, match="encryption is not configured"):
        plain_reader.fetch_log_segment(meta, 0)


@pytest.mark.parametrize("compression,encryption", [(False, False), (True, False), (False, True), (True, True)])
def test_flipped_bit_in_stored_chunk(
    compression: bool, encryption: bool, seg: Any, key_pairs: Any, make_manager: Any, tmp_path: Path
) -> None:
    m = make_manager(
        encryption_configs(key_pairs) if encryption else {}, compression_enabled=compression, chunk_size=16384
    )
    meta = _copy(m, seg)
    path = _store_file(tmp_path, segment_keys("", meta).log)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataException, match="chunk"), m.fetch_log_segment(meta, 0) as f:
        f.read()
    # ranges that do not touch the damaged chunk still read fine
    with m.fetch_log_segment(meta, 0, 99) as f:
        assert f.read() == seg.log.read_bytes()[:100]


def test_flipped_bit_in_stored_index(seg: Any, make_manager: Any, tmp_path: Path) -> None:
    m = make_manager()
    meta = _copy(m, seg)
    path = _store_file(tmp_path, segment_keys("", meta).indexes)
    raw = bytearray(path.read_bytes())
    raw[3] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataException, match="OFFSET index .* CRC-32C mismatch"):
        m.fetch_index(meta, IndexType.OFFSET)


def test_truncated_log_object(seg: Any, make_manager: Any, tmp_path: Path) -> None:
    m = make_manager(compression_enabled=True, chunk_size=16384)
    meta = _copy(m, seg)
    path = _store_file(tmp_path, segment_keys("", meta).log)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CorruptDataException, match="shorter than its manifest"), m.fetch_log_segment(meta, 0) as f:
        f.read()


def test_missing_manifest_and_missing_log(seg: Any, make_manager: Any, tmp_path: Path) -> None:
    m = make_manager()
    never_copied = seg.to_metadata(TIP)
    with pytest.raises(RemoteResourceNotFoundException, match="not in remote storage"):
        m.fetch_log_segment(never_copied, 0)
    with pytest.raises(RemoteResourceNotFoundException):
        m.fetch_index(never_copied, IndexType.OFFSET)
    meta = _copy(m, seg)
    _store_file(tmp_path, segment_keys("", meta).log).unlink()
    with pytest.raises(RemoteStorageException, match="missing although the manifest exists") as info:
        with m.fetch_log_segment(meta, 0) as f:
            f.read()
    assert not isinstance(info.value, RemoteResourceNotFoundException)


def test_corrupt_manifest(seg: Any, make_manager: Any, tmp_path: Path) -> None:
    m = make_manager()
    meta = _copy(m, seg)
    _store_file(tmp_path, segment_keys("", meta).manifest).write_bytes(b'{"version":"1"}')
    fresh = make_manager()
    with pytest.raises(CorruptDataException, match="malformed"):
        fresh.fetch_log_segment(meta, 0)


def test_range_errors(seg: Any, make_manager: Any) -> None:
    m = make_manager()
    meta = _copy(m, seg)
    with pytest.raises(RemoteStorageException, match="past the end"):
        m.fetch_log_segment(meta, seg.size + 5)
    with pytest.raises(RemoteStorageException, match="end before start"):
        m.fetch_log_segment(meta, 10, 5)
    with pytest.raises(RemoteStorageException, match="invalid start"):
        m.fetch_log_segment(meta, -1)
    with m.fetch_log_segment(meta, seg.size - 3, seg.size + 10_000) as f:  # end past EOF is clamped
        assert f.read() == seg.log.read_bytes()[-3:]


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({}, "chunk.size"),
        ({"chunk.size": "0"}, "chunk.size"),
        ({"chunk.size": "abc"}, "chunk.size"),
        ({"chunk.size": "1024", "storage.backend.class": "ftp"}, "storage.backend.class.*filesystem, s3, gcs, azure"),
        ({"chunk.size": "1024", "storage.backend.class": "nosuchmodule:X"}, "cannot import module"),
        ({"chunk.size": "1024", "compression.heuristic.enabled": "true"}, "requires compression.enabled"),
        ({"chunk.size": "1024", "compression.enabled": "maybe"}, "compression.enabled.*true or false"),
        ({"chunk.size": "1024", "compression.level": "99"}, "compression.level"),
        ({"chunk.size": "1024", "encryption.enabled": "true"}, "encryption.key.pair.id"),
        (
            {
                "chunk.size": "1024",
                "encryption.enabled": "true",
                "encryption.key.pair.id": "a",
                "encryption.key.pairs": "b",
            },
            "must be one of encryption.key.pairs",
        ),
        (
            {
                "chunk.size": "1024",
                "encryption.enabled": "true",
                "encryption.key.pair.id": "a",
                "encryption.key.pairs": "a",
            },
            "key pair 'a'",
        ),
        (
            {
                "chunk.size": "1024",
                "encryption.enabled": "true",
                "encryption.key.pair.id": "a",
                "encryption.key.pairs": "a",
                "encryption.key.pairs.a.public.key.file": "/nonexistent.pem",
            },
            "encryption.key.pairs.a.public.key.file.*cannot read",
        ),
        ({"chunk.size": "1024", "custom.metadata.fields.include": "REMOTE_SIZE,SIZE"}, "'SIZE' is not one of"),
        ({"chunk.size": "1024", "storage.backend.class": "filesystem"}, "storage.root"),
    ],
)
def test_invalid_config(configs: dict[str, str], message: str, tmp_path: Path) -> None:
    full = dict(configs)
    if "storage.root" not in str(message) and "storage.backend.class" not in full:
        full["storage.root"] = str(tmp_path)
    m = RemoteStorageManager()
    with pytest.raises(ConfigException, match=message):
        m.configure(full)


def test_inline_pem_keys(seg: Any, key_pairs: Any, make_manager: Any) -> None:
    pub, priv = key_pairs["kek1"]
    m = make_manager(
        {
            "encryption.enabled": "true",
            "encryption.key.pair.id": "k",
            "encryption.key.pairs": "k",
            "encryption.key.pairs.k.public.key": pub.read_text(),
            "encryption.key.pairs.k.private.key": priv.read_text(),
        }
    )
    meta = _copy(m, seg)
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read() == seg.log.read_bytes()


@pytest.mark.parametrize("fail_suffix", [".log", ".indexes", ".rsm-manifest"])
def test_failed_copy_leaves_nothing(fail_suffix: str, seg: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(FailingBackend, "fail_suffix", fail_suffix)
    m = RemoteStorageManager()
    m.configure(
        {
            "chunk.size": "16384",
            "storage.backend.class": "test_bad_input:FailingBackend",
            "storage.root": str(tmp_path / "store"),
            "compression.enabled": "true",
        }
    )
    meta = seg.to_metadata(TIP)
    with pytest.raises(RemoteStorageException, match=f"copy of segment {meta.remote_log_segment_id.id}"):
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
    assert list(m.backend.list("")) == []
    m.close()


def test_truncated_or_missing_segment_file(seg: Any, tmp_path: Path, make_manager: Any) -> None:
    m = make_manager()
    data = seg.to_log_segment_data()
    broken = type(data)(
        tmp_path / "missing.log",
        data.offset_index,
        data.time_index,
        None,
        data.producer_snapshot_index,
        data.leader_epoch_index,
    )
    with pytest.raises(RemoteStorageException, match="log segment .*missing.log does not exist"):
        m.copy_log_segment_data(seg.to_metadata(TIP), broken)


def test_copy_retry_with_same_id_overwrites(seg: Any, segment_factory: Any, make_manager: Any) -> None:
    m = make_manager(compression_enabled=True)
    meta = _copy(m, seg)
    other = segment_factory(target_bytes=120_000, seed=99)
    m.copy_log_segment_data(meta, other.to_log_segment_data())  # a retry of the same id with other content
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read() == other.log.read_bytes()
    assert len(list(m.backend.list(""))) == 3


def test_compression_heuristic_samples_batches(segment_factory: Any, make_manager: Any) -> None:
    m = make_manager(compression_enabled=True, compression_heuristic_enabled=True)
    zstd_seg = segment_factory(target_bytes=150_000, codec="zstd", seed=1)
    plain_seg = segment_factory(target_bytes=150_000, codec="none", seed=1)
    for s, expected in ((zstd_seg, False), (plain_seg, True)):
        meta = _copy(m, s)
        manifest = json.loads(m.backend.fetch(segment_keys("", meta).manifest).read())
        assert manifest["compression"] is expected
        with m.fetch_log_segment(meta, 0) as f:
            assert f.read() == s.log.read_bytes()


def test_heuristic_looks_past_the_first_batch(tmp_path: Path) -> None:
    """First batch uncompressed, the rest zstd: Aiven's first-batch rule would compress; sampling does not."""
    from rsm.core.compression_heuristic import should_compress
    from rsm.kafka.writer import write_segment

    head = write_segment(tmp_path / "a", num_batches=1, codec="none", seed=2)
    tail = write_segment(tmp_path / "b", base_offset=head.end_offset + 1, target_bytes=300_000, codec="zstd", seed=2)
    log = tmp_path / "mixed.log"
    log.write_bytes(head.log.read_bytes() + tail.log.read_bytes())
    assert should_compress(log, None) is True  # without an index only the first batch is visible
    from rsm.kafka.indexes import decode_offset_index, encode_offset_index

    shift = head.size
    entries = [
        (e.offset, e.position + shift) for e in decode_offset_index(tail.offset_index.read_bytes(), tail.base_offset)
    ]
    index = tmp_path / "mixed.index"
    index.write_bytes(encode_offset_index(entries, head.base_offset))
    assert should_compress(log, index) is False


def test_key_rotation_rewraps_manifest_only(seg: Any, key_pairs: Any, make_manager: Any, tmp_path: Path) -> None:
    from rsm.cli.main import main
    from rsm.operator_tools.rotation import rewrap_all

    old = make_manager(encryption_configs(key_pairs), compression_enabled=True)
    meta = _copy(old, seg)
    keys = segment_keys("", meta)
    log_before = _store_file(tmp_path, keys.log).read_bytes()
    both = make_manager(encryption_configs(key_pairs, active="kek2", ring=("kek1", "kek2")))
    dry = rewrap_all(both, dry_run=True)
    assert dry.rewrapped == {"kek1": 1}
    assert json.loads(_store_file(tmp_path, keys.manifest).read_bytes())["encryption"]["dataKey"].startswith("kek1:")

    props = tmp_path / "server.properties"
    lines = [
        f"rsm.config.{k}={v}"
        for k, v in {
            "chunk.size": "65536",
            "storage.backend.class": "filesystem",
            "storage.root": str(tmp_path / "store"),
            **encryption_configs(key_pairs, active="kek2", ring=("kek1", "kek2")),
        }.items()
    ]
    props.write_text("# broker config\n" + "\n".join(lines) + "\n")
    assert main(["rewrap", "--config", str(props)]) == 0

    manifest = json.loads(_store_file(tmp_path, keys.manifest).read_bytes())
    assert manifest["encryption"]["dataKey"].startswith("kek2:")
    assert _store_file(tmp_path, keys.log).read_bytes() == log_before  # data untouched
    only_new = make_manager(encryption_configs(key_pairs, active="kek2", ring=("kek2",)))
    with only_new.fetch_log_segment(meta, 0) as f:
        assert f.read() == seg.log.read_bytes()
    assert rewrap_all(only_new).already_current == 1


def test_filesystem_backend_keys_cannot_escape_root(tmp_path: Path) -> None:
    from backends.base import StorageBackendException

    b = FileSystemBackend(tmp_path / "root")
    for key in ("../x", "/etc/passwd", "a/../../x", "a//b", ""):
        with pytest.raises(StorageBackendException):
            b.upload(key, io.BytesIO(b"x"))
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(StorageBackendException, match="outside the storage root"):
        b.upload("link/x", io.BytesIO(b"x"))
