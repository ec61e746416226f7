"""The seam between the quarantine and the places it holds things in.

Two kinds of place hold what the plugin deletes: its object store (keys under ``key.prefix``, through a
``backends`` backend) and an Iceberg table's files (locations through the table's FileIO, under the warehouse).
The quarantine (``rsm.deletion.quarantine``) works on either through this protocol.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


class HoldingStore(Protocol):
    """A place whose objects the quarantine can move aside and back. ``name`` is a key or a location, as the
    place names its objects."""

    def describe(self) -> str:
        """The place, for messages: ``S3Backend(bucket='b')``, ``warehouse s3://w/``."""
        ...

    def relative(self, name: str) -> str | None:
        """``name`` below the place's own root (``key.prefix``, the warehouse) when it is the plugin's to hold;
        None for anything else (another application's object, the quarantine's own), which is never held."""
        ...

    def copy(self, source: str, target: str) -> None:
        """Copy ``source`` to ``target`` inside the store, server-side where the store can; ``KeyNotFound`` (or
        ``FileNotFoundError``) when ``source`` is gone."""
        ...

    def exists(self, name: str) -> bool: ...

    def size(self, name: str) -> int | None:
        """The object's size in bytes; None when it is gone."""
        ...

    def delete(self, name: str) -> None:
        """Remove ``name``; an object already gone is no error."""
        ...

    def put(self, name: str, data: bytes) -> None:
        """Write a small object (the quarantine's own records)."""
        ...

    def get(self, name: str) -> bytes:
        """Read a small object whole."""
        ...

    def list(self, prefix: str) -> Iterator[str]:
        """The names under ``prefix``."""
        ...


@dataclass(frozen=True)
class Held:
    """One object in the quarantine: where it was, where it is now, and why it was taken."""

    original: str
    location: str
    size: int
    kind: str
    run: str
    held_at: float
    until: float
    topic: str | None = None
    evidence: tuple[str, ...] = ()
    """The signals that authorised the move, as ``signal: detail`` lines."""
    present: bool = True
    """Whether the held copy is there. False for a hold interrupted before its copy completed (the original was
    never deleted then): purging such an item removes only its record."""
