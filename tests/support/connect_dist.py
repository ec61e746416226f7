"""Kafka Connect with Debezium's PostgreSQL connector, for the change-event tests.

:func:`debezium_plugin` assembles Debezium's PostgreSQL connector (``DEBEZIUM_VERSION``) and its dependencies
from Maven Central (``jvm-shim/debezium/pom.xml``) into a plugin folder under
``~/.cache/kafka-tiered-storage/debezium/<version>``; Maven resolves through ``~/.m2``, so ``make setup`` fetches
it once and the tests work offline. The folder appears by an atomic rename under a file lock.

:func:`start_connect` runs a standalone Connect worker (``ConnectStandalone``) from the broker's own Kafka
release (kafka_dist's assembly holds connect-runtime, connect-json and connect-transforms) with the plugin
folder on its ``plugin.path``, a REST listener on a free port and offsets in a file; :class:`ConnectWorker`
reads a connector's status over REST and stops the worker.

    python tests/support/connect_dist.py     # assemble Kafka DEBEZIUM_KAFKA and the plugin (make setup does)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka_dist as kd
from processes import stop_process

DEBEZIUM_VERSION = "3.6.1.Final"
DEBEZIUM_KAFKA = "4.3.1"
"""The Kafka release whose Connect runtime (and broker) runs the connector: the newest patch of the minor
release Debezium 3.6 is built against (4.3). On Kafka 4.4 its tasks fail: 4.4 moved
``org.apache.kafka.common.utils.Sanitizer``, which Debezium's metrics use."""
POM = kd.REPO / "jvm-shim" / "debezium" / "pom.xml"
STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"


class ConnectError(RuntimeError):
    """The Connect worker or its connector could not be assembled, started or reached."""


def _stamp() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:16]


def _complete(home: Path) -> bool:
    stamp = home / ".kts-plugin"
    return stamp.exists() and stamp.read_text().strip() == _stamp()


def _mvn(out: Path, offline: bool) -> subprocess.CompletedProcess[str]:
    cmd = ["mvn", "-B", "-q", "-f", str(POM), f"{kd.DEPENDENCY_PLUGIN}:copy-dependencies"]
    cmd += [f"-Ddebezium.version={DEBEZIUM_VERSION}", f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
    if offline:
        cmd.append("-o")
    env = {**os.environ, "JAVA_HOME": os.environ.get("MAVEN_JAVA_HOME", str(kd.DEFAULT_JAVA_HOME))}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)


