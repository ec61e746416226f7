"""Helpers shared by the shim tests and ``benchmarks/bench_shim.py``: jar locations and segment spec files.

The Java test harness (``jvm-shim/test-src``) drives the shim exactly as a broker would; it learns which
segments to use from a tab-separated spec file written here (format in ``Harness.java``).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rsm._version import __version__
from rsm.jvm.codec import I32
from rsm.jvm.config import SHIM_VERSION_KEY
from rsm.metadata import RemoteLogSegmentMetadata

F = TypeVar("F", bound=Callable[..., object])
REPO = Path(__file__).resolve().parents[2]
SHIM_DIR = REPO / "jvm-shim"
BUILD_DIR = SHIM_DIR / "build"
MAIN_BUILD = BUILD_DIR / "main"
PLUGIN_JAR = REPO / "rsm" / "_jars" / "kafka-tiered-storage-shim.jar"
TEST_JAR = MAIN_BUILD / "kafka-tiered-storage-shim-harness.jar"
"""The Java test harness (jvm-shim/test-src/io), compiled against the oldest supported Kafka."""
FAKE_KAFKA_JAR = MAIN_BUILD / "kafka-tiered-storage-shim-fake-kafka.jar"
"""A stand-in kafka.Kafka main (jvm-shim/test-src/kafka) for testing `kts kafka-server-start`."""
SHIM_CLASS = "io.kts.shim.PythonRemoteStorageManager"
HARNESS_CLASS = "io.kts.shim.harness.Harness"

RELEASES_FILE = SHIM_DIR / "kafka-releases.txt"


def _releases(tested_only: bool) -> tuple[str, ...]:
    rows = [line.split() for line in RELEASES_FILE.read_text().splitlines() if line and not line.startswith("#")]
    return tuple(row[0] for row in rows if not tested_only or "test" in row[1:])


KAFKA_RELEASES = _releases(tested_only=False)
"""The newest patch of every Kafka minor release we support, oldest first (jvm-shim/kafka-releases.txt)."""
OLDEST_RELEASE = KAFKA_RELEASES[0]
"""The release the plugin jar is compiled against (the pom's kafka.version)."""
DEFAULT_RELEASES = _releases(tested_only=True)
"""What ``make test`` runs the shim on: the oldest release, the newest 3.x and the newest 4.x."""
RETRIABLE_SINCE = (4, 2)
"""The first release with ``RetriableRemoteStorageException`` (KAFKA-19523; 4.1.2 lacks it, 4.2.2 has it)."""
TXN_IDX_EMPTY_SINCE = (4, 0)
"""The first release with ``RemoteLogSegmentMetadata.isTxnIdxEmpty()`` (KAFKA-16780)."""


def _newest_source() -> float:
    sources = [p for p in SHIM_DIR.rglob("*") if p.suffix in (".java", ".sh", ".xml") and BUILD_DIR not in p.parents]
    return max(p.stat().st_mtime for p in [*sources, REPO / "rsm" / "_version.py"])


def _fresh(jars: list[Path], listing: Path) -> bool:
    """The jars are no older than every source, and the class path listing is there (Maven rewrites it only when
    it changes, so its time says nothing)."""
    return (
        listing.is_file() and all(j.exists() for j in jars) and min(j.stat().st_mtime for j in jars) >= _newest_source()
    )


def _build(*args: str) -> None:
    r = subprocess.run(["bash", str(SHIM_DIR / "build.sh"), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"jvm-shim/build.sh {' '.join(args)} failed:\n{r.stdout}{r.stderr}")


def ensure_built() -> None:
    """Runs jvm-shim/build.sh when a jar is missing or older than a source (the source tree only)."""
    if not SHIM_DIR.is_dir():
        return
    if not _fresh([PLUGIN_JAR, TEST_JAR, FAKE_KAFKA_JAR], MAIN_BUILD / "kafka-api.classpath"):
        _build()


def _read_classpath(file: Path) -> list[Path]:
    jars = [Path(p) for p in file.read_text().strip().split(os.pathsep) if p]
    missing = [j for j in jars if not j.is_file()]
    if not jars or missing:
        raise RuntimeError(f"{file} names no jar or missing jars {missing}: run jvm-shim/build.sh again")
    return jars


def kafka_api_jars() -> list[Path]:
    """Kafka's API jars (kafka-storage-api, kafka-clients) of the oldest supported release, from ~/.m2."""
    ensure_built()
    return _read_classpath(MAIN_BUILD / "kafka-api.classpath")


def test_classpath() -> str:
    """The plugin jar, the oldest supported Kafka's API jars and the harness: what most shim tests run."""
    return os.pathsep.join(classpath_list())


def classpath_list() -> list[str]:
    return [str(p) for p in (PLUGIN_JAR, *kafka_api_jars(), TEST_JAR)]


def releases_under_test() -> list[str]:
    """The Kafka releases the release-sensitive shim tests run on: ``KTS_KAFKA_RELEASES`` (comma-separated, or
    ``all`` for every release in KAFKA_RELEASES), by default DEFAULT_RELEASES."""
    wanted = os.environ.get("KTS_KAFKA_RELEASES", "").strip()
    if not wanted:
        return list(DEFAULT_RELEASES)
    if wanted == "all":
        return list(KAFKA_RELEASES)
    return [v.strip() for v in wanted.split(",") if v.strip()]


def on_each_kafka_release(test: F) -> F:
    """Runs ``test(version=...)`` once for each of ``releases_under_test()``, marked ``kafka_release``."""
    import pytest

    ids = [f"kafka-{v}" for v in releases_under_test()]
    return pytest.mark.kafka_release(pytest.mark.parametrize("version", releases_under_test(), ids=ids)(test))


@dataclass(frozen=True)
class KafkaRelease:
    """One Kafka release's real API jars and the shim's test harness compiled against them."""

    version: str
    api_jars: tuple[Path, ...]
    harness_jar: Path

    @property
    def feature(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    @property
    def has_retriable(self) -> bool:
        return self.feature >= RETRIABLE_SINCE

    @property
    def has_txn_idx_empty(self) -> bool:
        return self.feature >= TXN_IDX_EMPTY_SINCE

    def classpath(self, *first: Path) -> list[Path]:
        """``first``, then the packaged plugin jar (compiled against the oldest release), this release's API
        jars and the harness compiled against this release: a broker of this release running our plugin."""
        return [*first, PLUGIN_JAR, *self.api_jars, self.harness_jar]


def kafka_release(version: str) -> KafkaRelease:
    """Compiles the shim and its harness against ``version``'s jars (jvm-shim/build/kafka-X/, once; Maven keeps
    the jars in ~/.m2) and returns where they are."""
    ensure_built()
    if version == OLDEST_RELEASE:
        return KafkaRelease(version, tuple(kafka_api_jars()), TEST_JAR)  # what the main build compiled against
    out = BUILD_DIR / f"kafka-{version}"
    harness = out / "kafka-tiered-storage-shim-harness.jar"
    listing = out / "kafka-api.classpath"
    if not _fresh([harness, out / "kafka-tiered-storage-shim.jar"], listing):
        _build("--no-main", "--kafka", version)
    return KafkaRelease(version, tuple(_read_classpath(listing)), harness)


def sidecar_config_payload(config: dict[str, str]) -> bytes:
    """What the shim writes to a sidecar's stdin (``Wire.encodeConfig``; ``rsm.jvm.codec.decode_config`` reads
    it): i32 count, then (i32 length, bytes) for each key and each value. For tests that start a sidecar alone.
    Like the shim, it names the jar's version (this package's, unless ``config`` says otherwise)."""
    config = {SHIM_VERSION_KEY: __version__, **config}
    out = [I32.pack(len(config))]
    for k, v in config.items():
        for text in (k.encode(), v.encode()):
            out += [I32.pack(len(text)), text]
    return b"".join(out)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports on 127.0.0.1 (all bound at once, so none is handed out twice)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def kraft_server_properties(work: Path, broker: int, controller: int, plugin: str) -> str:
    """A single-node KRaft broker on 127.0.0.1 with remote storage on and fast tiering (1 s task and retention
    checks, the first one 1 s after start), data under ``work/data``; ``plugin`` adds the
    remote.log.storage.manager.* and rsm.config.* lines. For the real-broker test and bench_broker_catchup.
    The internal topics get 3 partitions instead of 50: a broker on a busy machine starts in seconds."""
    return f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{broker}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={work / "data"}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
remote.log.manager.task.interval.ms=1000
log.retention.check.interval.ms=1000
log.initial.task.delay.ms=1000
log.segment.delete.delay.ms=1000
remote.log.storage.system.enable=true
remote.log.metadata.manager.listener.name=PLAINTEXT
rlmm.config.remote.log.metadata.topic.replication.factor=1
rlmm.config.remote.log.metadata.topic.num.partitions=3
offsets.topic.num.partitions=3
{plugin}"""


@dataclass(frozen=True)
class SpecSegment:
    """One line of the harness spec: the metadata plus the files the broker would hand to copy."""

    meta: RemoteLogSegmentMetadata
    log: Path
    offset_index: Path
    time_index: Path
    txn_index: Path | None
    producer_snapshot: Path
    leader_epoch_bytes: bytes


def write_spec(path: Path, segments: Iterable[SpecSegment]) -> Path:
    lines = []
    for i, s in enumerate(segments):
        m = s.meta
        tip = m.topic_id_partition
        epoch_file = path.with_name(f"{path.name}.epochs.{i}")
        epoch_file.write_bytes(s.leader_epoch_bytes)
        fields = [
            tip.topic_id,
            tip.topic,
            str(tip.partition),
            m.remote_log_segment_id.id,
            str(m.start_offset),
            str(m.end_offset),
            str(m.max_timestamp_ms),
            str(m.segment_size_in_bytes),
            str(s.log),
            str(s.offset_index),
            str(s.time_index),
            str(s.txn_index) if s.txn_index else "-",
            str(s.producer_snapshot),
            str(epoch_file),
        ]
        lines.append("\t".join(fields))
    path.write_text("\n".join(lines) + "\n")
    return path


def spec_segment(files: object, meta: RemoteLogSegmentMetadata) -> SpecSegment:
    """From ``rsm.kafka.segment_files.SegmentFiles`` (duck-typed to keep this module import-light)."""
    return SpecSegment(
        meta=meta,
        log=files.log,
        offset_index=files.offset_index,  # type: ignore[attr-defined]
        time_index=files.time_index,
        txn_index=files.txn_index,  # type: ignore[attr-defined]
        producer_snapshot=files.producer_snapshot,  # type: ignore[attr-defined]
        leader_epoch_bytes=files.leader_epoch_bytes,
    )  # type: ignore[attr-defined]


TEST_TIP = ("MWJ6FHTfRYy67jzwZdeqSQ", "orders", 7)


def make_test_segments(directory: Path, batches: int = 120) -> list[SpecSegment]:
    """Real Kafka segments of different shapes: plain, zstd batches with transactions, gzip, plain+transactions."""
    from rsm.kafka.writer import write_segment
    from rsm.metadata import TopicIdPartition

    tip = TopicIdPartition(*TEST_TIP)
    out = []
    for i, (codec, txn) in enumerate([("none", False), ("zstd", True), ("gzip", False), ("none", True)]):
        f = write_segment(
            directory / f"seg{i}",
            base_offset=i * 1_000_000,
            num_batches=batches,
            codec=codec,
            transactional=txn,
            seed=i,
        )
        out.append(spec_segment(f, f.to_metadata(tip)))
    return out


def base_config(store: Path, **extra: str) -> dict[str, str]:
    """A filesystem-backed manager config; ``python.path`` points the sidecar at this source tree."""
    import sys

    cfg = {
        "chunk.size": "1048576",
        "storage.backend.class": "filesystem",
        "storage.root": str(store),
        "compression.enabled": "true",
        "python.executable": sys.executable,
        "python.path": str(REPO),
    }
    cfg.update(extra)
    return cfg


def java_meta(meta: RemoteLogSegmentMetadata) -> Any:
    """The broker's ``RemoteLogSegmentMetadata`` for ``meta``, built in a JVM that JPype started."""
    import jpype

    pkg = "org.apache.kafka.server.log.remote.storage."
    uuid = jpype.JClass("org.apache.kafka.common.Uuid")
    tip = meta.topic_id_partition
    jtip = jpype.JClass("org.apache.kafka.common.TopicIdPartition")(
        uuid.fromString(tip.topic_id), tip.partition, tip.topic
    )
    seg_id = jpype.JClass(pkg + "RemoteLogSegmentId")(jtip, uuid.fromString(meta.remote_log_segment_id.id))
    epochs = jpype.JClass("java.util.HashMap")()
    for epoch, offset in meta.segment_leader_epochs.items():
        epochs.put(jpype.JInt(epoch), jpype.JLong(offset))
    return jpype.JClass(pkg + "RemoteLogSegmentMetadata")(
        seg_id,
        meta.start_offset,
        meta.end_offset,
        meta.max_timestamp_ms,
        meta.broker_id,
        meta.event_timestamp_ms,
        meta.segment_size_in_bytes,
        epochs,
    )


class InMemoryIndexManager:
    """A manager that answers ``fetch_index`` from memory and does nothing else: through the shim it measures
    the transport's own cost per call, with no storage behind it (``python.manager.class`` in benchmarks)."""

    INDEX = bytes(range(256)) * 16  # 4 KiB, a typical leader-epoch checkpoint is far smaller

    def configure(self, configs: object) -> None:
        pass

    def copy_log_segment_data(self, meta: object, data: object) -> None:
        return None

    def fetch_log_segment(self, meta: object, start: int, end: int | None = None) -> object:
        import io

        return io.BytesIO(b"")

    def fetch_index(self, meta: object, index_type: object) -> object:
        import io

        return io.BytesIO(self.INDEX)

    def delete_log_segment_data(self, meta: object) -> None:
        pass

    def close(self) -> None:
        pass


class FailingManager:
    """A manager whose every call fails the way a store in trouble makes the real one fail: copies and fetches
    with ``RetriableRemoteStorageException`` (what ``rsm.errors.storage_failure`` raises once a backend's retries
    gave up on throttling or a timeout), deletes with a plain ``RemoteStorageException``, indexes not found.
    ``python.manager.class=jvm_testing:FailingManager`` with ``tests/support`` on ``python.path``."""

    def configure(self, configs: object) -> None:
        pass

    def copy_log_segment_data(self, meta: object, data: object) -> None:
        from rsm.errors import RetriableRemoteStorageException

        raise RetriableRemoteStorageException("upload throttled (SlowDown), gave up after 3 attempt(s)")

    def fetch_log_segment(self, meta: object, start: int, end: int | None = None) -> object:
        from rsm.errors import RetriableRemoteStorageException

        raise RetriableRemoteStorageException("GET timed out")

    def fetch_index(self, meta: object, index_type: object) -> object:
        from rsm.errors import RemoteResourceNotFoundException

        raise RemoteResourceNotFoundException("no such index")

    def delete_log_segment_data(self, meta: object) -> None:
        from rsm.errors import RemoteStorageException

        raise RemoteStorageException("access denied")

    def close(self) -> None:
        pass
