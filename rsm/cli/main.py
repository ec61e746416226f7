"""``kts``: the operator's command line, one entry point with subcommands (click), ``--help`` on each.

Commands that talk to the store share one configuration source (``rsm.cli.settings``). Errors reach the
operator as one line naming what failed (``-v`` shows the traceback); usage errors exit 2, damage found 1.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
from pathlib import Path

import click

from rsm._version import __version__
from rsm.cli.browse import cat_command, inspect_command, ls_command
from rsm.cli.config_check import config_group
from rsm.cli.gc import gc_command
from rsm.cli.iceberg_maintain import iceberg_group
from rsm.cli.keys import keys_generate, keys_group, keys_rotate
from rsm.cli.scrub import verify_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="kts", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="log at DEBUG level and show tracebacks")
def cli(verbose: bool) -> None:
    """kafka-tiered-storage operator tool: demo, keys, listing, inspection, scrub, config checks, broker helpers."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@cli.command("demo")
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("./kts-demo"),
    show_default=True,
    help="a new or empty folder, or one an earlier demo made (it holds .kts-demo); any other is refused",
)
@click.option(
    "--backend",
    type=click.Choice(["filesystem", "s3", "gcs", "azure"]),
    default="filesystem",
    show_default=True,
    help="a folder, or a local emulator the demo starts (s3: moto, gcs: fake-gcs-server, azure: Azurite)",
)
@click.option("--segments", type=click.IntRange(1, 50), default=4, show_default=True, help="segments to write")
@click.option("--segment-mb", type=click.FloatRange(0.1, 256), default=2.0, show_default=True, help="size of each")
@click.option("--chunk-size", type=click.IntRange(1024), default=256 * 1024, show_default=True)
@click.option(
    "--transport",
    type=click.Choice(["auto", "jvm", "python"]),
    default="auto",
    show_default=True,
    help="jvm: the broker's shim in a real JVM tiers the data; python: the manager directly; auto: jvm when possible",
)
@click.option("--size-mb", type=click.FloatRange(0.1, 1024), default=None, help="one segment of this size (old form)")
@click.option("--spark/--no-spark", default=True, show_default=True, help="run the Spark example query at the end")
@click.option(
    "--iceberg/--no-iceberg",
    default=True,
    show_default=True,
    help="also tier a topic in Iceberg mode and query its table with DuckDB and pyiceberg (needs the iceberg extra)",
)
def demo_command(
    workdir: Path,
    backend: str,
    segments: int,
    segment_mb: float,
    chunk_size: int,
    transport: str,
    size_mb: float | None,
    spark: bool,
    iceberg: bool,
) -> int:
    """The main job: tier a real Kafka partition (transactions, keys) with compression and encryption, verify
    it, tier a topic in Iceberg mode and query its table, summarise, and leave <dir>/server.properties for every
    other command."""
    from rsm.cli.demo import DemoOptions, run_demo

    if size_mb is not None:  # the earlier demo's option: a single segment of that size
        segments, segment_mb = 1, size_mb
    return run_demo(
        DemoOptions(workdir, backend, segments, int(segment_mb * 1024 * 1024), chunk_size, transport, spark, iceberg)
    )


cli.add_command(keys_group)
cli.add_command(ls_command)
cli.add_command(inspect_command)
cli.add_command(cat_command)
cli.add_command(verify_command)
cli.add_command(config_group)
cli.add_command(gc_command)
cli.add_command(iceberg_group)


def _hidden_alias(command: click.Command, name: str, current: str) -> click.Command:
    """The command under the name of an earlier release: it still works, ``--help`` lists only the current one."""
    alias = copy.copy(command)
    alias.name, alias.hidden = name, True
    alias.help = f"Old name of `kts {current}`.\n\n{command.help or ''}"
    return alias


cli.add_command(_hidden_alias(keys_rotate, "rewrap", "keys rotate"))
cli.add_command(_hidden_alias(keys_generate, "keygen", "keys generate"))


@cli.command("config-docs")
@click.option("--check", metavar="FILE", help="fail if FILE does not contain the current tables")
@click.option("--write", metavar="FILE", help="replace the tables between their markers in FILE")
def config_docs_command(check: str | None, write: str | None) -> int:
    """Print the configuration tables generated from the declarations: every key, and every key of Aiven's plugin
    with what it means here (or check/rewrite them in a file such as docs/configuration.md)."""
    from rsm.cli.config_docs import aiven_docs_markdown, config_docs_markdown

    tables = {"config-table": config_docs_markdown(), "aiven-table": aiven_docs_markdown()}
    return _generated_tables(tables, "config-docs", check, write)


@cli.command("metrics-docs")
@click.option("--check", metavar="FILE", help="fail if FILE does not contain the current metrics tables")
@click.option("--write", metavar="FILE", help="replace the tables between their markers in FILE")
def metrics_docs_command(check: str | None, write: str | None) -> int:
    """Print the tables of every metric from the declarations: the plugin's (JMX bean, attribute, type, tags,
    meaning) and those `kts gc --watch` serves."""
    from rsm.metrics.catalog import gc_cluster_docs_markdown, metrics_docs_markdown

    tables = {"metrics-table": metrics_docs_markdown(), "gc-cluster-table": gc_cluster_docs_markdown()}
    return _generated_tables(tables, "metrics-docs", check, write)


