"""The ``kts plugin-path`` and ``kts kafka-server-start`` subcommands (registered into the lead's ``kts`` CLI).

Also runnable on its own: ``python -m rsm.jvm.shim_cli plugin-path``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rsm.jvm import launcher as jvm_launcher

SHIM_CLASS = "io.kts.shim.PythonRemoteStorageManager"


def cmd_plugin_path(args: argparse.Namespace) -> int:
    """Print the folder for remote.log.storage.manager.class.path (append /* in server.properties)."""
    jar = jvm_launcher.PLUGIN_JAR
    if not jar.exists():
        print(f"kts plugin-path: {jar} is missing (build it with jvm-shim/build.sh)", file=sys.stderr)
        return 1
    if getattr(args, "properties", False):
        print("remote.log.storage.system.enable=true")
        print(f"remote.log.storage.manager.class.path={jar.parent}/*")
        print(f"remote.log.storage.manager.class.name={SHIM_CLASS}")
        print(f"rsm.config.python.executable={sys.executable}")
    else:
        print(jar.parent)
    return 0


def cmd_kafka_server_start(args: argparse.Namespace) -> int:
    extra = list(args.broker_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    launch = jvm_launcher.build_launch(
        args.server_properties, extra, kafka_home=args.kafka_home, main_class=args.main_class
    )
    if args.dry_run:
        print(launch.describe())
        return 0
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    else:
        logging.getLogger("rsm").setLevel(logging.INFO)
    return jvm_launcher.run(launch)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pp = subparsers.add_parser(
        "plugin-path",
        help="print the directory holding the broker plugin jar (for remote.log.storage.manager.class.path)",
    )
    pp.add_argument(
        "--properties",
        action="store_true",
        help="print ready-to-paste server.properties lines for the sidecar transport instead",
    )
    pp.set_defaults(func=cmd_plugin_path)

    ks = subparsers.add_parser(
        "kafka-server-start",
        help="run a Kafka broker inside this Python process (in-process transport)",
        description="Like bin/kafka-server-start.sh, but the broker JVM runs inside Python "
        "(JPype) and the plugin calls the Python manager directly. Honours "
        "KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_GC_LOG_OPTS, "
        "KAFKA_JMX_OPTS, JMX_PORT, KAFKA_LOG4J_OPTS, LOG_DIR, KAFKA_OPTS and "
        "CLASSPATH.",
    )
    ks.add_argument("server_properties", help="the broker's server.properties")
    ks.add_argument("broker_args", nargs=argparse.REMAINDER, help="passed to kafka.Kafka, e.g. --override k=v")
    ks.add_argument("--kafka-home", default=None, help="Kafka installation (default: $KAFKA_HOME)")
    ks.add_argument("--dry-run", action="store_true", help="print the JVM options and class path, start nothing")
    ks.add_argument("--main-class", default="kafka.Kafka", help=argparse.SUPPRESS)
    ks.set_defaults(func=cmd_kafka_server_start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rsm.jvm.shim_cli")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except jvm_launcher.LaunchError as e:
        print(f"kts {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
