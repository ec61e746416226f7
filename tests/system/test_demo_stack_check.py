"""demo/stack-check/stack_check.py without a container engine: where it cannot run it says why in one line and
passes (CI has no podman), the stand-in Kafka image's build context carries the bin/ scripts the broker image
runs, and the podman settings it writes stay within the host's limits. The check itself (`make demo-stack-check`)
starts the stacks for real."""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "demo" / "stack-check" / "stack_check.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stack_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_skips_with_one_line_without_podman(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # a PATH with no podman on it
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "demo-stack-check: SKIPPED: podman is not installed (apt-get install podman runc mmdebstrap)"
    ]


def _fake_home(tmp_path: Path) -> Path:
    """A Kafka home as kafka_dist assembles it, with the tools' classes as empty entries of a jar."""
    home = tmp_path / "home"
    (home / "libs").mkdir(parents=True)
    (home / "config").mkdir()
    (home / "config" / "log4j2.properties").write_text("status = warn\n")
    (home / "config" / "tools-log4j2.properties").write_text("status = warn\n")
    with zipfile.ZipFile(home / "libs" / "kafka-tools-4.4.0.jar", "w") as z:
        for name in ("TopicCommand", "ConsoleProducer", "BrokerApiVersionsCommand", "ProducerPerformance"):
            z.writestr(f"org/apache/kafka/tools/{name}.class", b"")
        z.writestr("org/apache/kafka/tools/consumer/ConsoleConsumer.class", b"")
    with zipfile.ZipFile(home / "libs" / "kafka_2.13-4.4.0.jar", "w") as z:
        z.writestr("kafka/tools/StorageTool.class", b"")
    return home


def test_the_kafka_context_has_the_scripts_the_broker_image_runs(tmp_path: Path) -> None:
    module = _load()
    context = module.kafka_context(_fake_home(tmp_path), tmp_path / "context")
    assert (context / "libs" / "kafka_2.13-4.4.0.jar").is_file()
    assert (context / "config" / "log4j2.properties").is_file()
    used = {
        m
        for f in (REPO / "demo").rglob("*")
        if f.is_file()
        for m in re.findall(r"kafka-[a-z-]+\.sh", f.read_text(errors="replace"))
    }
    used |= set(re.findall(r'"(kafka-[a-z-]+\.sh)"', SCRIPT.read_text()))
    used.discard("kafka-run-class.sh")
    for name in used | {"kafka-run-class.sh"}:
        script = context / "bin" / name
        assert script.is_file(), f"the broker image runs {name}"
        assert script.stat().st_mode & 0o111
    topics = (context / "bin" / "kafka-topics.sh").read_text()
    assert "org.apache.kafka.tools.TopicCommand" in topics
    assert "kafka.tools.StorageTool" in (context / "bin" / "kafka-storage.sh").read_text()
    assert (
        "org.apache.kafka.tools.consumer.ConsoleConsumer" in (context / "bin" / "kafka-console-consumer.sh").read_text()
    )
    assert "kafka.Kafka" in (context / "bin" / "kafka-server-start.sh").read_text()


def test_the_scripts_run_this_kafkas_classes(tmp_path: Path) -> None:
    """The generated scripts start a JVM on the context's libs/ with the class they name: a tiny main class put
    where StorageTool would be prints its arguments and the JVM options the script passed."""
    home = _fake_home(tmp_path)
    src = tmp_path / "src" / "kafka" / "tools"
    src.mkdir(parents=True)
    (src / "StorageTool.java").write_text(
        "package kafka.tools;\npublic class StorageTool { public static void main(String[] a) {"
        ' System.out.println(String.join(" ", a) + "|" + System.getProperty("log4j2.configurationFile")); } }\n'
    )
    classes = tmp_path / "classes"
    subprocess.run(["javac", "-d", str(classes), str(src / "StorageTool.java")], check=True)
    jar = home / "libs" / "kafka_2.13-4.4.0.jar"
    jar.unlink()
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    context = _load().kafka_context(home, tmp_path / "context")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    out = subprocess.run(
        [str(context / "bin" / "kafka-storage.sh"), "random-uuid"], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"random-uuid|{context / 'config' / 'tools-log4j2.properties'}"


def test_containers_conf_keeps_ulimits_finite_and_within_the_hard_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _load()
    monkeypatch.setattr(module.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    limits = {resource.RLIMIT_NOFILE: (1024, 4096), resource.RLIMIT_NPROC: (100, resource.RLIM_INFINITY)}
    monkeypatch.setattr(module.resource, "getrlimit", lambda which: limits[which])
    text = module.containers_conf(tmp_path).read_text()
    assert 'default_ulimits = ["nofile=4096:4096", "nproc=16384:16384"]' in text
    assert 'runtime = "runc"' in text and 'cgroup_manager = "cgroupfs"' in text


def test_containers_conf_names_a_missing_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _load()
    monkeypatch.setattr(module.shutil, "which", lambda tool: None if tool == "mmdebstrap" else f"/usr/bin/{tool}")
    with pytest.raises(module.CheckFailed, match="mmdebstrap is not installed"):
        module.containers_conf(tmp_path)
