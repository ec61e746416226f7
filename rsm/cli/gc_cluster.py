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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import click

from backends.base import StorageBackendException
from rsm.cli.progress import stdout
from rsm.cli.properties import read_properties
from rsm.cli.settings import load_configs, open_manager
from rsm.core.object_keys import parse_object_key
from rsm.deletion.rules import RECORD_COMPLETE, TOPIC_GONE_CONFIRMED, DeletionRefused, Evidence, authorize
from rsm.errors import RemoteStorageException
from rsm.metadata import RemoteLogSegmentState
from rsm.metrics.catalog import GC_CLUSTER_METRICS, GC_CLUSTER_SUBSYSTEM
from rsm.operator_tools.client_settings import client_settings
from rsm.operator_tools.cluster_record import (
    ClusterReadError,
    RecordRead,
    TopicAbsence,
    TopicsRead,
    read_record,
    read_topics,
)
from rsm.operator_tools.garbage import GarbageItem
from rsm.operator_tools.garbage_removal import quarantine_usage
from rsm.operator_tools.reconcile import (
    CLUSTER_KINDS,
    DEAD_TOPIC_ICEBERG,
    DEAD_TOPIC_LATEST,
    DEAD_TOPIC_SEGMENT,
    LostSegment,
    Reconciliation,
    reconcile,
    segments_from_records,
)

F = TypeVar("F", bound=Callable[..., Any])
DEAD_TOPIC_KINDS = (DEAD_TOPIC_SEGMENT, DEAD_TOPIC_ICEBERG, DEAD_TOPIC_LATEST)
DEFAULT_CONFIRM_AFTER_S = 300.0
"""How far apart two Metadata reads must be to confirm a topic id gone (``--confirm-after``)."""


def cluster_options(func: F) -> F:
    """``--bootstrap-server``, ``--command-config``, ``--watch``, ``--metrics-port``, ``--confirm-after``."""
    func = click.option(
        "--confirm-after",
        default="5m",
        show_default=True,
        help="with --bootstrap-server: a topic id the cluster does not list is gone only if a second Metadata read "
        "this long after the first (from another broker when there are several) lacks it too, or if the record holds "
        "a partition delete marker for it; --delete waits for that read, --watch takes it from a later check",
    )(func)
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


@dataclass
class ClusterCheck:
    """One check: the record as read, the latest Metadata read, and the store held against them."""

    record: RecordRead
    topics: TopicsRead
    result: Reconciliation


def check(
    manager: Any,
    grace: float,
    settings: Mapping[str, Any],
    absence: TopicAbsence,
    previous: TopicsRead | None = None,
    before_listing: Callable[[], None] | None = None,
) -> ClusterCheck:
    """Read the record, then the topic ids (of another broker than ``previous``'s), then list the store and hold
    it against them; the record is read again after the listing for the segments the store lacks.
    ``before_listing`` runs between the reads and the listing (a test's seam)."""
    record = read_record(settings)
    names = record.topic_names()
    topics = read_topics(settings, names, previous)
    absence.observe(topics, names)
    for why in topics.undecided.values():
        click.echo(f"warning: not listed by the cluster, yet not confirmed deleted ({why}): left alone", err=True)
    complete = Evidence(RECORD_COMPLETE, f"read {record.extent()} without a gap") if record.complete else None
    if before_listing is not None:
        before_listing()
    result = reconcile(
        manager,
        segments_from_records(record.records),
        [*topics.topic_ids, *topics.undecided],
        grace,
        reread=lambda: segments_from_records(read_record(settings).records),
        complete=complete,
        gone=absence.gone(record.delete_marked()),
    )
    return ClusterCheck(record, topics, result)


def _dead_topic(item: GarbageItem) -> tuple[str, str] | None:
    """The (topic id, name) a dead-topic item is of: its segment's, or its latest table rows'."""
    if item.kind not in DEAD_TOPIC_KINDS:
        return None
    if item.dead_topic is not None:
        return item.dead_topic
    if item.segment is not None:
        return item.segment.topic_id_partition.topic_id, item.segment.topic_id_partition.topic
    return None


