"""``kts gc --bootstrap-server``: the cluster's record held against the store (``rsm.operator_tools.reconcile``), and
``--watch``, the same check on a schedule, exported as Prometheus metrics.

The scheduled check runs here, as a ``kts`` process (a Deployment, or a loop beside the brokers), not inside the
plugin: the plugin sees only the segments the broker hands it and has no client of its own to read
``__remote_log_metadata``; every broker would list the whole store for the same answer; and a check that lists
a store of 10,000 segments has no place on a broker's copy or fetch path. One process per cluster does it once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from backends.base import StorageBackendException
from rsm.cli.progress import stdout
from rsm.cli.properties import read_properties
from rsm.cli.settings import load_configs, open_manager
from rsm.core.object_keys import parse_object_key
from rsm.errors import RemoteStorageException
from rsm.metadata import RemoteLogSegmentState
from rsm.metrics.catalog import GC_CLUSTER_METRICS, GC_CLUSTER_SUBSYSTEM
from rsm.operator_tools.cluster_record import ClusterReadError, client_settings, read_cluster
from rsm.operator_tools.garbage import GarbageItem, quarantine_usage
from rsm.operator_tools.reconcile import (
    CLUSTER_KINDS,
    DEAD_TOPIC_ICEBERG,
    LostSegment,
    Reconciliation,
    reconcile,
    segments_from_records,
)

F = TypeVar("F", bound=Callable[..., Any])


def cluster_options(func: F) -> F:
    """``--bootstrap-server``, ``--command-config``, ``--watch``, ``--metrics-port``."""
    func = click.option(
        "--metrics-port",
        type=int,
        default=9465,
        show_default=True,
        help="with --watch: the port of the Prometheus endpoint (/metrics)",
    )(func)
    func = click.option(
        "--watch",
        metavar="INTERVAL",
        help="with --bootstrap-server: check every INTERVAL (e.g. 15m) and export the result as metrics; never deletes",
    )(func)
    func = click.option(
        "--command-config",
        type=click.Path(dir_okay=False),
        help="Kafka client properties (security.protocol, ssl.*, sasl.*), as Kafka's own tools take them",
    )(func)
    func = click.option(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="also reconcile with this cluster's record of tiered segments (__remote_log_metadata, topic ids)",
    )(func)
    return func


def load_command_config(path: str | None) -> dict[str, str]:
    """The client properties of ``--command-config`` (Kafka's tools' format); none without the option."""
    if path is None:
        return {}
    if not Path(path).is_file():
        raise ClusterReadError(f"--command-config {path}: no such file")
    return read_properties(path)


def deletes_iceberg_rows(config: str | None, sets: tuple[str, ...]) -> bool:
    """Whether the configuration removes an Iceberg-mode segment's rows with the segment."""
    return str(load_configs(config, sets).get("iceberg.mode.delete.rows.enabled", "false")).lower() == "true"


def check(
    manager: Any, grace: float, bootstrap_server: str, command_config: str | None
) -> tuple[Reconciliation, dict[str, str]]:
    """Read the cluster (the record first, then its topic ids), then reconcile the store with it."""
    settings = client_settings(bootstrap_server, load_command_config(command_config))
    view = read_cluster(settings)
    for why in view.undecided.values():
        click.echo(f"warning: not listed by the cluster, yet not confirmed deleted ({why}): left alone", err=True)
    segments = segments_from_records(view.records)
    return reconcile(manager, segments, [*view.topic_ids, *view.undecided], grace), view.topic_ids


