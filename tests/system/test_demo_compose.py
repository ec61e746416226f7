"""The compose stacks of demo/, checked without a container engine: the Compose specification's JSON schema,
pinned images, every file they reference (also the files those name inside the containers), the broker
configs and the Dockerfile. Starting them for real is ``make demo-stack-check`` (demo/stack-check/)."""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from rsm.cli.config_check import SHIM_CLASS, check_broker_properties
from rsm.cli.properties import read_properties
from rsm.jvm.config import CONFIG_DEF as SHIM_CONFIG_DEF

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"
# stack -> (emulator service, its port, the one-shot service that prepares the bucket)
STACKS: dict[str, tuple[str | None, int | None, str | None]] = {
    "local": (None, None, None),
    "s3": ("seaweedfs", 8333, "s3-init"),
    "gcs": ("gcs", 4443, "gcs-init"),
    "azure": ("azurite", 10000, "azurite-init"),
    "aws": (None, None, "s3-check"),
}
BROKER_IMAGE = "localhost/kts-demo-broker:dev"
METRICS_PORT = 9464
# What the interpolation sees: nothing set (the defaults apply), except the AWS stack's required variables.
REQUIRED_ENV = {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s", "KTS_S3_BUCKET": "b", "KTS_S3_REGION": "r"}
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:-|:\?)([^}]*))?\}")


@functools.cache
def compose_validator() -> jsonschema.Draft202012Validator:
    schema = compose_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def compose_schema() -> dict[str, Any]:
    """The Compose specification's schema (compose-spec/compose-spec, schema/compose-spec.json) as vendored by
    check-jsonschema, whose version pyproject.toml pins."""
    text = (importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text()
    return json.loads(text)


def raw(stack: str) -> dict[str, Any]:
    return yaml.safe_load((DEMO / f"compose-{stack}.yml").read_text())


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?message}`` (the only forms the files use)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.groups()
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg or ""

    out = VARIABLE.sub(one, value)
    assert "${" not in out, f"an interpolation form the check does not know: {value}"
    return out


