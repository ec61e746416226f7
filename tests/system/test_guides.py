"""The guides' runnable blocks, followed as written (tests/support/guide_blocks.py finds them by their
``<!-- test: SCENARIO STEP -->`` markers).

What stands in for what, and nothing else is changed:
- the repository's venv stands in for the README's ``/opt/venvs/kts``: its ``python3.11 -m venv`` and ``pip
  install`` lines are not run (a wheel build and install per run would take minutes); the test checks instead
  that the extras the line names cover what the configuration needs and are installed in the stand-in;
- ``/etc/kafka`` is a temporary folder; the shim jar's folder is the one ``kts plugin-path`` printed;
- cloud endpoints are local servers: S3 is moto on 127.0.0.1 (``storage.s3.endpoint.url`` added, its bucket
  created under the guide's name, credentials in the environment as the default chain reads them), Vault is
  OpenBao's dev server (the guide's URL replaced, a token file written).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import guide_blocks as gb
import pytest
import yaml
from helpers import TIP
from key_services import vault_client
from packaging.requirements import Requirement

from rsm.cli.config_check import CLASS_NAME, CLASS_PATH, check_broker_properties
from rsm.cli.emulators import _s3_client
from rsm.cli.properties import BROKER_PREFIX

REPO = gb.REPO
STAND_IN = Path(sys.executable).parent
SCENARIOS = {"readme-broker", "readme-key-service", "strimzi", "iceberg-s3"}


def test_every_marked_block_belongs_to_a_scenario_a_test_runs() -> None:
    blocks = gb.all_blocks()
    assert {b.scenario for b in blocks} == SCENARIOS, "a scenario without a test, or a test without its blocks"
    for b in blocks:
        assert b.lang in ("bash", "sh", "properties", "yaml", "python"), b.where()


def test_a_marker_not_right_before_a_block_is_an_error() -> None:
    with pytest.raises(gb.GuideError, match="markers"):
        gb.marked_blocks("<!-- test: readme-broker install -->\n\ntext\n```bash\nls\n```\n", "x.md")


# --- extras -------------------------------------------------------------------------------------------------


def extras_needed(plugin: dict[str, str], commands: list[list[str]] = ()) -> set[str]:  # type: ignore[assignment]
    """The package extras a plugin configuration (``rsm.config.`` stripped) and ``kts`` commands import."""
    need = set()
    backend = plugin.get("storage.backend.class", "filesystem")
    if backend in ("s3", "gcs", "azure"):
        need.add(backend)
    if any(k.endswith(".provider") and v != "file" for k, v in plugin.items()):
        need.add("kms")
    if plugin.get("iceberg.mode.topics.regex"):
        need.add("iceberg")
    if plugin.get("jvm.transport") == "inprocess":
        need.add("jvm")
    if any(c[:2] == ["kts", "gc"] and "--bootstrap-server" in c for c in commands):
        need.add("cluster")
    return need


def declared_extras() -> dict[str, list[Requirement]]:
    dist = importlib.metadata.distribution("kafka-tiered-storage")
    out: dict[str, list[Requirement]] = {}
    for raw in dist.requires or []:
        req = Requirement(raw)
        m = re.search(r'extra == "([a-z0-9-]+)"', str(req.marker or ""))
        if m:
            out.setdefault(m.group(1), []).append(req)
    return out


def assert_installed(extras: set[str]) -> None:
    """Every requirement of ``extras`` is installed in the stand-in venv at a version the extra allows."""
    declared = declared_extras()
    for extra in sorted(extras):
        assert extra in declared, f"the guide names the extra {extra!r}, which pyproject.toml does not declare"
        for req in declared[extra]:
            if req.name == "kafka-tiered-storage":
                continue
            version = importlib.metadata.version(req.name)
            assert req.specifier.contains(version, prereleases=True), (extra, str(req), version)


def pip_extras(block: gb.Block) -> set[str]:
    """The extras of the block's ``pip install 'kafka-tiered-storage[...]'`` line."""
    for words in block.commands():
        if words[0].endswith("/pip") and words[1] == "install":
            m = re.fullmatch(r"kafka-tiered-storage\[([a-z0-9,]+)\](==.*)?", words[2])
            assert m, f"{block.where()}: {words[2]!r} installs no extras"
            return set(m.group(1).split(","))
    raise gb.GuideError(f"{block.where()}: no pip install line")


