"""The sidecar's start-up check (rsm.jvm.startup_check): cgroup v1/v2 limits, the broker's -Xmx, /dev/shm free
space, and a real sidecar process refusing a region /dev/shm cannot hold."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import jvm_testing as jt
import pytest

from rsm.core.config_keys import AIVEN_DISK_CHUNK_CACHE
from rsm.core.manager import RemoteStorageManager
from rsm.jvm import startup_check as sc

MiB = 1 << 20


def _cgroup_v2(tmp_path: Path, limit: str, usage: str) -> tuple[Path, Path]:
    root = tmp_path / "cg"
    own = root / "kubepods/pod1/ctr"
    own.mkdir(parents=True)
    (own / "memory.max").write_text(limit + "\n")
    (own / "memory.current").write_text(usage + "\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod1/ctr\n")
    return root, proc


def test_cgroup_v2_limit_and_usage_of_the_process_own_cgroup(tmp_path: Path) -> None:
    root, proc = _cgroup_v2(tmp_path, str(768 * MiB), str(300 * MiB))
    got = sc.memory_limit(root, proc)
    assert got is not None and (got.limit, got.usage) == (768 * MiB, 300 * MiB)
    assert got.source.endswith("kubepods/pod1/ctr/memory.max")


def test_cgroup_v2_max_is_no_limit(tmp_path: Path) -> None:
    root, proc = _cgroup_v2(tmp_path, "max", "1000")
    assert sc.memory_limit(root, proc) is None


def test_cgroup_v1_limit_at_the_namespace_root_and_unlimited(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "memory").mkdir(parents=True)
    (root / "memory/memory.limit_in_bytes").write_text(f"{512 * MiB}\n")
    (root / "memory/memory.usage_in_bytes").write_text(f"{100 * MiB}\n")
    proc = tmp_path / "cgroup"
    # the path the host sees, which does not exist inside the container's namespace
    proc.write_text("12:pids:/libpod_parent/x\n11:memory:/libpod_parent/x\n")
    got = sc.memory_limit(root, proc)
    assert got is not None and (got.limit, got.usage) == (512 * MiB, 100 * MiB)
    (root / "memory/memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert sc.memory_limit(root, proc) is None


def test_no_cgroup_files_is_no_limit(tmp_path: Path) -> None:
    assert sc.memory_limit(tmp_path, tmp_path / "missing") is None


def test_heap_max_read_from_a_real_process_command_line() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-Xmx64m", "-Xmx3g"])
    try:
        deadline = time.monotonic() + 10
        while sc.heap_max(p.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sc.heap_max(p.pid) == 3 << 30  # the last -Xmx wins, as in the JVM
    finally:
        p.kill()
        p.wait()
    assert sc.heap_max(0) is None


def test_needs_cut_the_region_to_whole_chunks_and_follow_the_cache_class() -> None:
    cfg = {"chunk.size": str(4 * MiB)}
    n = sc.needs_of(cfg, 10 * MiB, RemoteStorageManager)
    assert n.shared == 8 * MiB
    assert n.parts == (("fetch.chunk.cache.size", 128 * MiB), ("fetch.readahead.chunks x chunk.size", 16 * MiB))
    assert sc.needs_of(cfg, 5 * MiB, RemoteStorageManager).shared == 0  # fewer than two chunks: no region at all
    disk = {**cfg, "fetch.chunk.cache.class": "disk", "fetch.chunk.cache.memory.size": "1000"}
    assert sc.needs_of(disk, 0, RemoteStorageManager).parts[0] == ("fetch.chunk.cache.memory.size", 1000)
    aiven = {**cfg, "fetch.chunk.cache.class": AIVEN_DISK_CHUNK_CACHE}
    assert sc.needs_of(aiven, 0, RemoteStorageManager).parts[0][0] == "fetch.chunk.cache.memory.size"


def test_needs_count_the_iceberg_row_group_cache_and_one_copys_rows_when_the_mode_is_on() -> None:
    cfg = {"chunk.size": str(4 * MiB), "iceberg.mode.topics.regex": "orders"}
    rows = "2 x 16 MiB row group (one copy's rows)"
    assert list(sc.needs_of(cfg, 0, RemoteStorageManager).parts[-2:]) == [
        ("iceberg.mode.fetch.cache.size", 64 * MiB),
        (rows, 32 * MiB),
    ]
    # The rows a copy holds are one row group, whatever iceberg.mode.write.batch.bytes (the size of its files).
    sized = {**cfg, "iceberg.mode.fetch.cache.size": str(MiB), "iceberg.mode.write.batch.bytes": str(256 * MiB)}
    assert list(sc.needs_of(sized, 0, RemoteStorageManager).parts[-2:]) == [
        ("iceberg.mode.fetch.cache.size", MiB),
        (rows, 32 * MiB),
    ]
    off = sc.needs_of({"chunk.size": str(4 * MiB)}, 0, RemoteStorageManager)
    assert all("iceberg" not in what for what, _ in off.parts)


def test_a_manager_without_memory_floor_counts_only_the_region() -> None:
    n = sc.needs_of({"chunk.size": str(MiB)}, 4 * MiB, object)
    assert (n.shared, n.parts, n.total) == (4 * MiB, (), 4 * MiB)


def test_a_small_shm_names_the_key_and_the_container_setting() -> None:
    n = sc.needs_of({"chunk.size": str(4 * MiB)}, 128 * MiB, RemoteStorageManager)
    found = sc.problems(n, shm=64 * MiB, limit=None, heap=None, rss=0, shared_bytes=128 * MiB)
    assert len(found) == 1
    assert "jvm.sidecar.shared.memory.bytes=134217728" in found[0] and "--shm-size" in found[0]
    assert "medium: Memory" in found[0]
    assert sc.problems(n, shm=200 * MiB, limit=None, heap=None, rss=0, shared_bytes=128 * MiB) == []


def test_a_low_memory_limit_names_the_limit_and_the_keys() -> None:
    n = sc.needs_of(
        {"chunk.size": str(4 * MiB)}, 128 * MiB, RemoteStorageManager
    )  # 128 region + 128 cache + 16 read-ahead
    limit = sc.MemoryLimit(512 * MiB, 200 * MiB, "/sys/fs/cgroup/memory.max")
    found = sc.problems(n, shm=None, limit=limit, heap=256 * MiB, rss=60 * MiB, shared_bytes=128 * MiB)
    assert len(found) == 1
    text = found[0]
    assert "resources.limits.memory" in text and "--memory" in text and "-Xmx 256.0 MiB" in text
    assert "jvm.sidecar.shared.memory.bytes" in text and "fetch.chunk.cache.size 128.0 MiB" in text
    assert text.endswith("or lower jvm.sidecar.shared.memory.bytes or fetch.chunk.cache.size")
    assert f"at least {sc.mib(316 * MiB + 272 * MiB)}" in text
    roomy = sc.MemoryLimit(1024 * MiB, 200 * MiB, "x")
    assert sc.problems(n, shm=None, limit=roomy, heap=256 * MiB, rss=60 * MiB, shared_bytes=128 * MiB) == []


def test_usage_counts_when_it_is_above_heap_plus_sidecar() -> None:
    n = sc.Needs(0, (("fetch.chunk.cache.size", 100 * MiB),))
    limit = sc.MemoryLimit(500 * MiB, 450 * MiB, "x")
    assert sc.problems(n, shm=None, limit=limit, heap=None, rss=10 * MiB, shared_bytes=0)


@pytest.mark.skipif(not sc.SHM_DIR.is_dir(), reason="needs /dev/shm")
def test_a_real_sidecar_refuses_a_region_dev_shm_cannot_hold(tmp_path: Path) -> None:
    # More than the folder holds in all: other tests may free shared memory while this one runs, so a request
    # of just over what is free now could fit by the time the sidecar checks, and then take all of it.
    fs = os.statvfs(sc.SHM_DIR)
    asked = fs.f_blocks * fs.f_frsize + 8 * MiB
    cfg = jt.base_config(tmp_path / "store", **{"chunk.size": str(MiB), "jvm.sidecar.shared.memory.bytes": str(asked)})
    p = subprocess.run(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "s.sock")],
        input=jt.sidecar_config_payload(cfg),
        capture_output=True,
        timeout=60,
    )
    out = p.stdout.decode()
    assert p.returncode == 4, out
    assert out.startswith("CONFIG-ERROR ConfigException: the sidecar does not fit in this container")
    assert f"jvm.sidecar.shared.memory.bytes={asked}" in out and "--shm-size" in out


def test_the_in_process_transport_checks_the_limit_too(tmp_path: Path) -> None:
    """Its buffers and what the manager holds, beside the JVM's heap and what the broker uses now (the plugin runs
    in the broker's own process: no sidecar of its own to count)."""
    cfg = {"chunk.size": str(4 * MiB)}  # 128 MiB memory cache + 16 MiB read-ahead by default
    root, proc = _cgroup_v2(tmp_path, str(256 * MiB), str(100 * MiB))
    with pytest.raises(sc.ConfigException) as info:
        sc.check_in_process(cfg, 128 * MiB, RemoteStorageManager, root, proc)
    text = str(info.value)
    assert text.startswith("the plugin does not fit in this container: the container's memory limit is 256.0 MiB")
    assert "the plugin in the broker's process is configured to hold 272.0 MiB" in text
    assert "jvm.inprocess.buffer.memory.bytes 128.0 MiB, fetch.chunk.cache.size 128.0 MiB" in text
    assert "on /dev/shm" not in text and "this sidecar" not in text
    assert text.endswith("or lower jvm.inprocess.buffer.memory.bytes or fetch.chunk.cache.size")
    roomy, proc = _cgroup_v2(tmp_path / "roomy", str(1024 * MiB), str(100 * MiB))
    sc.check_in_process(cfg, 128 * MiB, RemoteStorageManager, roomy, proc)
    sc.check_in_process(cfg, 128 * MiB, RemoteStorageManager, tmp_path / "none", tmp_path / "missing")  # no limit


