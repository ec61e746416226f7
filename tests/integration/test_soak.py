"""The soak: 16 Java broker threads drive the shim (sidecar transport) with a random mix of copy, fetch (random
byte positions, to EOF, early-closed, ranged), fetch_index and delete for a bounded time, against a real S3
server (moto) behind the fault proxy at 5% of requests, while this test SIGKILLs the sidecar every few seconds.

The Java side (``jvm-shim/test-src/.../Soak.java``) verifies every byte a stream delivers against the source
segment files, allows only the KIP-405 exception family, watches every call for hangs, measures latency per
operation and how long the shim takes to recover from each kill. This side samples the JVM's and the sidecar's
RSS, open fds (by kind) and threads from /proc, and after the run checks the store: no manifest for a copy the
plugin refused, nothing left behind after the broker's deletes and garbage collection.

``KTS_SOAK_SECONDS`` (default 60) makes the timed phase longer for an operator's run; ``KTS_SOAK_KILL_EVERY``
(default 10) sets the seconds between sidecar kills. The figures go to the reliability table
(docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import jvm_testing as jt
import pytest
from emulators import StoreServer
from faultproxy import FaultPlan, FaultProxy
from reliability_table import record_row
from test_faults import open_uploads

from backends.s3 import S3Backend
from rsm import RemoteStorageManager
from rsm.operator_tools.garbage import MULTIPART_UPLOAD, ORPHAN_OBJECT, find_garbage
from rsm.operator_tools.garbage_removal import delete_garbage, quarantine_of

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")

SOAK_SECONDS = float(os.environ.get("KTS_SOAK_SECONDS", "60"))
KILL_EVERY = float(os.environ.get("KTS_SOAK_KILL_EVERY", "10"))
THREADS = 16
FAULT_RATE = 0.05
POOL_SIZE = 16  # jvm.sidecar.pool.size
HANG_LIMIT_MS = 45_000  # over every bound the configuration below sets for one call (see _config)
PREFIX = "soak/"
SAMPLE_EVERY = 0.5


def _config(server: StoreServer, endpoint: str, sockets: Path) -> dict[str, str]:
    """S3 through the proxy; no chunk cache, so every fetch crosses the faulty network.

    Bounds of one call: a stalled S3 attempt is cut after 2 s and retried at most 6 times per request; a sidecar
    request (fetch, index, delete) is cut by the shim after 30 s, a copy after 40 s; a call waiting for a restarted
    sidecar waits at most the startup timeout (30 s). HANG_LIMIT_MS is above all of these.
    """
    return {
        "python.executable": sys.executable,
        "python.path": str(jt.REPO),
        "jvm.transport": "sidecar",
        "jvm.sidecar.socket.dir": str(sockets),
        "jvm.sidecar.restart.backoff.ms": "200",
        "jvm.sidecar.startup.timeout.ms": "30000",
        "jvm.sidecar.request.timeout.ms": "30000",
        "jvm.sidecar.copy.timeout.ms": "40000",
        "jvm.sidecar.pool.size": str(POOL_SIZE),
        "chunk.size": "65536",
        "key.prefix": PREFIX,
        "storage.backend.class": server.backend,
        "compression.enabled": "true",
        "fetch.chunk.cache.size": "0",
        "fetch.chunk.cache.prefetch.max.size": "0",
        **{f"storage.{k}": str(v) for k, v in server.config(**{"s3.endpoint.url": endpoint}).items()},
        "storage.s3.api.call.attempt.timeout": "2000",
        "storage.s3.retry.max.attempts": "6",
        "storage.s3.retry.backoff.ms": "20",
        "storage.s3.retry.backoff.max.ms": "200",
        "storage.s3.multipart.upload.part.size": str(5 * 1024 * 1024),
    }


# --- /proc sampling -----------------------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    rss_mib: float
    threads: int
    fds: dict[str, int]
    sidecar_pid: int | None = None
    sidecar_rss_mib: float | None = None
    sidecar_fds: dict[str, int] | None = None
    socket_files: int = 0


def _status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _fds_by_kind(pid: int) -> dict[str, int]:
    kinds = {"socket": 0, "pipe": 0, "anon": 0, "file": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        kind = target.split(":", 1)[0] if target.startswith(("socket:", "pipe:")) else None
        kinds[kind or ("anon" if target.startswith("anon_inode:") else "file")] += 1
    return kinds


def sidecar_of(java_pid: int) -> int | None:
    """The running sidecar: the child of the JVM started with ``--socket``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != java_pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"--socket" in f.read():
                    return int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return None


