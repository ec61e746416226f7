"""The runnable blocks of the guides: a fenced block right after ``<!-- test: SCENARIO STEP -->`` belongs to
SCENARIO's STEP. tests/system/test_guides.py runs each scenario's steps in the order the guide gives them.

A block's shell commands are split as bash splits them (continuation lines joined, comments dropped); its
properties are read as Java properties (``key=value`` lines).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The README and every guide a user follows; a marker anywhere else is not run and fails the marker test.
GUIDES = ("README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")))

_MARKED = re.compile(
    r"^[ ]*<!-- test: (?P<scenario>[a-z0-9-]+) (?P<step>[a-z0-9-]+) -->\n"
    r"(?P<indent>[ ]*)```(?P<lang>[a-z]+)\n(?P<body>.*?)^(?P=indent)```",
    re.S | re.M,
)
_ANY_MARKER = re.compile(r"<!-- test:")


class GuideError(AssertionError):
    """A guide's block cannot be followed as written; the message names the guide, the line and the step."""


@dataclass(frozen=True)
class Block:
    guide: str
    line: int
    scenario: str
    step: str
    lang: str
    body: str

    def where(self) -> str:
        return f"{self.guide}:{self.line} ({self.scenario} {self.step})"

    def commands(self) -> list[list[str]]:
        """The block's commands, each as bash would split it (no pipes or redirections are interpreted)."""
        joined = re.sub(r"\\\n", " ", self.body)
        out = []
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
        return out

    def properties(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for raw in self.body.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise GuideError(f"{self.where()}: {raw!r} is not a key=value line")
            out[key.strip()] = value.strip()
        return out


def marked_blocks(text: str, guide: str) -> list[Block]:
    found = []
    for m in _MARKED.finditer(text):
        indent = m.group("indent")
        body = "".join(line.removeprefix(indent) for line in m.group("body").splitlines(keepends=True))
        line = text.count("\n", 0, m.start()) + 1
        found.append(Block(guide, line, m.group("scenario"), m.group("step"), m.group("lang"), body))
    markers = len(_ANY_MARKER.findall(text))
    if markers != len(found):
        raise GuideError(
            f"{guide}: {markers} '<!-- test:' markers but {len(found)} are 'SCENARIO STEP' right before a fenced block"
        )
    return found


def all_blocks(repo: Path = REPO) -> list[Block]:
    return [b for guide in GUIDES for b in marked_blocks((repo / guide).read_text(encoding="utf-8"), guide)]


def scenario(name: str, blocks: list[Block] | None = None) -> list[Block]:
    """The scenario's blocks in the guide's order; a scenario the guides no longer hold is an error."""
    steps = [b for b in (all_blocks() if blocks is None else blocks) if b.scenario == name]
    if not steps:
        raise GuideError(f"no guide holds a block marked '<!-- test: {name} ... -->'")
    return steps


def step(blocks: list[Block], name: str) -> Block:
    matches = [b for b in blocks if b.step == name]
    if len(matches) != 1:
        raise GuideError(f"{len(matches)} blocks are step {name!r} of {blocks[0].scenario}; expected one")
    return matches[0]
