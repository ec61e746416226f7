"""The plugin's tables of a namespace, for tools: opening the catalog without creating anything, and the
orphan search over every table."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    NoSuchTableError,
)
from pyiceberg.table import Table

from rsm.deletion.fileio_holding import normal_location
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import new_run_id
from rsm.iceberg.config import IcebergConfig, MaintenanceSettings
from rsm.iceberg.maintenance.orphans import OrphanFile, find_orphans, hold_orphans, shared_location
from rsm.iceberg.maintenance.step import is_ours

log = logging.getLogger(__name__)


def open_existing_catalog(cfg: IcebergConfig, props: Mapping[str, str]) -> Catalog | None:
    """The catalog the keys name, or None when it holds nothing yet (no SQLite file, no namespace): opened
    without creating anything, for tools that must not."""
    uri = props.get("uri", "")
    if props.get("type") == "sql" and uri.startswith("sqlite:///") and not Path(urlparse(uri).path).is_file():
        return None
    catalog = load_catalog(cfg.catalog_name, **dict(props))
    return catalog if catalog.namespace_exists(cfg.namespace) else None


def plugin_tables(catalog: Catalog, namespace: str) -> tuple[list[Table], dict[str, str]]:
    """The namespace's tables the plugin made, and the location of every table of the namespace by name."""
    ours, locations = [], {}
    for ident in catalog.list_tables(namespace):
        try:
            table = catalog.load_table(ident)
        except NoSuchTableError:
            continue
        locations[ident[-1]] = table.location()
        if is_ours(table):
            ours.append(table)
    return ours, locations


def all_orphans(
    catalog: Catalog, namespace: str, grace_s: float, warehouse: str, record: bool = False, now: float | None = None
) -> list[OrphanFile]:
    """The orphan files (:func:`find_orphans`) of every table of the plugin in ``namespace`` whose location is
    inside ``warehouse``. ``record``: write each table's ledger (only for a caller that then removes them)."""
    ours, locations = plugin_tables(catalog, namespace)
    out = []
    for table in ours:
        name = table.name()[-1]
        others = {f"{namespace}.{n}": loc for n, loc in locations.items() if n != name}
        refused = shared_location(table, others)
        if refused is not None:
            log.warning("%s", refused)
            continue
        out += find_orphans(table, grace_s, list(others.values()), warehouse, now, record)
    return out


def hold_if_orphans(
    catalog: Catalog,
    namespace: str,
    paths: list[str],
    warehouse: str,
    settings: MaintenanceSettings,
    run: str | None = None,
    now: float | None = None,
) -> tuple[list[Held], list[tuple[str, str]]]:
    """Move into the warehouse's quarantine those of ``paths`` that are orphans past their grace now (each table's
    ledger is updated, its references read again just before the move); (held, kept with why)."""
    wanted = {normal_location(p): p for p in paths}
    ours, locations = plugin_tables(catalog, namespace)
    held: list[Held] = []
    kept: list[tuple[str, str]] = []
    run = run or new_run_id(now)
    for table in ours:
        name = table.name()[-1]
        others = {f"{namespace}.{n}": loc for n, loc in locations.items() if n != name}
        if shared_location(table, others) is not None:
            continue  # its files stay: not found as orphans now
        found = find_orphans(table, settings.orphan_grace_s, list(others.values()), warehouse, now, record=True)
        mine = [o for o in found if normal_location(o.path) in wanted]
        got, refused = hold_orphans(table, mine, warehouse, settings.quarantine_s, run, list(others.values()))
        held += got
        kept += [(o.path, why) for o, why in refused]
        for o in mine:
            wanted.pop(normal_location(o.path), None)
    why = "not an orphan past its grace now (referenced again, gone, or no longer a table's)"
    kept += [(p, why) for p in wanted.values()]
    return held, kept
