"""``kts gc``: list, and with ``--delete`` remove, the storage no tiered segment accounts for.

The logic is ``rsm.operator_tools.garbage`` (finding) and ``rsm.operator_tools.garbage_removal`` (removal); this
module parses the grace period, shows the table and asks nothing: a dry run is the default, and ``--delete`` is
the explicit consent.
"""

from __future__ import annotations

import re

import click
from rich.table import Table

from rsm.cli.gc_cluster import cluster_options, deletes_iceberg_rows, reconcile_with_cluster, show_lost
from rsm.cli.gc_quarantine import purge_command, quarantine_command, restore_command
from rsm.cli.progress import progress_bar, stdout
from rsm.cli.settings import config_options, load_configs, open_manager
from rsm.deletion.quarantine import new_run_id
from rsm.operator_tools.garbage import find_garbage, upload_deadline_seconds, where
from rsm.operator_tools.garbage_removal import delete_garbage, purge_expired, quarantine_of

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``1h``, ``2d`` or plain seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise click.BadParameter(f"{text!r} is not a duration such as 30m, 1h or 2d")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


@click.group("gc", invoke_without_command=True)
@click.pass_context
@config_options
@click.option(
    "--older-than",
    default="1h",
    show_default=True,
    help="grace period: longer than any copy takes (a copy in progress owns objects without a manifest)",
)
@click.option("--delete", is_flag=True, help="remove what is listed (without it, only list)")
@cluster_options
def gc_command(
    ctx: click.Context,
    config: str | None,
    sets: tuple[str, ...],
    older_than: str,
    delete: bool,
    bootstrap_server: str | None,
    command_config: str | None,
    watch: str | None,
    metrics_port: int,
    confirm_after: str,
) -> int | None:
    """Find leftovers of crashed copies (objects without a manifest), manifests whose data is gone, stale
    multipart uploads, temp files, disk-cache chunks of segments no longer tiered and files of the plugin's
    Iceberg tables that no snapshot references; a dry run unless --delete, which moves what it removes into the
    quarantine (kts gc restore puts it back) and purges what was held longer than gc.quarantine.ms.

    An Iceberg table's file is listed once no kept version of the table has referenced it for the table's orphan
    grace (iceberg.mode.maintenance.orphan.grace.ms, at least a day for data files; not --older-than), counted
    from the first run with --delete (or maintenance pass) that saw it so; --delete moves it into the
    warehouse's kts-quarantine/ folder.

    Only objects and uploads whose keys follow the plugin's layout under key.prefix are listed: other
    applications' objects under the same prefix are never touched.

    With --bootstrap-server it also reads the cluster's record of tiered segments (__remote_log_metadata and
    the cluster's topic ids) and lists segments of deleted topics, segments whose delete finished, and copies
    started longer ago than --older-than and never finished; segments the cluster believes tiered but the store
    lacks (still so when the record is read again after the listing) are reported as data loss (exit code 3).
    Nothing is removed on the record's word unless it was read whole (every partition from offset 0, without a
    gap); a topic is dead only when a partition delete marker or a second read --confirm-after later confirms it
    (--delete waits for that read; a dry run lists such topics as suspected). --watch repeats that check without
    deleting and exports it as Prometheus metrics.

    Needs no private key, except to remove the rows of an Iceberg-mode segment
    (iceberg.mode.delete.rows.enabled with --bootstrap-server --delete). Looks into the broker's disk chunk
    cache only when its directory exists."""
    if ctx.invoked_subcommand is not None:
        if delete or bootstrap_server or watch or command_config:
            raise click.UsageError(
                f"--delete, --bootstrap-server, --watch do not apply to kts gc {ctx.invoked_subcommand}"
            )
        ctx.obj = (config, sets)  # kts gc --config FILE restore ...: the subcommand reads the same store
        return None
    grace = parse_duration(older_than)
    confirm_s = parse_duration(confirm_after)
    if watch is not None:
        from rsm.cli.gc_cluster import watch_loop

        if delete or bootstrap_server is None:
            raise click.UsageError("--watch needs --bootstrap-server and never deletes (no --delete)")
        interval = parse_duration(watch)
        return watch_loop(
            config, sets, grace, bootstrap_server, command_config, interval, metrics_port, confirm_after=confirm_s
        )
    lost = []
    # removing an Iceberg-mode segment's rows reads its manifest's data key: only then is the key ring needed
    keys = bootstrap_server is not None and delete and deletes_iceberg_rows(config, sets)
    deadline = upload_deadline_seconds(load_configs(config, sets))  # the broker's, before the tool's own settings
    with open_manager(config, sets, keys=keys, disk_cache=True) as manager:
        stdout.print(f"looking in {where(manager)}; only keys of the plugin's object layout are considered")
        with progress_bar("listing objects") as listed:
            items = find_garbage(manager, grace, on_listed=listed, upload_deadline_s=deadline, record=delete)
        if bootstrap_server is not None:
            items, lost = reconcile_with_cluster(
                manager, items, grace, bootstrap_server, command_config, delete=delete, confirm_after=confirm_s
            )
        table = Table("kind", "key", "age", "bytes", title=f"garbage older than {older_than}")
        for item in items:
            size = "" if item.size is None else f"{item.size:,}"
            table.add_row(item.kind, item.key, f"{item.age_seconds / 3600:.1f} h", size)
        stdout.print(table)
        total = sum(i.size or 0 for i in items)
        show_lost(lost)
        if not delete:
            stdout.print(f"{len(items)} items, {total:,} bytes; dry run: pass --delete to remove them")
            return 3 if lost else 0
        run = new_run_id()
        quarantine = quarantine_of(manager)
        days = quarantine.retention_s / 86400
        stdout.print(f"run {run}: what can be undone moves into {quarantine.describe()} for {days:g} days")
        purged = purge_expired(manager)  # first: what this run holds stays for gc.quarantine.ms, even if 0
        with progress_bar("deleting", total=len(items)) as advance:
            report = delete_garbage(manager, items, progress=lambda item: advance(item.key), run=run)
    held_bytes = sum(h.size for h in report.held)
    stdout.print(
        f"moved {len(report.held)} objects ({held_bytes:,} bytes) into the quarantine, run {run} "
        f"(kts gc restore --run {run} puts them back); removed {len(report.deleted)} items in all, "
        f"skipped {len(report.skipped)}, failed {len(report.failed)}"
    )
    stdout.print(
        f"purged {len(purged.purged)} objects ({purged.bytes_freed:,} bytes) held longer than gc.quarantine.ms"
    )
    for item, why in report.skipped:
        stdout.print(f"skipped {item.kind} {item.key}: {why}")
    for item, why in report.failed:
        click.echo(f"FAILED {item.kind} {item.key}: {why}", err=True)
    return 1 if report.failed else 3 if lost else 0


gc_command.add_command(quarantine_command)
gc_command.add_command(restore_command)
gc_command.add_command(purge_command)