# --- the README's broker on S3, with key files and with a key service -----------------------------------------


class Host:
    """A broker host as the README sets it up, under ``root`` instead of /etc/kafka."""

    def __init__(self, root: Path, s3: Any, env: dict[str, str]) -> None:
        self.root = root
        self.s3 = s3
        self.env = env
        self.plugin_path = ""
        self.replace = {"/opt/venvs/kts/bin/": f"{STAND_IN}/", "/etc/kafka/": f"{root}/etc/kafka/"}

    def sub(self, text: str) -> str:
        for old, new in self.replace.items():
            text = text.replace(old, new)
        return text

    def run(self, block: gb.Block) -> list[str]:
        outputs = []
        for words in block.commands():
            if words[:3] == ["python3.11", "-m", "venv"]:
                assert words[3] == "/opt/venvs/kts", block.where()
                continue  # the stand-in venv exists
            if words[0].endswith("/pip"):
                continue  # checked by pip_extras against the configuration
            argv = [self.sub(w) for w in words]
            done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=180)
            assert done.returncode == 0, f"{block.where()}: {' '.join(words)} failed:\n{done.stdout}{done.stderr}"
            outputs.append(done.stdout)
            if words[-1:] == ["plugin-path"]:
                self.plugin_path = done.stdout.strip()
        return outputs

    def write_properties(self, props: dict[str, str]) -> Path:
        """server.properties with the guide's lines, the jar folder ``kts plugin-path`` printed, and the local S3."""
        class_path = props["remote.log.storage.manager.class.path"]
        assert class_path == "/opt/venvs/kts/lib/python3.11/site-packages/rsm/_jars/*", class_path
        assert self.plugin_path, "the install step did not run kts plugin-path"
        out = {k: self.sub(v) for k, v in props.items()}
        out["remote.log.storage.manager.class.path"] = f"{self.plugin_path}/*"
        out["rsm.config.storage.s3.endpoint.url"] = self.s3.endpoint
        path = self.root / "etc/kafka/server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{k}={v}\n" for k, v in out.items()))
        return path


def plugin_keys(props: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("rsm.config."): v for k, v in props.items() if k.startswith("rsm.config.")}


def round_trip(server_properties: Path, segment_factory: Any) -> str:
    """A segment copied and fetched back by the plugin configured from the file; its manifest's data key."""
    from rsm import RemoteStorageManager
    from rsm.core.manifest import SegmentManifest
    from rsm.core.object_keys import segment_keys

    props = dict(line.split("=", 1) for line in server_properties.read_text().splitlines())
    configs = plugin_keys(props)
    seg = segment_factory(target_bytes=48 * 1024, seed=55)
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        with m.fetch_log_segment(meta, 0) as f:
            assert f.read() == seg.log.read_bytes()
        key = segment_keys(configs["key.prefix"], meta).manifest
        bucket = configs["storage.s3.bucket.name"]
        raw = _s3_client(configs["storage.s3.endpoint.url"]).get_object(Bucket=bucket, Key=key)["Body"].read()
    finally:
        m.close()
    manifest = SegmentManifest.from_json_bytes(raw)
    assert manifest.encryption is not None, "the README's file encrypts"
    return str(manifest.encryption.data_key)


@pytest.fixture
def host(s3_moto_server: Any, tmp_path: Path) -> Host:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "guide", "AWS_SECRET_ACCESS_KEY": "guide"}
    env.pop("AWS_PROFILE", None)
    return Host(tmp_path, s3_moto_server, env)


def _bucket(host: Host, props: dict[str, str]) -> None:
    name = props["rsm.config.storage.s3.bucket.name"]
    client = _s3_client(host.s3.endpoint)
    if name not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket=name)  # "the bucket must exist"


@pytest.mark.timeout(300)
def test_readme_broker_on_s3_with_key_files(host: Host, segment_factory: Any, monkeypatch: Any) -> None:
    steps = gb.scenario("readme-broker")
    assert [b.step for b in steps] == ["install", "keys", "properties", "check", "topic"], "the README's order changed"
    props = gb.step(steps, "properties").properties()
    assert extras_needed(plugin_keys(props)) <= pip_extras(gb.step(steps, "install"))
    assert_installed(pip_extras(gb.step(steps, "install")))
    _bucket(host, props)
    host.run(gb.step(steps, "install"))
    host.run(gb.step(steps, "keys"))
    path = host.write_properties(props)
    out = host.run(gb.step(steps, "check"))
    assert out[-1].rstrip().endswith("OK"), out[-1]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "guide")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "guide")
    data_key = round_trip(path, segment_factory)
    assert data_key.startswith("k1:") and data_key.count(":") == 1  # a file pair: Aiven's format