def _unconfirmed_topics(result: Reconciliation) -> dict[str, str]:
    """The topic ids (with names) of dead-topic items that lack ``TOPIC_GONE_CONFIRMED``."""
    out: dict[str, str] = {}
    for item in result.items:
        signals = {e.signal for e in item.evidence}
        dead = _dead_topic(item)
        if dead is not None and TOPIC_GONE_CONFIRMED not in signals:
            out[dead[0]] = dead[1]
    return out


def confirm_dead_topics(checked: ClusterCheck, settings: Mapping[str, Any], absence: TopicAbsence) -> None:
    """Wait ``absence.confirm_after_s``, read the topic ids again (from another broker when there are several) and
    give the dead-topic items whose topic id that read lacks too their ``TOPIC_GONE_CONFIRMED``; items of a topic
    id listed again are dropped."""
    pending = _unconfirmed_topics(checked.result)
    if not pending:
        return
    named = ", ".join(f"{name} ({tid})" for tid, name in sorted(pending.items(), key=lambda kv: kv[1]))
    stdout.print(
        f"{checked.topics.broker} does not list topic ids whose segments are in the store, and the record holds no "
        f"delete marker for them: {named}. Waiting {absence.confirm_after_s:.0f} s (--confirm-after) to read the "
        "topic ids again, from another broker when there are several, before removing anything of them"
    )
    sys.stdout.flush()
    time.sleep(absence.confirm_after_s)
    names = checked.record.topic_names()
    again = read_topics(settings, names, checked.topics)
    absence.observe(again, names)
    gone = absence.gone(checked.record.delete_marked())
    items: list[GarbageItem] = []
    for item in checked.result.items:
        dead = _dead_topic(item)
        tid = dead[0] if dead is not None else ""
        if dead is None or tid not in pending:
            items.append(item)
        elif not again.lacks(tid):
            stdout.print(f"{again.broker} lists topic id {tid} ({pending[tid]}), or may not describe it: left alone")
        elif tid in gone:
            items.append(replace(item, evidence=(*item.evidence, gone[tid])))
        else:
            items.append(item)
    checked.result.items = items
    checked.topics = again


def removable(item: GarbageItem) -> bool:
    """Whether ``item`` carries every signal its rule needs."""
    try:
        authorize(item.kind, item.key, item.evidence)
    except DeletionRefused:
        return False
    return True


