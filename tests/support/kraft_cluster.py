"""A KRaft cluster of real Kafka brokers for the on-demand broker tests: ``n`` nodes that are broker and controller
at once, on 127.0.0.1, each with JMX on a port of its own, the plugin's ``rsm.config.*`` lines given by the test.

The Kafka distribution is any folder whose ``libs/`` holds the broker's and the tools' jars with a logging backend
(``kafka_dist.kafka_home`` assembles one from Maven Central): brokers and tools run as ``java -cp libs/*`` with
their main class, so no ``bin/`` scripts are needed. Every broker is in its own session (its sidecar with it) and
is stopped by :meth:`Cluster.stop`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jvm_testing as jt

BROKER_STARTED = b"Kafka Server started"

BROKER_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""A test broker's JVM options besides its heap, logging and JMX: one GC thread and the C1 compiler only. A test
broker lives a minute or two, too short for C2's compiles to pay for the CPU they take."""
BENCHMARK_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseG1GC",)
"""A benchmark's broker: G1 and C2, as ``kafka-server-start`` runs it (set :attr:`Cluster.jvm_options`)."""
TOOL_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""JVM options of every Kafka tool run by :meth:`Cluster.tool` besides its heap and logging."""


def shim_plugin_lines(storage: dict[str, str], transport: str = "sidecar", **extra: str) -> str:
    """The broker's lines for this plugin: the shim jar, this interpreter and source tree, ``storage`` (keys
    without ``storage.``) and ``extra`` rsm.config keys. The in-process transport finds the shim on the system
    class path that ``kts kafka-server-start`` builds, so it gets no plugin class path."""
    lines = [
        f"remote.log.storage.manager.class.name={jt.SHIM_CLASS}",
        f"rsm.config.python.executable={sys.executable}",
        f"rsm.config.python.path={jt.REPO}",
        f"rsm.config.jvm.transport={transport}",
    ]
    if transport == "sidecar":
        lines.append(f"remote.log.storage.manager.class.path={jt.REPO / 'rsm' / '_jars'}/*")
    lines += [f"rsm.config.storage.{k}={v}" for k, v in storage.items()]
    lines += [f"rsm.config.{k}={v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    jmx_port: int
    work: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def out(self) -> Path:
        return self.work / "broker.out"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.rlm.name = org.apache.kafka.server.log.remote
logger.rlm.level = {rlm_level}
logger.rlm3.name = kafka.log.remote
logger.rlm3.level = {rlm_level}
"""
LOG4J1 = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.server.log.remote={rlm_level}
log4j.logger.kafka.log.remote={rlm_level}
"""
"""Broker and tool logging to stdout; the remote log manager (``kafka.log.remote`` up to 4.0) at its own level."""

TOOLS = {
    "format": "StorageTool",
    "topics": "TopicCommand",
    "producer": "ConsoleProducer",
    "consumer": "ConsoleConsumer",
    "jmx": "JmxTool",
    "producer-perf": "ProducerPerformance",
    "consumer-perf": "ConsumerPerformance",
    "configs": "ConfigCommand",
}
"""The command-line classes this module runs, found in the release's jars by ``kafka_dist.find_class``."""


def java_command(kafka: Path, main: str, *jvm: str, java_home: str | None = None) -> list[str]:
    """``java -cp <kafka>/libs/* <jvm options> <main>``, with the Java of ``java_home`` or ``JAVA_HOME`` or PATH."""
    home = java_home or os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else "java"
    return [java, "-cp", f"{kafka / 'libs'}/*", "-Djava.awt.headless=true", *jvm, main]


