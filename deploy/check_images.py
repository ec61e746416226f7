"""``make deploy-image-check``: build the broker images of deploy/ and run them under podman with a memory limit.

No image registry is reachable here, so each Containerfile is built on a stand-in of its base (deploy/standin/:
a Debian bookworm rootfs from mmdebstrap, Java 17, Kafka's jars from Maven Central, the base image's user),
passed as the ``KAFKA_IMAGE`` build argument the real base goes through. Then, per image (``KTS_IMAGES`` picks
apache, strimzi):

1. the image: runs as its non-root user, has Python 3.11+ with the plugin and the S3 extra, the shim jar;
2. a broker in it with ``--memory`` and a small ``--shm-size``, a read-only root filesystem (volumes: data,
   the cache, a tmpfs /tmp; keys and credentials read-only) and SeaweedFS on the host: produce, wait until the
   closed segments are in the bucket (``kts ls`` in the container) and gone from the broker's disk, consume from
   offset 0 and compare; the container was not OOM-killed and ``podman diff`` shows nothing written to its root;
3. a memory limit too small for the heap plus the sidecar, then a /dev/shm too small for the shared region:
   the broker stops with the sidecar's start-up error naming the setting, and is not OOM-killed.

Before the images, the two branches of deploy/install-os-packages.sh that the Debian stand-ins do not take
(``KTS_BRANCHES``: microdnf for UBI, apk for Alpine) run in both modes on the Debian stand-in with the package
manager's stand-in (deploy/standin/package-manager.sh): their command lines, package names and the interpreter
they name are checked, not the real distributions' packages.

Podman's settings for this kind of host come from demo/stack-check (its containers.conf and base image).
Skips with one line, exit 0, where podman, runc, mmdebstrap or mvn is missing. ``KEEP=1`` keeps the work folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV_BIN = Path(sys.executable).parent
KAFKA_VERSION = os.environ.get("KTS_STANDIN_KAFKA_VERSION", "4.1.1")
IMAGES = os.environ.get("KTS_IMAGES", "apache strimzi").split()
# install-os-packages.sh's branches other than apt-get (the stand-ins are Debian), each on a stand-in of its base
BRANCHES = os.environ.get("KTS_BRANCHES", "microdnf apk").split()
USERS = {"apache": "1000", "strimzi": "1001"}
TOPIC = "tiered"
RECORDS = int(os.environ.get("RECORDS", "50000"))
MEMORY = os.environ.get("KTS_CHECK_MEMORY", "1g")
HEAP = "384m"
SHM = "64m"
CLUSTER_ID = "a3RzLWRlcGxveS1jaGVjaw"


def _stack_check() -> Any:
    spec = importlib.util.spec_from_file_location("stack_check", REPO / "demo/stack-check/stack_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sc = _stack_check()
CheckFailed = sc.CheckFailed
run = sc.run
wait_for = sc.wait_for


def say(message: str) -> None:
    print(f"[deploy-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kafka_libs(work: Path, log: Path) -> Path:
    """Kafka's broker and tools jars from Maven Central (the stand-in's /opt/kafka/libs)."""
    context = work / "kafka"
    run(
        [
            "mvn",
            "-q",
            "-f",
            str(HERE / "standin/kafka-dist-pom.xml"),
            f"-Dkafka.version={KAFKA_VERSION}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={context / 'libs'}",
        ],
        log=log,
    )
    return context


def slf4j1_binding(work: Path, log: Path) -> Path:
    """log4j's binding for SLF4J 1.x: Kafka's POM resolves slf4j-api 1.7, so without it the broker logs nothing
    (the distribution's tarball carries it; Maven's dependency tree does not). Added to the broker's class path."""
    folder = work / "slf4j1"
    run(
        [
            "mvn", "-q", "dependency:copy", "-Dartifact=org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
            f"-DoutputDirectory={folder}",
        ],
        log=log,
    )  # fmt: skip
    return folder


