"""Garbage collection's removal: ``delete_garbage`` takes what ``rsm.operator_tools.garbage`` found into the
quarantines (the store's, and the Iceberg warehouse's in Iceberg mode) once the deletion rules allow it on the
evidence found, and ``purge_expired`` empties what they held long enough. See ``rsm.operator_tools.garbage`` for
the kinds of garbage."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from backends.base import ObjectInfo, StorageBackendException
from rsm.core.object_keys import parse_object_key, segment_keys
from rsm.core.parallel import DEFAULT_CONCURRENCY, ordered_map
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import QUARANTINE_DIR, RECORD_SUFFIX, BackendHolding, PurgeReport, Quarantine, new_run_id
from rsm.deletion.rules import (
    STORE_RELISTED,
    DeletionRefused,
    Evidence,
    authorize,
)
from rsm.errors import RemoteStorageException
from rsm.formats.iceberg import iceberg_format
from rsm.operator_tools.garbage import (
    CACHE_ENTRY,
    ICEBERG_ORPHAN,
    MANIFEST_WITHOUT_DATA,
    GarbageItem,
    GarbageReport,
    iceberg_catalog,
)

DEAD_TOPIC_LATEST = "dead-topic-latest-rows"
"""``rsm.operator_tools.latest_rows``'s kind (that module imports this one)."""

if TYPE_CHECKING:
    from rsm.core.manager import RemoteStorageManager


def quarantine_of(manager: RemoteStorageManager) -> Quarantine:
    """The quarantine of the plugin's store: ``<key.prefix>kts-quarantine/``, holding only keys of the plugin's
    layout, for ``gc.quarantine.ms``."""
    prefix = manager.config["key.prefix"]
    store = BackendHolding(
        manager.backend,
        prefix,
        owned=lambda key: parse_object_key(key, prefix) is not None,
        capabilities=manager.backend_capabilities,
    )
    return Quarantine(store, store.root, manager.config["gc.quarantine.ms"] / 1000)


def quarantine_usage(
    manager: RemoteStorageManager, topic: str | None = None, partition: int | None = None
) -> tuple[int, int]:
    """How many objects the quarantines hold and their bytes (of one topic, or one partition of it): the store's
    from one listing, no record read; in Iceberg mode also the warehouse's, whose records name their topic (a
    table holds every partition of its topic, so ``partition`` does not narrow it)."""
    root = manager.config["key.prefix"] + QUARANTINE_DIR
    details = manager.backend_capabilities.details
    if details is None:
        held = [h for h in quarantine_of(manager).held() if h.present]
        infos = [ObjectInfo(h.location, h.size, h.held_at) for h in held]
    else:
        infos = [i for i in details.list_details(root) if not i.key.endswith(RECORD_SUFFIX)]
    objects = size = 0
    for info in infos:
        if topic is not None:
            parsed = parse_object_key(info.key[len(root) :].partition("/")[2], "")
            if parsed is None or parsed.topic != topic or partition not in (None, parsed.partition):
                continue
        objects += 1
        size += info.size
    warehouse = warehouse_quarantine(manager)
    if warehouse is not None:
        for held in warehouse.held(topic=topic):
            if held.present:
                objects += 1
                size += held.size
    return objects, size


def warehouse_quarantine(manager: RemoteStorageManager) -> Quarantine | None:
    """The quarantine of the Iceberg warehouse (``<warehouse>/kts-quarantine/``, through the tables' FileIO) when
    Iceberg mode is on and its catalog holds the namespace; None otherwise (nothing is created)."""
    opened = iceberg_catalog(manager)
    if opened is None or not opened[1]:
        return None
    from pyiceberg.io import load_file_io

    from rsm.deletion.fileio_holding import FileIOHolding

    catalog, warehouse = opened
    store = FileIOHolding(load_file_io(dict(catalog.properties), warehouse), warehouse)
    return Quarantine(store, store.root, manager.config["gc.quarantine.ms"] / 1000)