def take_sample(java_pid: int, t0: float, sockets: Path) -> Sample | None:
    try:
        st = _status(java_pid)
        s = Sample(
            time.monotonic() - t0, int(st["VmRSS"].split()[0]) / 1024, int(st["Threads"]), _fds_by_kind(java_pid)
        )
    except (OSError, KeyError):
        return None  # the JVM has exited
    s.socket_files = len(list(sockets.iterdir()))
    pid = sidecar_of(java_pid)
    if pid is not None:
        try:
            s.sidecar_rss_mib = int(_status(pid)["VmRSS"].split()[0]) / 1024
            s.sidecar_fds = _fds_by_kind(pid)
            s.sidecar_pid = pid
        except (OSError, KeyError):
            pass  # killed or restarting right now
    return s


def flat(
    values: list[tuple[float, float]], rel: float, slack: float, level: Callable[[list[float]], float] = max
) -> tuple[bool, float, float]:
    """Did a quantity stay flat over the timed phase (after warm-up)?

    The samples are cut into thirds by time and the level of the last third is compared with the level of the
    first: ``last <= first * (1 + rel) + slack``. The level is the maximum for memory and threads, because these
    move in bursts (16 threads open and close connections, the heap churns, a restarted sidecar re-imports) and a
    peak seen early is a level the process legitimately reaches; a leak keeps raising the peaks, so the last
    third's peak runs away from the first third's however noisy each is. Fd counts that must not grow at all use
    the median instead: a sample may land in the milliseconds in which a restart holds both the dead sidecar's
    pipes and the new one's, while a leaked fd stays and moves the median of every later third. ``rel`` and
    ``slack`` absorb what legitimately still settles (JIT code cache, allocator arenas); they are far below what
    one leaked object per operation or per kill would add over the run.
    """
    assert len(values) >= 6, f"too few samples ({len(values)}) to judge"
    t_lo, t_hi = values[0][0], values[-1][0]
    third = (t_hi - t_lo) / 3
    first = level([v for t, v in values if t <= t_lo + third])
    last = level([v for t, v in values if t >= t_hi - third])
    return last <= first * (1 + rel) + slack, first, last


# --- the run -----------------------------------------------------------------------------------------------------


@dataclass
class Run:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    draining: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    draining_at: float = 0.0

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("STARTED "):
                self.started_at = time.monotonic()
                self.started.set()
            elif line.startswith("DRAINING"):
                self.draining_at = time.monotonic()
                self.draining.set()
        self.started.set()  # the process ended: nobody waits forever
        self.draining.set()


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    jt.ensure_built()
    d = tmp_path_factory.mktemp("soak-segs")
    return jt.write_spec(d / "spec.tsv", jt.make_test_segments(d))


