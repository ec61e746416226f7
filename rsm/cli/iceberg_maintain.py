"""``kts iceberg maintain``: one maintenance run over the plugin's Iceberg tables, for operators who schedule it
themselves (cron, Airflow) instead of, or beside, the plugin's own thread.

It opens the catalog the plugin's keys name and creates nothing: no SQLite file, no namespace; ``--dry-run``
changes nothing at all and prints what a run would do. The steps are ``rsm.iceberg.maintenance``'s.
"""

from __future__ import annotations

import click
from rich.table import Table as RichTable

from rsm.cli.progress import stdout
from rsm.cli.settings import config_options, load_configs
from rsm.iceberg.config import IcebergConfig


@click.group("iceberg")
def iceberg_group() -> None:
    """Iceberg mode's tables: maintenance."""


@iceberg_group.command("maintain")
@config_options
@click.option(
    "--table",
    "tables",
    multiple=True,
    metavar="NAME",
    help="only this topic's table (the topic's or the table's name); repeatable",
)
@click.option("--dry-run", is_flag=True, help="change nothing: print what a run would do")
@click.option(
    "--orphans/--no-orphans",
    default=True,
    show_default=True,
    help="also move orphan files unreferenced for longer than the grace into the quarantine, and purge what it "
    "held past gc.quarantine.ms",
)
def maintain_command(
    config: str | None, sets: tuple[str, ...], tables: tuple[str, ...], dry_run: bool, orphans: bool
) -> int:
    """Expire snapshots, compact small data files, merge manifests and remove orphan files of the plugin's
    Iceberg tables (those with the kafka.topic property), as the iceberg.mode.maintenance.* keys say.

    Safe beside the brokers' own maintenance and beside Spark's procedures: every commit is checked against the
    table as it is then, and only files no kept table version has referenced for the grace period (counted from
    the first run or pass that saw them so, at least a day for data files) are moved, into the warehouse's
    kts-quarantine/ folder; what it held past gc.quarantine.ms is then removed for good."""
    from rsm.iceberg.catalog import catalog_properties
    from rsm.iceberg.maintenance.namespace import open_existing_catalog, plugin_tables
    from rsm.iceberg.maintenance.orphans import purge_quarantine
    from rsm.iceberg.maintenance.run import maintain

    configs = load_configs(config, sets)
    cfg = IcebergConfig.from_map(configs)
    storage = {k[len("storage.") :]: v for k, v in configs.items() if k.startswith("storage.")}
    backend = str(configs.get("storage.backend.class") or "filesystem")
    props = catalog_properties(cfg, backend, storage, configs.get("key.prefix", ""))
    catalog = open_existing_catalog(cfg, props)
    if catalog is None:
        raise click.ClickException(
            f"no namespace {cfg.namespace!r} in the catalog the keys name (iceberg.mode.catalog.*, "
            "iceberg.mode.namespace): nothing was tiered in Iceberg mode there yet, or the keys are not the brokers'"
        )
    tables_ours, locations = plugin_tables(catalog, cfg.namespace)

    def table_name(name: str) -> str:
        """A table's name, or the table a topic's segments go to (a topic ``a-b`` goes to table ``a_b``)."""
        namespace, table = cfg.table_of(name).identifier
        return name if name in locations or namespace != cfg.namespace else table

    unknown = sorted(n for n in tables if table_name(n) not in locations)
    if unknown:
        raise click.ClickException(f"no table {', '.join(unknown)} in namespace {cfg.namespace!r}")
    wanted = {table_name(n) for n in tables}
    ours = [t for t in tables_ours if not tables or t.name()[-1] in wanted]
    if not ours:
        raise click.ClickException(
            f"no table of the plugin (property kafka.topic) in namespace {cfg.namespace!r}"
            + (f" among {', '.join(tables)}" if tables else "")
        )
    out = RichTable("table", "step", "count", "bytes", "note", title="dry run" if dry_run else "maintenance")
    for t in ours:
        name = t.name()[-1]
        others = {f"{cfg.namespace}.{n}": loc for n, loc in locations.items() if n != name}
        for r in maintain(
            t, cfg.maintenance, dry_run=dry_run, orphans=orphans, others=others, warehouse=props.get("warehouse")
        ):
            note = r.refused or r.skipped or "; ".join(r.details[:3]) + (" ..." if len(r.details) > 3 else "")
            out.add_row(name, r.step, str(r.count), f"{r.bytes:,}" if r.bytes else "", note)
    warehouse = props.get("warehouse")
    if orphans and warehouse:
        r = purge_quarantine(ours[0].io, warehouse, cfg.maintenance.quarantine_s, dry_run=dry_run)
        out.add_row("(warehouse)", r.step, str(r.count), f"{r.bytes:,}" if r.bytes else "", "")
    stdout.print(out)
    return 0