def reconcile_with_cluster(
    manager: Any, items: list[GarbageItem], grace: float, bootstrap_server: str, command_config: str | None
) -> tuple[list[GarbageItem], list[LostSegment]]:
    """Today's ``items`` without those of segments the cluster serves (never removed on a listing's word), plus
    the cluster's kinds; and the lost segments."""
    stdout.print(f"reading the cluster's record of tiered segments from {bootstrap_server}")
    result, topic_ids = check(manager, grace, bootstrap_server, command_config)
    prefix = manager.config["key.prefix"]
    # the cluster's kinds remove whole segments: today's items of those segments would be removed twice
    covered = result.live_segment_ids | {i.segment.remote_log_segment_id.id for i in result.items if i.segment}
    kept: list[GarbageItem] = []
    for item in items:
        parsed = parse_object_key(item.key, prefix)
        if parsed is None or parsed.segment_id not in covered:
            kept.append(item)
    states = ", ".join(f"{n} {s}" for s, n in sorted(result.states.items())) or "none"
    stdout.print(
        f"the cluster has {len(topic_ids)} topics; its record holds segments: {states}; "
        f"{result.unknown_bytes:,} bytes in the store belong to segments it does not know (left alone)"
    )
    if result.iceberg_rows_kept and any(i.kind == DEAD_TOPIC_ICEBERG for i in result.items):
        stdout.print(
            "Iceberg-mode segments of deleted topics are listed: --delete removes their objects, and their rows "
            "stay in the topic's table (iceberg.mode.delete.rows.enabled is off; set it to remove them too)"
        )
    return kept + result.items, result.lost


def show_lost(lost: list[LostSegment]) -> None:
    """One line on stderr per lost segment (greppable, never cut to a terminal's width), then what to do."""
    if not lost:
        return
    for entry in lost:
        meta = entry.segment.metadata
        tip = meta.topic_id_partition
        click.echo(
            f"DATA LOSS {tip.topic}-{tip.partition} segment {meta.remote_log_segment_id.id} offsets "
            f"{meta.start_offset}..{meta.end_offset}: missing {', '.join(entry.missing)}",
            err=True,
        )
    click.echo(
        f"ERROR: {len(lost)} segments the cluster believes tiered are missing from the store; consumers reading "
        "them will fail. Restore the objects from a backup or versioned bucket; kts gc does not touch them.",
        err=True,
    )


def watch_loop(
    config: str | None,
    sets: tuple[str, ...],
    grace: float,
    bootstrap_server: str,
    command_config: str | None,
    interval: float,
    port: int,
    rounds: int | None = None,
) -> int:
    """Check every ``interval`` seconds and serve the result on ``port`` (``rounds``: stop after that many, for
    tests). A failed check is counted and logged, and the gauges keep their last values."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

    registry = CollectorRegistry()
    kinds = {"gauge": Gauge, "counter": Counter}
    family = {
        d.name.removeprefix(f"{GC_CLUSTER_SUBSYSTEM}_"): kinds[d.kind](
            d.name, d.meaning, list(d.labels), registry=registry
        )
        for d in GC_CLUSTER_METRICS
    }
    segments, garbage, garbage_bytes = family["segments"], family["garbage_segments"], family["garbage_bytes"]
    lost, unaccounted, unknown = family["lost_segments"], family["unaccounted_bytes"], family["unknown_bytes"]
    last, failures = family["last_success_timestamp_seconds"], family["check_failures"]
    held_objects, held_bytes = family["quarantined_objects"], family["quarantined_bytes"]
    server, _thread = start_http_server(port, addr="0.0.0.0", registry=registry)
    stdout.print(f"serving the reconciliation on :{port}/metrics, every {interval:.0f} s")
    done = 0
    try:
        with open_manager(config, sets, keys=False) as manager:
            while rounds is None or done < rounds:
                try:
                    result, _ids = check(manager, grace, bootstrap_server, command_config)
                    held = quarantine_usage(manager)
                except (RemoteStorageException, StorageBackendException, OSError) as e:
                    failures.inc()
                    click.echo(f"check failed: {e}", err=True)
                else:
                    for state in RemoteLogSegmentState:
                        segments.labels(state.name).set(result.states.get(state.name, 0))
                    by_kind = result.bytes_by_kind()
                    for kind in CLUSTER_KINDS:
                        garbage.labels(kind).set(sum(1 for i in result.items if i.kind == kind))
                        garbage_bytes.labels(kind).set(by_kind[kind])
                    lost.set(len(result.lost))
                    unaccounted.set(result.unaccounted_bytes)
                    unknown.set(result.unknown_bytes)
                    held_objects.set(held[0])
                    held_bytes.set(held[1])
                    last.set(time.time())
                    if result.lost:
                        show_lost(result.lost)
                    sys.stdout.flush()
                done += 1
                if rounds is None or done < rounds:
                    time.sleep(interval)
    finally:
        server.shutdown()
    return 0
