"""The sidecar protocol is declared twice, in rsm/jvm/codec.py and in the shim's Wire.java, and laid out once in
docs/architecture.md: all three list the same op codes, statuses and frame kinds, with the same values."""

from __future__ import annotations

import re
from pathlib import Path

from rsm.jvm import codec

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = ("OP_", "STATUS_", "STREAM_", "PIECE_")


def _python() -> dict[str, int]:
    return {
        name: value
        for name, value in vars(codec).items()
        if name.startswith(PREFIXES) and isinstance(value, int) and not isinstance(value, bool)
    }


def _java() -> dict[str, int]:
    source = (ROOT / "jvm-shim/src/io/kts/shim/Wire.java").read_text()
    found = re.findall(r"static final (?:byte|int) ([A-Z_]+) = (-?\d+);", source)
    return {name: int(value) for name, value in found if name.startswith(PREFIXES)}


def _docs() -> dict[str, int]:
    text = (ROOT / "docs/architecture.md").read_text()
    section = text.split("## The sidecar protocol", 1)[1].split("\n## ", 1)[0]
    return {name: int(value) for name, value in re.findall(r"^\| `([A-Z_]+)` \| (-?\d+) \|", section, re.M)}


def test_codec_wire_java_and_the_docs_list_the_same_protocol() -> None:
    python = _python()
    assert {"OP_FETCH", "OP_CANCEL_STREAM", "STREAM_END", "STREAM_ERROR", "PIECE_SHARED", "PIECE_ACK"} <= set(python)
    assert python == _java()
    assert python == _docs()


def test_the_frames_a_stream_can_carry_are_distinct() -> None:
    """An i32 frame head is a length (> 0) or one of the frame kinds: no two kinds may share a value."""
    kinds = [codec.STREAM_END, codec.STREAM_ERROR, codec.PIECE_SHARED, codec.STREAM_NEXT_SEGMENT]
    assert len(set(kinds)) == len(kinds) and all(k <= 0 for k in kinds)
    ops = [v for k, v in _python().items() if k.startswith("OP_")]
    assert len(set(ops)) == len(ops)
