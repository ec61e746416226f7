"""docs/compatibility.md's column on earlier releases, checked with their own code.

Segments are copied with today's code; releases 0.1.0 and 0.2.0, extracted from this repository's history
(tests/support/old_release.py), fetch them in a subprocess. Classic segments with no encryption or with key
pairs in files read byte for byte in both; a segment whose data key a key service wrapped is refused by both
with their "malformed dataKey" error; an Iceberg-mode segment reads in 0.2.0, and 0.1.0 refuses it for want of
its .log object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import encryption_configs
from iceberg_testing import iceberg_config, new_tip, order_records, segment_of
from key_services import kms_rsa_key, pair_configs
from old_release import read_with

from rsm import RemoteStorageManager
from rsm.kafka.segment_files import SegmentFiles
from rsm.metadata import RemoteLogSegmentMetadata, TopicIdPartition

pytestmark = pytest.mark.timeout(600)

TIP = TopicIdPartition("c1hAgXbNQ3e3rO2bq0Ut6w", "rollback", 1)
RELEASES = ("0.1.0", "0.2.0")
INDEX_FILES = {
    "OFFSET": "offset_index",
    "TIMESTAMP": "time_index",
    "PRODUCER_SNAPSHOT": "producer_snapshot",
    "TRANSACTION": "txn_index",
}


def _store(tmp_path: Path) -> dict[str, str]:
    return {
        "chunk.size": "65536",
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp_path / "store"),
        "storage.fsync.enabled": "false",
    }


def _copy(
    config: dict[str, str], segments: list[SegmentFiles], tip: TopicIdPartition = TIP
) -> list[RemoteLogSegmentMetadata]:
    """Copies ``segments`` with today's code; their metadata (each call of ``to_metadata`` makes a new id)."""
    metas = []
    with RemoteStorageManager() as m:
        m.configure(config)
        for f in segments:
            meta = f.to_metadata(tip)
            m.copy_log_segment_data(meta, f.to_log_segment_data())
            metas.append(meta)
    return metas


def _classic_segments(segment_factory: Any) -> list[SegmentFiles]:
    return [
        segment_factory(target_bytes=150_000, seed=61),
        segment_factory(target_bytes=150_000, seed=62, codec="zstd", transactional=True),
    ]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("kind", ["plain", "compressed", "file-keys"])
def test_an_earlier_release_reads_classic_segments(
    release: str, kind: str, segment_factory: Any, key_pairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    extra = {
        "plain": {},
        "compressed": {"compression.enabled": "true"},
        "file-keys": {"compression.enabled": "true", **encryption_configs(key_pairs)},
    }[kind]
    config = {**_store(tmp_path), **extra}
    segments = _classic_segments(segment_factory)
    metas = _copy(config, segments)
    got = read_with(release, config, metas, tmp_path / "fetched")
    assert got.returncode == 0, got.stderr[-4000:]
    assert release in (got.out / "release").read_text(), "the reader ran today's code, not the release's"
    for i, f in enumerate(segments):
        assert (got.out / f"log.{i}").read_bytes() == f.log.read_bytes(), f"segment {i}: log differs"
        for index, attr in INDEX_FILES.items():
            source = getattr(f, attr)
            fetched = got.out / f"{index}.{i}"
            if source is None:
                assert not fetched.exists(), f"segment {i}: {index} should be absent"
            else:
                assert fetched.read_bytes() == Path(source).read_bytes(), f"segment {i}: {index} differs"
        assert (got.out / f"LEADER_EPOCH.{i}").read_bytes() == f.leader_epoch_bytes


@pytest.mark.parametrize("release", RELEASES)
def test_an_earlier_release_refuses_a_key_service_segment(
    release: str,
    request: pytest.FixtureRequest,
    segment_factory: Any,
    key_pairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
) -> None:
    kms = request.getfixturevalue("local_kms")
    ring = {"encryption.enabled": "true", "encryption.key.pair.id": "svc", "encryption.key.pairs": "svc"}
    config = {**_store(tmp_path), **ring, **pair_configs("svc", "aws-kms", kms_rsa_key(kms), kms, tmp_path)}
    metas = _copy(config, _classic_segments(segment_factory)[:1])
    # The release knows key files only: a file pair of the same id gets it as far as the manifest's dataKey.
    pub, priv = key_pairs["kek1"]
    old_config = {
        **_store(tmp_path),
        **ring,
        "encryption.key.pairs.svc.public.key.file": str(pub),
        "encryption.key.pairs.svc.private.key.file": str(priv),
    }
    got = read_with(release, old_config, metas, tmp_path / "fetched")
    assert got.returncode == 3, (got.returncode, got.stderr[-4000:])
    assert "malformed dataKey" in got.stderr, got.stderr[-4000:]
    assert not (got.out / "log.0").exists()


@pytest.mark.parametrize("release", RELEASES)
def test_iceberg_mode_segments_read_from_0_2_0_on(release: str, tmp_path: Path) -> None:
    config = iceberg_config(tmp_path)
    tip = new_tip()
    segments = [segment_of(tmp_path / f"seg{i}", order_records(i * 500, 500)) for i in range(2)]
    metas = _copy(config, segments, tip)
    assert not list((tmp_path / "store").rglob("*.log")), "an Iceberg-mode segment has no .log object"
    got = read_with(release, config, metas, tmp_path / "fetched")
    if release == "0.1.0":
        assert got.returncode == 3, (got.returncode, got.stderr[-4000:])
        # 0.1.0 knows no Iceberg mode: it looks for the segment's .log object, which Iceberg mode never writes.
        assert "FAILED RemoteStorageException" in got.stderr, got.stderr[-4000:]
        assert "the .log object is missing although the manifest exists" in got.stderr, got.stderr[-4000:]
        return
    assert got.returncode == 0, got.stderr[-4000:]
    for i, f in enumerate(segments):
        assert (got.out / f"log.{i}").read_bytes() == f.log.read_bytes(), f"segment {i}: log differs"
