"""Transient store failures reach the broker as Kafka's ``RetriableRemoteStorageException`` where the broker has
that class (newer Kafka), and as ``RemoteStorageException`` with the same message where it does not (older
brokers): the shim looks the class up at run time. Both transports, each in a real JVM on each Kafka release's own
jars (``jvm_testing.releases_under_test``): releases with the class and releases without it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jvm_testing as jt
import pytest

from backends.base import KeyNotFound, StorageBackendException
from rsm.errors import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
    storage_failure,
)
from rsm.jvm import codec as wire

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
PKG = "org.apache.kafka.server.log.remote.storage."
THROTTLED = "RetriableRemoteStorageException: upload throttled (SlowDown), gave up after 3 attempt(s)"
TIMED_OUT = "RetriableRemoteStorageException: GET timed out"


def test_backend_failures_marked_retriable_become_retriable_remote_storage_exceptions() -> None:
    transient = StorageBackendException("S3 upload of key 'k' failed (throttling): SlowDown", retriable=True)
    assert type(storage_failure("copy failed", transient)) is RetriableRemoteStorageException
    assert type(storage_failure("copy failed", StorageBackendException("access denied"))) is RemoteStorageException
    assert type(storage_failure("copy failed", KeyNotFound("k"))) is RemoteStorageException
    assert type(storage_failure("copy failed", OSError("disk full"))) is RemoteStorageException


def test_the_wire_status_of_each_failure() -> None:
    assert wire.error_parts(RetriableRemoteStorageException("slow"))[0] == wire.STATUS_RETRIABLE == 3
    assert wire.error_parts(RemoteResourceNotFoundException("gone"))[0] == wire.STATUS_NOT_FOUND
    assert wire.error_parts(RemoteStorageException("bad"))[0] == wire.STATUS_ERROR
    assert wire.error_parts(ValueError("bug"))[0] == wire.STATUS_ERROR


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    jt.ensure_built()
    d = tmp_path_factory.mktemp("retriable-segs")
    return jt.write_spec(d / "spec.tsv", jt.make_test_segments(d, batches=20))


def failing_config() -> dict[str, str]:
    return {
        "python.manager.class": "jvm_testing:FailingManager",
        "jvm.transport": "sidecar",
        "python.executable": sys.executable,
        "python.path": f"{jt.REPO / 'tests' / 'support'}:{jt.REPO}",
    }


def errors_over_sidecar(spec: Path, classpath: list[Path], java: str = "java") -> dict[str, str]:
    cmd = [
        java,
        "-cp",
        os.pathsep.join(str(p) for p in classpath),
        jt.HARNESS_CLASS,
        "errors",
        jt.SHIM_CLASS,
        str(spec),
        "--",
        *(f"{k}={v}" for k, v in failing_config().items()),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


def transient(release: jt.KafkaRelease) -> str:
    """What a transient failure arrives as on ``release``."""
    return "RetriableRemoteStorageException" if release.has_retriable else "RemoteStorageException"


@needs_java
@jt.on_each_kafka_release
def test_sidecar_throws_retriable_exactly_where_the_broker_has_the_class(spec: Path, version: str) -> None:
    release = jt.kafka_release(version)
    got = errors_over_sidecar(spec, release.classpath())
    assert got["hasRetriable"] == str(release.has_retriable).lower()
    assert got["copy"] == f"{PKG}{transient(release)} ({THROTTLED})"
    assert got["fetch"] == f"{PKG}{transient(release)} ({TIMED_OUT})"
    assert got["fetchIndex"] == f"{PKG}RemoteResourceNotFoundException (RemoteResourceNotFoundException: no such index)"
    assert got["delete"] == f"{PKG}RemoteStorageException (RemoteStorageException: access denied)"


def test_the_default_releases_include_one_with_and_one_without_the_class() -> None:
    """Both branches of the shim's lookup run in ``make test``."""
    kinds = {jt.KafkaRelease(v, (), Path()).has_retriable for v in jt.DEFAULT_RELEASES}
    assert kinds == {True, False}


INPROCESS = """
import sys
import jpype
sys.path[:0] = [{tests!r}, {repo!r}]
import jvm_testing as jt
from rsm.jvm import inprocess

jpype.startJVM(classpath={classpath!r}, convertStrings=False)
inprocess.install(adopt_hooks=False)
m = jpype.JClass("java.util.HashMap")()
m.put("python.manager.class", "jvm_testing:FailingManager")
m.put("jvm.transport", "inprocess")
print(jpype.JClass("io.kts.shim.harness.Harness").errors(jt.SHIM_CLASS, m, {spec!r}))
"""


def errors_in_process(spec: Path, classpath: list[Path]) -> dict[str, str]:
    """One JVM per process with JPype: each class path gets a fresh Python process."""
    support = str(jt.REPO / "tests" / "support")
    code = INPROCESS.format(tests=support, repo=str(jt.REPO), classpath=[str(p) for p in classpath], spec=str(spec))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


@needs_java
@jt.on_each_kafka_release
def test_inprocess_maps_retriable_the_same_way_as_the_sidecar(spec: Path, version: str) -> None:
    pytest.importorskip("jpype")
    release = jt.kafka_release(version)
    got = errors_in_process(spec, release.classpath())
    assert got["hasRetriable"] == str(release.has_retriable).lower()
    assert got["copy"] == f"{PKG}{transient(release)} ({THROTTLED})"
    assert got["delete"] == f"{PKG}RemoteStorageException (RemoteStorageException: access denied)"
    assert got["fetch"].startswith(f"{PKG}{transient(release)} (")
    assert TIMED_OUT in got["fetch"]