@pytest.mark.timeout(900)
def test_readme_topic_created_on_three_brokers_set_up_as_written(host: Host, monkeypatch: Any) -> None:
    """The README's brokers, three of them (its topic has replication factor 3), each with the README's lines in its
    server.properties; then its ``kafka-topics.sh`` line, run as Kafka's TopicCommand with the bootstrap server
    replaced. The brokers start only if the plugin configured from those lines."""
    import kafka_dist as kd
    import kraft_cluster as kc

    steps = gb.scenario("readme-broker")
    props = gb.step(steps, "properties").properties()
    _bucket(host, props)
    host.run(gb.step(steps, "install"))
    host.run(gb.step(steps, "keys"))
    lines = host.write_properties(props).read_text()
    # The stand-in venv runs the package installed for the tests: the sidecar imports this source tree.
    plugin = lines + f"rsm.config.python.path={REPO}\n"
    for k, v in (("AWS_ACCESS_KEY_ID", "guide"), ("AWS_SECRET_ACCESS_KEY", "guide")):
        monkeypatch.setenv(k, v)
    cluster = kc.make_cluster(kd.kafka_home(kd.NEWEST_4X), host.root / "kafka", 3, plugin)
    try:
        cluster.start()
        (topic_line,) = gb.step(steps, "topic").commands()
        assert topic_line[0] == "kafka-topics.sh", topic_line
        args = [cluster.bootstrap if w == "localhost:9092" else w for w in topic_line[1:]]
        assert cluster.bootstrap in args, "the README's line names no localhost:9092 to replace"
        cluster.tool("topics", *args)
        topic = args[args.index("--topic") + 1]
        described = cluster.tool("topics", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", topic)
    finally:
        cluster.stop()
    summary = described.splitlines()[0]
    assert "PartitionCount: 6" in summary and "ReplicationFactor: 3" in summary, summary
    found = re.search(r"Configs: (\S+)", summary)
    assert found, summary
    configs = dict(c.split("=", 1) for c in found.group(1).split(","))
    expected = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--config")
    assert expected == {"remote.storage.enable": "true", "local.retention.ms": "3600000", "retention.ms": "2592000000"}
    for key, value in expected.items():
        assert configs.get(key) == value, (key, summary)


@pytest.mark.timeout(300)
def test_readme_broker_on_s3_with_a_key_service(
    host: Host,
    openbao: Any,
    segment_factory: Any,
    monkeypatch: Any,
) -> None:
    base = gb.scenario("readme-broker")
    steps = gb.scenario("readme-key-service")
    assert [b.step for b in steps] == ["install", "properties"]
    props = gb.step(base, "properties").properties()
    service = gb.step(steps, "properties").properties()
    replaced = [k for k in props if k.startswith("rsm.config.encryption.key.pair")]
    assert len(replaced) == 4, "the README says the key-service lines replace four lines"
    props = {k: v for k, v in props.items() if k not in replaced} | service
    assert extras_needed(plugin_keys(props)) <= pip_extras(gb.step(steps, "install"))
    assert_installed(pip_extras(gb.step(steps, "install")))

    key = service["rsm.config.encryption.key.pairs.vault1.key.id"]
    vault_client(openbao.url).secrets.transit.create_key(name=key, key_type="rsa-2048")
    host.replace["https://vault.example:8200"] = openbao.url
    token = Path(host.sub(service["rsm.config.encryption.key.pairs.vault1.vault.token.file"]))
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text("root\n")
    _bucket(host, props)
    host.run(gb.step(base, "install"))
    path = host.write_properties(props)
    out = host.run(gb.step(base, "check"))
    assert out[-1].rstrip().endswith("OK"), out[-1]
    assert not list(host.root.rglob("*.pem")), "no key file on the host"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "guide")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "guide")
    assert round_trip(path, segment_factory).startswith("vault1:vault-transit;rsa-oaep-sha256;")


# --- the Strimzi example, step by step, against what each resource needs --------------------------------------


