"""The compose stacks of demo/, checked without a Docker engine: YAML, references, broker configs, Dockerfile."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsm.cli.config_check import SHIM_CLASS, check_broker_properties
from rsm.cli.properties import read_properties

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
STACKS = {"s3": "minio", "gcs": "gcs", "azure": "azurite", "local": None}
EMULATOR_PORTS = {"minio": 9000, "gcs": 4443, "azurite": 10000}


def _compose(name: str) -> dict[str, Any]:
    return yaml.safe_load((DEMO / f"compose-{name}.yml").read_text())


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        out.append((source, target))
    return out


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_compose_references_exist(stack: str) -> None:
    doc = _compose(stack)
    services = doc["services"]
    named_volumes = set(doc.get("volumes") or {})
    assert "broker" in services
    for name, service in services.items():
        for dep in service.get("depends_on", []):
            assert dep in services, f"{stack}: {name} depends on missing service {dep}"
        for source, target in _bind_mounts(service):
            assert target.startswith("/"), (name, target)
            if source.startswith("."):
                assert (DEMO / source).exists(), f"{stack}: {name} mounts missing {source}"
            else:
                assert source in named_volumes, f"{stack}: {name} uses undeclared volume {source}"
        for port in service.get("ports", []):
            host, container = str(port).split(":")
            assert host.isdigit() and container.isdigit()
        if "build" in service:
            context = (DEMO / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file()
        assert "image" in service or "build" in service
    used = {source for s in services.values() for source, _ in _bind_mounts(s) if not source.startswith(".")}
    assert used == named_volumes, f"{stack}: declared but unused volumes {named_volumes - used}"
    broker = services["broker"]
    assert [str(p) for p in broker["ports"]] == ["9092:9092"]
    emulator = STACKS[stack]
    if emulator is not None:
        assert emulator in services and f"{EMULATOR_PORTS[emulator]}:{EMULATOR_PORTS[emulator]}" in [
            str(p) for p in services[emulator]["ports"]
        ]
        # the broker starts after an init step that creates the bucket/container and finished successfully
        inits = [
            d for d, cond in broker["depends_on"].items() if cond == {"condition": "service_completed_successfully"}
        ]
        assert len(inits) == 1 and emulator in services[inits[0]]["depends_on"]


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_broker_config_passes_our_validation(stack: str) -> None:
    doc = _compose(stack)
    mounts = dict((t, s) for s, t in _bind_mounts(doc["services"]["broker"]))
    props_path = DEMO / mounts["/etc/kafka/server.properties"]
    props = read_properties(props_path)
    result = check_broker_properties(props)
    assert result.errors == [] and result.ignored == [] and result.changes == [], result
    assert props["remote.log.storage.manager.class.name"] == SHIM_CLASS
    assert props["remote.log.storage.manager.class.path"] == "/opt/kafka-tiered-storage/jars/*"
    assert props["listeners"].split(",")[0].endswith(":9092")
    # the volumes the config names are mounted
    for key in ("log.dirs", "rsm.config.storage.root"):
        if key in props:
            assert props[key] in mounts, f"{stack}: {key}={props[key]} is not a mounted volume"
    key_files = [v for k, v in props.items() if k.endswith(".key.file")]
    assert key_files and all(Path(f).parent.as_posix() in mounts for f in key_files)
    # the emulator endpoint in the config is a service of the stack, at the port it listens on
    emulator = STACKS[stack]
    endpoints = [v for k, v in props.items() if "endpoint" in k.lower() or "connection.string" in k]
    if emulator is None:
        assert props["rsm.config.storage.backend.class"] == "filesystem" and not endpoints
    else:
        assert any(f"//{emulator}:{EMULATOR_PORTS[emulator]}" in e for e in endpoints), endpoints


def _dockerfile_runs() -> list[str]:
    text = (DEMO / "Dockerfile").read_text().replace("\\\n", " ")
    return [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]


def test_dockerfile_installs_the_wheel_built_from_this_repository() -> None:
    text = (DEMO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?", text, re.M)
    names = {alias for _, alias in stages if alias}
    for source in re.findall(r"^COPY --from=(\S+)", text, re.M):
        assert source in names, f"COPY --from={source} names no stage"
    assert "COPY . /src" in text  # the build context is this repository (compose: context ..)
    runs = _dockerfile_runs()
    wheel = [r for r in runs if "pip wheel" in r]
    assert len(wheel) == 1 and shlex.split(wheel[0])[-1] == "/src" and "-w /dist" in wheel[0]
    install = [r for r in runs if "pip install" in r]
    assert len(install) == 1
    m = re.search(r'"\$\(ls /dist/(kafka_tiered_storage)-\*\.whl\)\[([a-z0-9,]+)\]"', install[0])
    assert m, install[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert m.group(1) == project["name"].replace("-", "_")  # the wheel's file name for this project
    assert set(m.group(2).split(",")) <= set(project["optional-dependencies"])
    # the plugin path the broker configs name is the folder `kts plugin-path` prints
    assert any("kts plugin-path" in r and "/opt/kafka-tiered-storage/jars" in r for r in runs)
    for copied in re.findall(r"^COPY (?!--from)(\S+) ", text, re.M):
        assert (ROOT / copied).exists(), copied
    assert "apache/kafka:3.9" in text


def test_demo_readme_names_every_stack_and_file() -> None:
    readme = (DEMO / "README.md").read_text()
    for stack in STACKS:
        assert f"compose-{stack}.yml" in readme and f"{stack}/server.properties" in readme
    for command in re.findall(r"docker compose -f (demo/\S+)", readme):
        assert (ROOT / command).is_file()
    for service in re.findall(r"exec (\w+) ", readme):
        assert service in _compose("s3")["services"]
