"""deploy/: the broker images' Containerfiles (static properties; `make deploy-image-check` builds and runs them),
every Strimzi resource against Strimzi's own CRD schemas (vendored, deploy/strimzi/crds/), the PodMonitor against
Prometheus Operator's (vendored, deploy/prometheus-operator/), the plain Kubernetes objects against Kubernetes'
OpenAPI schemas (kubernetes-validate, offline), every pod we ship (the Jobs, and the pods Strimzi makes from the
Kafka resource) against the Pod Security Standards' restricted level, and the plugin's config of the Kafka
resource through the real `kts config check`."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pod_security
import pytest
import yaml

from rsm.core.manager import RemoteStorageManager
from rsm.jvm import startup_check

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
STRIMZI = DEPLOY / "strimzi"
CRDS = STRIMZI / "crds"
STRIMZI_VERSION = "1.2.0"
PROMETHEUS_OPERATOR = DEPLOY / "prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "0.93.0"
# Kubernetes release whose OpenAPI schemas the plain objects are checked against (kubernetes-validate bundles them)
K8S_VERSION = "1.33.0"
CONTAINERFILES = {"apache": DEPLOY / "apache-kafka.Containerfile", "strimzi": DEPLOY / "strimzi-kafka.Containerfile"}
# Strimzi 1.2.0's KafkaClusterSpec.FORBIDDEN_PREFIXES: spec.kafka.config keys the operator rejects
FORBIDDEN = (
    "listeners, advertised., broker., listener., host.name, port, inter.broker.listener.name, sasl., ssl., "
    "security., password., log.dir, zookeeper.connect, zookeeper.set.acl, zookeeper.ssl, "
    "zookeeper.clientCnxnSocket, authorizer., super.user, cruise.control.metrics.topic, "
    "cruise.control.metrics.reporter.bootstrap.servers, node.id, process.roles, controller., metadata.log.dir, "
    "zookeeper.metadata.migration.enable, client.quota.callback.static.kafka.admin., "
    "client.quota.callback.static.produce, client.quota.callback.static.fetch, "
    "client.quota.callback.static.storage.per.volume.limit.min.available., "
    "client.quota.callback.static.excluded.principal.name.list, prometheus.metrics.reporter., cordoned.log.dirs"
)
FORBIDDEN_PREFIXES = [p.strip() for p in FORBIDDEN.split(",")]
IMAGE_PATHS = {"venv": "/opt/kts-venv", "jars": "/opt/kafka-tiered-storage/jars", "cache": "/mnt/kts-cache"}


# --- the Containerfiles ----------------------------------------------------------------------------------------
def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, f"{path}: ends inside a continued line"
    return out


def stages(path: Path) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = [[]]
    for ins in instructions(path):
        if ins[0] == "FROM":
            found.append([])
        found[-1].append(ins)
    return found


@pytest.mark.parametrize("which", sorted(CONTAINERFILES))
def test_containerfile_base_is_a_pinned_build_arg_used_by_every_stage(which: str) -> None:
    path = CONTAINERFILES[which]
    preamble, *built = stages(path)
    args = dict(a[1].split("=", 1) for a in preamble if a[0] == "ARG" and "=" in a[1])
    base = args["KAFKA_IMAGE"]
    if which == "apache":
        assert re.fullmatch(r"docker\.io/apache/kafka:\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", base), base
    else:
        m = re.fullmatch(r"quay\.io/strimzi/kafka:(\d+\.\d+\.\d+)-kafka-(\d+\.\d+\.\d+)(@sha256:[0-9a-f]{64})?", base)
        assert m, base
        assert m.group(1) == STRIMZI_VERSION  # the same Strimzi as the vendored CRDs
        kafka = next(d for d in strimzi_docs() if d["kind"] == "Kafka")
        assert m.group(2) == kafka["spec"]["kafka"]["version"]  # and the Kafka the example asks for
    assert len(built) == 2
    for stage in built:
        assert stage[0][1].split()[0] == "${KAFKA_IMAGE}", stage[0]  # the stand-in goes through the same file


@pytest.mark.parametrize("which", sorted(CONTAINERFILES))
def test_containerfile_runs_as_non_root_with_extras_a_venv_and_a_cache_volume(which: str) -> None:
    final = stages(CONTAINERFILES[which])[-1]
    args = {a[1].split("=", 1)[0]: a[1].split("=", 1)[1] for a in final if a[0] == "ARG" and "=" in a[1]}
    users = [a[1] for a in final if a[0] == "USER"]
    assert users[-1] == "${KAFKA_USER}" and args["KAFKA_USER"] not in ("root", "0", "0:0")
    assert final[-1] == ("USER", "${KAFKA_USER}")  # nothing after it runs as root
    run = " ".join(a[1] for a in final if a[0] == "RUN")
    assert "-m venv /opt/kts-venv" in run and "[${KTS_EXTRAS}]" in run and args["KTS_EXTRAS"] == "s3"
    assert f'ln -s "$(/opt/kts-venv/bin/kts plugin-path)" {IMAGE_PATHS["jars"]}' in run
    assert 'chown "${KAFKA_USER}' in run and IMAGE_PATHS["cache"] in run
    volumes = [a[1] for a in final if a[0] == "VOLUME"]
    assert volumes == [f'["{IMAGE_PATHS["cache"]}"]']
    env = " ".join(a[1] for a in final if a[0] == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # a read-only root: no .pyc written at run time
    assert "rm -rf /tmp/kts-dist" in run  # the wheel does not stay in the image


@pytest.mark.parametrize("which", sorted(CONTAINERFILES))
def test_containerfile_copies_only_what_exists(which: str) -> None:
    for word, rest in instructions(CONTAINERFILES[which]):
        if word == "COPY" and not rest.startswith("--from"):
            *sources, _dest = rest.split()
            for source in sources:
                assert (REPO / source).exists(), f"{CONTAINERFILES[which].name}: COPY {source}: not in the repo"


def test_install_script_is_valid_sh_and_knows_the_three_package_managers() -> None:
    script = DEPLOY / "install-os-packages.sh"
    subprocess.run(["sh", "-n", str(script)], check=True)
    text = script.read_text()
    for manager in ("apt-get", "microdnf", "apk"):
        assert f"command -v {manager}" in text
    bad = subprocess.run(["sh", str(script), "bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown mode bogus" in bad.stderr


# --- the Strimzi and Kubernetes resources ----------------------------------------------------------------------
def yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def strimzi_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(STRIMZI.glob("*.yaml")) for d in yaml_docs(p)]


def doc_blocks() -> list[dict[str, Any]]:
    """Every YAML resource in docs/kubernetes.md's ```yaml blocks."""
    text = (REPO / "docs/kubernetes.md").read_text()
    return [d for block in re.findall(r"```yaml\n(.*?)```", text, re.S) for d in yaml.safe_load_all(block) if d]