class Cluster:
    """What the Strimzi guide's steps have made so far, as far as its resources depend on it: the images built
    (and their extras), local files, Secrets (and their keys), PostgreSQL roles and databases, applied resources.
    A command the check does not know is an error, so a new step needs a rule here."""

    def __init__(self) -> None:
        self.images: dict[str, set[str]] = {}
        self.files: set[str] = set()
        self.namespaces: set[str] = set()
        self.secrets: dict[str, set[str]] = {}
        self.roles: set[str] = set()
        self.databases: set[str] = set()
        self.applied: dict[tuple[str, str], dict[str, Any]] = {}

    def follow(self, block: gb.Block) -> None:
        for words in block.commands():
            command: list[str] = []
            for w in [*words, "&&"]:
                if w != "&&":
                    command.append(w)
                elif command:
                    self.command(block, command)
                    command = []

    def command(self, block: gb.Block, words: list[str]) -> None:
        where = f"{block.where()}: {' '.join(words)}"
        tool, args = words[0], words[1:]
        if tool == "podman" and args[0] == "build":
            opts = _options(args[1:])
            extras = next(v.split("=", 1)[1] for v in opts["--build-arg"] if v.startswith("KTS_EXTRAS="))
            assert (REPO / opts["-f"][0]).read_text().count("ARG KTS_EXTRAS") == 1, where
            self.images[opts["-t"][0]] = set(extras.split(","))
        elif tool == "podman" and args[0] == "push":
            assert args[1] in self.images, f"{where}: pushes an image no step built"
        elif tool == "kts" and args[:2] == ["keys", "generate"]:
            opts = _options(args[2:])
            for half in ("public", "private"):
                self.files.add(_local(f"{opts['--out'][0]}/{opts['--id'][0]}-{half}.pem"))
        elif tool == "printf":
            assert args[-2] == ">", where
            self.files.add(_local(args[-1]))
        elif tool == "psql":
            for sql in _options(args)["-c"]:
                if m := re.match(r"CREATE ROLE (\w+)", sql):
                    self.roles.add(m.group(1))
                elif m := re.match(r"CREATE DATABASE (\w+) OWNER (\w+)", sql):
                    assert m.group(2) in self.roles, f"{where}: the owner is created later"
                    self.databases.add(m.group(1))
        elif tool == "kubectl":
            self.kubectl(where, args)
        else:
            raise gb.GuideError(f"{where}: the Strimzi check has no rule for {tool!r}")

    def kubectl(self, where: str, args: list[str]) -> None:
        if args[:2] == ["create", "namespace"]:
            self.namespaces.add(args[2])
            return
        assert args[0] == "-n" and args[1] in self.namespaces, f"{where}: the namespace is not created before"
        verb, rest = args[2], args[3:]
        if verb == "create" and rest[:2] == ["secret", "generic"]:
            keys = set()
            for opt, value in (a.split("=", 1) for a in rest[3:] if a.startswith("--from-")):
                if opt == "--from-file":
                    key, _, path = value.rpartition("=")
                    assert _local(path) in self.files, f"{where}: {path} is made by no earlier step"
                    keys.add(key or Path(path).name)
                else:
                    keys.add(value.split("=", 1)[0])
            self.secrets[rest[2]] = keys
        elif verb == "apply":
            docs = [d for d in yaml.safe_load_all((REPO / _options(rest)["-f"][0]).read_text()) if d]
            for d in docs:  # one file is applied at once: its resources may name each other
                self.applied[(d["kind"], d["metadata"]["name"])] = d
            for d in docs:
                self.check(where, d)
        elif verb == "wait" or verb == "logs":
            kind, name = next(a for a in rest if "/" in a).split("/")
            kinds = {"kafka": "Kafka", "job": "Job"}
            assert (kinds[kind], name) in self.applied, f"{where}: {kind}/{name} is applied by no earlier step"
        elif verb == "exec":
            pool = next(d for (k, _), d in self.applied.items() if k == "KafkaNodePool")
            cluster = pool["metadata"]["labels"]["strimzi.io/cluster"]
            assert rest[0].startswith(f"{cluster}-{pool['metadata']['name']}-"), f"{where}: no such broker pod"
        elif verb == "run":
            assert any(a.startswith("--image=") for a in rest), where
        else:
            raise gb.GuideError(f"{where}: the Strimzi check has no rule for kubectl {verb}")

    def check(self, where: str, d: dict[str, Any]) -> None:
        kind = d["kind"]
        if kind == "Kafka":
            kafka = d["spec"]["kafka"]
            plugin = {k: str(v) for k, v in kafka["tieredStorage"]["remoteStorageManager"]["config"].items()}
            pod = kafka["template"]["pod"]
            container = kafka["template"]["kafkaContainer"]
            self.check_pod(where, "the brokers", kafka["image"], plugin, [], pod["volumes"], container)
            self.check_files(where, plugin, pod["volumes"], container["volumeMounts"])
            self.check_plugin_starts(where, kafka["tieredStorage"]["remoteStorageManager"], plugin)
            if uri := plugin.get("iceberg.mode.catalog.uri"):
                m = re.fullmatch(r"postgresql\+psycopg2://(\w+)@[^/]+/(\w+)", uri)
                assert m, uri
                assert m.group(1) in self.roles, f"{where}: the catalog's role {m.group(1)} is created later"
                assert m.group(2) in self.databases, f"{where}: the catalog's database {m.group(2)} is created later"
            pools = [p for (k, _), p in self.applied.items() if k == "KafkaNodePool"]
            assert pools, f"{where}: no KafkaNodePool for the brokers"
        elif kind in ("Job", "Deployment"):
            spec = d["spec"]["template"]["spec"]
            sa = spec.get("serviceAccountName")
            assert sa is None or ("ServiceAccount", sa) in self.applied, f"{where}: ServiceAccount {sa} is missing"
            plugin: dict[str, str] = {}
            for v in spec.get("volumes", []):
                if "configMap" in v:
                    cm = self.applied.get(("ConfigMap", v["configMap"]["name"]))
                    assert cm is not None, f"{where}: ConfigMap {v['configMap']['name']} is applied by no step"
                    for text in cm["data"].values():
                        plugin |= plugin_keys(dict(x.split("=", 1) for x in text.splitlines() if "=" in x))
            for c in spec["containers"]:
                self.check_pod(where, f"{kind}/{d['metadata']['name']}", c["image"], plugin,
                               [[*c.get("command", []), *c.get("args", [])]], spec.get("volumes", []), c)  # fmt: skip

    def check_pod(
        self, where: str, who: str, image: str, plugin: dict[str, str], commands: list[list[str]],
        volumes: list[dict[str, Any]], container: dict[str, Any],
    ) -> None:  # fmt: skip
        assert image in self.images, f"{where}: {who} run {image}, which no earlier step built"
        missing = extras_needed(plugin, commands) - self.images[image]
        assert not missing, f"{where}: {who} need the extras {sorted(missing)}, not in the image's KTS_EXTRAS"
        for v in volumes:
            if "secret" in v:
                name = v["secret"]["secretName"]
                assert name in self.secrets, f"{where}: {who} mount the Secret {name}, created by no earlier step"
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] in self.secrets, f"{where}: {who} read the Secret {ref['name']}, created later"
                assert ref["key"] in self.secrets[ref["name"]], f"{where}: Secret {ref['name']} has no {ref['key']}"

    def check_plugin_starts(self, where: str, rsm: dict[str, Any], plugin: dict[str, str]) -> None:
        """The broker lines Strimzi writes from the Kafka resource pass ``kts config check``: the plugin's
        configure() would accept them, Iceberg mode included. The files the config names live in the pods'
        Secrets, which check_files checks: a complaint that one cannot be read here is left out."""
        props = {
            "remote.log.storage.system.enable": "true",
            CLASS_NAME: rsm["className"],
            CLASS_PATH: rsm["classPath"],
            **{BROKER_PREFIX + k: v for k, v in plugin.items()},
        }
        mounted = [v for k, v in plugin.items() if k.endswith(".file")]
        errors = [e for e in check_broker_properties(props).errors if not any(f"'{f}'" in e for f in mounted)]
        assert errors == [], f"{where}: the brokers would not start the plugin: {errors}"

    def check_files(
        self, where: str, plugin: dict[str, str], volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]
    ) -> None:
        """Every file the plugin's config names is a key of the Secret mounted over its folder."""
        by_name = {v["name"]: v for v in volumes}
        for key, value in plugin.items():
            if not key.endswith(".file"):
                continue
            mount = next(m for m in mounts if value.startswith(m["mountPath"] + "/"))
            secret = by_name[mount["name"]]["secret"]["secretName"]
            name = value.removeprefix(mount["mountPath"] + "/")
            assert name in self.secrets[secret], f"{where}: {key}={value}, but Secret {secret} has no key {name}"


