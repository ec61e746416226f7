"""Every guide says first whom it is for and what they will have at the end, and its prose lines fit in 120
characters (tables, code blocks and generated blocks aside: Markdown cannot wrap them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")) + ["demo/README.md"]


def prose_lines(text: str) -> list[tuple[int, str]]:
    out, block, generated = [], False, False
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*```", line):
            block = not block
            continue
        if re.match(r"<!-- [\w-]+:begin -->", line):
            generated = True
        elif re.match(r"<!-- [\w-]+:end -->", line):
            generated = False
        elif not (block or generated or line.lstrip().startswith("|")):
            out.append((number, line))
    return out


def breakable(line: str, width: int = 120) -> bool:
    """A space outside code spans within the first ``width`` characters: the line could be wrapped there."""
    return any(line[i] == " " and line[:i].count("`") % 2 == 0 for i in range(1, min(width, len(line))))


@pytest.mark.parametrize("guide", [*GUIDES, "README.md"])
def test_prose_lines_fit_in_120_characters(guide: str) -> None:
    long = [
        f"{guide}:{n}"
        for n, line in prose_lines((ROOT / guide).read_text())
        if len(line) > 120 and breakable(line.lstrip())
    ]
    assert long == []


@pytest.mark.parametrize("guide", GUIDES)
def test_each_guide_opens_with_its_reader_and_outcome(guide: str) -> None:
    text = (ROOT / guide).read_text()
    title, rest = text.split("\n", 1)
    assert title.startswith("# ")
    opening = " ".join(rest.lstrip("\n").split("\n\n", 1)[0].split())
    assert opening.startswith("For "), f"{guide}: the first paragraph says whom the guide is for"
    assert "At the end" in opening, f"{guide}: the first paragraph says what the reader will have at the end"


def test_the_readme_says_whom_it_is_for() -> None:
    text = (ROOT / "README.md").read_text()
    assert re.search(r"This page is for .+\. At the end ", text.replace("\n", " "))


def table_cells(text: str) -> list[tuple[int, str]]:
    """Every cell of every Markdown table outside code blocks, generated ones included: (line number, text)."""
    out, block = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*```", line):
            block = not block
            continue
        row = line.strip()
        if block or not row.startswith("|"):
            continue
        cells, cell, code = [], "", False
        for i, ch in enumerate(row.strip("|")):
            if ch == "`":
                code = not code
            if ch == "|" and not code and (i == 0 or row.strip("|")[i - 1] != "\\"):
                cells.append(cell)
                cell = ""
            else:
                cell += ch
        cells.append(cell)
        out += [(number, c.strip()) for c in cells]
    return out


def test_table_cells_are_split_outside_code_spans() -> None:
    cells = [c for _, c in table_cells("| a | `x | y` b |\n|---|---|\n```\n| not | a table |\n```\n")]
    assert cells == ["a", "`x | y` b", "---", "---"]


@pytest.mark.parametrize("guide", [*GUIDES, "README.md"])
def test_no_table_cell_is_over_100_words(guide: str) -> None:
    """Detail goes into prose below the table: a cell of more than 100 words is a paragraph in a cramped column."""
    long = [
        f"{guide}:{n} ({len(cell.split())} words)"
        for n, cell in table_cells((ROOT / guide).read_text())
        if len(cell.split()) > 100
    ]
    assert long == []
