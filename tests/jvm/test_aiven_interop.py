"""docs/compatibility.md's table, checked against Aiven's own plugin both ways.

Aiven's RemoteStorageManager is built from its source (``jvm-shim/aiven/build.sh``) and driven by a small Java
peer (``tests/jvm/java/AivenRsmPeer.java``) on the same filesystem store as this plugin. Segments this plugin
copies with no encryption or with key pairs in files are fetched through Aiven's plugin byte for byte (the log,
a range of it and every index); a segment whose data key a key service wrapped is refused by Aiven's parser of
the ``dataKey`` field, and an Iceberg-mode segment by its manifest parser; segments Aiven's plugin copies are
fetched by this one byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiven_plugin import FILESYSTEM_STORAGE, AivenPlugin, aiven_plugin
from helpers import encryption_configs
from iceberg_testing import iceberg_config, order_records, segment_of
from jvm_testing import SpecSegment, spec_segment, write_spec
from key_services import kms_rsa_key, pair_configs

from rsm import IndexType, RemoteResourceNotFoundException
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_segment
from rsm.metadata import TopicIdPartition

# Aiven's source comes from GitHub, which CI cannot reach: `make test-aiven-compat` runs this module.
pytestmark = pytest.mark.aiven_source

PEER_SRC = Path(__file__).parent / "java" / "AivenRsmPeer.java"
TIP = TopicIdPartition("bHoWZs4PQmWBfqf3zqKwSw", "interop", 3)
CHUNK = 65536
# Each index as the broker hands it to copy, by the name of Kafka's IndexType.
INDEX_FILES = {
    IndexType.OFFSET: "offset_index",
    IndexType.TIMESTAMP: "time_index",
    IndexType.PRODUCER_SNAPSHOT: "producer_snapshot",
    IndexType.TRANSACTION: "txn_index",
}


@pytest.fixture(scope="module")
def aiven() -> AivenPlugin:
    return aiven_plugin()


@pytest.fixture(scope="module")
def peer(aiven: AivenPlugin, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that runs the Java peer against Aiven's plugin."""
    javac = shutil.which("javac")
    assert javac, "javac (JDK 17) is required for the interop tests; .ci/run installs it"
    out = tmp_path_factory.mktemp("aivenpeer")
    subprocess.run([javac, "-d", str(out), "-cp", aiven.classpath(), str(PEER_SRC)], check=True)
    return ["java", "-cp", f"{out}:{aiven.classpath()}", "AivenRsmPeer"]


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[SegmentFiles, SpecSegment]]:
    """Real segments: plain, zstd with transactions (so a transaction index), gzip."""
    root = tmp_path_factory.mktemp("interop-segments")
    out = []
    for i, (codec, txn) in enumerate([("none", False), ("zstd", True), ("gzip", False)]):
        f = write_segment(
            root / f"seg{i}", base_offset=i * 100_000, target_bytes=200_000, codec=codec, transactional=txn, seed=40 + i
        )
        out.append((f, spec_segment(f, f.to_metadata(TIP))))
    return out


def _ours(store: Path, extra: dict[str, str]) -> Any:
    from rsm import RemoteStorageManager

    m = RemoteStorageManager()
    m.configure(
        {
            "chunk.size": str(CHUNK),
            "storage.backend.class": "filesystem",
            "storage.root": str(store),
            "storage.fsync.enabled": "false",
            **extra,
        }
    )
    return m


def _aiven_config(path: Path, store: Path, extra: dict[str, str]) -> Path:
    lines = {
        "chunk.size": str(CHUNK),
        "storage.backend.class": FILESYSTEM_STORAGE,
        "storage.root": str(store),
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


def _run_peer(peer: list[str], *args: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*peer, *map(str, args)], capture_output=True, text=True, timeout=300, check=False)