def _options(args: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for flag, value in zip(args, [*args[1:], ""], strict=True):
        if flag.startswith("-") and not value.startswith("-"):
            out.setdefault(flag, []).append(value)
    return out


def _local(path: str) -> str:
    return str(Path(path))


def test_the_strimzi_example_in_the_guides_order() -> None:
    steps = gb.scenario("strimzi")
    cluster = Cluster()
    for block in steps:
        cluster.follow(block)
    assert ("Kafka", "tiered") in cluster.applied and ("Deployment", "kts-gc-watch") in cluster.applied


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (("KTS_EXTRAS=s3,iceberg,cluster", "KTS_EXTRAS=s3"), "need the extras ['iceberg']"),
        (("KTS_EXTRAS=s3,iceberg,cluster", "KTS_EXTRAS=s3,iceberg"), "need the extras ['cluster']"),
        (("CREATE DATABASE iceberg", "CREATE DATABASE other"), "database iceberg is created later"),
        (("secret generic kts-iceberg-catalog", "secret generic kts-catalog"), "kts-iceberg-catalog, created later"),
        (("--from-file=./keys/k1-private.pem", ""), "has no key k1-private.pem"),
    ],
)
def test_the_strimzi_check_fails_on_a_broken_guide(damage: tuple[str, str], expected: str) -> None:
    text = (REPO / "docs/kubernetes.md").read_text()
    assert damage[0] in text
    blocks = gb.marked_blocks(text.replace(damage[0], damage[1]), "docs/kubernetes.md")
    cluster = Cluster()
    with pytest.raises(AssertionError, match=re.escape(expected)):
        for block in gb.scenario("strimzi", blocks):
            cluster.follow(block)


