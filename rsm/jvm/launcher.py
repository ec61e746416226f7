"""``kts kafka-server-start``: run a Kafka broker in this Python process with the in-process transport.

The JVM gets what ``bin/kafka-server-start.sh`` -> ``bin/kafka-run-class.sh`` would give it (class path from
``$KAFKA_HOME/libs``, ``KAFKA_HEAP_OPTS``, ``KAFKA_JVM_PERFORMANCE_OPTS``, GC log, JMX and log4j options,
``KAFKA_OPTS``), plus the shim jar on the system class path and ``--add-opens java.base/java.lang`` so the
broker's shutdown hook can be moved under JPype's (otherwise JPype disables Python proxies before the broker
has closed the plugin). Then the Python bridge is registered and ``kafka.Kafka.main`` runs on this thread,
through the shim's ``BrokerMain``, which keeps the thread in Java once the JVM shuts down.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

PLUGIN_JAR = Path(__file__).resolve().parent.parent / "_jars" / "kafka-tiered-storage-shim.jar"  # rsm/_jars

DEFAULT_HEAP_OPTS = "-Xmx1G -Xms1G"  # kafka-server-start.sh
DEFAULT_PERFORMANCE_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
)
DEFAULT_JMX_OPTS = (
    "-Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.authenticate=false "
    "-Dcom.sun.management.jmxremote.ssl=false"
)
ADD_OPENS = "--add-opens=java.base/java.lang=ALL-UNNAMED"
# kafka-run-class.sh leaves these out of the class path
_EXCLUDED_JAR = re.compile(r"(-(test|test-sources|src|scaladoc|javadoc)\.jar|jar\.asc|connect-file.*\.jar)$")
# JVM options that take their value as the next word on a java command line but need '=' through JNI
_TWO_WORD = {
    "--add-opens",
    "--add-exports",
    "--add-reads",
    "--add-modules",
    "--patch-module",
    "--limit-modules",
    "--module-path",
    "-p",
}


class LaunchError(RuntimeError):
    """The broker cannot be started as asked (no Kafka home, no libs, no shim jar)."""


@dataclass
class BrokerLaunch:
    """Everything needed to start the broker JVM in this process."""

    kafka_home: Path
    jvm_options: list[str]
    classpath: list[str]
    main_class: str = "kafka.Kafka"
    args: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return "\n".join(
            [
                f"kafka home: {self.kafka_home}",
                "jvm options:",
                *(f"  {o}" for o in self.jvm_options),
                "class path:",
                *(f"  {c}" for c in self.classpath),
                f"main: {self.main_class} {' '.join(self.args)}",
            ]
        )


def jvm_words(text: str) -> list[str]:
    """Split an env var like the shell does, drop -server/-client (not valid through JNI), join two-word flags."""
    words = shlex.split(text)
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-server", "-client"):
            pass
        elif w in _TWO_WORD and i + 1 < len(words):
            out.append(f"{w}={words[i + 1]}")
            i += 1
        elif w in ("-cp", "-classpath", "--class-path"):
            i += 1  # a class path belongs in CLASSPATH; ignore it here as kafka-run-class would shadow it
        else:
            out.append(w)
        i += 1
    return out


def resolve_kafka_home(explicit: str | None, env: Mapping[str, str]) -> Path:
    home = explicit or env.get("KAFKA_HOME")
    if not home:
        raise LaunchError(
            "no Kafka installation given: pass --kafka-home DIR or set KAFKA_HOME "
            "(the directory with bin/, libs/ and config/)"
        )
    path = Path(home).expanduser().resolve()
    if not (path / "libs").is_dir():
        raise LaunchError(f"{path} is not a Kafka installation: it has no libs/ directory")
    return path


def build_launch(
    server_properties: str,
    extra_args: Sequence[str] = (),
    *,
    kafka_home: str | None = None,
    env: Mapping[str, str] | None = None,
    main_class: str = "kafka.Kafka",
) -> BrokerLaunch:
    """The JVM options and class path kafka-server-start.sh would use, plus what the in-process shim needs."""
    env = os.environ if env is None else env
    home = resolve_kafka_home(kafka_home, env)
    if not PLUGIN_JAR.exists():
        raise LaunchError(f"the shim jar {PLUGIN_JAR} is missing; build it with jvm-shim/build.sh")
    log_dir = env.get("LOG_DIR") or str(home / "logs")

    classpath = [p for p in env.get("CLASSPATH", "").split(os.pathsep) if p]
    classpath += [str(p) for p in sorted((home / "libs").glob("*")) if p.is_file() and not _EXCLUDED_JAR.search(p.name)]
    classpath.append(str(PLUGIN_JAR))  # on the system class path, so JPype and the plugin share ShimRegistry

    opts: list[str] = []
    opts += jvm_words(env.get("KAFKA_HEAP_OPTS") or DEFAULT_HEAP_OPTS)
    opts += jvm_words(env.get("KAFKA_JVM_PERFORMANCE_OPTS") or DEFAULT_PERFORMANCE_OPTS)
    gc_opts = env.get("KAFKA_GC_LOG_OPTS")
    if gc_opts is None:  # kafka-server-start.sh passes -loggc
        gc_opts = f"-Xlog:gc*:file={log_dir}/kafkaServer-gc.log:time,tags:filecount=10,filesize=100M"
    opts += jvm_words(gc_opts)
    jmx = env.get("KAFKA_JMX_OPTS") or DEFAULT_JMX_OPTS
    if env.get("JMX_PORT"):
        jmx += f" -Dcom.sun.management.jmxremote.port={env['JMX_PORT']}"
        jmx += f" -Dcom.sun.management.jmxremote.rmi.port={env.get('JMX_RMI_PORT', env['JMX_PORT'])}"
    opts += jvm_words(jmx)
    log4j = env.get("KAFKA_LOG4J_OPTS")
    if not log4j:
        if (home / "config" / "log4j2.yaml").exists():  # Kafka 4.x
            log4j = f"-Dlog4j2.configurationFile={home}/config/log4j2.yaml"
        else:
            log4j = f"-Dlog4j.configuration=file:{home}/config/log4j.properties"
    opts += jvm_words(f"-Dkafka.logs.dir={log_dir} {log4j}")
    opts += jvm_words(env.get("KAFKA_OPTS", ""))
    if not any(o.startswith("--add-opens=java.base/java.lang=") for o in opts):
        opts.append(ADD_OPENS)
    return BrokerLaunch(home, opts, classpath, main_class, [server_properties, *extra_args])


def run(launch: BrokerLaunch) -> int:
    """Start the JVM here, register the Python bridge, run the broker's main on this thread."""
    import jpype

    from rsm.jvm import inprocess as jvm_inprocess
    from rsm.jvm.process_memory import return_large_buffers

    return_large_buffers()  # freed chunks and parts go back to the system, as in the sidecar

    Path(
        next(
            (o.split("=", 1)[1] for o in launch.jvm_options if o.startswith("-Dkafka.logs.dir=")),
            launch.kafka_home / "logs",
        )
    ).mkdir(parents=True, exist_ok=True)
    # interrupt=True (the default) leaves SIGINT/SIGTERM to the JVM; False crashed the JVM on SIGTERM
    jpype.startJVM(
        *launch.jvm_options, jvmpath=jpype.getDefaultJVMPath(), classpath=launch.classpath, convertStrings=False
    )
    jvm_inprocess.install()
    log.info(
        "starting %s in-process (JPype %s, Python %s)", launch.main_class, jpype.__version__, sys.version.split()[0]
    )
    # BrokerMain keeps this thread in Java once a JVM shutdown has begun (the JVM's halt ends the process), so
    # neither the broker's exit nor the interrupt JPype's shutdown sends this thread comes back into Python.
    broker_main = jpype.JClass("io.kts.shim.BrokerMain")
    try:
        broker_main.run(launch.main_class, jpype.JArray(jpype.JString)(launch.args))
    except Exception as e:
        log.error("broker main %s failed: %s: %s", launch.main_class, type(e).__name__, e)
        return 1
    return 0
