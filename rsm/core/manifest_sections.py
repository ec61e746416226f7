"""A segment format's own part of the manifest (``.rsm-manifest``), beside Aiven's fields.

A manifest holds at most one section, stored under its format's name (``"iceberg": {...}``); a manifest without
one is a classic segment. The manifest codec knows no format: each format plugged in (``rsm.core.segment_format``)
adds the parser of its section here, and the codec parses the sections whose parsers it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["ManifestSection", "SectionParser", "add_section_parser", "section_parsers"]


class ManifestSection(Protocol):
    """What the manifest codec needs of a section: its format's name, its JSON, and the bytes its data takes in
    storage (``kts ls`` shows it)."""

    @property
    def kind(self) -> str: ...

    @property
    def stored_size(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


SectionParser = Callable[[Any], ManifestSection]
"""Parses a section's JSON; raises ``KeyError``/``TypeError``/``ValueError`` on a malformed one (the manifest codec
then names the manifest)."""

_PARSERS: dict[str, SectionParser] = {}


def add_section_parser(kind: str, parser: SectionParser) -> None:
    """Read the manifest key ``kind`` with ``parser`` from now on."""
    _PARSERS[kind] = parser


def section_parsers() -> Mapping[str, SectionParser]:
    """The sections the manifest codec reads, by manifest key."""
    return dict(_PARSERS)
