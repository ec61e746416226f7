"""A maintenance run: every step once on one table, each commit retried on conflicts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext

from pyiceberg.exceptions import (
    CommitFailedException,
    ValidationException,
)
from pyiceberg.table import Table

from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance.compaction import compact
from rsm.iceberg.maintenance.expiry import expire_snapshots, set_metadata_properties
from rsm.iceberg.maintenance.manifests import rewrite_manifests
from rsm.iceberg.maintenance.orphans import remove_orphans, shared_location
from rsm.iceberg.maintenance.step import Guard, StepResult, is_ours

log = logging.getLogger(__name__)


def maintain(
    table: Table,
    settings: MaintenanceSettings,
    dry_run: bool = False,
    orphans: bool = True,
    others: Mapping[str, str] | None = None,
    guard: Guard = nullcontext,
    attempts: int = 3,
    warehouse: str | None = None,
    proceed: Callable[[], bool] | None = None,
) -> list[StepResult]:
    """Every step once on ``table`` (ours only; another table gives nothing). Compaction comes before the
    manifest rewrite (its overwrite adds manifests) and the orphan removal after expiry. ``proceed``, asked
    before each step: False ends the run there (the steps not run are not in the results).

    ``others``: the other tables of the namespace, name to location (their files are never this table's
    orphans; one sharing the table's location stops the orphan step, see ``shared_location``).
    ``guard``: held around each commit (the plugin's copies to the same table wait meanwhile, so a commit of
    maintenance is not starved by a table that commits without pause). A step whose commit loses to another
    writer is tried again on the table as it is then, ``attempts`` times, and otherwise left for the next run."""
    if not is_ours(table):
        return []
    results = []
    steps: list[tuple[str, Callable[[Table], StepResult], bool]] = [
        ("metadata-properties", lambda t: set_metadata_properties(t, dry_run), True),
        ("expire-snapshots", lambda t: expire_snapshots(t, settings, dry_run), True),
        ("compaction", lambda t: compact(t, settings, dry_run, guard), False),
        ("rewrite-manifests", lambda t: rewrite_manifests(t, settings, dry_run), True),
    ]
    if orphans:
        refused = shared_location(table, others or {})
        if refused is not None:
            log.warning("%s", refused)
            steps.append(("remove-orphans", lambda t: StepResult("remove-orphans", refused=refused), False))
        else:
            locations = list((others or {}).values())
            steps.append(
                ("remove-orphans", lambda t: remove_orphans(t, settings, dry_run, locations, warehouse), False)
            )
    for name, step, guarded in steps:
        if proceed is not None and not proceed():
            log.info("maintenance of %s: stopped before %s", table.name(), name)
            break
        started = time.monotonic()
        result = StepResult(name, skipped=f"lost {attempts} commits to other writers (left for the next run)")
        for attempt in range(attempts):
            try:
                if guarded and not dry_run:
                    with guard():
                        # Loaded under the guard, for the reason compact_bins gives.
                        result = step(table.catalog.load_table(table.name()))
                else:
                    result = step(table)
                break
            except (CommitFailedException, ValidationException) as e:
                log.debug("maintenance of %s, %s: conflict (attempt %d): %s", table.name(), name, attempt + 1, e)
                table = table.catalog.load_table(table.name())
        result.seconds = time.monotonic() - started
        results.append(result)
        if not dry_run:
            table = table.catalog.load_table(table.name())
    return results