def resolved(stack: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return interpolate(raw(stack), REQUIRED_ENV if env is None else env)


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    return [tuple(v.split(":")[:2]) for v in service.get("volumes", [])]  # type: ignore[misc]


def long_running(services: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in services.items() if v.get("restart") != "no"}


def dockerfile_args() -> dict[str, str]:
    text = (DEMO / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_compose_file_follows_the_compose_specification(stack: str) -> None:
    compose_validator().validate(raw(stack))  # as written
    compose_validator().validate(resolved(stack))  # as an engine reads it


def test_the_schema_check_catches_a_broken_file() -> None:
    doc = raw("s3")
    doc["services"]["broker"]["depends_on"] = "s3-init"  # a list or a mapping
    doc["services"]["seaweedfs"]["restart_policy"] = "always"  # not a service key
    errors = compose_validator().iter_errors(doc)
    paths = {"/".join(map(str, e.absolute_path)) for e in errors}
    assert {"services/seaweedfs", "services/broker/depends_on"} <= paths, paths


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_image_is_pinned(stack: str) -> None:
    services = raw(stack)["services"]
    built = {s["image"] for s in services.values() if "build" in s}
    assert built == {BROKER_IMAGE}, "one image of ours, built by one service"
    assert sum("build" in s for s in services.values()) == 1
    for name, service in services.items():
        image = service["image"]
        if image == BROKER_IMAGE:  # ours: built here, never pulled
            assert "build" in service or service.get("pull_policy") == "never", name
            continue
        # a public image: a variable (for local stand-ins) whose default is a fully qualified, tagged name
        m = re.fullmatch(r"\$\{KTS_[A-Z0-9_]+_IMAGE:-([^}]+)\}", image)
        assert m, f"{stack}/{name}: {image} is not ${{KTS_..._IMAGE:-<pinned default>}}"
        registry, _, rest = m.group(1).partition("/")
        repository, _, tag = rest.rpartition(":")
        assert "." in registry and repository and tag, f"{stack}/{name}: {m.group(1)} is not registry/repo:tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{stack}/{name}: tag {tag} is not a version"
    # the broker's base images: build arguments with the same pinned defaults as the Dockerfile's
    args = services["broker"]["build"]["args"]
    defaults = dockerfile_args()
    assert set(args) == set(defaults) == {"BASE_IMAGE", "KAFKA_IMAGE"}
    for arg, value in args.items():
        assert re.fullmatch(rf"\$\{{KTS_{arg}:-{re.escape(defaults[arg])}\}}", value), (arg, value)
        assert re.search(r":[\w.-]*\d[\w.-]*$", defaults[arg]) and "latest" not in defaults[arg], defaults[arg]


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_referenced_file_exists(stack: str) -> None:
    doc = resolved(stack)
    services = doc["services"]
    named_volumes = set(doc.get("volumes") or {})
    for name, service in services.items():
        for source, target in bind_mounts(service):
            assert target.startswith("/"), (name, target)
            if source.startswith("."):
                assert (DEMO / source).is_file(), f"{stack}: {name} mounts missing {source}"
            else:
                assert source in named_volumes, f"{stack}: {name} uses undeclared volume {source}"
        if "build" in service:
            context = (DEMO / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file()
        for dep in service.get("depends_on", {}):
            assert dep in services, f"{stack}: {name} depends on missing service {dep}"
    used = {source for s in services.values() for source, _ in bind_mounts(s) if not source.startswith(".")}
    assert used == named_volumes, f"{stack}: declared but unused volumes {named_volumes - used}"


def _mounted(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> the file of this repository mounted there."""
    return {target: (DEMO / source).resolve() for source, target in bind_mounts(service) if source.startswith(".")}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_monitoring_is_wired_inside_the_containers(stack: str) -> None:
    """Prometheus scrapes the broker's metrics port and loads our rules; Grafana's provisioning finds the data
    source and our dashboard: every path a mounted file names is a mounted file in that container."""
    services = resolved(stack)["services"]
    prometheus = _mounted(services["prometheus"])
    command = dict(a.split("=", 1) for a in services["prometheus"]["command"])
    config = yaml.safe_load(prometheus[command["--config.file"]].read_text())
    assert [job["static_configs"][0]["targets"] for job in config["scrape_configs"]] == [[f"broker:{METRICS_PORT}"]]
    assert config["rule_files"] and all(prometheus[f].is_file() for f in config["rule_files"])
    assert {prometheus[f] for f in config["rule_files"]} == {ROOT / "rsm/metrics/monitoring/prometheus-alerts.yml"}
    assert any(t == "/prometheus" for _, t in bind_mounts(services["prometheus"]))  # its data in a volume

    grafana = services["grafana"]
    mounted = _mounted(grafana)
    datasources = [
        d
        for f, p in mounted.items()
        if "/provisioning/datasources/" in f
        for d in yaml.safe_load(p.read_text())["datasources"]
    ]
    assert [(d["type"], d["url"], d.get("isDefault")) for d in datasources] == [
        ("prometheus", "http://prometheus:9090", True)
    ]
    providers = [
        p
        for f, path in mounted.items()
        if "/provisioning/dashboards/" in f
        for p in yaml.safe_load(path.read_text())["providers"]
    ]
    folders = {p["options"]["path"] for p in providers}
    dashboards = {f: p for f, p in mounted.items() if any(f.startswith(d + "/") for d in folders)}
    assert set(dashboards.values()) == {ROOT / "rsm/metrics/monitoring/grafana-dashboard.json"}
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] in dashboards
    dashboard = json.loads(next(iter(dashboards.values())).read_text())
    # provisioning does not fill an import's ${DS_...} inputs: the panels must pick the data source themselves
    assert not dashboard.get("__inputs"), "a provisioned dashboard cannot have __inputs"


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_health_checks_shm_and_start_order(stack: str) -> None:
    services = resolved(stack)["services"]
    emulator, port, init = STACKS[stack]
    assert {"broker", "prometheus", "grafana"} <= set(services)
    for name, service in long_running(services).items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{stack}: {name} has no health check"
    broker = services["broker"]
    size = re.fullmatch(r"(\d+)([kmg])", broker["shm_size"])
    region = SHIM_CONFIG_DEF.keys["jvm.sidecar.shared.memory.bytes"].default  # the sidecar's default region fits
    assert size and int(size.group(1)) * {"k": 2**10, "m": 2**20, "g": 2**30}[size.group(2)] > region
    assert "--skip" not in json.dumps(broker)
    if emulator is not None:
        published = [p.rsplit(":", 1)[1] for p in services[emulator]["ports"]]
        assert str(port) in published
        assert broker["depends_on"][emulator] == {"condition": "service_healthy"}
    if init is not None:
        one_shot = services[init]
        assert one_shot["restart"] == "no" and one_shot["image"] == BROKER_IMAGE
        assert one_shot["entrypoint"][:2] == ["kts-demo-init", "bucket"]
        # no depends_on: podman < 5.6 cannot start a container whose finished dependency has dependencies
        assert "depends_on" not in one_shot
        assert broker["depends_on"][init] == {"condition": "service_completed_successfully"}
        assert dict(bind_mounts(one_shot)) == {
            s: t for s, t in bind_mounts(broker) if t == "/etc/kafka/server.properties"
        }
    assert set(long_running(services)) == {"broker", "prometheus", "grafana"} | ({emulator} if emulator else set())
    # every published port listens on the host's loopback only (anonymous Grafana, an any-key S3 emulator)
    for name, service in services.items():
        for published in service.get("ports", []):
            assert published.startswith("127.0.0.1:"), (name, published)


def test_the_shared_services_are_the_same_in_every_stack() -> None:
    docs = {stack: raw(stack)["services"] for stack in STACKS}
    for service in ("prometheus", "grafana"):
        assert len({json.dumps(d[service], sort_keys=True) for d in docs.values()}) == 1, service
    shared = ("build", "image", "shm_size", "ports", "healthcheck")
    assert len({json.dumps({k: d["broker"][k] for k in shared}, sort_keys=True) for d in docs.values()}) == 1


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_broker_config_passes_our_validation(stack: str, tmp_path: Path) -> None:
    services = resolved(stack)["services"]
    mounts = {t: s for s, t in bind_mounts(services["broker"])}
    # checked as the broker's entrypoint checks it: ${NAME} placeholders filled in first (the AWS stack's, from
    # demo/.env; here .env.example's values), since the check builds the backend's client from the values
    example = dict(
        line.split("=", 1) for line in (DEMO / ".env.example").read_text().splitlines() if re.match(r"\w+=", line)
    )
    mounted = (DEMO / mounts["/etc/kafka/server.properties"]).read_text()
    rendered = tmp_path / "server.properties"
    rendered.write_text(re.sub(r"\$\{(\w+)\}", lambda m: example[m.group(1)], mounted))
    props = read_properties(rendered)
    result = check_broker_properties(props)
    assert result.errors == [] and result.ignored == [] and result.changes == [], result
    assert props["remote.log.storage.manager.class.name"] == SHIM_CLASS
    assert props["remote.log.storage.manager.class.path"] == "/opt/kafka-tiered-storage/jars/*"
    assert props["listeners"].split(",")[0].endswith(":9092")
    # the plugin's endpoint listens on every interface at the port Prometheus scrapes
    assert props["rsm.config.metrics.prometheus.host"] == "0.0.0.0"
    assert props["rsm.config.metrics.prometheus.port"] == str(METRICS_PORT)
    assert (
        f"127.0.0.1:${{KTS_METRICS_PORT:-{METRICS_PORT}}}:{METRICS_PORT}" in raw(stack)["services"]["broker"]["ports"]
    )
    for key in ("log.dirs", "rsm.config.storage.root"):
        if key in props:
            assert props[key] in mounts, f"{stack}: {key}={props[key]} is not a mounted volume"
    key_files = [v for k, v in props.items() if k.endswith(".key.file")]
    assert key_files and all(Path(f).parent.as_posix() in mounts for f in key_files)
    emulator, port, _ = STACKS[stack]
    endpoints = [v for k, v in props.items() if "endpoint" in k.lower() or "connection.string" in k]
    if stack == "local":
        assert props["rsm.config.storage.backend.class"] == "filesystem" and not endpoints
    elif stack == "aws":  # the SDK's own endpoint; bucket and region from demo/.env, filled in by the entrypoint
        assert not endpoints and "aws.access.key.id" not in json.dumps(props)
        placeholders = set(re.findall(r"\$\{(\w+)\}", (DEMO / "aws/server.properties").read_text()))
        assert placeholders == {"KTS_S3_BUCKET", "KTS_S3_REGION"}
        assert placeholders <= set(services["broker"]["environment"]) & set(services["s3-check"]["environment"])
        example = (DEMO / ".env.example").read_text()
        for variable in (*placeholders, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert re.search(rf"^{variable}=", example, re.M), variable
    else:
        assert any(f"//{emulator}:{port}" in e for e in endpoints), endpoints


def test_the_aws_stack_refuses_to_start_without_its_variables() -> None:
    with pytest.raises(AssertionError, match="AWS_ACCESS_KEY_ID"):
        resolved("aws", {k: v for k, v in REQUIRED_ENV.items() if k != "AWS_ACCESS_KEY_ID"})
    assert ".env" in (DEMO / ".gitignore").read_text().split()


def _dockerfile_runs() -> list[str]:
    text = (DEMO / "Dockerfile").read_text().replace("\\\n", " ")
    return [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]


def test_dockerfile_installs_the_wheel_built_from_this_repository() -> None:
    text = (DEMO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?", text, re.M)
    assert [image for image, _ in stages] == ["${KAFKA_IMAGE}", "${BASE_IMAGE}", "${BASE_IMAGE}"]
    names = {alias for _, alias in stages if alias}
    for source in re.findall(r"^COPY --from=(\S+)", text, re.M):
        assert source in names, f"COPY --from={source} names no stage"
    runs = _dockerfile_runs()
    wheel = [r for r in runs if "pip wheel" in r]
    assert len(wheel) == 1 and shlex.split(wheel[0])[-1] == "/src" and "-w /dist" in wheel[0]
    # everything the wheel is built from is copied into /src
    copied = {p for line in re.findall(r"^COPY (?!--from)(.+) /src/?\S*$", text, re.M) for p in line.split()}
    assert {
        "pyproject.toml",
        "setup.py",
        "README.md",
        "rsm",
        "backends",
        "chunking",
        "encryption",
        "jvm-shim",
    } <= copied
    install = [r for r in runs if "pip install" in r]
    assert len(install) == 1
    m = re.search(r'"\$\(ls /dist/(kafka_tiered_storage)-\*\.whl\)\[([a-z0-9,]+)\]"', install[0])
    assert m, install[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert m.group(1) == project["name"].replace("-", "_")  # the wheel's file name for this project
    assert set(m.group(2).split(",")) <= set(project["optional-dependencies"])
    assert any("kts plugin-path" in r and "/opt/kafka-tiered-storage/jars" in r for r in runs)
    for line in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for copied_path in line.split():
            assert (ROOT / copied_path).exists(), copied_path
    assert re.search(r"^USER kafka$", text, re.M)  # the broker does not run as root


def test_demo_readme_says_how_to_start_each_stack() -> None:
    readme = (DEMO / "README.md").read_text()
    for stack in STACKS:
        assert f"compose-{stack}.yml" in readme and f"{stack}/server.properties" in readme
    for command in re.findall(r"compose -f (demo/\S+)", readme):
        assert (ROOT / command).is_file(), command
    for service in re.findall(r"exec (\S+) ", readme):
        assert service in raw("s3")["services"], service
    assert "no Docker engine needed" not in readme
    assert "make demo-stack-check" in readme
