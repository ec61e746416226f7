"""Aligned text columns for listings of any length, written while the rows still arrive.

A rich ``Table`` holds every row until it is printed and renders at about a millisecond a row, more as it grows
(10,000 segments took longer to print than to read). ``Columns`` sets each column's width from the header and the
first ``lookahead`` rows, then writes every row as it comes: memory stays bounded and the first rows show at once.
A later value wider than its column pushes only its own line wider.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

LOOKAHEAD = 500
GAP = "  "


class Columns:
    """Rows of ``headers``' columns, written through ``write`` (one line per call); columns whose index is in
    ``right`` are right-aligned (numbers)."""

    def __init__(
        self,
        headers: Sequence[str],
        write: Callable[[str], None],
        right: frozenset[int] = frozenset(),
        lookahead: int = LOOKAHEAD,
    ) -> None:
        self._headers = tuple(headers)
        self._write = write
        self._right = right
        self._lookahead = lookahead
        self._pending: list[tuple[str, ...]] | None = []
        self._widths: list[int] = []
        self.rows = 0

    def add(self, *cells: str) -> None:
        if len(cells) != len(self._headers):
            raise ValueError(f"{len(cells)} cells for {len(self._headers)} columns")
        self.rows += 1
        if self._pending is None:
            self._line(cells)
            return
        self._pending.append(cells)
        if len(self._pending) >= self._lookahead:
            self._flush()

    def close(self) -> None:
        """Write what the look-ahead still holds (with the header, if any row came)."""
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending or [], None
        self._widths = [max(len(row[i]) for row in [self._headers, *pending]) for i in range(len(self._headers))]
        self._line(self._headers)
        for row in pending:
            self._line(row)

    def _line(self, cells: Sequence[str]) -> None:
        last = len(cells) - 1
        parts = [
            cell.rjust(width) if i in self._right else (cell if i == last else cell.ljust(width))
            for i, (cell, width) in enumerate(zip(cells, self._widths, strict=True))
        ]
        self._write(GAP.join(parts))