def test_the_strimzi_check_fails_when_a_step_comes_too_late() -> None:
    """The guide as it was: the catalog's Secret and database made after the brokers were applied."""
    blocks = gb.scenario("strimzi")
    late = [b for b in blocks if b.step != "step-3"]
    late.insert(late.index(gb.step(blocks, "step-4")) + 1, gb.step(blocks, "step-3"))
    cluster = Cluster()
    with pytest.raises(AssertionError, match="created later"):
        for block in late:
            cluster.follow(block)


# --- the Iceberg guide: Spark and DuckDB over a table on S3 ----------------------------------------------------

SPARK_RUN = """
import sys
exec(compile(sys.argv[2], "docs/iceberg.md", "exec"))
print("GUIDE-ROWS", spark.sql("SELECT count(*) FROM kafka_tiered.kafka.orders").collect()[0][0])
spark.stop()
"""


@pytest.mark.timeout(900)
def test_iceberg_guide_reads_a_table_on_s3_with_spark_and_duckdb(tmp_path: Path, monkeypatch: Any) -> None:
    """The plugin tiers an Iceberg-mode topic to S3 (SeaweedFS checking signatures), then the guide's Spark and
    DuckDB blocks read its table. Stand-ins: the local S3 (endpoint, path-style, plain HTTP) and the test's
    credentials in the environment, the SQLite catalog for PostgreSQL (the same JDBC catalog layout; the guide
    gives its URI), the jar files of ~/.m2 for ``<path>``."""
    import duckdb
    from emulators import fresh_store, serving
    from iceberg_testing import (
        ORDER_SCHEMA,
        iceberg_config,
        iceberg_spark,
        load_table,
        new_tip,
        order_records,
        segment_of,
        tier,
    )

    from rsm.cli.emulators import S3_ACCESS_KEY, S3_SECRET_KEY, start_seaweedfs

    blocks = gb.scenario("iceberg-s3")
    spark_block, duck_block = gb.step(blocks, "spark"), gb.step(blocks, "duckdb")
    with serving("s3-seaweedfs", lambda d: start_seaweedfs(d, credentials=True), tmp_path / "weed") as s3:
        bucket = "guide-iceberg"
        storage = fresh_store(s3, bucket)
        config = iceberg_config(
            tmp_path,
            **{"storage.backend.class": "s3", **{f"storage.{k}": str(v) for k, v in storage.items()}},
            **{"iceberg.value.schema.orders.avro": json.dumps(ORDER_SCHEMA)},
        )
        del config["iceberg.mode.warehouse"]  # the default: the plugin's bucket under key.prefix + iceberg/
        recs = order_records(0, 300)
        tier(config, new_tip(), [segment_of(tmp_path / "seg0", recs[:150]), segment_of(tmp_path / "seg1", recs[150:])])
        table = load_table(config)
        location = table.metadata_location
        warehouse = location.split("/kafka/orders/")[0]
        assert location.startswith(f"s3://{bucket}/"), location
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY)
        monkeypatch.setenv("AWS_REGION", "us-east-1")

        # DuckDB, as written: its secret's inline keys and the metadata file replaced by the local ones
        code = duck_block.body
        host = s3.endpoint.removeprefix("http://")
        code = code.replace(
            "KEY_ID 'AKIA...', SECRET '...', REGION 'eu-west-1'",
            f"KEY_ID '{S3_ACCESS_KEY}', SECRET '{S3_SECRET_KEY}', REGION 'us-east-1', ENDPOINT '{host}', "
            "URL_STYLE 'path', USE_SSL false",
        )
        code = code.replace("s3://my-bucket/kafka-iceberg/kafka/orders/metadata/00007-....metadata.json", location)
        code = code.replace(").show()", ").fetchall()[0]")
        assert code != duck_block.body
        scope: dict[str, Any] = {}
        exec(
            compile(code.replace('con.sql(f"SELECT', 'result = con.sql(f"SELECT', 1), duck_block.where(), "exec"), scope
        )
        count, size = scope["result"]
        assert count == len(recs) and size == sum(len(r.value or b"") for r in recs)
        assert isinstance(scope["con"], duckdb.DuckDBPyConnection)

        # Spark, as written: the catalog on SQLite, the local S3's endpoint beside the guide's S3FileIO lines
        python, jars = iceberg_spark()
        by_name = {Path(j).name: j for j in jars.split(",")}
        code = spark_block.body
        for name in re.findall(r"<path>/([\w.-]+\.jar)", code):
            local = "sqlite-jdbc-3.54.1.0.jar" if name.startswith("postgresql-") else name  # the SQLite catalog
            jar = by_name.get(local)
            assert jar, f"{spark_block.where()}: {local} is not among the jars .ci/iceberg_spark_env.sh fetched"
            code = code.replace(f"<path>/{name}", jar)
        code = code.replace("jdbc:postgresql://db.example:5432/iceberg", f"jdbc:sqlite:{tmp_path / 'catalog.db'}")
        code = code.replace("s3://my-bucket/kafka-iceberg", warehouse)
        code = code.replace(
            '.config(f"{catalog}.client.region", "eu-west-1")',
            '.config(f"{catalog}.client.region", "us-east-1")'
            f'.config(f"{{catalog}}.s3.endpoint", "{s3.endpoint}").config(f"{{catalog}}.s3.path-style-access", "true")'
            '.config("spark.ui.enabled", "false").master("local[1]")',
        )
        env = {**os.environ, "PYSPARK_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1"}
        done = subprocess.run(
            [str(python), "-c", SPARK_RUN, "", code], capture_output=True, text=True, timeout=600, env=env
        )
        causes = [x for x in done.stderr.splitlines() if "Caused by" in x or "Exception:" in x]
        assert done.returncode == 0, "\n".join(causes[:12]) + "\n...\n" + done.stderr[-3000:]
        assert f"GUIDE-ROWS {len(recs)}" in done.stdout, done.stdout[-2000:]
        assert "item-3" in done.stdout  # the guide's GROUP BY value.item printed its groups


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("iceberg.mode.write.batch.bytes", "1", "iceberg.mode.write.batch.bytes"),
        ("iceberg.mode.catalog.type", "hive", "iceberg.mode.catalog.type"),
        ("chunk.size", "-1", "chunk.size"),
    ],
)
def test_the_strimzi_check_refuses_a_plugin_config_the_brokers_would_refuse(
    key: str, value: str, expected: str
) -> None:
    docs = yaml.safe_load_all((REPO / "deploy/strimzi/kafka.yaml").read_text())
    kafka = next(d for d in docs if d and d["kind"] == "Kafka")["spec"]["kafka"]
    rsm = kafka["tieredStorage"]["remoteStorageManager"]
    plugin = {k: str(v) for k, v in rsm["config"].items()}
    Cluster().check_plugin_starts("kafka.yaml", rsm, plugin)  # as shipped: accepted
    with pytest.raises(AssertionError, match=re.escape(expected)):
        Cluster().check_plugin_starts("kafka.yaml", rsm, {**plugin, key: value})
