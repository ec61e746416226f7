"""Snapshot expiry, and the table properties that bound its metadata log (old metadata files go as orphans)."""

from __future__ import annotations

import time

from pyiceberg.table import Table

from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance.step import StepResult
from rsm.iceberg.tables import FORCED_METADATA_PROPERTIES, METADATA_PROPERTIES


def set_metadata_properties(table: Table, dry_run: bool = False) -> StepResult:
    """Give the table the properties that bound its metadata log (unless set already), and turn off pyiceberg's
    deletion of old metadata files on commit (their removal is the orphan step's, through the quarantine)."""
    result = StepResult("metadata-properties")
    missing = {
        k: v
        for k, v in METADATA_PROPERTIES.items()
        if k not in table.properties or (k in FORCED_METADATA_PROPERTIES and table.properties[k] != v)
    }
    result.count = len(missing)
    result.details = [f"set {k}={v}" for k, v in missing.items()]
    if missing and not dry_run:
        with table.transaction() as txn:
            txn.set_properties(missing)
    return result


# --- snapshots --------------------------------------------------------------------------------------------------


def snapshots_to_expire(table: Table, settings: MaintenanceSettings, now_ms: int) -> list[int]:
    """Snapshots older than the max age or past the newest ``snapshot_max_keep``, never the newest
    ``snapshot_min_keep`` nor any branch or tag head."""
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    newest_first = sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))[::-1]
    cutoff = now_ms - int(settings.snapshot_max_age_s * 1000)
    expired = []
    for rank, snap in enumerate(newest_first):
        if rank < settings.snapshot_min_keep or snap.snapshot_id in protected:
            continue
        if snap.timestamp_ms < cutoff or rank >= settings.snapshot_max_keep:
            expired.append(snap.snapshot_id)
    return expired


def expire_snapshots(table: Table, settings: MaintenanceSettings, dry_run: bool = False) -> StepResult:
    """Drop old snapshots from the table's metadata. Their files are left: the orphan step removes them once no
    remaining snapshot references them and the grace period has passed (a reader of an expired snapshot that
    started before has that long to finish)."""
    result = StepResult("expire-snapshots")
    ids = snapshots_to_expire(table, settings, int(time.time() * 1000))
    result.count = len(ids)
    if ids and not dry_run:
        table.maintenance.expire_snapshots().by_ids(ids).commit()
    return result
