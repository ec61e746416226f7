"""Progress bars and tables on stderr/stdout through rich, so long work shows where it is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

stderr = Console(stderr=True)
stdout = Console(highlight=False, soft_wrap=True)
if not stdout.is_terminal:  # piped or captured: wide enough that tables keep one line per row
    stdout = Console(highlight=False, soft_wrap=True, width=200)


@contextmanager
def progress_bar(description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """Yields ``advance(what, total=None)``; the bar is drawn on stderr only when it is a terminal. ``total`` may
    be given late, by the first ``advance``, when the work is counted while it runs."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[what]}"),
        console=stderr,
        transient=False,
        disable=not stderr.is_terminal,
    ) as bar:
        task = bar.add_task(description, total=total, what="")

        def advance(what: str = "", total: int | None = None) -> None:
            bar.update(task, advance=1, what=what[-50:], total=total)

        yield advance
