"""Packaging of the plugin jar, the kafka-server-start.sh-equivalent launch, and `kts plugin-path`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import jvm_testing as jt
import pytest

from rsm.jvm import launcher as jvm_launcher

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    jt.ensure_built()


def test_plugin_jar_holds_our_classes_only() -> None:
    names = zipfile.ZipFile(jt.PLUGIN_JAR).namelist()
    classes = [n for n in names if n.endswith(".class")]
    assert "io/kts/shim/PythonRemoteStorageManager.class" in classes
    # Kafka's API must come from the broker: a copy in a child-first plugin loader would break the cast
    assert all(n.startswith("io/kts/shim/") for n in classes), [n for n in classes if not n.startswith("io/kts/")]
    assert not [n for n in names if n.startswith(("org/", "kafka/"))]
    assert all(n.startswith(("io/", "META-INF/")) for n in names)
    assert not [n for n in names if n.startswith("META-INF/maven/")]  # no pom of ours either


def test_the_manifest_carries_the_release_version() -> None:
    from rsm._version import __version__

    manifest = zipfile.ZipFile(jt.PLUGIN_JAR).read("META-INF/MANIFEST.MF").decode()
    assert f"Implementation-Version: {__version__}\r\n" in manifest
    assert "Implementation-Title: kafka-tiered-storage-shim\r\n" in manifest


def test_the_shim_is_compiled_against_the_oldest_supported_kafka_release() -> None:
    """The pom's provided Kafka version is the first line of jvm-shim/kafka-releases.txt, and the build used
    Kafka's own jars of that release (from Maven Central, not a copy of its API)."""
    pom = (jt.SHIM_DIR / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert version and version.group(1) == jt.OLDEST_RELEASE == jt.KAFKA_RELEASES[0] == "3.6.2"
    assert [j.name for j in jt.kafka_api_jars()] == ["kafka-storage-api-3.6.2.jar", "kafka-clients-3.6.2.jar"]
    assert all(".m2" in j.parts or "repository" in j.parts for j in jt.kafka_api_jars())
    assert not list(jt.SHIM_DIR.rglob("org/apache/kafka")), "a copy of Kafka's API under jvm-shim/"
    out = subprocess.run(
        ["javap", "-cp", jt.test_classpath(), jt.SHIM_CLASS], capture_output=True, text=True, check=True
    ).stdout
    assert "implements org.apache.kafka.server.log.remote.storage.RemoteStorageManager" in out


def test_the_listed_releases_are_the_newest_patch_of_each_minor() -> None:
    minors = [tuple(map(int, v.split(".")[:2])) for v in jt.KAFKA_RELEASES]
    assert minors == sorted(set(minors)), jt.KAFKA_RELEASES  # one per minor, oldest first
    assert minors[0] == (3, 6) and minors[-1] == (4, 4)
    assert set(jt.DEFAULT_RELEASES) == {"3.6.2", "3.9.2", "4.4.0"}


def test_plugin_path_prints_the_jar_directory() -> None:
    from rsm.jvm import shim_cli

    r = subprocess.run(
        [sys.executable, "-m", "rsm.jvm.shim_cli", "plugin-path"], capture_output=True, text=True, cwd=jt.REPO
    )
    assert r.returncode == 0
    assert Path(r.stdout.strip()) == jt.PLUGIN_JAR.parent
    assert shim_cli.SHIM_CLASS == jt.SHIM_CLASS


def test_java_defaults_match_declared_config() -> None:
    """Settings.java reads the keys itself; the docs table comes from the declarations (the shim's keys, and the
    metrics key it also reads). They must agree; Java's "" is an unset (None) default."""
    from rsm.jvm.config import CONFIG_DEF
    from rsm.metrics.config import CONFIG_DEF as METRICS_CONFIG_DEF

    declared = {**CONFIG_DEF.keys, **METRICS_CONFIG_DEF.keys}
    src = (jt.SHIM_DIR / "src/io/kts/shim/Settings.java").read_text()
    found = dict(re.findall(r'longOf\(c, "([a-z.]+)", ([0-9_]+)L\)', src))
    found.update(re.findall(r'getOrDefault\("([a-z.]+)", "([^"]*)"\)', src))
    assert found, "could not parse Settings.java"
    for key, value in found.items():
        assert key in declared, key
        default = declared[key].default
        assert ("" if default is None else str(default)) == value.replace("_", ""), key


@pytest.fixture()
def kafka_home(tmp_path: Path) -> Path:
    home = tmp_path / "kafka"
    (home / "libs").mkdir(parents=True)
    (home / "config").mkdir()
    (home / "config" / "log4j.properties").write_text("")
    for jar in jt.kafka_api_jars():  # Kafka's own API jars, as a real installation's libs/ has them
        shutil.copy(jar, home / "libs" / jar.name)
    shutil.copy(jt.FAKE_KAFKA_JAR, home / "libs" / "kafka_2.13-fake.jar")
    (home / "libs" / "kafka_2.13-fake-javadoc.jar").write_bytes(b"")
    return home


def test_launch_options_follow_kafka_run_class(kafka_home: Path) -> None:
    env = {
        "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M",
        "KAFKA_OPTS": "-Dx=1 --add-exports java.base/sun.nio.ch=ALL-UNNAMED",
        "CLASSPATH": "/extra.jar",
        "LOG_DIR": "/var/log/kafka",
    }
    launch = jvm_launcher.build_launch("server.properties", ["--override", "a=b"], kafka_home=str(kafka_home), env=env)
    o = launch.jvm_options
    assert o[:2] == ["-Xmx512M", "-Xms512M"]
    assert "-server" not in o and "-XX:+ExplicitGCInvokesConcurrent" in o and "-XX:+UseG1GC" in o
    assert "-Xlog:gc*:file=/var/log/kafka/kafkaServer-gc.log:time,tags:filecount=10,filesize=100M" in o
    assert "-Dcom.sun.management.jmxremote" in o
    assert "-Dkafka.logs.dir=/var/log/kafka" in o
    assert f"-Dlog4j.configuration=file:{kafka_home}/config/log4j.properties" in o
    assert "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED" in o and "-Dx=1" in o
    assert o[-1] == jvm_launcher.ADD_OPENS
    assert launch.classpath[0] == "/extra.jar" and launch.classpath[-1] == str(jt.PLUGIN_JAR)
    assert not any(c.endswith("-javadoc.jar") for c in launch.classpath)
    assert launch.args == ["server.properties", "--override", "a=b"]


def test_missing_kafka_home_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(jvm_launcher.LaunchError, match="KAFKA_HOME"):
        jvm_launcher.build_launch("s.properties", env={})
    with pytest.raises(jvm_launcher.LaunchError, match="no libs/"):
        jvm_launcher.build_launch("s.properties", kafka_home=str(tmp_path), env={})


def _start(kafka_home: Path, tmp_path: Path, wait_ms: int | None) -> subprocess.Popen[str]:
    props = tmp_path / "server.properties"
    lines = [
        "remote.log.storage.system.enable=true",
        f"remote.log.storage.manager.class.name={jt.SHIM_CLASS}",
        "rsm.config.chunk.size=4194304",
        "rsm.config.storage.backend.class=filesystem",
        f"rsm.config.storage.root={tmp_path / 'store'}",
    ]
    if wait_ms is not None:
        lines.append(f"fake.kafka.wait.ms={wait_ms}")
    props.write_text("\n".join(lines) + "\n")
    env = dict(
        os.environ,
        KAFKA_HEAP_OPTS="-Xmx200M",
        KAFKA_OPTS="-Dkts.test.marker=m1",
        PYTHONPATH=str(jt.REPO),
        LOG_DIR=str(tmp_path / "logs"),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "rsm.jvm.shim_cli", "kafka-server-start", "--kafka-home", str(kafka_home), str(props)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_kafka_server_start_runs_the_broker_with_the_inprocess_transport(kafka_home: Path, tmp_path: Path) -> None:
    p = _start(kafka_home, tmp_path, None)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, out + err
    assert "FAKE-KAFKA start maxHeapMB=200" in out and "marker=m1" in out
    assert "FAKE-KAFKA transport=in-process" in out
    assert "FAKE-KAFKA main-probe not-found: RemoteResourceNotFoundException" in out
    # System.exit ran the broker's shutdown hook, which still reached Python (hooks adopted under JPype's)
    assert "FAKE-KAFKA hook-probe not-found" in out and "FAKE-KAFKA hook-closed" in out, out + err


def test_sigterm_runs_the_broker_shutdown_hook_through_python(kafka_home: Path, tmp_path: Path) -> None:
    p = _start(kafka_home, tmp_path, 60_000)
    try:
        assert p.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line or "main-probe" in line:
                break
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, out + err
    assert "FAKE-KAFKA hook-probe not-found" in out and "FAKE-KAFKA hook-closed" in out, out + err