@dataclass
class Cluster:
    kafka: Path
    nodes: list[Node]
    work: Path
    plugin: str
    extra_server: str = ""
    heap: str = "-Xmx512m"
    jvm_options: tuple[str, ...] = BROKER_JVM_OPTIONS
    """The brokers' JVM options besides heap, logging and JMX."""
    java_home: str | None = None
    inprocess: bool = False
    rlm_log_level: str = "DEBUG"
    """Level of the broker's remote log manager loggers (DEBUG shows every retried copy)."""
    """Start brokers with ``kts kafka-server-start`` (the JVM inside a Python process, in-process transport)."""
    _outs: list[object] = field(default_factory=list)
    _classes: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes if n.alive())

    def properties(self, node: Node) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        replication = min(3, len(self.nodes))
        props = jt.kraft_server_properties(node.work, node.port, node.controller_port, self.plugin)
        props = re.sub(r"(?m)^node\.id=.*$", f"node.id={node.node_id}", props)
        props = re.sub(r"(?m)^controller\.quorum\.voters=.*$", f"controller.quorum.voters={voters}", props)
        for key in ("offsets.topic.replication.factor", "rlmm.config.remote.log.metadata.topic.replication.factor"):
            props = re.sub(rf"(?m)^{re.escape(key)}=.*$", f"{key}={replication}", props)
        return props + self.extra_server

    def _log4j(self, name: str, level: str, rlm_level: str) -> str:
        """The JVM option of a logging config for this release: log4j2 from Kafka 4.0, log4j 1 (reload4j) before."""
        if any((self.kafka / "libs").glob("log4j-core-2*.jar")):
            path = self.work / f"log4j2-{name}.properties"
            path.write_text(LOG4J2.format(level=level, rlm_level=rlm_level))
            return f"-Dlog4j2.configurationFile={path}"
        path = self.work / f"log4j-{name}.properties"
        path.write_text(LOG4J1.format(level=level, rlm_level=rlm_level))
        return f"-Dlog4j.configuration=file:{path}"

    def main_class(self, tool: str) -> str:
        if tool not in self._classes:
            import kafka_dist

            self._classes[tool] = kafka_dist.find_class(self.kafka, TOOLS[tool])
        return self._classes[tool]

    def start(self, timeout: float = 180) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        from rsm.metadata import random_kafka_uuid

        cluster_id = random_kafka_uuid()  # as `kafka-storage random-uuid` prints it, without starting a JVM
        for node in self.nodes:
            node.work.mkdir(parents=True, exist_ok=True)
            props = node.work / "server.properties"
            props.write_text(self.properties(node))
            self.tool("format", "format", "-t", cluster_id, "-c", str(props))
        for node in self.nodes:
            self.start_node(node)
        for node in self.nodes:
            self.wait_started(node, timeout)

    def start_node(self, node: Node) -> None:
        """Start (or restart) the broker of ``node``; its log (INFO, the remote log manager at
        :attr:`rlm_log_level`) goes to ``node.out``."""
        log4j = self._log4j("server", "INFO", self.rlm_log_level)
        jmx = [
            "-Dcom.sun.management.jmxremote",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
        ]
        ports = [
            f"-Dcom.sun.management.jmxremote.port={node.jmx_port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={node.jmx_port}",
        ]
        hostname = "-Djava.rmi.server.hostname=127.0.0.1"
        props = str(node.work / "server.properties")
        env = dict(os.environ)
        if self.inprocess:  # the launcher takes the same options through kafka-run-class.sh's variables
            cmd = [sys.executable, "-m", "rsm.cli.main", "kafka-server-start", props]
            env.update(
                KAFKA_HOME=str(self.kafka),
                KAFKA_HEAP_OPTS=self.heap,
                KAFKA_JVM_PERFORMANCE_OPTS=" ".join(self.jvm_options),
                KAFKA_LOG4J_OPTS=log4j,
                KAFKA_JMX_OPTS=" ".join([*jmx, hostname]),
                JMX_PORT=str(node.jmx_port),
                KAFKA_GC_LOG_OPTS="",
                LOG_DIR=str(node.work / "logs"),
            )
            if self.java_home:
                env["JAVA_HOME"] = self.java_home
        else:
            jvm = [self.heap, *self.jvm_options, log4j, *jmx, *ports, hostname]
            cmd = java_command(self.kafka, "kafka.Kafka", *jvm, java_home=self.java_home) + [props]
        out = open(node.out, "ab")  # noqa: SIM115 - closed by stop()
        self._outs.append(out)
        node.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_started(self, node: Node, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while BROKER_STARTED not in node.out.read_bytes():
            if not node.alive():
                raise RuntimeError(f"broker {node.node_id} exited:\n{node.out.read_text(errors='replace')[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {node.node_id} did not start in {timeout:.0f} s; see {node.out}")
            time.sleep(0.5)

    def kill(self, node: Node) -> None:
        """SIGKILL the broker and everything it started (its sidecar): a crash, not a shutdown."""
        if node.process is not None and node.process.poll() is None:
            os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(30)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                os.killpg(node.process.pid, signal.SIGTERM)
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(30)
        for out in self._outs:
            out.close()  # type: ignore[attr-defined]

    def tool(self, name: str, *args: str, input: str | None = None, timeout: float = 300) -> str:
        """Run one of :data:`TOOLS`; its stdout, or an error with its stderr."""
        log4j = self._log4j("tools", "WARN", "WARN")
        cmd = java_command(
            self.kafka,
            self.main_class(name),
            "-Xmx256m",
            *TOOL_JVM_OPTIONS,
            log4j,
            java_home=self.java_home,
        )
        r = subprocess.run([*cmd, *args], input=input, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-4000:]}")
        return r.stdout

    def create_topic(self, topic: str, partitions: int, replication: int, **configs: str) -> None:
        args = ["--bootstrap-server", self.bootstrap, "--create", "--topic", topic]
        args += ["--partitions", str(partitions), "--replication-factor", str(replication)]
        for k, v in configs.items():
            args += ["--config", f"{k.replace('_', '.')}={v}"]
        self.tool("topics", *args)

    def delete_topic(self, topic: str) -> None:
        self.tool("topics", "--bootstrap-server", self.bootstrap, "--delete", "--topic", topic)

    def produce(self, topic: str, records: list[str]) -> None:
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic]
        # --producer-property: deprecated from 4.2 (--command-property) but accepted by every release
        args += ["--producer-property", "linger.ms=50", "--producer-property", "batch.size=65536"]
        args += ["--producer-property", "acks=all"]
        self.tool("producer", *args, input="\n".join(records) + "\n")

    def consume_all(self, topic: str, count: int) -> list[str]:
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic, "--from-beginning"]
        args += ["--max-messages", str(count), "--timeout-ms", "120000"]
        return self.tool("consumer", *args, timeout=400).splitlines()

    def leader(self, topic: str, partition: int = 0) -> Node:
        out = self.tool("topics", "--bootstrap-server", self.bootstrap, "--describe", "--topic", topic)
        m = re.search(rf"Partition:\s*{partition}\s+Leader:\s*(-?\d+)", out)
        if not m:
            raise RuntimeError(f"no leader line for {topic}-{partition} in:\n{out}")
        leader = int(m.group(1))
        return next(n for n in self.nodes if n.node_id == leader)

    def jmx_values(self, node: Node, pattern: str, attribute: str = "Count") -> dict[str, float]:
        """``attribute`` of every MBean matching the ObjectName ``pattern`` on ``node``, by ObjectName, read with
        Kafka's JmxTool. Kafka registers a topic's meter on its first mark, so a meter never marked is absent
        (callers query with a wildcard that also matches an always-present meter, to tell absent from unread)."""
        url = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{node.jmx_port}/jmxrmi"
        args = ["--jmx-url", url, "--object-name", pattern, "--attributes", attribute, "--one-time", "true"]
        try:
            out = self.tool("jmx", *args, "--report-format", "properties")
        except RuntimeError as e:
            if "No matched attributes" in str(e):
                return {}
            raise
        found = re.finditer(rf"(\S+?):{re.escape(attribute)}=([0-9.eE+-]+)", out)
        return {m.group(1): float(m.group(2)) for m in found}

    def broker_topic_meter(self, node: Node, name: str, topic: str) -> int:
        """``kafka.server:type=BrokerTopicMetrics,name=<name>,topic=<topic>``'s count (0 while never marked); the
        all-topics meter of that name must be there, or the read itself failed."""
        base = f"kafka.server:type=BrokerTopicMetrics,name={name}"
        counts = self.jmx_values(node, base + ",*")
        if base not in counts:
            raise RuntimeError(f"no {base} on broker {node.node_id}: JMX read {counts}")
        return int(counts.get(f"{base},topic={topic}", 0))


def make_cluster(kafka: Path, work: Path, n: int, plugin: str, extra_server: str = "") -> Cluster:
    ports = jt.free_ports(3 * n)
    nodes = [Node(i + 1, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], work / f"node{i + 1}") for i in range(n)]
    return Cluster(kafka, nodes, work, plugin, extra_server)