def quarantines_of(manager: RemoteStorageManager) -> list[Quarantine]:
    """Every quarantine gc and maintenance hold things in: the store's, then the warehouse's in Iceberg mode."""
    warehouse = warehouse_quarantine(manager)
    return [quarantine_of(manager), *([warehouse] if warehouse is not None else [])]


def purge_expired(manager: RemoteStorageManager, now: float | None = None) -> PurgeReport:
    """Purge what the store's quarantine, and in Iceberg mode the warehouse's, have held longer than
    ``gc.quarantine.ms``."""
    quarantines = quarantines_of(manager)
    report = quarantines[0].purge(quarantines[0].expired(now))
    for other in quarantines[1:]:
        report.purged += other.purge(other.expired(now)).purged
    return report


def delete_garbage(
    manager: RemoteStorageManager,
    items: Iterable[GarbageItem],
    progress: Callable[[GarbageItem], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    run: str | None = None,
) -> GarbageReport:
    """Remove ``items`` (from ``find_garbage``), ``concurrency`` at a time; ``progress`` is called (in the caller's
    thread, in the items' order) after each item is handled.

    Every item's removal is authorised by ``rsm.deletion.rules.authorize`` on its evidence (an item lacking a
    signal is skipped, with the reason); what can be undone is moved into the store's quarantine under ``run``
    (a new run id when None), the rest (unfinished uploads, cache entries) is deleted. An orphan object whose
    manifest has appeared since it was listed (a slow copy completed) is skipped. A failure on one item is
    recorded and the others still go.
    """
    report = GarbageReport(run=run or new_run_id())
    quarantine = quarantine_of(manager)
    items = list(items)
    orphans = [i for i in items if i.kind == ICEBERG_ORPHAN]
    if orphans:
        items = [i for i in items if i.kind != ICEBERG_ORPHAN]
        _remove_iceberg_orphans(manager, orphans, report, progress)
    latest = [i for i in items if i.kind == DEAD_TOPIC_LATEST]
    if latest:
        from rsm.operator_tools.latest_rows import remove_latest_rows

        items = [i for i in items if i.kind != DEAD_TOPIC_LATEST]
        remove_latest_rows(manager, latest, report, progress)
    for outcome in ordered_map(
        lambda item: _remove(manager, quarantine, report.run, item), items, concurrency, "kts-gc-delete"
    ):
        item = outcome.item
        if isinstance(outcome.error, StorageBackendException | DeletionRefused):
            report.failed.append((item, str(outcome.error)))
        elif outcome.error is not None:
            raise outcome.error
        else:
            assert outcome.result is not None
            state, why, held = outcome.result
            report.held += held
            if state == _DELETED:
                report.deleted.append(item)
            else:
                (report.skipped if state == _SKIPPED else report.failed).append((item, why))
        if progress is not None:
            progress(item)
    return report


_DELETED, _SKIPPED, _FAILED = "deleted", "skipped", "failed"
_Outcome = tuple[str, str, list[Held]]


def _remove_iceberg_orphans(
    manager: RemoteStorageManager,
    items: list[GarbageItem],
    report: GarbageReport,
    progress: Callable[[GarbageItem], None] | None,
) -> None:
    """Move the Iceberg orphans that are orphans still into the warehouse's quarantine (``kts-quarantine/``):
    each table's ledger and references are read again, and each move is authorised by the ``iceberg-orphan``
    rule."""
    opened = iceberg_catalog(manager)
    if opened is None:
        report.skipped += [(i, "Iceberg mode is off or its namespace is gone") for i in items]
        return
    from rsm.iceberg.maintenance.namespace import hold_if_orphans

    catalog, warehouse = opened
    cfg = iceberg_format(manager).cfg
    held, kept = hold_if_orphans(
        catalog, cfg.namespace, [i.key for i in items], warehouse, cfg.maintenance, run=report.run
    )
    report.held += held
    gone = {h.original for h in held}
    why = dict(kept)
    for item in items:
        if item.key in gone:
            report.deleted.append(item)
        else:
            report.skipped.append((item, why.get(item.key, "not an orphan now")))
        if progress is not None:
            progress(item)


def _refused(item: GarbageItem, evidence: Iterable[Evidence]) -> str | None:
    """Why the rules refuse ``item`` on ``evidence``; None when they allow it."""
    try:
        authorize(item.kind, item.key, evidence)
    except DeletionRefused as e:
        return str(e)
    return None


def _remove(manager: RemoteStorageManager, quarantine: Quarantine, run: str, item: GarbageItem) -> _Outcome:
    """Remove one item; returns what became of it (``_DELETED``, ``_SKIPPED`` or ``_FAILED``), why, and what the
    quarantine now holds of it."""
    backend = manager.backend
    if item.kind == CACHE_ENTRY:
        if (why := _refused(item, item.evidence)) is not None:
            return _SKIPPED, why, []
        if manager.chunk_cache is not None and manager.chunk_cache.disk is not None:
            manager.chunk_cache.forget_segment(item.key)
        return _DELETED, "", []
    if item.segment is not None:
        return _remove_segment(manager, quarantine, run, item)
    prefix = manager.config["key.prefix"]
    parsed = parse_object_key(item.key, prefix)
    if parsed is None:
        return _FAILED, "not a key of the plugin's object layout; left alone", []
    if item.upload is not None:
        if (why := _refused(item, item.evidence)) is not None:
            return _SKIPPED, why, []
        pending_uploads = manager.backend_capabilities.pending_uploads
        if pending_uploads is None:
            return _FAILED, f"{backend} cannot abort uploads", []
        pending_uploads.abort_pending_upload(item.upload)
        return _DELETED, "", []
    keys = parsed.keys
    if item.kind == MANIFEST_WITHOUT_DATA:
        present = set(backend.list(keys.prefix + parsed.main_path + "."))
        if keys.log in present and keys.indexes in present:
            return _SKIPPED, "its segment's data exists now", []
        relisted = Evidence(STORE_RELISTED, "listed again: the segment's .log or .indexes is still missing")
        if (why := _refused(item, (*item.evidence, relisted))) is not None:
            return _SKIPPED, why, []
        names = [(keys.manifest, item.size)] + [(k, None) for k in (keys.log, keys.indexes) if k in present]
        held = quarantine.hold(item.kind, names, (*item.evidence, relisted), run, parsed.topic)
        return _DELETED, "", held
    if any(k == keys.manifest for k in backend.list(keys.manifest)):
        return _SKIPPED, "its segment's manifest exists now (the copy completed)", []
    relisted = Evidence(STORE_RELISTED, "listed again: the segment still has no manifest")
    if (why := _refused(item, (*item.evidence, relisted))) is not None:
        return _SKIPPED, why, []
    held = quarantine.hold(item.kind, [(item.key, item.size)], (*item.evidence, relisted), run, parsed.topic)
    return _DELETED, "", held


def _remove_segment(manager: RemoteStorageManager, quarantine: Quarantine, run: str, item: GarbageItem) -> _Outcome:
    """A segment the cluster's record ties to nothing live: its rows go through the table writer when
    ``iceberg.mode.delete.rows.enabled`` (before its manifest, as the plugin's delete does), then its objects move
    into the quarantine together."""
    assert item.segment is not None
    if (why := _refused(item, item.evidence)) is not None:
        return _SKIPPED, why, []
    keys = segment_keys(manager.config["key.prefix"], item.segment)
    try:
        manager.delete_segment_rows(item.segment)
    except RemoteStorageException as e:
        return _FAILED, str(e), []
    present = set(manager.backend.list(keys.prefix + keys.main_path + "."))
    names = [(k, None) for k in (keys.manifest, keys.log, keys.indexes) if k in present]
    topic = item.segment.topic_id_partition.topic
    held = quarantine.hold(item.kind, names, item.evidence, run, topic)
    manager.forget_segment(item.segment)
    return _DELETED, "", held