def reconcile_with_cluster(
    manager: Any,
    items: list[GarbageItem],
    grace: float,
    bootstrap_server: str,
    command_config: str | None,
    delete: bool = False,
    confirm_after: float = DEFAULT_CONFIRM_AFTER_S,
) -> tuple[list[GarbageItem], list[LostSegment]]:
    """Today's ``items`` without those of segments the cluster serves (never removed on a listing's word), plus
    the cluster's kinds; and the lost segments. With ``delete`` a dead topic not yet confirmed is waited for
    (``confirm_after`` seconds, then a second read), and the cluster's items that still lack a signal their rule
    needs are dropped from the list with the reason."""
    stdout.print(f"reading the cluster's record of tiered segments from {bootstrap_server}")
    settings = client_settings(bootstrap_server, load_command_config(command_config))
    absence = TopicAbsence(confirm_after)
    checked = check(manager, grace, settings, absence)
    if delete and checked.record.complete:  # an incomplete record removes nothing: no need to wait
        confirm_dead_topics(checked, settings, absence)
    result, record = checked.result, checked.record
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
        f"the cluster has {len(checked.topics.topic_ids)} topics ({checked.topics.broker}); its record holds "
        f"segments: {states} ({record.extent()}); {result.unknown_bytes:,} bytes in the store belong to segments "
        "it does not know (left alone)"
    )
    if not record.complete:
        stdout.print(
            f"the record is not complete: {record.shortfall()} (retention or a records delete removed its "
            "beginning). Segments whose first records are gone are unknown and left alone, and nothing is removed "
            "on this record's word; keep the topic's retention infinite (retention.ms=-1, Kafka's default for it)"
        )
    if result.deleted_meanwhile:
        stdout.print(
            f"{result.deleted_meanwhile} segments the listing lacked were deleted by Kafka meanwhile (the record, "
            "read again after the listing, says so): not lost"
        )
    unconfirmed = _unconfirmed_topics(result)
    if unconfirmed:
        for tid, name in sorted(unconfirmed.items(), key=lambda kv: kv[1]):
            mine = [i for i in result.items if i.segment and i.segment.topic_id_partition.topic_id == tid]
            rows = sum(i.rows or 0 for i in result.items if i.dead_topic is not None and i.dead_topic[0] == tid)
            stdout.print(
                f"suspected, not confirmed: topic {name} ({tid}) is not listed by {checked.topics.broker}: "
                f"{len(mine)} segments, {sum(i.size or 0 for i in mine):,} bytes"
                + (f", {rows:,} rows in its latest-per-key table" if rows else "")
            )
        if not delete:
            stdout.print(
                "a topic id is confirmed gone by a second Metadata read --confirm-after later (kts gc --delete "
                "waits for it) or by a partition delete marker in the record"
            )
    if result.iceberg_rows_kept and any(i.kind == DEAD_TOPIC_ICEBERG for i in result.items):
        stdout.print(
            "Iceberg-mode segments of deleted topics are listed: --delete removes their objects, and their rows "
            "stay in the topic's table (iceberg.mode.delete.rows.enabled is off; set it to remove them too)"
        )
    found = result.items
    if delete:
        found = []
        for item in result.items:
            try:
                authorize(item.kind, item.key, item.evidence)
            except DeletionRefused as e:
                click.echo(f"kept: {e}", err=True)
            else:
                found.append(item)
    return kept + found, result.lost


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
    confirm_after: float = DEFAULT_CONFIRM_AFTER_S,
) -> int:
    """Check every ``interval`` seconds and serve the result on ``port`` (``rounds``: stop after that many, for
    tests). A failed check is counted and logged, and the gauges keep their last values. Successive checks ask
    the topic ids of different brokers, and a topic id absent from reads ``confirm_after`` seconds apart is
    confirmed gone."""
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
    suspected, complete = family["suspected_segments"], family["record_complete"]
    lost, unaccounted, unknown = family["lost_segments"], family["unaccounted_bytes"], family["unknown_bytes"]
    last, failures = family["last_success_timestamp_seconds"], family["check_failures"]
    held_objects, held_bytes = family["quarantined_objects"], family["quarantined_bytes"]
    server, _thread = start_http_server(port, addr="0.0.0.0", registry=registry)
    stdout.print(f"serving the reconciliation on :{port}/metrics, every {interval:.0f} s")
    absence = TopicAbsence(confirm_after)
    previous: TopicsRead | None = None
    done = 0
    try:
        with open_manager(config, sets, keys=False) as manager:
            settings = client_settings(bootstrap_server, load_command_config(command_config))
            while rounds is None or done < rounds:
                try:
                    checked = check(manager, grace, settings, absence, previous)
                    held = quarantine_usage(manager)
                except (RemoteStorageException, StorageBackendException, OSError) as e:
                    failures.inc()
                    click.echo(f"check failed: {e}", err=True)
                else:
                    previous, result = checked.topics, checked.result
                    for state in RemoteLogSegmentState:
                        segments.labels(state.name).set(result.states.get(state.name, 0))
                    for kind in CLUSTER_KINDS:
                        mine = [i for i in result.items if i.kind == kind]
                        sure = [i for i in mine if removable(i)]
                        garbage.labels(kind).set(len(sure))
                        garbage_bytes.labels(kind).set(sum(i.size or 0 for i in sure))
                        suspected.labels(kind).set(len(mine) - len(sure))
                    complete.set(1 if checked.record.complete else 0)
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