class Check:
    def __init__(self, work: Path, env: dict[str, str], log: Path, kafka: Path, s3: Any) -> None:
        self.work, self.env, self.log, self.kafka, self.s3 = work, env, log, kafka, s3

    def podman(self, *args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        return run(["podman", *args], env=self.env, log=self.log, check=check, timeout=timeout)

    def build(self, which: str, base: str) -> str:
        standin = f"localhost/kts-standin/{which}-kafka:{KAFKA_VERSION}"
        self.podman(
            "build", "-q", "--build-arg", f"BASE_IMAGE={base}",
            "-f", str(HERE / f"standin/{which}-kafka.Containerfile"), "-t", standin, str(self.kafka),
        )  # fmt: skip
        say(f"{which}: stand-in base {standin}")
        image = f"localhost/kts-deploy/{which}-kafka-kts:check"
        started = time.monotonic()
        self.podman(
            "build", "-q", "--build-arg", f"KAFKA_IMAGE={standin}", "--build-arg", "KTS_EXTRAS=s3",
            "-f", str(HERE / f"{which}-kafka.Containerfile"), "-t", image, str(REPO),
        )  # fmt: skip
        say(f"{which}: built {image} from deploy/{which}-kafka.Containerfile in {time.monotonic() - started:.0f} s")
        return image

    def os_packages_branch(self, manager: str, base: str) -> None:
        """deploy/install-os-packages.sh's microdnf or apk branch, both modes, on a stand-in of its base
        (deploy/standin/os-packages.Containerfile); the apt-get branch is the one the images above are built with."""
        context = self.work / f"branch-{manager}"
        context.mkdir()
        shutil.copy(HERE / "install-os-packages.sh", context)
        shutil.copy(HERE / "standin/package-manager.sh", context)
        started = time.monotonic()
        self.podman(
            "build", "-q", "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"MANAGER={manager}",
            "-f", str(HERE / "standin/os-packages.Containerfile"), "-t", f"localhost/kts-standin/branch-{manager}",
            str(context),
        )  # fmt: skip
        say(f"install-os-packages.sh: the {manager} branch ran in runtime and build modes on its stand-in "
            f"({time.monotonic() - started:.0f} s)")  # fmt: skip

    def image_facts(self, which: str, image: str) -> None:
        user = self.podman("image", "inspect", image, "--format", "{{.Config.User}}").stdout.strip()
        uid = self.podman("run", "--rm", "--read-only", image, "id", "-u").stdout.strip()
        if uid == "0" or uid != USERS[which]:
            raise CheckFailed(f"{which}: the image runs as uid {uid} (USER {user!r}), expected {USERS[which]}")
        probe = (
            "import sys, boto3, rsm; from pathlib import Path; "
            "jars = list(Path('/opt/kafka-tiered-storage/jars').glob('*.jar')); "
            "assert sys.version_info >= (3, 11) and jars, jars; print(sys.version.split()[0], jars[0].name)"
        )
        out = self.podman("run", "--rm", "--read-only", image, "/opt/kts-venv/bin/python", "-c", probe).stdout.strip()
        say(
            f"{which}: runs as uid {uid} (USER {user}); Python {out.split()[0]}, boto3 and the plugin, {out.split()[1]}"
        )

    def broker_files(self, which: str, name: str, **overrides: str) -> tuple[Path, dict[str, int]]:
        """A config folder (server.properties, log4j2, keys, credentials) and empty data/cache volumes."""
        uid = int(USERS[which])
        folder = self.work / name
        for sub in ("etc", "data", "cache"):
            (folder / sub).mkdir(parents=True)
        ports = {"broker": free_port(), "controller": free_port()}
        run(
            [
                str(VENV_BIN / "kts"),
                "keys",
                "generate",
                "--id",
                "k1",
                "--bits",
                "2048",
                "--out",
                str(folder / "etc/keys"),
            ]
        )
        (folder / "etc/s3-credentials").write_text(
            "[default]\naws_access_key_id = kts-check\naws_secret_access_key = kts-check-secret\n"
        )
        shutil.copy(HERE / "standin/log4j2.properties", folder / "etc/log4j2.properties")
        shutil.copytree(self.work / "slf4j1", folder / "etc/slf4j1")
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{ports['controller']}",
            "listeners": f"PLAINTEXT://127.0.0.1:{ports['broker']},CONTROLLER://127.0.0.1:{ports['controller']}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports['broker']}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": "/var/lib/kafka/data",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "log.retention.check.interval.ms": "3000",
            "remote.log.manager.task.interval.ms": "3000",
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.path": "/opt/kafka-tiered-storage/jars/*",
            "remote.log.storage.manager.class.name": "io.kts.shim.PythonRemoteStorageManager",
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rsm.config.python.executable": "/opt/kts-venv/bin/python",
            "rsm.config.chunk.size": "1048576",
            "rsm.config.jvm.sidecar.shared.memory.bytes": str(32 << 20),
            "rsm.config.fetch.chunk.cache.class": "disk",
            "rsm.config.fetch.chunk.cache.path": "/mnt/kts-cache/chunks",
            "rsm.config.fetch.chunk.cache.size": str(256 << 20),
            "rsm.config.storage.backend.class": "s3",
            "rsm.config.storage.s3.bucket.name": self.s3.bucket,
            "rsm.config.storage.s3.region": "us-east-1",
            "rsm.config.storage.s3.endpoint.url": self.s3.endpoint,
            "rsm.config.storage.s3.path.style.access.enabled": "true",
            "rsm.config.storage.aws.credentials.file": "/etc/kts-check/s3-credentials",
            "rsm.config.key.prefix": f"deploy-check/{name}/",
            "rsm.config.compression.enabled": "true",
            "rsm.config.encryption.enabled": "true",
            "rsm.config.encryption.key.pair.id": "k1",
            "rsm.config.encryption.key.pairs": "k1",
            "rsm.config.encryption.key.pairs.k1.public.key.file": "/etc/kts-check/keys/k1-public.pem",
            "rsm.config.encryption.key.pairs.k1.private.key.file": "/etc/kts-check/keys/k1-private.pem",
            **overrides,
        }
        (folder / "etc/server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, uid, 0)  # the image's user reads its keys and writes its volumes
        return folder, ports

    def start(self, which: str, image: str, name: str, memory: str, shm: str, **overrides: str) -> tuple[Path, int]:
        folder, ports = self.broker_files(which, name, **overrides)
        etc = "/etc/kts-check"
        cp = f"'{etc}/slf4j1/*:/opt/kafka/libs/*'"  # the SLF4J 1 binding first: its classes win
        java = f"java -Xms{HEAP} -Xmx{HEAP} -Dlog4j2.configurationFile={etc}/log4j2.properties -cp {cp}"
        script = (
            f"{java} kafka.tools.StorageTool format --ignore-formatted -t {CLUSTER_ID} -c {etc}/server.properties"
            f" && exec {java} kafka.Kafka {etc}/server.properties"
        )
        self.podman(
            "run", "-d", "--name", name, "--network", "host",
            "--memory", memory, "--memory-swap", memory, "--shm-size", shm,
            "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=64m",
            "-v", f"{folder / 'etc'}:/etc/kts-check:ro", "-v", f"{folder / 'data'}:/var/lib/kafka/data",
            "-v", f"{folder / 'cache'}:/mnt/kts-cache",
            image, "sh", "-c", script,
        )  # fmt: skip
        say(f"{which}: broker {name} started: --memory {memory} --shm-size {shm}, -Xmx{HEAP}, read-only root")
        return folder, ports["broker"]

    def state(self, name: str) -> dict[str, Any]:
        out = self.podman("inspect", name, "--format", "{{json .State}}").stdout
        return dict(json.loads(out))

    def stop(self, name: str) -> None:
        self.podman("rm", "-f", "-t", "10", name, check=False, timeout=120)

    def tools(self, main: str, *args: str, input: str | None = None, timeout: float = 300) -> str:
        """A Kafka tool run on the host's Java with the stand-in's jars (the broker's container stays the broker)."""
        cmd = ["java", "-Xmx256m", "-cp", f"{self.kafka / 'libs'}/*", main, *args]
        return run(cmd, log=self.log, input=input, timeout=timeout).stdout

    def tier(self, which: str, image: str) -> None:
        name = f"kts-deploy-check-{which}"
        folder, port = self.start(which, image, name, MEMORY, SHM)
        try:
            boot = ["--bootstrap-server", f"127.0.0.1:{port}"]

            def up() -> bool:
                if self.state(name)["Status"] != "running":
                    raise CheckFailed(f"{which}: broker exited: {self.podman('logs', name).stderr[-3000:]}")
                self.tools("org.apache.kafka.tools.TopicCommand", *boot, "--list", timeout=60)
                return True

            wait_for(f"{which}: broker up", up, 180, 3)
            self.tools(
                "org.apache.kafka.tools.TopicCommand", *boot, "--create", "--topic", TOPIC, "--partitions", "1",
                "--replication-factor", "1", "--config", "remote.storage.enable=true",
                "--config", "segment.bytes=1048576", "--config", "local.retention.bytes=1",
                "--config", "file.delete.delay.ms=1000",
            )  # fmt: skip
            records = [f"record-{i:07d}-" + "z" * (i % 61 + 40) for i in range(RECORDS)]
            self.tools(
                "org.apache.kafka.tools.ConsoleProducer", *boot, "--topic", TOPIC,
                "--producer-property", "acks=all", input="\n".join(records) + "\n",
            )  # fmt: skip
            say(f"{which}: produced {len(records)} records ({sum(map(len, records)) / 1e6:.1f} MB)")
            local_dir = folder / "data" / f"{TOPIC}-0"

            def tiered() -> tuple[int, int] | None:
                if self.state(name)["Status"] != "running":
                    raise CheckFailed(f"{which}: broker exited while tiering: {self.state(name)}")
                listed = self.podman(
                    "exec", name, "/opt/kts-venv/bin/kts", "ls", "--config", "/etc/kts-check/server.properties",
                    "--json", TOPIC,
                ).stdout  # fmt: skip
                remote = [json.loads(line) for line in listed.splitlines() if line.startswith("{")]
                names = [p.name for p in local_dir.iterdir()]
                logs = sorted(int(n.split(".")[0]) for n in names if n.endswith(".log"))
                if len(remote) >= 2 and len(logs) == 1 and logs[0] > 0 and not any(".deleted" in n for n in names):
                    return len(remote), logs[0]
                return None

            segments, first_local = wait_for(f"{which}: segments tiered and deleted locally", tiered, 300, 4)
            say(
                f"{which}: {segments} segments in the bucket (kts ls in the container); "
                f"local log starts at {first_local}"
            )
            consumed = self.tools(
                "org.apache.kafka.tools.consumer.ConsoleConsumer", *boot, "--topic", TOPIC, "--from-beginning",
                "--max-messages", str(RECORDS), "--timeout-ms", "120000",
            ).splitlines()  # fmt: skip
            if consumed != records:
                raise CheckFailed(f"{which}: consumed {len(consumed)} records, produced {len(records)}, or they differ")
            say(
                f"{which}: consumed 0..{RECORDS - 1} from the beginning, identical "
                f"(0..{first_local - 1} from the bucket)"
            )
            state = self.state(name)
            if state["Status"] != "running" or state.get("OOMKilled"):
                raise CheckFailed(f"{which}: broker not running or OOM-killed after the round trip: {state}")
            # podman creates the mount points it binds (and so changes their parents); anything else was written
            mounts = ["/etc/kts-check", "/var/lib/kafka/data", "/mnt/kts-cache", "/tmp"]
            changed = self.podman("diff", name).stdout.split()[1::2]
            diff = [p for p in changed if not any(m == p or m.startswith(p.rstrip("/") + "/") for m in mounts)]
            if diff:
                raise CheckFailed(f"{which}: the container wrote outside its volumes: {diff[:20]}")
            usage = self.podman("stats", "--no-stream", "--format", "{{.MemUsage}}", name, check=False).stdout.strip()
            say(
                f"{which}: still running, not OOM-killed, nothing written to the root filesystem (podman diff: "
                f"{' '.join(changed) or 'empty'}, the mount points); memory {usage}"
            )
        except BaseException:
            print(self.podman("logs", "--tail", "60", name, check=False).stdout, flush=True)
            raise
        finally:
            self.stop(name)

    def refused(self, which: str, image: str, tag: str, memory: str, shm: str, expect: list[str]) -> None:
        name = f"kts-deploy-check-{which}-{tag}"
        self.start(which, image, name, memory, shm)
        try:

            def exited() -> dict[str, Any] | None:
                state = self.state(name)
                return state if state["Status"] in ("exited", "stopped") else None

            state = wait_for(f"{which}: broker with {tag} to stop", exited, 240, 3)
            logs = self.podman("logs", name).stdout + self.podman("logs", name).stderr
            line = next((x for x in logs.splitlines() if "does not fit in this container" in x), None)
            if state.get("OOMKilled") or line is None or not all(word in line for word in expect):
                raise CheckFailed(
                    f"{which}: {tag}: expected the start-up check's error naming {expect}, OOMKilled false; got "
                    f"OOMKilled={state.get('OOMKilled')}, exit {state.get('ExitCode')}, log tail:\n{logs[-3000:]}"
                )
            say(f"{which}: {tag}: broker stopped (exit {state.get('ExitCode')}, not OOM-killed): {line.strip()[:400]}")
        finally:
            self.stop(name)


def main() -> int:
    missing = [tool for tool in ("podman", "runc", "mmdebstrap", "mvn", "java") if shutil.which(tool) is None]
    if missing:
        print(f"deploy-image-check: SKIPPED: {', '.join(missing)} not installed (apt-get install podman runc "
              "mmdebstrap maven)", flush=True)  # fmt: skip
        return 0
    from rsm.cli.emulators import start_seaweedfs

    work = Path(tempfile.mkdtemp(prefix="kts-deploy-check."))
    os.chmod(work, 0o755)
    log = work / "commands.log"
    began = time.monotonic()
    s3 = None
    try:
        env = {**os.environ, "CONTAINERS_CONF": str(sc.containers_conf(work))}
        say(f"work folder {work} (commands and their output: {log.name})")
        base = sc.Standins(work, Path("/nonexistent"), env, log).base()
        kafka = kafka_libs(work, log)
        slf4j1_binding(work, log)
        say(f"stand-in Kafka {KAFKA_VERSION}: {len(list((kafka / 'libs').glob('*.jar')))} jars from Maven Central")
        s3 = start_seaweedfs(work / "seaweedfs")
        say(f"SeaweedFS on the host: {s3.endpoint}, bucket {s3.bucket}")
        check = Check(work, env, log, kafka, s3)
        for manager in BRANCHES:
            check.os_packages_branch(manager, base)
        for which in IMAGES:
            image = check.build(which, base)
            check.image_facts(which, image)
            check.tier(which, image)
            check.refused(
                which, image, "memory-480m", "480m", SHM,
                ["resources.limits.memory", "--memory", "jvm.sidecar.shared.memory.bytes"],
            )  # fmt: skip
            check.refused(
                which, image, "shm-16m", MEMORY, "16m", ["--shm-size", "jvm.sidecar.shared.memory.bytes=33554432"]
            )
            say(f"{which}: PASS")
    except Exception as e:  # one FAIL line; commands.log has each command's output
        say(f"FAIL: {e}" if isinstance(e, CheckFailed) else f"FAIL: {type(e).__name__}: {e}")
        say(f"kept {work} for a look")
        return 1
    finally:
        if s3 is not None:
            s3.stop()
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    say(f"PASS: {', '.join(IMAGES + [f'{m} branch' for m in BRANCHES])} in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