@pytest.mark.timeout(int(SOAK_SECONDS) + 240)
def test_soak_16_threads_faults_and_sidecar_kills(
    spec: Path,
    tmp_path: Path,
    s3_moto_server: StoreServer,
) -> None:
    sockets = tmp_path / "sock"
    sockets.mkdir()
    proxy = FaultProxy(int(s3_moto_server.endpoint.rsplit(":", 1)[1]), FaultPlan(FAULT_RATE, stall_s=2.5, seed=405))
    cfg = _config(s3_moto_server, proxy.url, sockets)
    stderr_path = tmp_path / "soak.stderr"
    cmd = [
        "java",
        # A fixed, pre-touched heap: its pages are resident from the start, so RSS growth can only be native memory
        # (direct buffers, mappings, threads, metaspace) and a heap leak surfaces as an OutOfMemoryError instead.
        "-Xms192m",
        "-Xmx192m",
        "-XX:+AlwaysPreTouch",
        "-cp",
        jt.test_classpath(),
        "io.kts.shim.harness.Soak",
        jt.SHIM_CLASS,
        str(spec),
        str(THREADS),
        str(SOAK_SECONDS),
        str(HANG_LIMIT_MS),
        "--",
        *(f"{k}={v}" for k, v in cfg.items()),
    ]
    kills: list[int] = []
    samples: list[Sample] = []
    t0 = time.monotonic()
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
    run = Run(proc)
    reader = threading.Thread(target=run.read, name="soak-stdout", daemon=True)
    reader.start()
    stop_sampling = threading.Event()

    def sampler() -> None:
        while not stop_sampling.is_set() and proc.poll() is None:
            s = take_sample(proc.pid, t0, sockets)
            if s is not None:
                samples.append(s)
            stop_sampling.wait(SAMPLE_EVERY)

    sampling = threading.Thread(target=sampler, name="soak-sampler", daemon=True)
    sampling.start()
    try:
        assert run.started.wait(180), "the driver did not finish its initial copies"
        assert proc.poll() is None, _tail(run, stderr_path)
        # --- the killer: SIGKILL the sidecar KILL_EVERY seconds after it is back, until the timed phase ends ------
        # (counted from the restart, not the kill: on a loaded machine a restart takes 5-10 s, and a sidecar killed
        # again as soon as it is up would leave no time for a copy to succeed between kills)
        while not run.draining.wait(KILL_EVERY):
            pid = sidecar_of(proc.pid)
            if pid is None:
                continue  # between a death and its restart
            os.kill(pid, signal.SIGKILL)
            kills.append(pid)
            assert proc.stdin is not None
            proc.stdin.write(f"KILLED {pid}\n")
            proc.stdin.flush()
            while not run.draining.is_set() and sidecar_of(proc.pid) in (None, pid):
                time.sleep(0.2)
        proc.wait(timeout=HANG_LIMIT_MS / 1000 * 2 + 120)
    finally:
        stop_sampling.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.stop()
    reader.join(10)
    sampling.join(10)
    wall = time.monotonic() - t0
    result_line = next((x for x in run.lines if x.startswith("RESULT ")), None)
    assert proc.returncode == 0 and result_line is not None, _tail(run, stderr_path)
    print(result_line)
    r: dict[str, Any] = json.loads(result_line[len("RESULT ") :])
    failed_ids = [x.split()[1] for x in run.lines if x.startswith("COPY-FAILED ")]

    # --- what the driver saw -----------------------------------------------------------------------------------
    problems = r["problems"]
    assert r["wrong_bytes"] == 0, problems
    assert r["short_reads"] == 0, problems
    assert r["unexpected"] == 0, f"failures outside the KIP-405 exception family: {r['failed']} {problems}"
    assert r["hangs"] == 0, problems
    assert r["resurrected"] == 0, problems
    assert r["cleanup_failures"] == 0, problems
    assert r["bytes_verified"] > 0 and r["ok_fetch"] > 0 and r["ok_fetch_index"] > 0, r
    assert r["ok_copy"] > 0 and r["ok_delete"] > 0, r
    assert len(failed_ids) == r["copy_failed_definite"]
    # failures the kills did not cause: faults past the retries, or a shim timeout; body reads are retried, so rare
    calls = sum(r[f"ok_{op}"] for op in ("copy", "fetch", "fetch_index", "delete")) + sum(r["failed"].values())
    not_kills = sum(n for k, n in r["failed"].items() if not k.endswith("[sidecar]"))
    assert not_kills <= 0.01 * calls, f"{not_kills} of {calls} calls failed without a kill: {r['storage_failures']}"
    # --- the kills really happened, and the shim recovered from each by itself ------------------------------------
    # a kill every KILL_EVERY seconds of a live sidecar, plus the restarts in between (the longest one measured)
    expected_kills = int(SOAK_SECONDS // (KILL_EVERY + r["recovery_max_ms"] / 1000)) - 1
    assert len(kills) >= max(1, expected_kills), f"only {len(kills)} kills in {SOAK_SECONDS} s"
    assert r["kills_heard"] == len(kills)
    assert r["kills_unrecovered"] == 0, "a kill after which no call succeeded any more"
    # The longest recovery measured 5.8 to 10.2 s at load 20; a sidecar that is not restarted never recovers.
    assert len(r["recovery_ms"]) == len(kills) and r["recovery_max_ms"] < 30_000, r["recovery_ms"]
    assert r["final_sidecar_pid"] not in kills
    # A kill that lands on a sidecar still starting is heard as a failed restart (the supervisor retries), not as
    # a death: each kill shows as one or the other.
    log = stderr_path.read_text(errors="replace")
    assert log.count("restarting it") + log.count("Python sidecar restart failed") >= len(kills), len(kills)
    assert list(sockets.iterdir()) == [], "socket files left behind in jvm.sidecar.socket.dir"
    assert sum(proxy.plan.injected.values()) > 0, "the proxy injected nothing: the soak proves nothing"

    # --- the store: no manifest for a refused copy; nothing unaccounted for after deletes and gc -----------------
    direct = S3Backend()
    direct.configure(s3_moto_server.config())
    try:
        keys = list(direct.list(PREFIX))
    finally:
        direct.close()
    manifests = [k for k in keys if k.endswith(".rsm-manifest")]
    for seg_id in failed_ids:
        assert not [k for k in manifests if f"-{seg_id}." in k], f"refused copy {seg_id} left a manifest"
    assert manifests == [], f"manifests left after every segment was deleted: {manifests[:5]}"
    open_before_gc = len(open_uploads(s3_moto_server, PREFIX))
    gc = RemoteStorageManager()
    gc.configure(
        {k: v for k, v in _config(s3_moto_server, s3_moto_server.endpoint, sockets).items() if not k.startswith("jvm.")}
    )
    try:
        garbage = find_garbage(gc, 0, upload_deadline_s=0)  # the brokers are gone: no upload still runs
        assert {g.kind for g in garbage} <= {ORPHAN_OBJECT, MULTIPART_UPLOAD}, garbage
        report = delete_garbage(gc, garbage)
        assert report.failed == [] and report.skipped == []
        orphans = sum(1 for g in garbage if g.kind == ORPHAN_OBJECT)
        assert len(report.held) == orphans
        quarantine = quarantine_of(gc)
        quarantine.purge(quarantine.held())
        left = list(gc.backend.list(PREFIX))
    finally:
        gc.close()
    assert left == [], f"objects left after gc and the quarantine's purge: {left[:5]}"
    assert open_uploads(s3_moto_server, PREFIX) == [], "a multipart upload is still open after gc"

    # --- memory, fds and threads stayed flat ---------------------------------------------------------------------
    timed = [s for s in samples if run.started_at - t0 <= s.t <= run.draining_at - t0]
    # the JVM's own view (SAMPLE lines, timed phase only): native memory held by direct buffers
    begin, end = run.lines.index(next(x for x in run.lines if x.startswith("STARTED "))), run.lines.index("DRAINING")
    jvm_view = [dict(kv.split("=") for kv in x.split()[1:]) for x in run.lines[begin:end] if x.startswith("SAMPLE ")]
    direct_mib = [(float(v["t"]), int(v["direct_bytes"]) / 2**20) for v in jvm_view]
    warm = timed[len(timed) // 4 :]  # the first quarter is warm-up: JIT, connection pools, first imports
    checks = {
        # JVM: heap fixed (see cmd); 16 direct 256 KiB connection buffers plus code cache may still settle
        "jvm_rss_mib": (flat([(s.t, s.rss_mib) for s in warm], 0.15, 48), "MiB"),
        # connection buffers are heap memory; direct memory is only the JDK's per-thread socket buffers
        "jvm_direct_mib": (flat(direct_mib[len(direct_mib) // 4 :], 0, 8), "MiB"),
        "jvm_threads": (flat([(s.t, s.threads) for s in warm], 0, 4), "threads"),
        # pipes (3 per sidecar) and files must not grow at all: each kill would add its own
        "jvm_pipe_fds": (flat([(s.t, s.fds["pipe"]) for s in warm], 0, 0, median), "fds"),
        "jvm_file_fds": (flat([(s.t, s.fds["file"] + s.fds["anon"]) for s in warm], 0, 1, median), "fds"),
        "sidecar_rss_mib": (flat([(s.t, s.sidecar_rss_mib) for s in warm if s.sidecar_rss_mib], 0.25, 32), "MiB"),
        # The sidecar's sockets come and go with the calls in flight: each of the THREADS calls may hold a socket
        # to the store and a connection from the shim, and the shim keeps POOL_SIZE idle ones. At load 20 the
        # median of all its fds went from 4 to 20, 43 to 37 and 42 to 5 between thirds, and of its sockets from
        # 31 and 29 to 0. Its other fds (pipes, files, eventfds: 5 to 12, as a restarted sidecar's pools start up;
        # 10.5 to 12 between thirds once) stay within 4: a descriptor leaked per call would add hundreds.
        "sidecar_sockets": (
            flat([(s.t, s.sidecar_fds["socket"]) for s in warm if s.sidecar_fds], 0, 2 * THREADS + POOL_SIZE, median),
            "fds",
        ),
        "sidecar_other_fds": (
            flat(
                [(s.t, sum(s.sidecar_fds.values()) - s.sidecar_fds["socket"]) for s in warm if s.sidecar_fds],
                0,
                4,
                median,
            ),
            "fds",
        ),
    }
    grown = {k: (first, last) for k, ((ok, first, last), _) in checks.items() if not ok}
    assert not grown, f"not flat (first third max, last third max): {grown}"
    # sockets: one per call in flight plus the idle pool, whatever happened before
    max_sockets = max(s.fds["socket"] for s in timed)
    assert max_sockets <= THREADS + POOL_SIZE + 2, f"{max_sockets} sockets open in the JVM"
    assert max(s.socket_files for s in timed) <= 2, "socket files pile up while the sidecar is killed"

    lat = {op: r[f"latency_{op}"] for op in ("copy", "fetch", "fetch_index", "delete")}
    ops = sum(r[f"ok_{op}"] for op in lat) + sum(r["failed"].values())
    by_op = {op: sum(n for k, n in r["failed"].items() if k.startswith(f"{op}:")) for op in lat}
    cut = ", ".join(f"{op} {n}" for op, n in by_op.items() if n) or "none"
    recovery: list[int] = r["recovery_ms"]
    drift = "; ".join(f"{k} {first:.0f}->{last:.0f}" for k, ((_, first, last), _) in checks.items())
    print(
        f"\nsoak {SOAK_SECONDS:.0f}s: {ops} calls, failures {r['failed']}; kills {len(kills)}, recovery ms "
        f"{recovery}; bytes verified {r['bytes_verified']}; latency {lat}; faults {dict(proxy.plan.injected)} of "
        f"{proxy.plan.requests} requests; max JVM sockets {max_sockets}; {drift}"
    )
    record_row(
        {
            "scenario": f"soak {SOAK_SECONDS:.0f} s: {THREADS} Java threads through the shim (sidecar), S3 via "
            f"fault proxy at {FAULT_RATE:.0%}, sidecar SIGKILL every {KILL_EVERY:.0f} s",
            "faults": {**dict(proxy.plan.injected), "sidecar SIGKILL": len(kills)},
            "operations": f"{ops} calls: copy {r['ok_copy']} ok, fetch {r['ok_fetch']} ok, fetch_index "
            f"{r['ok_fetch_index']} ok, delete {r['ok_delete']} ok; failed: {sum(by_op.values())} ({cut}), "
            f"{not_kills} of them not cut by a kill; every failure RemoteStorageException (or an IOException "
            "caused by one)",
            "outcome": "p50/p99/max ms: "
            + ", ".join(f"{op} {v['p50_ms']:.0f}/{v['p99_ms']:.0f}/{v['max_ms']:.0f}" for op, v in lat.items())
            + f"; recovery after each kill {median(recovery):.0f} ms median, {max(recovery)} ms max; 0 hangs; "
            f"{orphans} orphans and {open_before_gc} open uploads before gc, 0 after; first->last third: JVM RSS "
            f"{checks['jvm_rss_mib'][0][1]:.0f}->{checks['jvm_rss_mib'][0][2]:.0f} MiB, sidecar RSS "
            f"{checks['sidecar_rss_mib'][0][1]:.0f}->{checks['sidecar_rss_mib'][0][2]:.0f} MiB, JVM threads "
            f"{checks['jvm_threads'][0][1]:.0f}->{checks['jvm_threads'][0][2]:.0f}, JVM pipes "
            f"{checks['jvm_pipe_fds'][0][1]:.0f}->{checks['jvm_pipe_fds'][0][2]:.0f}, sidecar sockets "
            f"{checks['sidecar_sockets'][0][1]:.0f}->{checks['sidecar_sockets'][0][2]:.0f}, sidecar other fds "
            f"{checks['sidecar_other_fds'][0][1]:.0f}->{checks['sidecar_other_fds'][0][2]:.0f}",
            "bytes_verified": r["bytes_verified"],
            "wrong_bytes": r["wrong_bytes"],
            "peak_rss_mib": f"JVM {max(s.rss_mib for s in samples):.0f}, sidecar "
            f"{max(s.sidecar_rss_mib or 0 for s in samples):.0f}",
            "seconds": round(wall, 1),
        }
    )


def _tail(run: Run, stderr_path: Path) -> str:
    return "\n".join(run.lines[-30:]) + "\n--- stderr ---\n" + stderr_path.read_text(errors="replace")[-6000:]
