"""Manifest rewrite: merging the current snapshot's data manifests when there are too many."""

from __future__ import annotations

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance.step import COMPACTION_SNAPSHOT_PROPERTY, StepResult
from rsm.iceberg.transaction import transaction


def rewrite_manifests(table: Table, settings: MaintenanceSettings, dry_run: bool = False) -> StepResult:
    """Merge the current snapshot's data manifests when there are more than ``manifests_max`` (each commit that
    replaces files adds some; planning a scan or a commit reads every one).

    pyiceberg 0.12 has no rewrite-manifests action; its merging append does the same when given no files:
    one commit whose manifests hold the same live files, merged up to ``commit.manifest.target-size-bytes``.
    The minimum count to merge is lowered inside the same transaction only, so the table keeps its own."""
    result = StepResult("rewrite-manifests")
    snapshot = table.current_snapshot()
    if snapshot is None:
        return result
    manifests = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA]
    result.details = [f"{len(manifests)} data manifests"]
    if len(manifests) <= settings.manifests_max:
        return result
    result.count = len(manifests)
    if dry_run:
        return result
    temporary = {"commit.manifest.min-count-to-merge": "2", "commit.manifest-merge.enabled": "true"}
    txn = transaction(table)
    txn.set_properties(temporary)
    with txn.update_snapshot(snapshot_properties={COMPACTION_SNAPSHOT_PROPERTY: "rewrite-manifests"}).merge_append():
        pass
    kept = {k: table.properties[k] for k in temporary if k in table.properties}
    if kept:
        txn.set_properties(kept)
    if len(kept) < len(temporary):
        txn.remove_properties(*(k for k in temporary if k not in kept))
    txn.commit_transaction()
    return result
