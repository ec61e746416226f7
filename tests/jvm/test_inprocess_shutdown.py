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
import threading
import time
from collections.abc import Callable
from pathlib import Path

import jvm_testing as jt
import pytest

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
HERE = Path(__file__).resolve().parent
CLOSED = "in-process transport: RemoteStorageManager closed"
NEW_WRAPPER = "WRAPPER-MADE-DURING-SHUTDOWN"
MAIN_BACK = "MAIN-THREAD-BACK-IN-PYTHON-DURING-SHUTDOWN"
FETCH_FAILED = "RemoteResourceNotFoundException"


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


def sigterm_fake_broker(home: Path, work: Path, ready: str, *extra: str) -> tuple[int, str]:
    """Runs the stand-in broker under the watcher (shutdown_watch.py) with ``extra`` server.properties lines,
    sends SIGTERM once it printed a line containing ``ready``; returns the exit code and its output."""
    props = work / "server.properties"
    lines = [
        "remote.log.storage.system.enable=true",
        f"remote.log.storage.manager.class.name={jt.SHIM_CLASS}",
        "rsm.config.chunk.size=1048576",
        "rsm.config.storage.backend.class=filesystem",
        f"rsm.config.storage.root={work / 'store'}",
        "fake.kafka.wait.ms=60000",
        *extra,
    ]
    props.write_text("\n".join(lines) + "\n")
    env = dict(
        os.environ,
        KAFKA_HEAP_OPTS="-Xmx200M",
        KAFKA_OPTS=f"-XX:ErrorFile={work}/hs_err_%p.log",
        PYTHONPATH=os.pathsep.join([str(jt.REPO), str(HERE)]),
        LOG_DIR=str(work / "logs"),
    )
    cmd = [sys.executable, str(HERE / "shutdown_watch.py"), "--kafka-home", str(home), str(props)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=work)
    seen: list[str] = []
    try:
        assert p.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            seen.append(line)
            if not line or ready in line:
                break
        assert ready in seen[-1], "".join(seen)
        p.send_signal(signal.SIGTERM)
        out = "".join(seen) + p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out


def test_sigterm_makes_no_python_wrapper_once_the_jvm_shuts_down(fake_kafka_home: Path, tmp_path: Path) -> None:
    """The stand-in broker's main thread sleeps in Java; SIGTERM runs its hook (which calls the plugin and
    closes it), then JPype interrupts the main thread. Its InterruptedException must not come back into
    Python, where JPype would make the exception's class wrapper while it tears down: that was the SIGSEGV of
    the in-process broker at shutdown. The watcher (shutdown_watch.py) reports the main thread coming back
    into Python and any wrapper made after the shutdown began, so a crash the timing happens to avoid still
    fails the test."""
    code, out = sigterm_fake_broker(fake_kafka_home, tmp_path, "main-probe")
    assert MAIN_BACK not in out, out
    assert NEW_WRAPPER not in out, out
    assert not list(tmp_path.glob("hs_err_*.log")), out
    assert code == 143, f"exit {code}:\n{out}"
    assert "FAKE-KAFKA hook-closed" in out and CLOSED in out, out


def test_a_plugin_call_failing_after_jpype_let_go_waits_for_the_halt(fake_kafka_home: Path, tmp_path: Path) -> None:
    """A broker thread's fetch is still in the plugin when the broker's hook has finished, and fails just after
    JPype has been told the JVM is going away (stuck_manager.py). JPype can no longer hand any exception to
    Java then; raising one made it end the process with a SIGSEGV. The call must wait for the halt instead:
    exit 143, the plugin closed by the hook, no crash report."""
    code, out = sigterm_fake_broker(
        fake_kafka_home,
        tmp_path,
        "STUCK-FETCH waiting",
        "fake.kafka.stuck.reader=true",
        "rsm.config.python.manager.class=stuck_manager:StuckManager",
    )
    assert "FAKE-KAFKA stuck-reader started" in out, out
    assert not list(tmp_path.glob("hs_err_*.log")), out
    assert code == 143, f"exit {code}:\n{out}"
    assert "FAKE-KAFKA hook-closed" in out and CLOSED in out, out
    assert "stuck-reader failed" not in out and "stuck-reader-probe" not in out, out