def all_resources() -> Iterator[tuple[str, dict[str, Any]]]:
    for p in sorted(STRIMZI.glob("*.yaml")):
        for d in yaml_docs(p):
            yield f"{p.name}:{d['kind']}/{d['metadata']['name']}", d
    for d in doc_blocks():
        yield f"docs/kubernetes.md:{d['kind']}/{d['metadata']['name']}", d


def crd_validators(folder: Path = CRDS) -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    found = {}
    for path in sorted(folder.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = version["schema"]["openAPIV3Schema"]
                found[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return found


VALIDATORS = crd_validators()
MONITORING_VALIDATORS = crd_validators(PROMETHEUS_OPERATOR)


def validate(resource: dict[str, Any]) -> list[str]:
    """Schema errors of one resource: Strimzi's CRD schema for kafka.strimzi.io, Prometheus Operator's for
    monitoring.coreos.com, Kubernetes' otherwise."""
    for group, validators, owner in (
        ("kafka.strimzi.io/", VALIDATORS, f"Strimzi {STRIMZI_VERSION}"),
        ("monitoring.coreos.com/", MONITORING_VALIDATORS, f"Prometheus Operator {PROMETHEUS_OPERATOR_VERSION}"),
    ):
        if resource["apiVersion"].startswith(group):
            validator = validators.get((resource["apiVersion"], resource["kind"]))
            if validator is None:
                return [f"{owner} serves no {resource['kind']} in {resource['apiVersion']}"]
            return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(resource)]
    try:
        kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'/'.join(map(str, e.path))}: {e.message}"]
    return []


