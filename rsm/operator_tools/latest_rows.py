"""A deleted topic's rows in the latest-per-key tables (``dead-topic-latest-rows``): found by the cluster
reconciliation, removed by ``kts gc --delete`` into the warehouse's quarantine, put back by ``kts gc restore``.

A latest table keeps a key's newest row until a tombstone, like a compacted topic; when the topic itself is
deleted its rows are the rest of a dead topic's data. They go on the evidence that lets gc remove a dead topic's
segments: the cluster's record, read complete, knows the topic id, and the cluster's absence of it is confirmed
(two Metadata reads ``--confirm-after`` apart, or a delete marker). Only rows carrying that topic id go, and only
from a table of the record's name for it: a topic created again under the same name keeps its rows.

A removal writes the rows it takes as one Parquet file into ``<warehouse>/kts-quarantine/<run>/`` (with the
quarantine's record: kind, topic, evidence, when) before the commit that removes them, so it can be undone for
``gc.quarantine.ms``: ``kts gc restore`` puts each row back whose (partition, key) has no row now (a row written
since is never replaced; rows left out stay held, and the restore says so), and the quarantine's purge removes
the file for good.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rsm.deletion.fileio_holding import normal_location
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import Quarantine, RestoreReport
from rsm.deletion.rules import DeletionRefused, Evidence, authorize
from rsm.errors import RemoteStorageException
from rsm.formats.iceberg import iceberg_format
from rsm.operator_tools.garbage import GarbageItem, GarbageReport, iceberg_catalog

if TYPE_CHECKING:
    from rsm.core.manager import RemoteStorageManager

DEAD_TOPIC_LATEST = "dead-topic-latest-rows"  # also garbage_removal.DEAD_TOPIC_LATEST
REMOVED_DIR = "kts-removed-rows"
"""The folder, under a latest table's location, that names the rows a removal holds (nothing is written there:
the rows are in the quarantine)."""
_T = TypeVar("_T")


def latest_tables(manager: RemoteStorageManager) -> list[Any]:
    """The latest-per-key tables of the plugin's catalog: those of its namespace and of the namespaces the
    configuration puts latest tables in. Nothing is created; none when Iceberg mode is off."""
    opened = iceberg_catalog(manager)
    if opened is None:
        return []
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from rsm.iceberg.latest_removal import is_latest_table

    catalog = opened[0]
    cfg = iceberg_format(manager).cfg
    namespaces = sorted({cfg.namespace, *(spec.namespace for spec in cfg.latest.values())})
    out = []
    for namespace in namespaces:
        try:
            identifiers = catalog.list_tables(namespace)
        except NoSuchNamespaceError:
            continue
        for ident in identifiers:
            try:
                table = catalog.load_table(ident)
            except NoSuchTableError:
                continue
            if is_latest_table(table):
                out.append(table)
    return out


def _name(table: Any) -> str:
    return ".".join(table.name())


def find_latest_rows(
    manager: RemoteStorageManager,
    dead: Mapping[str, str],
    complete: Evidence | None,
    gone: Mapping[str, Evidence],
) -> list[GarbageItem]:
    """One item per latest table and topic id of ``dead`` (the topic ids the record knows and the cluster does
    not list, with the record's topic name) whose rows the table holds, in a table of that topic name. Each
    carries ``complete`` and ``gone[topic id]`` where given: the two signals its rule needs."""
    if not dead:
        return []
    from rsm.iceberg.latest_removal import topic_ids_of

    items = []
    names = set(dead.values())
    for table in latest_tables(manager):
        topic = table.properties.get("kafka.topic")
        if topic not in names:
            continue  # no dead topic id of its name: its rows are not read
        for topic_id, rows in sorted(topic_ids_of(table).items()):
            if not topic_id or dead.get(topic_id) != topic:
                continue
            evidence = [e for e in (complete, gone.get(topic_id)) if e is not None]
            key = f"{_name(table)} _kafka.topic_id={topic_id}"
            items.append(
                GarbageItem(
                    DEAD_TOPIC_LATEST, key, 0.0, evidence=tuple(evidence), dead_topic=(topic_id, topic), rows=rows
                )
            )
    return items


def _warehouse_quarantine(manager: RemoteStorageManager) -> Quarantine | None:
    from rsm.operator_tools.garbage_removal import warehouse_quarantine

    return warehouse_quarantine(manager)


def remove_latest_rows(
    manager: RemoteStorageManager,
    items: Sequence[GarbageItem],
    report: GarbageReport,
    progress: Callable[[GarbageItem], None] | None = None,
) -> None:
    """Remove each item's rows, once ``authorize`` allows it on the item's evidence: the rows are held in the
    warehouse's quarantine (run ``report.run``), then one commit removes them from their table. A commit that
    another writer beat is planned again on the fresh table (``iceberg.mode.commit.retries`` times)."""
    tables = {_name(t): t for t in latest_tables(manager)}
    quarantine = _warehouse_quarantine(manager)
    retries = iceberg_format(manager).cfg.commit_retries
    for item in items:
        try:
            authorize(item.kind, item.key, item.evidence)
        except DeletionRefused as e:
            report.skipped.append((item, str(e)))
        else:
            table = tables.get(item.key.split(" ", 1)[0])
            if item.dead_topic is None or table is None or quarantine is None:
                report.skipped.append((item, "its latest table is gone, or Iceberg mode is off: nothing to remove"))
            else:
                try:
                    held = _remove(table, item, quarantine, report.run, retries)
                except RemoteStorageException as e:
                    report.failed.append((item, str(e)))
                else:
                    if held is None:
                        report.skipped.append((item, "the table holds none of its rows now"))
                    else:
                        report.held.append(held)
                        report.deleted.append(item)
        if progress is not None:
            progress(item)


def _commit_with_retries(attempt: Callable[[], _T], retries: int, what: str, next_step: str) -> _T:
    """``attempt()`` again after another writer's commit won, up to ``retries`` more times; then an error saying
    ``next_step``. Each attempt starts from the table as it is now."""
    from rsm.iceberg.commit_retries import retry_conflicts

    return retry_conflicts(
        attempt,
        retries,
        lambda e, n: RemoteStorageException(f"{what}: another writer committed first {n} times ({e}); {next_step}"),
    )


def _remove(table: Any, item: GarbageItem, quarantine: Quarantine, run: str, retries: int) -> Held | None:
    from rsm.iceberg.commit_retries import CONFLICTS
    from rsm.iceberg.latest_removal import commit_removal, plan_removal, rows_to_parquet

    assert item.dead_topic is not None
    topic_id, topic = item.dead_topic
    what = f"removing the rows of topic {topic} ({topic_id}) from {_name(table)}"
    original = f"{table.location().rstrip('/')}/{REMOVED_DIR}/{topic_id}.parquet"

    def attempt() -> Held | None:
        removal = plan_removal(table.refresh(), frozenset([topic_id]))
        if removal is None:
            return None
        held = quarantine.keep(DEAD_TOPIC_LATEST, original, rows_to_parquet(removal.removed), item.evidence, run, topic)
        try:
            commit_removal(removal, what)
        except CONFLICTS:
            quarantine.purge([held])  # the rows stay in the table: nothing to hold
            raise
        return held

    return _commit_with_retries(
        attempt, retries, what, "nothing was removed. Run kts gc --delete again, or raise iceberg.mode.commit.retries"
    )


def restore_held(manager: RemoteStorageManager, quarantine: Quarantine, held: Iterable[Held]) -> RestoreReport:
    """``quarantine.restore`` for objects; held rows of ``dead-topic-latest-rows`` go back into their table
    (:func:`restore_latest_rows`)."""
    held = list(held)
    report = quarantine.restore([h for h in held if h.kind != DEAD_TOPIC_LATEST])
    rows = [h for h in held if h.kind == DEAD_TOPIC_LATEST]
    if rows:
        other = restore_latest_rows(manager, quarantine, rows)
        report.restored += other.restored
        report.refused += other.refused
        report.missing += other.missing
    return report


def restore_latest_rows(manager: RemoteStorageManager, quarantine: Quarantine, held: Sequence[Held]) -> RestoreReport:
    """Put held rows back into the latest table whose location names them: each row whose (partition, key) has
    no row now. The held file is removed once all its rows are back; rows left out (their key has a row now,
    which is never replaced) stay held, and the item is reported refused with how many."""
    from rsm.iceberg.latest_removal import restore_rows, rows_from_parquet, rows_to_parquet

    report = RestoreReport()
    tables = {normal_location(t.location()).rstrip("/"): t for t in latest_tables(manager)}
    retries = iceberg_format(manager).cfg.commit_retries
    for h in held:
        home = normal_location(h.original).rsplit(f"/{REMOVED_DIR}/", 1)[0]
        table = tables.get(home)
        if table is None:
            report.missing.append((h, f"no latest table is at {home} now: the rows stay held"))
            continue
        if not h.present or not quarantine.store.exists(h.location):
            report.missing.append((h, "its held copy is gone (purged): nothing to put back"))
            continue
        rows = rows_from_parquet(quarantine.store.get(h.location), h.location)
        what = f"putting back the rows held at {h.location} into {_name(table)}"
        back, left = _commit_with_retries(
            lambda t=table, r=rows, w=what: restore_rows(t.refresh(), r, w),
            retries,
            what,
            "the rows stay held: run kts gc restore again",
        )
        if left.num_rows:
            evidence = [Evidence(*line.split(": ", 1)) for line in h.evidence]
            again = quarantine.keep(h.kind, h.original, rows_to_parquet(left), evidence, h.run, h.topic)
            report.refused.append(
                (
                    again,
                    f"{back} rows put back; {left.num_rows} rows whose key has a row now stay held (never replaced)",
                )
            )
        else:
            quarantine.purge([h])
            report.restored.append(h)
    return report