TOPIC = "tiered"
RECORDS = 5000  # about 2.5 MiB: two closed segments of 1 MiB (Kafka 4 refuses smaller ones)
READERS = 2


def record(i: int) -> bytes:
    return f"record-{i:06d}-".encode() + bytes([97 + i % 26]) * (i * 37 % 1000)


class RestartedBroker:
    """A single-node KRaft broker of the newest Kafka 4.x on the in-process transport (``kts kafka-server-start``)
    with one data directory, formatted once and reused by every start; each start logs to its own file."""

    def __init__(self, work: Path) -> None:
        import kafka_dist as kd

        self.kd = kd
        self.work = work
        self.home = kd.kafka_home(kd.NEWEST_4X)
        self.store = work / "remote"
        self.port, controller, self.jmx = jt.free_ports(3)
        plugin = kd.plugin_properties(self.store, "inprocess")
        self.props = work / "server.properties"
        self.props.write_text(jt.kraft_server_properties(work, self.port, controller, plugin))
        kd.run_tool(self.home, "StorageTool", ["format", "-t", kd.random_cluster_id(), "-c", self.props])
        self.java_home = kd.DEFAULT_JAVA_HOME  # for kafka_dist.create_topic
        self.starts = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def out(self) -> Path:
        return self.work / f"broker-{self.starts}.out"

    def log(self) -> str:
        return self.out.read_text(errors="replace")

    def start(self, timeout: float = 180) -> None:
        kd = self.kd
        self.starts += 1
        opts = kd.DEFAULT_JVM_OPTIONS
        env = {
            **os.environ,
            "JAVA_HOME": str(kd.DEFAULT_JAVA_HOME),
            "KAFKA_HOME": str(self.home),
            "LOG_DIR": str(self.work / "logs"),
            "KAFKA_HEAP_OPTS": " ".join(o for o in opts if o.startswith("-Xm")),
            "KAFKA_JVM_PERFORMANCE_OPTS": " ".join(o for o in opts if not o.startswith("-Xm")),
            "KAFKA_GC_LOG_OPTS": "",
            "KAFKA_JMX_OPTS": " ".join(kd.jmx_options(self.jmx)),
            "KAFKA_LOG4J_OPTS": " ".join(kd.log4j_options(self.home)),
            "KAFKA_OPTS": f"-XX:ErrorFile={self.work}/hs_err_%p.log",
        }
        env.pop("JMX_PORT", None)
        cmd = [sys.executable, "-m", "rsm.cli.main", "kafka-server-start", str(self.props)]
        with open(self.out, "wb") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.work)
        deadline = time.monotonic() + timeout
        while kd.STARTED not in self.out.read_bytes():
            assert self.process.poll() is None, f"start {self.starts} exited:\n{self.log()[-4000:]}"
            assert time.monotonic() < deadline, f"start {self.starts} not up in {timeout} s:\n{self.log()[-4000:]}"
            time.sleep(0.3)

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.process is not None and self.process.poll() is None, f"exited before {what}:\n{self.log()}"
            assert time.monotonic() < deadline, f"not {what} in {timeout} s:\n{self.log()[-4000:]}"
            time.sleep(0.2)

    def terminate(self, timeout: float = 120) -> int:
        """SIGTERM, then the exit code (SIGKILL and a failure if it does not exit within ``timeout``)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"start {self.starts} still running {timeout} s after SIGTERM:\n{self.log()[-4000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Readers:
    """Consumers reading the topic from offset 0 over and over until stopped; ``records`` counts the records
    they received from below ``remote_below`` (the first offset still on the broker's disk), which only the
    plugin's fetches can have given them."""

    def __init__(self, bootstrap: str, n: int, remote_below: int) -> None:
        self.bootstrap = bootstrap
        self.remote_below = remote_below
        self.stop_event = threading.Event()
        self.records = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _read(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        tp = TopicPartition(TOPIC, 0)
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None, reconnect_backoff_max_ms=1000
        )
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            while not self.stop_event.is_set():
                try:
                    batches = consumer.poll(timeout_ms=500).values()
                    got = sum(1 for records in batches for r in records if r.offset < self.remote_below)
                    with self.lock:
                        self.records += got
                    if consumer.position(tp) >= RECORDS:
                        consumer.seek(tp, 0)
                except Exception:  # a fetch the broker failed, or the broker going away: read from 0 again
                    time.sleep(0.2)
                    consumer.seek(tp, 0)
        finally:
            consumer.close(autocommit=False)

    def got_some(self) -> bool:
        with self.lock:
            return self.records > 0

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(60)


def stop_during_fetches(work: Path, cycles: int) -> None:
    """``cycles`` starts of one broker, each stopped by SIGTERM while readers fetch tiered data from offset 0:
    on even cycles the fetches succeed, on odd ones the first segment's manifest is moved out of the store, so
    every fetch from offset 0 fails in the plugin (RemoteResourceNotFoundException). Each stop must exit 143
    with the plugin closed, and no JVM crash report may appear."""
    import kafka_dist as kd

    broker = RestartedBroker(work)
    try:
        broker.start()
        kd.create_topic(
            broker,  # type: ignore[arg-type]
            TOPIC,
            {"remote.storage.enable": "true", "segment.bytes": str(1024 * 1024), "local.retention.bytes": "1"},
        )
        kd.produce(broker.bootstrap, TOPIC, [record(i) for i in range(RECORDS)])
        local = work / "data" / f"{TOPIC}-0"
        broker.wait_until(lambda: kd.tiered_locally(local), 300, "every closed segment tiered and deleted locally")
        local_from = int(next(local.glob("*.log")).stem)
        manifest = next(broker.store.rglob("00000000000000000000-*.rsm-manifest"))
        hidden = work / manifest.name
        for cycle in range(cycles):
            if cycle:
                broker.start()
            failing = cycle % 2 == 1
            if failing:
                manifest.rename(hidden)
            readers = Readers(broker.bootstrap, READERS, local_from)
            try:
                if failing:
                    broker.wait_until(lambda: FETCH_FAILED in broker.log(), 120, "a remote fetch failed")
                else:
                    broker.wait_until(readers.got_some, 120, "the readers received tiered records")
                code = broker.terminate()
            finally:
                readers.stop()
                if failing:
                    hidden.rename(manifest)
            log = broker.log()
            crashes = sorted(p.name for p in work.glob("hs_err_*.log"))
            assert not crashes and "A fatal error has been detected" not in log, f"cycle {cycle}: {crashes}\n{log}"
            assert code == 143, f"cycle {cycle} ({'failing' if failing else 'good'} fetches): exit {code}\n{log}"
            assert CLOSED in log, f"cycle {cycle}: the plugin was not closed\n{log[-4000:]}"
    finally:
        broker.kill()


@pytest.mark.timeout(600)
def test_sigterm_during_fetches_three_times(tmp_path: Path) -> None:
    """Three stops (good, failing, good fetches): about 2.5 minutes on two loaded cores."""
    stop_during_fetches(tmp_path, 3)


@pytest.mark.jvm_stress
@pytest.mark.timeout(3600)
def test_sigterm_during_fetches_twenty_times(tmp_path: Path) -> None:
    """Twenty stops, ten with failing fetches: about 15 minutes, so on demand (make test-jvm-shutdown)."""
    stop_during_fetches(tmp_path, 20)