def test_the_vendored_crds_are_strimzis_and_carry_the_license() -> None:
    assert sorted(VALIDATORS) == [
        ("kafka.strimzi.io/v1", "Kafka"),
        ("kafka.strimzi.io/v1", "KafkaNodePool"),
        ("kafka.strimzi.io/v1", "KafkaTopic"),
    ]
    assert "Apache License" in (CRDS / "LICENSE").read_text()
    assert f"Strimzi {STRIMZI_VERSION}" in (CRDS / "README.md").read_text()


def test_the_vendored_podmonitor_crd_is_prometheus_operators_and_carries_the_license() -> None:
    assert sorted(MONITORING_VALIDATORS) == [("monitoring.coreos.com/v1", "PodMonitor")]
    crd = yaml.safe_load((PROMETHEUS_OPERATOR / "monitoring.coreos.com_podmonitors.yaml").read_text())
    assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == PROMETHEUS_OPERATOR_VERSION
    assert "Apache License" in (PROMETHEUS_OPERATOR / "LICENSE").read_text()
    assert (PROMETHEUS_OPERATOR / "NOTICE").is_file()
    assert f"Prometheus Operator {PROMETHEUS_OPERATOR_VERSION}" in (PROMETHEUS_OPERATOR / "README.md").read_text()


def test_every_example_resource_validates() -> None:
    resources = list(all_resources())
    kinds = {d["kind"] for _, d in resources}
    assert {"Kafka", "KafkaNodePool", "KafkaTopic", "Secret", "ConfigMap", "Job", "ServiceAccount"} <= kinds
    assert {"PodMonitor", "NetworkPolicy"} <= kinds
    problems = {name: errors for name, d in resources if (errors := validate(d))}
    assert problems == {}


