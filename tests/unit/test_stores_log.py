"""The operator tools ask a segment's format whether it stores a ``.log`` body (``SegmentFormat.stores_log``),
found by its manifest's kind: gc's manifest-without-data rule, scrub and browse name no format themselves."""

from __future__ import annotations

import io
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from test_segment_formats import OLD_ICEBERG_MANIFEST

from backends.base import KeyNotFound
from rsm.cli.browse import _codec
from rsm.core.manifest import SegmentManifest
from rsm.core.segment_format import Formats
from rsm.operator_tools.garbage import is_garbage_without_log

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class _Format:
    """Just what the tools ask of a format."""

    kind: str
    stores_log: bool


class _Store:
    """A store of a few objects in memory."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def fetch(self, key: str) -> io.BytesIO:
        if key not in self.objects:
            raise KeyNotFound(key)
        return io.BytesIO(self.objects[key])


def _manager(iceberg_stores_log: bool | None) -> SimpleNamespace:
    """A stand-in manager whose formats are classic and, unless None, one of kind ``iceberg``."""
    others = [] if iceberg_stores_log is None else [_Format("iceberg", iceberg_stores_log)]
    formats = Formats(_Format("classic", True), others)  # type: ignore[arg-type]
    return SimpleNamespace(backend=_Store({"t/m.rsm-manifest": OLD_ICEBERG_MANIFEST}), formats=formats)


@pytest.mark.parametrize(
    ("iceberg_stores_log", "garbage"),
    [(False, False), (True, True), (None, True)],
    ids=["its-format-stores-no-log", "its-format-stores-a-log", "a-format-this-plugin-does-not-read"],
)
def test_a_manifest_without_a_log_is_garbage_unless_its_format_stores_none(
    iceberg_stores_log: bool | None, garbage: bool
) -> None:
    manager = _manager(iceberg_stores_log)
    assert is_garbage_without_log(manager, "t/m.rsm-manifest") is garbage  # type: ignore[arg-type]
    assert is_garbage_without_log(manager, "t/gone.rsm-manifest") is False  # type: ignore[arg-type]


def test_browse_shows_the_codec_by_whether_the_format_stores_a_log() -> None:
    manifest = SegmentManifest.from_json_bytes(OLD_ICEBERG_MANIFEST)
    assert _codec(_manager(False), manifest) == "none (rows of an Iceberg table)"  # type: ignore[arg-type]
    assert _codec(_manager(True), manifest) == "none"  # type: ignore[arg-type]
