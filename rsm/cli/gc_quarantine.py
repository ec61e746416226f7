"""``kts gc quarantine``, ``kts gc restore`` and ``kts gc purge``: what ``kts gc --delete`` moved aside, put back or
removed for good (``rsm.deletion.quarantine``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from rsm.cli.columns import Columns
from rsm.cli.settings import config_options, open_manager
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import Quarantine, check_run_id
from rsm.operator_tools.garbage_removal import quarantines_of
from rsm.operator_tools.latest_rows import restore_held

F = TypeVar("F", bound=Callable[..., Any])


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_run_id(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def scope_options(func: F) -> F:
    """``--key``, ``--topic``, ``--run``: which held objects a command is about."""
    func = click.option("--run", callback=_run, help="the objects of one `kts gc --delete` run (its printed id)")(func)
    func = click.option("--topic", help="the objects of one topic")(func)
    return click.option("--key", help="one object, by the key it had before it was held")(func)


def _store(config: str | None, sets: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The subcommand's --config and --set, after those given to ``kts gc`` itself (which they override)."""
    ctx = click.get_current_context()
    outer = ctx.obj if isinstance(ctx.obj, tuple) else (None, ())
    return config or outer[0], (*outer[1], *sets)


def _select(
    quarantines: list[Quarantine], key: str | None, topic: str | None, run: str | None
) -> list[tuple[Quarantine, list[Held]]]:
    """The held objects matching every given scope, by quarantine (the store's, the warehouse's); none matching
    in any is an error naming the scope."""
    found = [(q, q.held(run=run, topic=topic, key=key)) for q in quarantines]
    if not any(held for _q, held in found):
        scope = ", ".join(f"{n} {v}" for n, v in (("--key", key), ("--topic", topic), ("--run", run)) if v)
        where = " or ".join(q.describe() for q in quarantines)
        raise click.ClickException(f"nothing in {where} matches {scope}; `kts gc quarantine` lists what is held")
    return [(q, held) for q, held in found if held]


def _show(held: list[Held]) -> None:
    columns = Columns(("run", "kind", "key", "bytes", "held until"), click.echo, right=frozenset({3}))
    for h in held:
        until = _iso(h.until) + ("" if h.present else " (copy missing: an interrupted hold)")
        columns.add(h.run, h.kind, h.original, f"{h.size:,}", until)
    columns.close()


@click.command("quarantine")
@config_options
@scope_options
def quarantine_command(
    config: str | None, sets: tuple[str, ...], key: str | None, topic: str | None, run: str | None
) -> int:
    """List what `kts gc --delete` moved into the quarantine: run, kind, original key, size and until when it is
    kept (gc.quarantine.ms). Reads only."""
    with open_manager(*_store(config, sets), keys=False) as manager:
        quarantines = quarantines_of(manager)
        if key or topic or run:
            _select(quarantines, key, topic, run)  # a scope that matches nothing is an error
        for quarantine in quarantines:
            held = quarantine.held(run=run, topic=topic, key=key)
            _show(held)
            size = sum(h.size for h in held if h.present)
            click.echo(f"{len(held)} objects, {size:,} bytes in {quarantine.describe()}")
    return 0


@click.command("restore")
@config_options
@scope_options
def restore_command(
    config: str | None, sets: tuple[str, ...], key: str | None, topic: str | None, run: str | None
) -> int:
    """Put objects back from the quarantine under their original keys (by --key, --topic or --run: at least one).
    An object whose key holds a live object now is refused and stays held (exit 1). Rows removed from a
    latest-per-key table go back into it, each whose key has no row now; the others stay held (exit 1)."""
    if not (key or topic or run):
        raise click.UsageError("name what to restore: --key, --topic or --run")
    with open_manager(*_store(config, sets), keys=False) as manager:
        reports = [restore_held(manager, q, held) for q, held in _select(quarantines_of(manager), key, topic, run)]
    report = reports[0]
    for other in reports[1:]:
        report.restored += other.restored
        report.refused += other.refused
        report.missing += other.missing
    for h in report.restored:
        click.echo(f"restored {h.original} ({h.size:,} bytes, {h.kind}, run {h.run})")
    for h, why in report.refused:
        click.echo(f"REFUSED {h.original}: {why}", err=True)
    for h, why in report.missing:
        click.echo(f"MISSING {h.original}: {why}", err=True)
    click.echo(f"restored {len(report.restored)}, refused {len(report.refused)}, missing {len(report.missing)}")
    return 1 if report.refused or report.missing else 0


@click.command("purge")
@config_options
@scope_options
@click.option("--expired", is_flag=True, help="the objects held longer than gc.quarantine.ms")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
def purge_command(
    config: str | None,
    sets: tuple[str, ...],
    key: str | None,
    topic: str | None,
    run: str | None,
    expired: bool,
    yes: bool,
) -> int:
    """Remove objects from the quarantine for good (by --key, --topic, --run or --expired: at least one; with
    several, those matching all). Asks first unless --yes."""
    if not (key or topic or run or expired):
        raise click.UsageError("name what to purge: --key, --topic, --run or --expired")
    with open_manager(*_store(config, sets), keys=False) as manager:
        quarantines = quarantines_of(manager)
        if expired:
            scoped = _select(quarantines, key, topic, run) if key or topic or run else []
            chosen = {h.location for _q, held in scoped for h in held}
            chosen_items = [(q, [h for h in q.expired() if not chosen or h.location in chosen]) for q in quarantines]
            chosen_items = [(q, held) for q, held in chosen_items if held]
            if not chosen_items:
                where = " or ".join(q.describe() for q in quarantines)
                raise click.ClickException(f"nothing in {where} is held past gc.quarantine.ms")
        else:
            chosen_items = _select(quarantines, key, topic, run)
        count = sum(len(held) for _q, held in chosen_items)
        total = sum(h.size for _q, held in chosen_items for h in held if h.present)
        if not yes:
            click.confirm(f"purge {count} objects ({total:,} bytes) for good?", abort=True, err=True)
        reports = [q.purge(held) for q, held in chosen_items]
    purged = sum(len(r.purged) for r in reports)
    click.echo(f"purged {purged} objects, {sum(r.bytes_freed for r in reports):,} bytes")
    return 0