# What Aiven's configuration needs for each kind of classic segment its reference says it reads.
def _variants(key_pairs: dict[str, tuple[Path, Path]]) -> dict[str, dict[str, str]]:
    return {
        "plain": {},
        "compressed": {"compression.enabled": "true"},
        "file-keys": {"compression.enabled": "true", **encryption_configs(key_pairs)},
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["plain", "compressed", "file-keys"])
def test_aiven_reads_what_we_copied(
    kind: str,
    peer: list[str],
    segments: list[tuple[SegmentFiles, SpecSegment]],
    key_pairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
) -> None:
    extra = _variants(key_pairs)[kind]
    store = tmp_path / "store"
    m = _ours(store, extra)
    try:
        for f, s in segments:
            m.copy_log_segment_data(s.meta, f.to_log_segment_data())
    finally:
        m.close()
    spec = write_spec(tmp_path / "spec.tsv", [s for _, s in segments])
    out = tmp_path / "fetched"
    out.mkdir()
    done = _run_peer(peer, "fetch", _aiven_config(tmp_path / "aiven.properties", store, extra), spec, out)
    assert done.returncode == 0, done.stderr[-4000:]
    for i, (f, _) in enumerate(segments):
        original = f.log.read_bytes()
        assert (out / f"log.{i}").read_bytes() == original, f"segment {i}: log differs"
        size = len(original)
        assert (out / f"range.{i}").read_bytes() == original[size // 3 : 2 * size // 3 + 1], f"segment {i}: range"
        for index, attr in INDEX_FILES.items():
            source = getattr(f, attr)
            fetched = out / f"{index.value}.{i}"
            if source is None:
                assert not fetched.exists(), f"segment {i}: {index.value} should be absent"
            else:
                assert fetched.read_bytes() == Path(source).read_bytes(), f"segment {i}: {index.value} differs"
        assert (out / f"LEADER_EPOCH.{i}").read_bytes() == f.leader_epoch_bytes


@pytest.mark.timeout(600)
def test_aiven_refuses_a_key_service_segment(
    request: pytest.FixtureRequest,
    peer: list[str],
    segments: list[tuple[SegmentFiles, SpecSegment]],
    key_pairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
) -> None:
    kms = request.getfixturevalue("local_kms")
    store = tmp_path / "store"
    ring = {"encryption.enabled": "true", "encryption.key.pair.id": "svc", "encryption.key.pairs": "svc"}
    m = _ours(store, {**ring, **pair_configs("svc", "aws-kms", kms_rsa_key(kms), kms, tmp_path)})
    f, s = segments[0]
    try:
        m.copy_log_segment_data(s.meta, f.to_log_segment_data())
    finally:
        m.close()
    # Aiven's plugin with a file pair of the same id: it gets as far as parsing the manifest's dataKey.
    pub, priv = key_pairs["kek1"]
    aiven_keys = {
        **ring,
        "encryption.key.pairs.svc.public.key.file": str(pub),
        "encryption.key.pairs.svc.private.key.file": str(priv),
    }
    spec = write_spec(tmp_path / "spec.tsv", [s])
    out = tmp_path / "fetched"
    out.mkdir()
    done = _run_peer(peer, "fetch", _aiven_config(tmp_path / "aiven.properties", store, aiven_keys), spec, out)
    assert done.returncode == 3, (done.returncode, done.stderr[-4000:])
    assert "Malformed encrypted data key string: svc:" in done.stderr, done.stderr[-4000:]
    assert not (out / "log.0").exists()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["plain", "compressed", "file-keys"])
def test_we_read_what_aiven_copied(
    kind: str,
    peer: list[str],
    segments: list[tuple[SegmentFiles, SpecSegment]],
    key_pairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
) -> None:
    extra = _variants(key_pairs)[kind]
    store = tmp_path / "store"
    store.mkdir()  # Aiven's filesystem storage wants an existing root
    spec = write_spec(tmp_path / "spec.tsv", [s for _, s in segments])
    done = _run_peer(peer, "copy", _aiven_config(tmp_path / "aiven.properties", store, extra), spec)
    assert done.returncode == 0, done.stderr[-4000:]
    m = _ours(store, extra)
    try:
        for i, (f, s) in enumerate(segments):
            original = f.log.read_bytes()
            with m.fetch_log_segment(s.meta, 0) as got:
                assert got.read() == original, f"segment {i}: log differs"
            size = len(original)
            with m.fetch_log_segment(s.meta, size // 3, 2 * size // 3) as got:
                assert got.read() == original[size // 3 : 2 * size // 3 + 1], f"segment {i}: range"
            for index, attr in INDEX_FILES.items():
                source = getattr(f, attr)
                if source is None:
                    with pytest.raises(RemoteResourceNotFoundException):
                        m.fetch_index(s.meta, index).read()
                    continue
                with m.fetch_index(s.meta, index) as got:
                    assert got.read() == Path(source).read_bytes(), f"segment {i}: {index.value} differs"
            with m.fetch_index(s.meta, IndexType.LEADER_EPOCH) as got:
                assert got.read() == f.leader_epoch_bytes
    finally:
        m.close()


@pytest.mark.timeout(600)
def test_aiven_refuses_an_iceberg_mode_segment(peer: list[str], tmp_path: Path) -> None:
    config = iceberg_config(tmp_path, topics=TIP.topic, **{"chunk.size": str(CHUNK)})
    f = segment_of(tmp_path / "seg", order_records(0, 500))
    s = spec_segment(f, f.to_metadata(TIP))
    m = _ours(tmp_path / "store", {k: v for k, v in config.items() if k.startswith("iceberg.")})
    try:
        m.copy_log_segment_data(s.meta, f.to_log_segment_data())
    finally:
        m.close()
    assert not list((tmp_path / "store").rglob("*.log")), "an Iceberg-mode segment has no .log object"
    spec = write_spec(tmp_path / "spec.tsv", [s])
    out = tmp_path / "fetched"
    out.mkdir()
    done = _run_peer(peer, "fetch", _aiven_config(tmp_path / "aiven.properties", tmp_path / "store", {}), spec, out)
    assert done.returncode == 3, (done.returncode, done.stderr[-4000:])
    # Its manifest parser knows four fields; an Iceberg-mode manifest has a fifth.
    assert 'Unrecognized field "iceberg"' in done.stderr, done.stderr[-4000:]
    assert not (out / "log.0").exists()