def test_the_in_process_factory_refuses_before_configuring(tmp_path: Path) -> None:
    from rsm.jvm.inprocess import default_manager_factory

    cfg = jt.base_config(tmp_path / "store", **{"jvm.inprocess.buffer.memory.byte": "1"})
    with pytest.raises(sc.ConfigException, match="Did you mean 'jvm.inprocess.buffer.memory.bytes'"):
        default_manager_factory(cfg)
    assert not (tmp_path / "store").exists()


def test_a_small_shared_memory_dir_names_the_dir_and_the_key() -> None:
    n = sc.needs_of({"chunk.size": str(4 * MiB)}, 128 * MiB, RemoteStorageManager)
    found = sc.problems(n, 64 * MiB, None, None, 0, 128 * MiB, shm_dir=Path("/mnt/kts-shm"))
    assert len(found) == 1 and found[0].startswith("/mnt/kts-shm has 64.0 MiB free")
    assert "jvm.sidecar.shared.memory.dir" in found[0]


def _sidecar(tmp_path: Path, cfg: dict[str, str]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "s.sock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert p.stdin is not None
    p.stdin.write(jt.sidecar_config_payload(cfg))
    p.stdin.flush()
    return p


def test_a_real_sidecar_makes_its_region_in_the_shared_memory_dir(tmp_path: Path) -> None:
    shm = tmp_path / "kts-shm"
    shm.mkdir()
    cfg = jt.base_config(
        tmp_path / "store",
        **{
            "chunk.size": str(MiB),
            "jvm.sidecar.shared.memory.bytes": str(4 * MiB),
            "jvm.sidecar.shared.memory.dir": str(shm),
        },
    )
    p = _sidecar(tmp_path, cfg)
    try:
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert line.startswith("READY "), line
        region = Path(line.split(" shm=", 1)[1].split()[0])
        assert region.parent == shm and region.name.startswith("kts-sidecar-")
        assert region.stat().st_size == 4 * MiB
    finally:
        assert p.stdin is not None
        p.stdin.close()  # the sidecar stops when its broker's end of stdin closes
        p.wait(timeout=60)
    assert list(shm.iterdir()) == []  # its name removed on the way out


def test_a_real_sidecar_refuses_a_region_its_shared_memory_dir_cannot_hold(tmp_path: Path) -> None:
    shm = tmp_path / "kts-shm"
    shm.mkdir()
    free = sc.shm_free(shm)
    assert free is not None
    asked = free + 8 * MiB
    cfg = jt.base_config(
        tmp_path / "store",
        **{
            "chunk.size": str(MiB),
            "jvm.sidecar.shared.memory.bytes": str(asked),
            "jvm.sidecar.shared.memory.dir": str(shm),
        },
    )
    p = subprocess.run(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "s.sock")],
        input=jt.sidecar_config_payload(cfg),
        capture_output=True,
        timeout=60,
    )
    out = p.stdout.decode()
    assert p.returncode == 4, out
    assert out.startswith(f"CONFIG-ERROR ConfigException: the sidecar does not fit in this container: {shm} has ")
    assert f"jvm.sidecar.shared.memory.bytes={asked}" in out and list(shm.iterdir()) == []