@cli.command("rules-docs")
@click.option("--check", metavar="FILE", help="fail if FILE does not contain the current rules table")
@click.option("--write", metavar="FILE", help="replace the table between the markers in FILE")
def rules_docs_command(check: str | None, write: str | None) -> int:
    """Print the table of the deletion rules (kind, signals required, grace, reversible) from rsm.deletion.rules
    (docs/reliability.md)."""
    from rsm.deletion.rules import rules_markdown

    return _generated_tables({"rules-table": rules_markdown()}, "rules-docs", check, write)


@cli.command("memory-docs")
@click.option("--check", metavar="FILE", help="fail if FILE does not contain the current memory blocks it marks")
@click.option("--write", metavar="FILE", help="replace the memory blocks between their markers in FILE")
def memory_docs_command(check: str | None, write: str | None) -> int:
    """Print the guides' memory blocks, computed by the code of `kts config check`: the formula at the defaults
    (docs/operations.md, docs/kubernetes.md), the README's S3 broker and the Strimzi example. With a FILE, only
    the blocks whose markers it holds, and at least one."""
    from rsm.cli.memory_docs import memory_tables

    tables = memory_tables()
    path = check or write
    if path:
        text = Path(path).read_text(encoding="utf-8")
        tables = {m: block for m, block in tables.items() if f"<!-- {m}:begin -->" in text}
        if not tables:
            markers = ", ".join(f"<!-- {m}:begin -->" for m in memory_tables())
            click.echo(f"{path} has none of the memory blocks' markers ({markers}): add one first", err=True)
            return 1
    return _generated_tables(tables, "memory-docs", check, write)


@cli.command("cli-docs")
@click.option("--check", metavar="FILE", help="fail if FILE does not contain the current command table")
@click.option("--write", metavar="FILE", help="replace the table between the markers in FILE")
def cli_docs_command(check: str | None, write: str | None) -> int:
    """Print the table of every kts command, generated from the commands themselves (docs/cli.md)."""
    from rsm.cli.cli_docs import cli_docs_markdown

    return _generated_tables({"cli-table": cli_docs_markdown(cli)}, "cli-docs", check, write)


def _generated_tables(tables: dict[str, str], command: str, check: str | None, write: str | None) -> int:
    """Check, rewrite (each between its ``<!-- marker:begin/end -->``) or print generated tables."""
    if check:
        text = Path(check).read_text(encoding="utf-8")
        stale = [marker for marker, table in tables.items() if table.strip() not in text]
        if stale:
            click.echo(
                f"{check} does not contain the current {', '.join(stale)}; regenerate with `kts {command} --write "
                f"{check}`",
                err=True,
            )
            return 1
        return 0
    if write:
        path = Path(write)
        text = path.read_text(encoding="utf-8")
        for marker, table in tables.items():
            begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
            if begin not in text or end not in text:
                click.echo(f"{path} has no {begin} ... {end} markers", err=True)
                return 1
            head, rest = text.split(begin, 1)
            _old, tail = rest.split(end, 1)
            text = f"{head}{begin}\n{table}\n{end}{tail}"
        path.write_text(text, encoding="utf-8")
        return 0
    click.echo("\n\n".join(tables.values()))
    return 0


@cli.command("plugin-path")
@click.option("--properties", is_flag=True, help="print ready-to-paste server.properties lines (sidecar transport)")
def plugin_path_command(properties: bool) -> int:
    """Print the folder holding the broker plugin jar (for remote.log.storage.manager.class.path)."""
    from rsm.jvm import shim_cli

    return shim_cli.cmd_plugin_path(argparse.Namespace(properties=properties))


@cli.command(
    "kafka-server-start",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("server_properties")
@click.option("--kafka-home", default=None, help="Kafka installation (default: $KAFKA_HOME)")
@click.option("--dry-run", is_flag=True, help="print the JVM options and class path, start nothing")
@click.option("--main-class", default="kafka.Kafka", hidden=True)
@click.argument("broker_args", nargs=-1, type=click.UNPROCESSED)
def kafka_server_start_command(
    server_properties: str, kafka_home: str | None, dry_run: bool, main_class: str, broker_args: tuple[str, ...]
) -> int:
    """Run a Kafka broker inside this Python process (in-process transport), like kafka-server-start.sh.

    Honours KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_GC_LOG_OPTS, KAFKA_JMX_OPTS, JMX_PORT,
    KAFKA_LOG4J_OPTS, LOG_DIR, KAFKA_OPTS and CLASSPATH. Extra arguments go to kafka.Kafka (e.g. --override k=v).
    """
    from rsm.jvm import launcher, shim_cli

    args = argparse.Namespace(
        server_properties=server_properties,
        broker_args=list(broker_args),
        kafka_home=kafka_home,
        dry_run=dry_run,
        main_class=main_class,
    )
    try:
        return shim_cli.cmd_kafka_server_start(args)
    except launcher.LaunchError as e:
        raise click.ClickException(str(e)) from None


def _command_name(argv: list[str]) -> str:
    return next((a for a in argv if not a.startswith("-")), "")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in args or "--verbose" in args
    try:
        result = cli.main(args=args, prog_name="kts", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2 if isinstance(e, click.UsageError) else max(1, e.exit_code)
    except Exception as e:  # an operator gets one clear line, not a traceback (use -v for details)
        if verbose:
            raise
        click.echo(f"kts {_command_name(args)}: {type(e).__name__}: {e}", err=True)
        return 2
    return int(result or 0) if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
