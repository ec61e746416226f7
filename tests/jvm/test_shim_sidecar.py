"""The sidecar transport, driven from a real, separately started JVM (``java -cp shim:kafka-api:harness``, Kafka's
API from its own jars), as a broker would: lifecycle on real segments from 16 threads, on each Kafka release,
kill -9 mid-fetch, close(), broken environments."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jvm_testing as jt
import pytest

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    jt.ensure_built()
    d = tmp_path_factory.mktemp("shim-segs")
    return jt.write_spec(d / "spec.tsv", jt.make_test_segments(d))


def harness(
    mode: str, *positional: str, config: dict[str, str], timeout: float = 180, **popen: object
) -> subprocess.CompletedProcess[str]:
    cmd = [
        "java",
        "-cp",
        jt.test_classpath(),
        jt.HARNESS_CLASS,
        mode,
        jt.SHIM_CLASS,
        *positional,
        "--",
        *(f"{k}={v}" for k, v in config.items()),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **popen)  # type: ignore[call-overload]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def oom_score_adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def test_lifecycle_16_threads_over_sidecar(spec: Path, tmp_path: Path) -> None:
    r = harness("lifecycle", str(spec), "16", "24", config=jt.base_config(tmp_path / "store"))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.startswith("OK lifecycle segments=4 threads=16"), r.stdout
    assert "(sidecar transport)" in r.stderr  # auto picked the sidecar in a plain JVM
    assert "Python sidecar pid" in r.stderr and "stopped (exit code 0)" in r.stderr
    assert not list((tmp_path / "store").rglob("*.log")), "delete left segment objects behind"


@jt.on_each_kafka_release
def test_lifecycle_on_the_kafka_release_jars(spec: Path, tmp_path: Path, version: str) -> None:
    """The packaged jar (compiled against the oldest release) on this release's API jars, driven by the harness
    compiled against them: copy, every fetch and index, delete, from 4 threads."""
    release = jt.kafka_release(version)
    cmd = ["java", "-cp", os.pathsep.join(map(str, release.classpath())), jt.HARNESS_CLASS, "lifecycle"]
    cmd += [jt.SHIM_CLASS, str(spec), "4", "8", "--"]
    cmd += [f"{k}={v}" for k, v in jt.base_config(tmp_path / "store").items()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.startswith("OK lifecycle segments=4 threads=4"), r.stdout
    assert f"kafka-storage-api-{version}.jar" in " ".join(cmd)
    assert not list((tmp_path / "store").rglob("*.log")), "delete left segment objects behind"


def _summary(line: str, prefix: str) -> dict[str, int]:
    assert line.startswith(prefix), line
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in line.split()[2:])}


def test_streams_closed_early_are_kept_bounded_and_expire(spec: Path, tmp_path: Path) -> None:
    """The broker's next fetch of a segment goes on with the stream its previous fetch closed (no request to
    the sidecar), for at most jvm.sidecar.kept.streams streams, and not past jvm.sidecar.kept.stream.idle.ms."""
    cfg = jt.base_config(
        tmp_path / "store", **{"jvm.sidecar.kept.streams": "2", "jvm.sidecar.kept.stream.idle.ms": "300"}
    )
    r = harness("kept", str(spec), "1500", config=cfg)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    s = _summary(r.stdout.strip().splitlines()[-1], "OK kept ")
    assert s["segments"] == 4
    assert s["kept_after_closes"] == 2  # the two newest; the oldest two were cancelled
    assert s["resumed"] == 2  # ... and only those two go on; the others opened anew (bytes checked either way)
    assert s["resumed_bounded"] == 0  # a bounded fetch never takes a kept stream: it would end too late
    assert s["kept_after_idle"] == 0
    assert s["resumed_after_idle"] == 0
    # Cancelled streams give their connections back to the pool; a fetch that comes before the sidecar has ended
    # the stream opens another. Measured 3 to 4 at load 21 (4 was this bound); with no connection given back,
    # each of the 13 fetches and the copies before them would open its own. 8 is twice the most measured.
    assert s["connections"] <= 8


def test_kept_streams_off(spec: Path, tmp_path: Path) -> None:
    r = harness("kept", str(spec), "0", config=jt.base_config(tmp_path / "store", **{"jvm.sidecar.kept.streams": "0"}))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    s = _summary(r.stdout.strip().splitlines()[-1], "OK kept ")
    assert s["kept_after_closes"] == 0 and s["resumed"] == 0
    # 12 early closes, each cancelled and its connection pooled: it is reused once the sidecar has ended the
    # stream, and a fetch that comes before that opens another (measured 3 at load 21). Without the reuse: 13.
    # 8 is more than twice the most measured and still 5 below that.
    assert s["connections"] <= 8


def test_index_fetches_of_a_new_segment_cost_one_round_trip(spec: Path, tmp_path: Path) -> None:
    """Kafka's remote index cache fetches OFFSET, TIMESTAMP and TRANSACTION for every new segment: the first call
    brings the other two, which the shim then serves without asking Python (held 2, then 1, then 0), with the
    same bytes and the same not-found as a call of their own. A delete drops what is held for its segment."""
    r = harness("indexes", str(spec), config=jt.base_config(tmp_path / "store"))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    s = r.stdout.strip().splitlines()[-1]
    assert s.startswith("OK indexes segments=4 "), s
    fields = dict(kv.split("=", 1) for kv in s.split()[2:])
    assert fields["held"] == "210," * 4, fields  # one request per segment, its other two indexes held until asked
    assert fields["held_before_delete"] == "2" and fields["held_after_delete"] == "0", fields


def test_kill_9_mid_fetch_fails_cleanly_and_restarts(spec: Path, tmp_path: Path) -> None:
    sockets = tmp_path / "sock"
    sockets.mkdir()
    cfg = jt.base_config(
        tmp_path / "store",
        **{
            "jvm.sidecar.restart.backoff.ms": "200",
            "jvm.sidecar.socket.dir": str(sockets),
            "jvm.sidecar.oom.score.adj": "650",
        },
    )
    cmd = [
        "java",
        "-cp",
        jt.test_classpath(),
        jt.HARNESS_CLASS,
        "supervise",
        jt.SHIM_CLASS,
        str(spec),
        "--",
        *(f"{k}={v}" for k, v in cfg.items()),
    ]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdin is not None
        line = p.stdout.readline()
        assert line.startswith("FETCHING "), line + p.stderr.read() if p.stderr else ""
        pid1 = int(line.split()[1])
        # the kernel's OOM killer picks the sidecar before the broker (whose score stays as it was)
        assert oom_score_adj(pid1) == 650 and oom_score_adj(p.pid) == oom_score_adj(os.getpid())
        os.kill(pid1, signal.SIGKILL)  # as the OOM killer does
        p.stdin.write("go\n")
        p.stdin.flush()
        seen = []
        while not (seen and seen[-1].startswith("RECOVERED")):
            line = p.stdout.readline()
            assert line, "".join(seen) + (p.stderr.read() if p.stderr else "")
            seen.append(line)
        restarted = int(seen[-1].split()[1])
        assert oom_score_adj(restarted) == 650, "the restarted sidecar is the OOM killer's first pick too"
        out, err = p.communicate(timeout=120)
        out = "".join(seen) + out
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out + err[-4000:]
    lines = out.splitlines()
    failed = next(x for x in lines if x.startswith("STREAM-FAILED"))
    # the broker's read fails with an IOException caused by a RemoteStorageException that says what happened
    assert "org.apache.kafka.server.log.remote.storage.RemoteStorageException" in failed
    assert f"pid {pid1}" in failed and "died" in failed and "signal 9" in failed, failed
    recovered = next(x for x in lines if x.startswith("RECOVERED"))
    pid2 = int(recovered.split()[1])
    # Seconds from the kill to the first call the new sidecar answered: measured 4.7 to 7.5 at load 21. A shim
    # that did not restart it never prints RECOVERED.
    assert pid2 != pid1 and float(recovered.split()[2]) < 30
    assert any("restarting it" in x for x in err.splitlines()), "no log line about the restart"
    assert lines[-1] == "CLOSED"
    assert not alive(pid2), "close() left the restarted sidecar running"
    # the killed sidecar could not remove its socket file: the shim must, or every death leaves one behind
    assert list(sockets.iterdir()) == []


def _sockets(pid: int) -> int:
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("socket:"))


def test_interrupted_fetches_drop_their_connection_and_leave_the_sidecar_serving(spec: Path, tmp_path: Path) -> None:
    """Kafka cancels a delayed remote fetch by interrupting the reading thread: the interrupt closes that
    connection, and the thread's next fetch, the sidecar and its socket count must not suffer for it."""
    rounds = 12
    cfg = jt.base_config(tmp_path / "store", **{"jvm.sidecar.pool.size": "4"})
    cmd = ["java", "-cp", jt.test_classpath(), jt.HARNESS_CLASS, "interrupted", jt.SHIM_CLASS, str(spec), str(rounds)]
    cmd += ["--", *(f"{k}={v}" for k, v in cfg.items())]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdin is not None
        line = p.stdout.readline()
        assert line.startswith("INTERRUPTED "), line + (p.stderr.read() if p.stderr else "")
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        pid = int(fields["pid"])
        # every round's interrupted read failed (the segment is larger than what one read brings), and closed
        # its connection: each round opened a new one, and the sidecar holds no more than the pool and a few
        assert int(fields["failed"]) == rounds, fields
        assert rounds <= int(fields["opened"]) <= 2 * rounds + 2, fields
        assert _sockets(pid) <= 4 + 4, f"the sidecar holds {_sockets(pid)} sockets after {rounds} interrupted fetches"
        out, err = p.communicate("go\n", timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0 and out.splitlines()[-1] == "CLOSED", out + err[-4000:]
    assert not alive(pid)


def test_close_stops_the_sidecar_and_removes_its_socket(tmp_path: Path) -> None:
    sockets = tmp_path / "sock"
    sockets.mkdir()
    r = harness(
        "configure", config=jt.base_config(tmp_path / "store", **{"jvm.sidecar.socket.dir": str(sockets)}), timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(r.stdout.split()[1])
    assert r.stdout.splitlines()[-1] == "CLOSED"
    assert not alive(pid)
    assert list(sockets.iterdir()) == []


def _python_without_package() -> str | None:
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand) and os.path.realpath(cand) != os.path.realpath(sys.executable):
            probe = subprocess.run(
                [cand, "-c", "import rsm.jvm.sidecar"],
                capture_output=True,
                cwd="/",
                env={"PATH": os.environ.get("PATH", "")},
            )
            if probe.returncode != 0:
                return cand
    return None


def test_broken_python_environment_fails_configure_naming_interpreter_and_import(tmp_path: Path) -> None:
    py = _python_without_package()
    if py is None:
        pytest.skip("no interpreter without kafka-tiered-storage on this machine")
    cfg = jt.base_config(tmp_path / "store", **{"python.executable": py})
    del cfg["python.path"]
    r = harness("configure", config=cfg, timeout=60, cwd="/")
    assert r.returncode == 1
    err = r.stdout.splitlines()[0]
    assert err.startswith("ERROR java.lang.IllegalStateException"), err
    assert py in err and "could not import rsm.jvm.sidecar" in err and "No module named 'rsm'" in err, err
    assert "pip install kafka-tiered-storage" in err


def test_missing_interpreter_fails_configure(tmp_path: Path) -> None:
    cfg = jt.base_config(tmp_path / "store", **{"python.executable": "/nonexistent/bin/python3.11"})
    r = harness("configure", config=cfg, timeout=60)
    assert r.returncode == 1
    assert "cannot run the Python interpreter '/nonexistent/bin/python3.11'" in r.stdout, r.stdout


def test_manager_config_error_fails_configure(tmp_path: Path) -> None:
    cfg = jt.base_config(tmp_path / "store", **{"chunk.size": "not-a-number"})
    r = harness("configure", config=cfg, timeout=60)
    assert r.returncode == 1
    first = r.stdout.splitlines()[0]
    assert "rejected its configuration: ConfigException" in first and "chunk.size" in first, first


def test_sidecar_ignores_sigterm_and_exits_on_stdin_eof(tmp_path: Path) -> None:
    """Direct check of the child's contract: group-wide SIGTERM/SIGINT must not kill it before the broker's
    shutdown hook has closed the plugin; stdin EOF (broker gone) must."""
    sock = tmp_path / "s.sock"
    cfg = jt.base_config(tmp_path / "store")
    payload = jt.sidecar_config_payload(cfg)
    env = dict(os.environ, PYTHONPATH=str(jt.REPO))
    p = subprocess.Popen(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(sock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(payload)
        p.stdin.flush()
        assert p.stdout.readline().startswith(b"READY")
        assert oom_score_adj(p.pid) == 800, "by default the sidecar asks the OOM killer to pick it first"
        p.send_signal(signal.SIGTERM)
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert p.poll() is None, "the sidecar died on SIGTERM/SIGINT"
        assert sock.exists()
        p.stdin.close()
        assert p.wait(timeout=15) == 0
        assert not sock.exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# --- the version handshake ---------------------------------------------------------------------------------------

_SKEWED_PYTHON = """#!{python}
import sys

import rsm.jvm.config as config
import rsm.jvm.sidecar as sidecar

if {old!r}:  # a package of 0.1.0: it checks nothing and its READY line names no version
    config.version_skew = lambda _config: None
    say = sidecar._say
    sidecar._say = lambda line: say(" ".join(t for t in line.split(" ") if not t.startswith("version=")))
else:  # a newer package than the jar
    config.__version__ = sidecar.__version__ = "9.9.9"
code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
exec(compile(code, "<bootstrap>", "exec"), {{"__name__": "__main__"}})
"""


def _skewed_python(tmp_path: Path, old: bool) -> str:
    path = tmp_path / ("python-0.1.0" if old else "python-9.9.9")
    path.write_text(_SKEWED_PYTHON.format(python=sys.executable, old=old))
    path.chmod(0o755)
    return str(path)


def test_a_jar_with_an_older_python_package_fails_configure(tmp_path: Path) -> None:
    from rsm._version import __version__

    cfg = jt.base_config(tmp_path / "store", **{"python.executable": _skewed_python(tmp_path, old=True)})
    r = harness("configure", config=cfg, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    err = r.stdout.splitlines()[0]
    assert f"version skew: the shim jar is version {__version__}" in err, err
    assert (
        "kafka-tiered-storage is older than 0.2.0" in err and f"pip install kafka-tiered-storage=={__version__}" in err
    )


def test_a_jar_with_a_newer_python_package_fails_configure(tmp_path: Path) -> None:
    from rsm._version import __version__

    cfg = jt.base_config(tmp_path / "store", **{"python.executable": _skewed_python(tmp_path, old=False)})
    r = harness("configure", config=cfg, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    err = r.stdout.splitlines()[0]
    assert f"the shim jar on the broker's class path is version {__version__}" in err, err
    assert "kafka-tiered-storage in" in err and "is version 9.9.9" in err
    assert f"pip install kafka-tiered-storage=={__version__}" in err


@pytest.mark.parametrize("jar", [None, "0.1.0"])
def test_the_sidecar_refuses_a_jar_of_another_release(tmp_path: Path, jar: str | None) -> None:
    """As after `pip install -U` on a broker host whose jar stayed: 0.1.0 jars send no version at all."""
    from rsm._version import __version__
    from rsm.jvm.codec import I32

    cfg = jt.base_config(tmp_path / "store")
    if jar is not None:
        cfg["jvm.shim.version"] = jar
    payload = I32.pack(len(cfg)) + b"".join(
        I32.pack(len(t)) + t for k, v in cfg.items() for t in (k.encode(), v.encode())
    )
    p = subprocess.run(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "s.sock")],
        input=payload,
        capture_output=True,
        timeout=60,
    )
    line = p.stdout.decode().splitlines()[0]
    assert p.returncode == 4 and line.startswith("CONFIG-ERROR version skew"), line
    assert f"kafka-tiered-storage in {sys.executable} is version {__version__}" in line
    if jar is None:
        assert "older than 0.2.0" in line
    else:
        assert "is version 0.1.0" in line and "pip install kafka-tiered-storage==0.1.0" in line
    assert not (tmp_path / "store").exists()
