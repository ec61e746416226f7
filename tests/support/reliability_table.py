"""Rows of the reliability table in docs/reliability.md: each scenario test appends one JSON line to the file
named by ``RELIABILITY_TABLE`` (``make reliability-table`` sets it and renders the Markdown)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

COLUMNS = ["scenario", "faults", "operations", "outcome", "bytes_verified", "wrong_bytes", "peak_rss_mib"]


def record_row(row: dict[str, Any]) -> None:
    target = os.environ.get("RELIABILITY_TABLE")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def render(path: str) -> str:
    """The Markdown table of the rows in ``path``."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            cells = []
            for c in COLUMNS:
                v = row.get(c, "")
                if isinstance(v, dict):
                    v = ", ".join(f"{k} {n}" for k, n in sorted(v.items())) or "none"
                cells.append(str(v))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(sys.argv[1]))
