"""Whether a table's live data files may hold rows of a Kafka partition's offset range, from the bounds their
manifests record, each manifest read once.

A copy asks before it plans what it replaces; the usual answer is no (a new segment's offsets come after all
that is tiered), and then it plans nothing. Manifests never change once written (each has a new name), so
the bounds each lists are kept by its path: a copy reads only the manifest list and the manifests committed
since the last copy asked, however many live files the table has.
"""

from __future__ import annotations

from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType

from rsm.fetch.lru import TimedLru

__all__ = ["MANIFEST_BOUNDS", "Bounds", "ManifestBounds", "file_bounds", "overlaps"]

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


class ManifestBounds:
    """The bounds of the live files each data manifest lists, kept by manifest path; at most ``files`` files'
    bounds in all (least recently used out first, and read again when needed)."""

    def __init__(self, files: int = 100_000) -> None:
        self._cache: TimedLru[str, tuple[Bounds, ...]] = TimedLru(
            "iceberg-manifest-bounds", files, None, weigher=lambda bounds: len(bounds) + 1
        )

    def may_hold(self, table: Table, partition: int, first: int, last: int) -> bool:
        """Whether any live data file of the table's current snapshot may hold rows of ``partition`` at offsets
        ``first..last``."""
        snapshot = table.current_snapshot()
        if snapshot is None:
            return False
        schema = table.schema()
        ids = (schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id)
        for manifest in snapshot.manifests(table.io):
            if manifest.content != ManifestContent.DATA:
                continue
            if any(overlaps(b, partition, first, last) for b in self._bounds(table.io, manifest, ids)):
                return True
        return False

    def _bounds(self, io: FileIO, manifest: ManifestFile, ids: tuple[int, int]) -> tuple[Bounds, ...]:
        bounds = self._cache.get(manifest.manifest_path)
        if bounds is None:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
            bounds = tuple(file_bounds(e.data_file, *ids) for e in entries)
            self._cache.put(manifest.manifest_path, bounds)
        return bounds

    def clear(self) -> None:
        self._cache.clear()


MANIFEST_BOUNDS = ManifestBounds()
"""The process's cache (copies to every table share it; manifest paths are unique across tables)."""