@pytest.mark.parametrize(
    "kind, damage",
    [
        # Strimzi writes rsm.config values as strings: a YAML number there is refused by the API server
        ("Kafka", lambda d: d["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]["config"].update(x=5)),
        ("Kafka", lambda d: d["spec"]["kafka"]["tieredStorage"].update(type="s3")),
        ("KafkaNodePool", lambda d: d["spec"].pop("roles")),
        ("Job", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(volumeMount=[])),
        ("Secret", lambda d: d.update(stringData={"a": 1})),
        ("PodMonitor", lambda d: d["spec"]["podMetricsEndpoints"][0].update(portNumber=70000)),
        ("PodMonitor", lambda d: d["spec"]["podMetricsEndpoints"][0].update(scheme="gopher")),
        ("NetworkPolicy", lambda d: d["spec"]["ingress"][0]["ports"][0].update(port=[9464])),
        ("Job", lambda d: d["spec"]["template"]["spec"]["securityContext"].update(seccompProfile={"typ": "x"})),
    ],
)
def test_the_validation_can_fail(kind: str, damage: Any) -> None:
    resource = copy.deepcopy(next(d for _, d in all_resources() if d["kind"] == kind))
    assert validate(resource) == []
    damage(resource)
    assert validate(resource) != []


def kafka_resource() -> dict[str, Any]:
    return next(d for d in strimzi_docs() if d["kind"] == "Kafka")


def test_kafka_config_uses_no_key_strimzi_forbids() -> None:
    config = kafka_resource()["spec"]["kafka"]["config"]
    bad = [k for k in config for prefix in FORBIDDEN_PREFIXES if k == prefix or k.startswith(prefix)]
    assert bad == []


def test_every_file_the_plugin_reads_is_on_a_mounted_volume_under_mnt() -> None:
    spec = kafka_resource()["spec"]["kafka"]
    mounts = spec["template"]["kafkaContainer"]["volumeMounts"]
    assert all(m["mountPath"].startswith("/mnt/") for m in mounts)  # Strimzi's rule for extra volumes
    volumes = {v["name"]: v for v in spec["template"]["pod"]["volumes"]}
    assert {m["name"] for m in mounts} <= set(volumes)
    config = spec["tieredStorage"]["remoteStorageManager"]["config"]
    paths = [v for k, v in config.items() if k.endswith((".file", ".path")) and str(v).startswith("/")]
    assert paths
    for p in paths:
        assert any(p.startswith(m["mountPath"] + "/") for m in mounts), p
    secrets = {v["secret"]["secretName"] for v in volumes.values() if "secret" in v}
    defined = {d["metadata"]["name"] for d in yaml_docs(STRIMZI / "secrets.yaml")}
    assert secrets <= defined
    assert spec["tieredStorage"]["remoteStorageManager"]["classPath"] == IMAGE_PATHS["jars"] + "/*"
    assert config["python.executable"] == IMAGE_PATHS["venv"] + "/bin/python"


def broker_properties(config: dict[str, str]) -> dict[str, str]:
    """What Strimzi writes into the broker's configuration for a custom tieredStorage (its config under
    rsm.config.), as KafkaBrokerConfigurationBuilder does."""
    rsm = kafka_resource()["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": rsm["className"],
        "remote.log.storage.manager.class.path": rsm["classPath"],
        "remote.log.storage.manager.impl.prefix": "rsm.config.",
        **{f"rsm.config.{k}": str(v) for k, v in config.items()},
    }


def test_the_job_configmap_carries_the_brokers_plugin_config() -> None:
    config = kafka_resource()["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]["config"]
    cm = next(d for d in yaml_docs(STRIMZI / "kts-job.yaml") if d["kind"] == "ConfigMap")
    lines = [x for x in cm["data"]["tiered.properties"].splitlines() if x and not x.startswith("#")]
    in_cm = dict(x.split("=", 1) for x in lines)
    assert in_cm == {k: v for k, v in broker_properties(config).items() if k.startswith("rsm.config.")}


def test_the_kafka_resources_plugin_config_passes_kts_config_check(tmp_path: Path) -> None:
    """The rsm.config.* keys as Strimzi writes them, with the image's paths moved to this machine's: /mnt/... to
    a folder holding real keys and credentials, the venv's python and the jar folder to this install's."""
    config = dict(kafka_resource()["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]["config"])
    mnt = tmp_path / "mnt"
    subprocess.run(
        [str(Path(sys.executable).parent / "kts"), "keys", "generate", "--id", "k1", "--bits", "2048",
         "--out", str(mnt / "kts-keys")],
        check=True, capture_output=True,
    )  # fmt: skip
    (mnt / "kts-s3").mkdir()
    (mnt / "kts-s3/credentials").write_text("[default]\naws_access_key_id = a\naws_secret_access_key = b\n")
    plugin_path = subprocess.run(
        [str(Path(sys.executable).parent / "kts"), "plugin-path"], check=True, capture_output=True, text=True
    ).stdout.strip()
    props = broker_properties({k: str(v).replace("/mnt/", f"{mnt}/") for k, v in config.items()})
    props["rsm.config.python.executable"] = sys.executable
    props["remote.log.storage.manager.class.path"] = f"{plugin_path}/*"
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "kts"), "config", "check", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ignored (0):" in result.stdout and "change these" not in result.stdout
    assert result.stdout.rstrip().endswith("OK")
    honoured = len([k for k in props if k.startswith("rsm.config.")])
    assert f"honoured ({honoured}):" in result.stdout


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", quantity)
    assert m, quantity
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


def test_the_node_pools_memory_limit_holds_the_heap_and_the_sidecars_floor() -> None:
    pool = next(d for d in strimzi_docs() if d["kind"] == "KafkaNodePool")
    config = kafka_resource()["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]["config"]
    limit = _bytes(pool["spec"]["resources"]["limits"]["memory"])
    heap = int(pool["spec"]["jvmOptions"]["-Xmx"].rstrip("m")) << 20
    shared = int(config["jvm.sidecar.shared.memory.bytes"])
    needs = startup_check.needs_of(config, shared, RemoteStorageManager)
    assert needs.shared == shared  # whole chunks: nothing cut
    found = startup_check.problems(
        needs, shm=64 << 20, limit=startup_check.MemoryLimit(limit, 0, "example"), heap=heap, rss=150 << 20,
        shared_bytes=shared,
    )  # fmt: skip
    assert found == []  # fits the runtime's default 64 MiB /dev/shm and the pod's limit


def test_the_image_check_skips_with_one_line_where_podman_is_missing(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "check_images.py")],
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("deploy-image-check: SKIPPED: podman, runc, mmdebstrap, mvn, java not installed")


# --- Pod Security "restricted" on every pod we ship, the cache volumes, the PodMonitor ------------------------------
def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Strimzi's template merge: a node pool's template field replaces the Kafka resource's."""
    return {**base, **over}


def strimzi_pods() -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """The pods Strimzi makes from our resources, as far as our templates shape them: the brokers (one pod spec per
    node pool) and the entity operator. Strimzi's own volumes are PVCs, emptyDirs, Secrets and ConfigMaps."""
    kafka = kafka_resource()["spec"]
    makers = set(kafka) - {"kafka", "entityOperator"}
    # a component that makes pods of its own (cruiseControl, kafkaExporter) needs its pods added here
    assert not makers & {"cruiseControl", "kafkaExporter", "zookeeper"}, makers
    for pool in (d for d in strimzi_docs() if d["kind"] == "KafkaNodePool"):
        template = _merged(kafka["kafka"].get("template", {}), pool["spec"].get("template", {}))
        pod = template.get("pod", {})
        spec = {
            "securityContext": pod.get("securityContext", {}),
            "volumes": pod.get("volumes", []),
            "containers": [{"name": "kafka", **template.get("kafkaContainer", {})}],
        }
        notes = pod.get("metadata", {}).get("annotations", {})
        yield f"Kafka broker pod of pool {pool['metadata']['name']}", spec, notes
    eo = kafka.get("entityOperator")
    if eo:
        template = eo.get("template", {})
        pod = template.get("pod", {})
        containers = [
            {"name": name, **template.get(f"{part}Container", {})}
            for part, name in (("topicOperator", "topic-operator"), ("userOperator", "user-operator"))
            if part in eo
        ]
        spec = {
            "securityContext": pod.get("securityContext", {}),
            "volumes": pod.get("volumes", []),
            "containers": containers,
        }
        yield "entity operator pod", spec, pod.get("metadata", {}).get("annotations", {})


def shipped_pods() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    pods = list(strimzi_pods())
    for name, d in all_resources():
        template = {
            "Job": lambda r: r["spec"]["template"],
            "Deployment": lambda r: r["spec"]["template"],
            "Pod": lambda r: r,
        }.get(d["kind"])
        assert d["kind"] not in ("StatefulSet", "DaemonSet", "CronJob"), f"{name}: add its pods here"
        if template is not None:
            t = template(d)
            pods.append((name, t["spec"], t.get("metadata", {}).get("annotations", {})))
    return pods


def test_every_pod_we_ship_meets_the_restricted_pod_security_level() -> None:
    pods = shipped_pods()
    names = [name for name, _, _ in pods]
    assert "Kafka broker pod of pool dual-role" in names and "entity operator pod" in names
    assert sum("Job/" in n for n in names) == 2  # kts-job.yaml's and docs/kubernetes.md's
    assert "kts-gc.yaml:Deployment/kts-gc-watch" in names
    problems = {name: found for name, spec, notes in pods if (found := pod_security.restricted(spec, notes))}
    assert problems == {}
    for name, spec, _ in pods:
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


def _compliant() -> dict[str, Any]:
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
        "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x"}}],
    }


