"""The table of every ``kts`` command in docs/cli.md, generated from the click commands themselves
(``kts cli-docs``), so a command cannot exist without a row, nor a row outlive its command."""

from __future__ import annotations

import inspect

import click


def _rows(command: click.Command, path: list[str]) -> list[tuple[str, str]]:
    if command.hidden:
        return []
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=" ".join(path))
        rows = [row for name in command.list_commands(ctx) for row in _rows(command.commands[name], [*path, name])]
        if command.invoke_without_command:  # the group does something of its own too (kts keys lists the pairs)
            summary = " ".join(inspect.cleandoc(command.help or "").split("\n\n", 1)[0].split())
            rows.insert(0, (" ".join(path), summary))
        return rows
    ctx = click.Context(command, info_name=" ".join(path))
    required = [
        f"{p.opts[0]} {p.metavar or str(p.name).upper()}"
        for p in command.params
        if isinstance(p, click.Option) and p.required
    ]
    arguments = " ".join(command.collect_usage_pieces(ctx)).replace("[OPTIONS]", "").split()
    summary = " ".join(inspect.cleandoc(command.help or "").split("\n\n", 1)[0].split())
    return [(" ".join([*path, *required, *arguments]), summary)]


def cli_docs_markdown(root: click.Group, name: str = "kts") -> str:
    """One row per visible command: its usage and the first paragraph of its help (options: ``--help``)."""
    lines = ["| command | what it does |", "|---|---|"]
    for usage, summary in _rows(root, [name]):
        cell = summary.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        lines.append(f"| `{usage}` | {cell} |")
    return "\n".join(lines)
