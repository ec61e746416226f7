"""The shim driven by ``BrokerSim`` (jvm-shim/test-src), a Java stand-in for the broker's RemoteLogManager: it
tiers the rolled segments of a partition directory laid out like a broker's, serves offset and timestamp fetches
from 10 reader threads (closing streams early, as the broker does), checks every index, then deletes everything.

Run over both transports: the sidecar from a separately started ``java`` (as in a broker), and the in-process
bridge with the JVM started by JPype in this pytest process."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jvm_testing as jt
import pytest
from helpers import encryption_configs

from rsm import RemoteStorageManager
from rsm.kafka.indexes import encode_leader_epoch_checkpoint
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_segment

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")

BROKER_SIM = "io.kts.shim.harness.BrokerSim"
FETCHES = 400
THREADS = 10  # remote.log.reader.threads default
KEPT_STREAMS = 8  # jvm.sidecar.kept.streams default
POOL_SIZE = 16  # jvm.sidecar.pool.size default

# (codec, transactional, batches) per segment in offset order; the last one is the active segment, never tiered.
# The one-batch segment (rolled early, e.g. by segment.ms) has an empty offset index and, as after a truncation,
# an empty .txnindex file.
LAYOUT = [("none", False, 24), ("zstd", True, 24), ("none", False, 1), ("gzip", False, 24), ("none", True, 24)]
LAYOUT += [("zstd", False, 24)]
ROLLED = len(LAYOUT) - 1


class CorruptingManager(RemoteStorageManager):
    """Flips the 100th byte of every fetched range: BrokerSim must notice."""

    def fetch_log_segment(self, meta: Any, start: int, end: int | None = None) -> Any:
        data = bytearray(super().fetch_log_segment(meta, start, end).read())
        if len(data) > 100:
            data[100] ^= 0xFF
        return io.BytesIO(bytes(data))


class NotDeletingManager(RemoteStorageManager):
    """Retention that silently keeps the data: BrokerSim must notice."""

    def delete_log_segment_data(self, meta: Any) -> None:
        pass


class PartitionLog:
    def __init__(self, directory: Path, segments: list[SegmentFiles], epochs: dict[int, int]) -> None:
        self.directory = directory
        self.segments = segments
        self.epochs = epochs

    @property
    def rolled(self) -> list[SegmentFiles]:
        return self.segments[:-1]


@pytest.fixture(scope="module")
def partition_log(tmp_path_factory: pytest.TempPathFactory) -> PartitionLog:
    """A broker partition directory: contiguous segments, three leader epochs (epoch 5 starts inside the gzip
    segment, epoch 7 exactly at the next segment's base), producer snapshots at each next base and the
    ``leader-epoch-checkpoint``."""
    jt.ensure_built()
    d = tmp_path_factory.mktemp("orders-7")
    epochs = {2: 5_000}
    segments: list[SegmentFiles] = []
    base = 5_000
    for i, (codec, txn, batches) in enumerate(LAYOUT):
        if i == 3:
            epochs[5] = base + 357
        if i == 4:
            epochs[7] = base
        f = write_segment(
            d,
            base_offset=base,
            num_batches=batches,
            codec=codec,
            transactional=txn,
            leader_epochs=epochs,
            seed=i,
            base_timestamp_ms=1_700_000_000_000 + i * 10_000_000,
        )
        if batches == 1:
            assert f.offset_index.stat().st_size == 0
            (d / f"{base:020d}.txnindex").write_bytes(b"")
        segments.append(f)
        base = f.end_offset + 1
    (d / "leader-epoch-checkpoint").write_bytes(encode_leader_epoch_checkpoint(epochs))
    # write_segment names the snapshot after the segment end: the producer snapshot at the next segment's base
    for prev, nxt in zip(segments, segments[1:], strict=False):
        assert prev.producer_snapshot.name == f"{nxt.base_offset:020d}.snapshot"
    return PartitionLog(d, segments, epochs)


def _summary(line: str) -> dict[str, str]:
    assert line.startswith("OK brokersim "), line
    return dict(kv.split("=", 1) for kv in line.split()[2:])


def _check(summary: str, log: PartitionLog, custom: bool) -> None:
    s = _summary(summary)
    rolled = log.rolled
    assert int(s["segments_copied"]) == len(rolled) == ROLLED == 5
    assert s["offsets"] == f"{rolled[0].base_offset}-{rolled[-1].end_offset}"
    assert int(s["deleted"]) == ROLLED
    assert int(s["index_checks"]) == 5 * ROLLED
    assert int(s["fetches"]) + int(s["timestamp_lookups"]) == FETCHES + int(s["catchup_fetches"])
    assert int(s["timestamp_lookups"]) == FETCHES // 8
    assert int(s["early_closes"]) > FETCHES // 2, "most fetches should stop before the end of the segment"
    assert int(s["threads"]) == THREADS
    assert int(s["bytes_verified"]) > 1_000_000
    assert int(s["catchup_fetches"]) > 10 * ROLLED  # several 16 KiB fetches per chunk
    if custom:
        assert int(s["custom_metadata"]) == ROLLED and 0 < int(s["custom_bytes"]) <= ROLLED * 128
    else:
        assert int(s["custom_metadata"]) == 0


def _remote_objects(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file()] if store.exists() else []


def _config(kind: str, store: Path, key_pairs: dict[str, tuple[Path, Path]], transport: str) -> dict[str, str]:
    if kind == "zstd-encrypted":
        # custom metadata with the object prefix: every fetch and delete resolves keys through the metadata the
        # broker kept from the copy
        extra = {
            **encryption_configs(key_pairs),
            "compression.enabled": "true",
            "chunk.size": "65536",
            "key.prefix": "tiered/",
            "custom.metadata.fields.include": "REMOTE_SIZE,OBJECT_PREFIX",
        }
    else:
        extra = {"compression.enabled": "false", "chunk.size": "32768"}
    return jt.base_config(store, **extra, **{"jvm.transport": transport})


@pytest.fixture(scope="module")
def jvm() -> Any:
    jpype = pytest.importorskip("jpype")
    jt.ensure_built()
    if not jpype.isJVMStarted():
        jpype.startJVM(classpath=jt.classpath_list(), convertStrings=False)
    try:
        return jpype.JClass(BROKER_SIM)
    except Exception:
        pytest.skip("a JVM without the shim test jar was already started in this process")


def _run_inprocess(jvm: Any, cfg: dict[str, str], log: PartitionLog, fetches: int) -> str:
    """The in-process bridge: the JVM JPype started in this process, its reader threads calling into Python."""
    import jpype

    from rsm.jvm import inprocess as jvm_inprocess

    m = jpype.JClass("java.util.HashMap")()
    for k, v in cfg.items():
        m.put(k, v)
    topic_id, topic, partition = jt.TEST_TIP
    jvm_inprocess.install(adopt_hooks=False)
    try:
        return str(jvm.run(jt.SHIM_CLASS, m, str(log.directory), topic_id, topic, partition, fetches, THREADS))
    finally:
        jvm_inprocess.uninstall()


def _run_sidecar(cfg: dict[str, str], log: PartitionLog) -> str:
    """A separately started ``java``, as a broker; the shim starts and supervises the Python sidecar."""
    topic_id, topic, partition = jt.TEST_TIP
    cmd = [
        "java",
        "-cp",
        jt.test_classpath(),
        BROKER_SIM,
        jt.SHIM_CLASS,
        str(log.directory),
        topic_id,
        topic,
        str(partition),
        str(FETCHES),
        str(THREADS),
        "--",
        *(f"{k}={v}" for k, v in cfg.items()),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert "(sidecar transport)" in r.stderr
    assert "stopped (exit code 0)" in r.stderr, r.stderr[-4000:]
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["zstd-encrypted", "plain"])
@pytest.mark.parametrize("transport", ["sidecar", "inprocess"])
def test_broker_sim(
    request: pytest.FixtureRequest,
    partition_log: PartitionLog,
    key_pairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
    transport: str,
    kind: str,
) -> None:
    store = tmp_path / "store"
    cfg = _config(kind, store, key_pairs, transport)
    if transport == "sidecar":
        summary = _run_sidecar(cfg, partition_log)
        s = _summary(summary)
        # Streams closed early are kept for the segment's next fetch (one connection each, at most
        # KEPT_STREAMS) or cancelled and their connections reused. A fetch that finds every idle connection still
        # ending a cancelled stream opens a new one, so how many open depends on the sidecar's speed; never more
        # than can be open at once (one per reader thread, the kept streams, the idle pool), and never one per
        # early close.
        assert 0 < int(s["connections"]) <= THREADS + KEPT_STREAMS + POOL_SIZE < int(s["early_closes"]), s
        # The lagging consumer's fetches mostly start inside the piece its previous fetch stopped in: they go on
        # with the kept stream, without a request to the sidecar (BrokerSim checked every byte they returned).
        fetches, resumed = int(s["catchup_fetches"]), int(s["catchup_resumed"])
        assert fetches // 2 < resumed < fetches, s
        # At a segment's end the stream went on into the next segment (its first fetch resumed it, its indexes
        # came along), unless the sidecar's lookup of that segment was still running: at least once, never more
        # often than there are borders.
        assert 1 <= int(s["catchup_into_next"]) <= ROLLED - 1, s
    else:
        summary = _run_inprocess(request.getfixturevalue("jvm"), cfg, partition_log, FETCHES)
        s = _summary(summary)
        assert int(s["catchup_resumed"]) == 0  # in-process: nothing is kept (the diagnostic is -1, unchanged)
        assert int(s["catchup_into_next"]) == 0
    _check(summary, partition_log, custom=kind == "zstd-encrypted")
    assert not _remote_objects(store), "retention left objects behind"


@pytest.mark.parametrize(
    ("manager", "message"),
    [
        ("CorruptingManager", r"bytes \[\d+, \d+\) differ from the local \.log at position \d+"),
        ("NotDeletingManager", r"fetch after delete: expected RemoteResourceNotFoundException, the call returned"),
    ],
    ids=["corrupt-bytes", "delete-keeps-data"],
)
def test_broker_sim_detects_a_misbehaving_manager(
    jvm: Any, partition_log: PartitionLog, tmp_path: Path, manager: str, message: str
) -> None:
    import jpype

    cfg = jt.base_config(
        tmp_path / "store", **{"jvm.transport": "inprocess", "python.manager.class": f"{__name__}:{manager}"}
    )
    with pytest.raises(jpype.JClass("java.lang.AssertionError")) as e:
        _run_inprocess(jvm, cfg, partition_log, 40)
    assert re.search(message, str(e.value.getMessage())), str(e.value.getMessage())
