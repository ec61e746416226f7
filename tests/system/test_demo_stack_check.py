"""demo/stack-check/stack_check.py without a container engine: where it cannot run it says why in one line and
passes (CI has no podman), a wrong KAFKA_HOME is an error, and the podman settings it writes stay within the
host's limits. The check itself (`make demo-stack-check`) starts the stacks for real."""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "demo" / "stack-check" / "stack_check.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stack_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_skips_with_one_line_without_kafka_home() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_HOME"}
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "demo-stack-check: SKIPPED: KAFKA_HOME is not set (a Kafka 3.6+ distribution: no Kafka image can be pulled "
        "here)"
    ]


def test_skips_with_one_line_without_podman(tmp_path: Path) -> None:
    # a PATH with no podman on it; KAFKA_HOME is set, so podman is the reason given
    env = {**os.environ, "KAFKA_HOME": str(tmp_path), "PATH": str(tmp_path)}
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "demo-stack-check: SKIPPED: podman is not installed (apt-get install podman runc mmdebstrap)"
    ]


def test_a_kafka_home_that_is_no_kafka_fails(tmp_path: Path) -> None:
    module = _load()
    if module.skip_reason(str(tmp_path)) is not None:
        pytest.skip("podman is not installed: the check skips before it looks at KAFKA_HOME")
    result = _run({**os.environ, "KAFKA_HOME": str(tmp_path)})
    assert result.returncode == 1
    assert f"FAIL: KAFKA_HOME={tmp_path} is not a Kafka distribution" in result.stdout


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