@pytest.mark.parametrize(
    "rule, damage",
    [
        ("Seccomp", lambda s: s["securityContext"].pop("seccompProfile")),
        ("Seccomp", lambda s: s["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"})),
        ("Running as Non-root", lambda s: s["securityContext"].pop("runAsNonRoot")),
        ("Running as Non-root", lambda s: s["containers"][0]["securityContext"].update(runAsNonRoot=False)),
        ("Running as Non-root user", lambda s: s["securityContext"].update(runAsUser=0)),
        ("Privilege Escalation", lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation")),
        ("Capabilities", lambda s: s["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"])),
        ("Capabilities", lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["CHOWN"])),
        ("Capabilities", lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
        ("Volume Types", lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
        ("Volume Types", lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}})),
        ("Host Namespaces", lambda s: s.update(hostNetwork=True)),
        ("Privileged Containers", lambda s: s["containers"][0]["securityContext"].update(privileged=True)),
        ("Host Ports", lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}])),
        ("Sysctls", lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
        ("SELinux", lambda s: s["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
        ("/proc Mount Type", lambda s: s["containers"][0]["securityContext"].update(procMount="Unmasked")),
        ("HostProcess", lambda s: s["securityContext"].update(windowsOptions={"hostProcess": True})),
        ("Privilege Escalation", lambda s: s.update(initContainers=[{"name": "i", "securityContext": {}}])),
    ],
)
def test_the_pod_security_checks_can_fail(rule: str, damage: Any) -> None:
    spec = _compliant()
    assert pod_security.restricted(spec) == []
    damage(spec)
    assert any(line.startswith(rule + ":") for line in pod_security.restricted(spec)), pod_security.restricted(spec)
    assert pod_security.restricted(_compliant(), {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"})


def _cache_config(name: str, d: dict[str, Any]) -> dict[str, str]:
    if d["kind"] == "Kafka":
        return {k: str(v) for k, v in d["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]["config"].items()}
    cm = next(x for x in yaml_docs(STRIMZI / "kts-job.yaml") if x["kind"] == "ConfigMap")
    lines = [x for x in cm["data"]["tiered.properties"].splitlines() if x and not x.startswith("#")]
    return {k[len("rsm.config.") :]: v for k, v in (x.split("=", 1) for x in lines)}


def test_every_disk_cache_volume_is_larger_than_the_cache() -> None:
    """docs/kubernetes.md's rule: the emptyDir holding fetch.chunk.cache.path must be larger than
    fetch.chunk.cache.size, or the kubelet evicts the pod when the cache fills."""
    checked = []
    for name, d in all_resources():
        if d["kind"] == "Kafka":
            t = d["spec"]["kafka"]["template"]
            volumes, mounts = t["pod"]["volumes"], t["kafkaContainer"]["volumeMounts"]
        elif d["kind"] == "Job" and name.startswith("kts-job.yaml"):
            spec = d["spec"]["template"]["spec"]
            volumes, mounts = spec["volumes"], spec["containers"][0]["volumeMounts"]
        else:
            continue
        config = _cache_config(name, d)
        assert config["fetch.chunk.cache.class"] == "disk"
        path = config["fetch.chunk.cache.path"]
        mount = next(m for m in mounts if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in volumes if v["name"] == mount["name"])
        assert _bytes(volume["emptyDir"]["sizeLimit"]) > int(config["fetch.chunk.cache.size"]), name
        checked.append(name)
    assert len(checked) == 2


def test_the_podmonitor_scrapes_the_plugins_port_on_the_broker_pods() -> None:
    docs = yaml_docs(STRIMZI / "monitoring.yaml")
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    config = kafka_resource()["spec"]["kafka"]["tieredStorage"]["remoteStorageManager"]["config"]
    port = int(config["metrics.prometheus.port"])
    assert config["metrics.prometheus.host"] == "0.0.0.0"  # reachable from outside the pod
    # the broker pods' labels (Strimzi sets these on every Kafka pod of the cluster)
    cluster = kafka_resource()["metadata"]["name"]
    labels = {"strimzi.io/cluster": cluster, "strimzi.io/kind": "Kafka"}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["portNumber"] == 9091 and endpoint["path"] == "/metrics"  # Strimzi's replication port
    moved = endpoint["relabelings"][0]
    assert moved["targetLabel"] == "__address__" and moved["replacement"] == f"${{1}}:{port}"
    assert re.sub(f"^{moved['regex']}$", moved["replacement"].replace("${1}", r"\g<1>"), "10.1.2.3:9091") == (
        f"10.1.2.3:{port}"
    )
    assert re.sub(f"^{moved['regex']}$", moved["replacement"].replace("${1}", r"\g<1>"), "[fd00::1]:9091") == (
        f"[fd00::1]:{port}"
    )
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": port}]


def _script_packages(manager: str) -> dict[str, list[str]]:
    """The packages install-os-packages.sh asks ``manager`` for, in runtime and in build mode."""
    text = (DEPLOY / "install-os-packages.sh").read_text()
    branch = text.split(f"command -v {manager} ", 1)[1].split("\nel", 1)[0]
    runtime = re.search(r'^\s*pkgs="([^"$]+)"', branch, re.M)
    build = re.search(r'pkgs="\$pkgs ([^"]+)"', branch)
    assert runtime and build, branch
    return {"runtime": runtime.group(1).split(), "build": runtime.group(1).split() + build.group(1).split()}


@pytest.mark.parametrize("manager", ["microdnf", "apk"])
def test_the_package_manager_stand_in_takes_the_scripts_command_lines(manager: str, tmp_path: Path) -> None:
    """What `make deploy-image-check` runs those branches with: every package the script names is one the stand-in
    knows, the real tool's options pass, and a name or option it does not know fails as the real tool would."""
    tool = tmp_path / manager
    tool.symlink_to(DEPLOY / "standin/package-manager.sh")
    record = tmp_path / "apt-calls"
    recorder = tmp_path / "apt-get"
    recorder.write_text(f'#!/bin/sh\necho "$*" >> {record}\n')
    recorder.chmod(0o755)
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "old").write_text("x")
    env = {"PATH": "/usr/bin:/bin", "KTS_STANDIN_APT": str(recorder), "KTS_STANDIN_APT_LISTS": str(lists)}
    options = ["--setopt=install_weak_deps=0", "--setopt=tsflags=nodocs", "install", "-y"]
    command = options if manager == "microdnf" else ["add", "--no-cache"]
    for mode, packages in _script_packages(manager).items():
        done = subprocess.run([str(tool), *command, *packages], env=env, capture_output=True, text=True)
        assert done.returncode == 0, (mode, done.stderr)
    calls = record.read_text().splitlines()
    assert calls[-1].startswith("install -y -q --no-install-recommends") and "openjdk-17-jdk-headless" in calls[-1]
    wrong = "python311" if manager == "microdnf" else "python-3"
    bad = subprocess.run([str(tool), *command, wrong], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and f"no package {wrong}" in bad.stderr
    if manager == "microdnf":
        bad = subprocess.run([str(tool), "install", "--best", "gcc"], env=env, capture_output=True, text=True)
        assert bad.returncode == 1 and "option --best not known" in bad.stderr
        assert subprocess.run([str(tool), "clean", "all"], env=env).returncode == 0
    else:
        bad = subprocess.run([str(tool), "add", "gcc"], env=env, capture_output=True, text=True)
        assert bad.returncode == 1 and "--no-cache" in bad.stderr
    assert list(lists.iterdir()) == []  # nothing of the lists left in the image


@pytest.mark.parametrize("manager, python", [("microdnf", "/usr/bin/python3.11"), ("apk", "/usr/bin/python3")])
def test_each_branch_of_the_install_script_runs_with_its_package_manager(
    manager: str, python: str, tmp_path: Path
) -> None:
    """The script itself, in both modes, where only ``manager`` is on the PATH (the stand-in, recording what it
    would install): the branch is taken, its commands pass, and the interpreter it names is written out."""
    if not Path(python).is_file():
        pytest.skip(f"{python} is not on this host")
    path = tmp_path / "bin"
    path.mkdir()
    for tool in ("sh", "basename", "rm"):
        (path / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    (path / manager).symlink_to(DEPLOY / "standin/package-manager.sh")
    record = tmp_path / "apt-calls"
    recorder = tmp_path / "apt-get"
    recorder.write_text(f'#!/bin/sh\necho "$*" >> {record}\n')
    recorder.chmod(0o755)
    (tmp_path / "lists").mkdir()
    env = {
        "PATH": str(path),
        "KTS_STANDIN_APT": str(recorder),
        "KTS_STANDIN_APT_LISTS": str(tmp_path / "lists"),
        "KTS_PYTHON_FILE": str(tmp_path / "kts-python"),
    }
    for mode in ("runtime", "build"):
        done = subprocess.run(
            ["sh", str(DEPLOY / "install-os-packages.sh"), mode], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith(f"at {python} via {manager}"), done.stdout
        assert (tmp_path / "kts-python").read_text().strip() == python
    installs = [line for line in record.read_text().splitlines() if line.startswith("install")]
    assert len(installs) == 2 and "openjdk-17-jdk-headless" not in installs[0] and "gcc" in installs[1]


def test_the_docs_say_how_to_pin_strimzis_base_by_digest() -> None:
    """Strimzi's base is pinned by tag (no registry here to read its digest): docs/kubernetes.md says how to pin
    the very image the Containerfile names."""
    args = [a[1] for a in stages(CONTAINERFILES["strimzi"])[0] if a[0] == "ARG" and "=" in a[1]]
    base = dict(a.split("=", 1) for a in args)["KAFKA_IMAGE"]
    text = (REPO / "docs/kubernetes.md").read_text()
    if "@sha256:" not in base:
        section = text.split("**Pinning Strimzi's base.**", 1)[1].split("\n- **", 1)[0]
        assert f"docker://{base}" in section and f"KAFKA_IMAGE={base}@sha256:<digest>" in section
        assert "docs/kubernetes.md" in CONTAINERFILES["strimzi"].read_text()


def test_the_jobs_memory_limit_holds_what_kts_holds() -> None:
    """`kts` in the Job reads through a memory chunk cache (the broker's disk cache is not its to fill): sized as
    the broker's memory tier, not as the 4 GiB disk cache, so `kts verify` of a large topic stays under the
    Job's limit, with room for Python and its libraries."""
    from rsm.cli.settings import tool_configs
    from rsm.core.memory_floor import memory_floor

    job = next(d for d in yaml_docs(STRIMZI / "kts-job.yaml") if d["kind"] == "Job")
    limit = _bytes(job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"])
    config = _cache_config("kts-job.yaml", job)
    assert int(config["fetch.chunk.cache.size"]) > limit  # the broker's disk cache alone would not fit
    tool = tool_configs(config)
    assert tool["fetch.chunk.cache.class"] == "memory"
    held = sum(n for _, n in memory_floor(tool))
    assert held + (256 << 20) <= limit, held
