"""A broker on the in-process transport stopped by SIGTERM: exit 143 with the plugin closed, never a SIGSEGV.

JPype's JVM shutdown hook runs the broker's hooks (adopted under it), then tells its native side the JVM is
going away. From then on, making the Python wrapper of a Java class Python has not met yet crashes the process
(``TypeFactoryNative.newWrapper``). The in-process launcher keeps the broker's main thread out of Python once a
shutdown has begun, and the bridge makes beforehand every wrapper it may need while the JVM shuts down.
"""

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
HERE = Path(__file__).resolve().parent
CLOSED = "in-process transport: RemoteStorageManager closed"
NEW_WRAPPER = "WRAPPER-MADE-DURING-SHUTDOWN"
MAIN_BACK = "MAIN-THREAD-BACK-IN-PYTHON-DURING-SHUTDOWN"


@pytest.fixture(scope="module")
def fake_kafka_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Kafka installation whose kafka.Kafka is the test stand-in (jvm-shim/test-src/kafka/Kafka.java)."""
    jt.ensure_built()
    home = tmp_path_factory.mktemp("fake-kafka")
    (home / "libs").mkdir()
    (home / "config").mkdir()
    (home / "config" / "log4j.properties").write_text("")
    for jar in jt.kafka_api_jars():
        shutil.copy(jar, home / "libs" / jar.name)
    shutil.copy(jt.FAKE_KAFKA_JAR, home / "libs" / "kafka_2.13-fake.jar")
    return home


def test_sigterm_makes_no_python_wrapper_once_the_jvm_shuts_down(fake_kafka_home: Path, tmp_path: Path) -> None:
    """The stand-in broker's main thread sleeps in Java; SIGTERM runs its hook (which calls the plugin and
    closes it), then JPype interrupts the main thread. Its InterruptedException must not come back into
    Python, where JPype would make the exception's class wrapper while it tears down: that was the SIGSEGV of
    the in-process broker at shutdown. The watcher (shutdown_watch.py) reports the main thread coming back
    into Python and any wrapper made after the shutdown began, so a crash the timing happens to avoid still
    fails the test."""
    props = tmp_path / "server.properties"
    props.write_text(
        "\n".join(
            [
                "remote.log.storage.system.enable=true",
                f"remote.log.storage.manager.class.name={jt.SHIM_CLASS}",
                "rsm.config.chunk.size=1048576",
                "rsm.config.storage.backend.class=filesystem",
                f"rsm.config.storage.root={tmp_path / 'store'}",
                "fake.kafka.wait.ms=60000",
            ]
        )
        + "\n"
    )
    env = dict(
        os.environ,
        KAFKA_HEAP_OPTS="-Xmx200M",
        KAFKA_OPTS=f"-XX:ErrorFile={tmp_path}/hs_err_%p.log",
        PYTHONPATH=os.pathsep.join([str(jt.REPO), str(HERE)]),
        LOG_DIR=str(tmp_path / "logs"),
    )
    cmd = [sys.executable, str(HERE / "shutdown_watch.py"), "--kafka-home", str(fake_kafka_home), str(props)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    lines: list[str] = []
    try:
        assert p.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            lines.append(line)
            if not line or "main-probe" in line:
                break
        assert "main-probe" in lines[-1], "".join(lines)
        p.send_signal(signal.SIGTERM)
        out = "".join(lines) + p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert MAIN_BACK not in out, out
    assert NEW_WRAPPER not in out, out
    assert not list(tmp_path.glob("hs_err_*.log")), out
    assert p.returncode == 143, f"exit {p.returncode}:\n{out}"
    assert "FAKE-KAFKA hook-closed" in out and CLOSED in out, out