def debezium_plugin() -> Path:
    """The Connect plugin folder (``plugin.path``) holding ``debezium-postgres/`` with the connector's jars."""
    root = kd.cache_root().parent / "debezium"
    home = root / DEBEZIUM_VERSION
    if _complete(home):
        return home
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{DEBEZIUM_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(home):
            return home
        tmp = Path(tempfile.mkdtemp(prefix=f".{DEBEZIUM_VERSION}.", dir=root))
        try:
            jars = tmp / "debezium-postgres"
            r = None
            for offline in (True, False):
                shutil.rmtree(jars, ignore_errors=True)
                r = _mvn(jars, offline)
                if r.returncode == 0:
                    break
            assert r is not None
            if r.returncode != 0:
                raise ConnectError(
                    f"Maven could not fetch Debezium {DEBEZIUM_VERSION} ({POM}): {(r.stdout + r.stderr)[-3000:]}\n"
                    "check that Maven Central is reachable"
                )
            (tmp / ".kts-plugin").write_text(_stamp() + "\n")
            if home.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{DEBEZIUM_VERSION}.old.", dir=root))
                home.rename(old / "home")
                shutil.rmtree(old, ignore_errors=True)
            tmp.rename(home)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return home


@dataclass
class ConnectWorker:
    """A running standalone Connect worker; stop it with :meth:`stop` (or use :func:`running_connect`)."""

    work: Path
    rest_port: int
    process: subprocess.Popen[bytes]
    _out: io.BufferedWriter = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def log(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return (self.work / "connect.out").read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def get(self, path: str) -> Any:
        """The JSON body of a GET on the worker's REST API."""
        with urllib.request.urlopen(self.url + path, timeout=10) as r:  # noqa: S310 - a local worker
            return json.loads(r.read())

    def status(self, name: str) -> dict[str, Any] | None:
        """The connector's status (``connector.state`` and its ``tasks``), or None while it is unknown."""
        try:
            return dict(self.get(f"/connectors/{name}/status"))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_running(self, name: str, timeout: float = 180) -> None:
        """Waits until the connector and one task run; fails with the worker's log if a task fails first."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.status(name)
            if s and s["connector"]["state"] == "RUNNING" and s["tasks"]:
                states = {t["state"] for t in s["tasks"]}
                if states == {"RUNNING"}:
                    return
                if "FAILED" in states:
                    raise ConnectError(f"connector {name} failed: {s}\n{self.log()[-4000:]}")
            if not self.alive() or time.monotonic() > deadline:
                raise ConnectError(f"connector {name} is not running ({s}); the worker's log:\n{self.log()[-4000:]}")
            time.sleep(0.5)

    def stop(self, timeout: float = 60) -> int:
        code = stop_process(self.process, timeout, group=True)
        self._out.close()
        return code


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def start_connect(
    broker: kd.Broker, work: Path, connectors: Mapping[str, Mapping[str, str]], *, timeout: float = 180
) -> ConnectWorker:
    """A standalone worker of ``broker``'s Kafka release on ``broker``, running ``connectors`` ({name: config}),
    with Debezium's PostgreSQL connector on its plugin path and JSON converters without embedded schemas.
    Returns once its REST API answers."""
    jt = kd._jvm_testing()
    work.mkdir(parents=True, exist_ok=True)
    (rest,) = jt.free_ports(1)
    worker = {
        "bootstrap.servers": broker.bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(work / "offsets"),
        "offset.flush.interval.ms": "1000",
        "listeners": f"http://127.0.0.1:{rest}",
        "plugin.path": str(debezium_plugin()),
        # Plugins found by their ServiceLoader manifests (Kafka's and Debezium's jars carry them), not by
        # scanning every class of the plugin path: a quicker start.
        "plugin.discovery": "service_load",
    }
    (work / "worker.properties").write_text(_properties(worker))
    files = []
    for name, config in connectors.items():
        path = work / f"{name}.properties"
        path.write_text(_properties({"name": name, **config}))
        files.append(str(path))
    cmd = [kd.java(broker.java_home), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    cmd += [f"-Dkafka.logs.dir={work}", *kd.log4j_options(broker.home)]
    cmd += ["-cp", kd.classpath(broker.home), STANDALONE, str(work / "worker.properties"), *files]
    out = open(work / "connect.out", "wb")  # noqa: SIM115 - ConnectWorker.stop closes it
    process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    w = ConnectWorker(work, rest, process, out)
    deadline = time.monotonic() + timeout
    while True:
        try:
            w.get("/")
            return w
        except (urllib.error.URLError, OSError, ValueError):
            if not w.alive() or time.monotonic() > deadline:
                w.stop()
                raise ConnectError(f"the Connect worker did not start; its output ends:\n{w.log()[-4000:]}") from None
            time.sleep(0.5)


@contextlib.contextmanager
def running_connect(
    broker: kd.Broker, work: Path, connectors: Mapping[str, Mapping[str, str]], **kwargs: float
) -> Iterator[ConnectWorker]:
    """:func:`start_connect` as a context manager that always stops the worker."""
    w = start_connect(broker, work, connectors, **kwargs)
    try:
        yield w
    finally:
        w.stop()


def postgres_connector(host_port: tuple[str, int], prefix: str, tables: str, slot: str) -> dict[str, str]:
    """Debezium's PostgreSQL connector on the built-in ``pgoutput`` plugin, as the ``postgres`` superuser:
    an initial snapshot, then the changes of ``tables`` (``schema.table``, comma separated) into
    ``<prefix>.<schema>.<table>``; deletes write the ``d`` event and a tombstone."""
    host, port = host_port
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": "postgres",
        "database.password": "unused",
        "database.dbname": "postgres",
        "topic.prefix": prefix,
        "table.include.list": tables,
        "slot.name": slot,
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "tombstones.on.delete": "true",
        "decimal.handling.mode": "double",
        "time.precision.mode": "connect",
    }


def main() -> int:
    print(kd.kafka_home(DEBEZIUM_KAFKA))
    print(debezium_plugin())
    return 0


if __name__ == "__main__":
    sys.exit(main())
