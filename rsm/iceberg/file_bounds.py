"""What each manifest of a table lists as live, read once per manifest: the files' locations (for the orphan
search) and their partition and offset bounds (for a copy that asks whether live files may hold rows of a Kafka
partition's offset range).

A copy asks before it plans what it replaces; the usual answer is no (a new segment's offsets come after all
that is tiered), and then it plans nothing. Manifests never change once written (each has a new name), so
what each lists is kept by its path: a copy or a maintenance pass reads only the manifest lists and the
manifests committed since the last one asked, however many live files the table has.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType

from rsm.deletion.fileio_holding import normal_location
from rsm.fetch.lru import TimedLru

__all__ = ["MANIFESTS", "Bounds", "Listed", "ManifestCache", "bound_ids", "file_bounds", "overlaps"]

Bounds = tuple[int | None, int | None, int | None, int | None]
"""(partition low, partition high, offset low, offset high) of one data file; None where a bound is missing."""


def file_bounds(f: DataFile, partition_id: int, offset_id: int) -> Bounds:
    lower, upper = f.lower_bounds or {}, f.upper_bounds or {}

    def bound(bounds: dict[int, bytes], field_id: int, kind: IntegerType | LongType) -> int | None:
        raw = bounds.get(field_id)
        return None if raw is None else int(from_bytes(kind, raw))

    return (
        bound(lower, partition_id, IntegerType()),
        bound(upper, partition_id, IntegerType()),
        bound(lower, offset_id, LongType()),
        bound(upper, offset_id, LongType()),
    )


def overlaps(b: Bounds, partition: int, first: int, last: int) -> bool:
    """Whether a file of bounds ``b`` may hold rows of ``partition`` at offsets ``first..last`` (a missing bound
    may hold anything)."""
    p_lo, p_hi, o_lo, o_hi = b
    in_partition = (p_lo is None or p_lo <= partition) and (p_hi is None or partition <= p_hi)
    in_offsets = (o_lo is None or o_lo <= last) and (o_hi is None or first <= o_hi)
    return in_partition and in_offsets


FieldIds = tuple[int, int]
"""Field ids of ``kafka.partition`` and ``kafka.offset`` in a table's schema."""


def bound_ids(table: Table) -> FieldIds | None:
    """The field ids whose bounds :func:`file_bounds` reads, or None when the table's schema lacks them."""
    schema = table.schema()
    try:
        return schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id
    except ValueError:
        return None


@dataclass(frozen=True)
class Listed:
    """The live data or delete files one manifest lists (a DELETED entry is a file its snapshot removed: not
    part of it). ``locations``: their normalised locations; ``bounds``: their bounds, by ``ids`` (all missing
    when ``ids`` is None)."""

    locations: frozenset[str]
    bounds: tuple[Bounds, ...]
    ids: FieldIds | None


class ManifestCache:
    """What each manifest lists (:class:`Listed`), kept by manifest path; at most ``files`` files in all (least
    recently used out first, and read again when needed)."""

    def __init__(self, files: int = 200_000) -> None:
        self._cache: TimedLru[str, Listed] = TimedLru(
            "iceberg-manifests", files, None, weigher=lambda listed: len(listed.bounds) + 1
        )

    def listed(self, io: FileIO, manifest: ManifestFile, ids: FieldIds | None) -> Listed:
        """What ``manifest`` lists, its bounds read by ``ids`` (the table's, :func:`bound_ids`)."""
        found = self._cache.get(manifest.manifest_path)
        if found is None or found.ids != ids:
            files = [e.data_file for e in manifest.fetch_manifest_entry(io, discard_deleted=True)]
            missing: Bounds = (None, None, None, None)
            found = Listed(
                frozenset(normal_location(f.file_path) for f in files),
                tuple(missing if ids is None else file_bounds(f, *ids) for f in files),
                ids,
            )
            self._cache.put(manifest.manifest_path, found)
        return found

    def may_hold(self, table: Table, partition: int, first: int, last: int) -> bool:
        """Whether any live data file of the table's current snapshot may hold rows of ``partition`` at offsets
        ``first..last``."""
        snapshot = table.current_snapshot()
        if snapshot is None:
            return False
        ids = bound_ids(table)
        for manifest in snapshot.manifests(table.io):
            if manifest.content != ManifestContent.DATA:
                continue
            if any(overlaps(b, partition, first, last) for b in self.listed(table.io, manifest, ids).bounds):
                return True
        return False

    def clear(self) -> None:
        self._cache.clear()


MANIFESTS = ManifestCache()
"""The process's cache (copies and maintenance passes of every table share it; manifest paths are unique across
tables)."""
