"""The shim runs on every Java a supported broker runs on, down to Java 11: every class in the packaged jar is
a Java 11 class file, and where Java has no Unix domain socket channels (before 16) the sidecar is reached over
loopback TCP, each connection proving itself with the secret the shim gave the sidecar.

``KTS_TEST_JAVA`` (os.pathsep-separated ``java`` binaries, e.g. a Java 11 and a Java 21 runtime) adds runs of the
shim on those runtimes; without it only the ``java`` on PATH is used."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import jvm_testing as jt
import pytest

from rsm.jvm import codec as wire

JAVA_11_MAJOR = 55
needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")


def class_file_majors(jar: Path) -> dict[str, int]:
    """Each class's major version, read from its header: u4 magic 0xCAFEBABE, u2 minor, u2 major."""
    out = {}
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if not name.endswith(".class"):
                continue
            with z.open(name) as f:
                magic, _minor, major = struct.unpack(">IHH", f.read(8))
            assert magic == 0xCAFEBABE, f"{jar.name}:{name} is not a class file"
            out[name] = major
    return out


@needs_java
def test_every_packaged_class_is_a_java_11_class_file() -> None:
    jt.ensure_built()
    jars = sorted((jt.REPO / "rsm" / "_jars").glob("*.jar"))
    assert jars, "no packaged jar"
    for jar in jars:
        majors = class_file_majors(jar)
        assert "io/kts/shim/PythonRemoteStorageManager.class" in majors or jar != jt.PLUGIN_JAR
        wrong = {name: v for name, v in majors.items() if v != JAVA_11_MAJOR}
        assert majors and not wrong, f"{jar.name}: classes not built for Java 11 (major 55): {wrong}"


@needs_java
def test_test_jars_are_java_11_too() -> None:
    """The harness runs on the Java 11 runtime in the KTS_TEST_JAVA runs below, with the oldest release's API jars
    (Kafka 3.x runs on Java 8 and newer)."""
    jt.ensure_built()
    for jar in (jt.TEST_JAR, jt.FAKE_KAFKA_JAR):
        assert set(class_file_majors(jar).values()) == {JAVA_11_MAJOR}, jar.name
    for jar in jt.kafka_api_jars():
        assert max(class_file_majors(jar).values()) <= JAVA_11_MAJOR, jar.name


def runtimes() -> list[str]:
    extra = [p for p in os.environ.get("KTS_TEST_JAVA", "").split(os.pathsep) if p]
    return ["java", *extra]


def java_feature(java: str) -> int:
    r = subprocess.run([java, "-XshowSettings:properties", "-version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"java\.specification\.version = (\d+)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    jt.ensure_built()
    d = tmp_path_factory.mktemp("java11-segs")
    return jt.write_spec(d / "spec.tsv", jt.make_test_segments(d))


def lifecycle(java: str, spec: Path, config: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [java, "-cp", jt.test_classpath(), jt.HARNESS_CLASS, "lifecycle", jt.SHIM_CLASS, str(spec), "8", "8", "--"]
    cmd += [f"{k}={v}" for k, v in config.items()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@needs_java
@pytest.mark.parametrize("java", runtimes())
def test_lifecycle_on_each_runtime_with_the_socket_auto_picks(java: str, spec: Path, tmp_path: Path) -> None:
    feature = java_feature(java)
    r = lifecycle(java, spec, jt.base_config(tmp_path / "store"))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.startswith("OK lifecycle segments=4 threads=8"), r.stdout
    over_tcp = "(TCP, token)" in r.stderr
    assert over_tcp == (feature < 16), f"Java {feature}: {r.stderr[-2000:]}"


@needs_java
def test_lifecycle_over_loopback_tcp_when_asked(spec: Path, tmp_path: Path) -> None:
    r = lifecycle("java", spec, jt.base_config(tmp_path / "store", **{"jvm.sidecar.socket": "tcp"}))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.startswith("OK lifecycle segments=4 threads=8"), r.stdout
    assert "(TCP, token)" in r.stderr
    assert not list((tmp_path / "store").rglob("*.log")), "delete left segment objects behind"


def test_tcp_sidecar_answers_only_connections_that_send_the_secret(tmp_path: Path) -> None:
    token = secrets.token_bytes(32)
    env = {**os.environ, "KTS_SIDECAR_TOKEN": token.hex(), "PYTHONPATH": str(jt.REPO)}
    p = subprocess.Popen(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "unused.sock"), "--tcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(jt.sidecar_config_payload(jt.base_config(tmp_path / "store")))
        p.stdin.flush()
        ready = p.stdout.readline().decode()
        assert ready.startswith("READY"), ready
        port = int(re.search(r" tcp=(\d+)", ready).group(1))  # type: ignore[union-attr]
        assert not (tmp_path / "unused.sock").exists()
        ping = wire.REQUEST_HEADER.pack(1, wire.OP_PING)

        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(bytes(32) + ping)  # a wrong secret: closed, unanswered
            assert s.recv(16) == b""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(token + ping)
            assert s.recv(16) == bytes([wire.STATUS_OK])
    finally:
        if p.stdin is not None:
            p.stdin.close()  # stdin EOF is the sidecar's signal to stop
        p.wait(timeout=30)
    assert p.returncode == 0
    assert b"without the shim's secret was closed" in (p.stderr.read() if p.stderr else b"")


def test_tcp_sidecar_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KTS_SIDECAR_TOKEN"}
    env["PYTHONPATH"] = str(jt.REPO)
    r = subprocess.run(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "s.sock"), "--tcp"],
        input=jt.sidecar_config_payload(jt.base_config(tmp_path / "store")),
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 4
    assert r.stdout.decode().startswith("CONFIG-ERROR --tcp needs the shim's 32-byte secret")
