"""What a table's kept versions reference, read once per immutable file: the orphan search's other side."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from rsm.deletion.fileio_holding import normal_location
from rsm.errors import RemoteStorageException
from rsm.fetch.lru import TimedLru
from rsm.iceberg.file_bounds import MANIFESTS, bound_ids

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Version:
    """What one metadata file references directly: statistics files (normalised) and its snapshots' manifest
    lists."""

    statistics: frozenset[str]
    manifest_lists: tuple[str, ...]


def _version(meta: TableMetadata) -> _Version:
    stats = [s.statistics_path for s in meta.statistics] + [s.statistics_path for s in meta.partition_statistics]
    return _Version(frozenset(normal_location(p) for p in stats), tuple(s.manifest_list for s in meta.snapshots))


class ReferenceCache:
    """What metadata files and manifest lists reference, kept by their location; what manifests list is kept in
    :data:`rsm.iceberg.file_bounds.MANIFESTS`.

    None of these files changes once written (each name is new), so a maintenance pass reads only those it has
    not seen: the metadata files of versions committed since the last pass and their new manifest lists and
    manifests. Bounded, least recently used out first (and read again when needed): ``versions`` metadata files,
    manifest lists naming ``manifests`` manifests in all."""

    def __init__(self, versions: int = 1024, manifests: int = 50_000) -> None:
        self.versions: TimedLru[str, _Version] = TimedLru("iceberg-metadata-files", versions, None)
        self.lists: TimedLru[str, tuple[ManifestFile, ...]] = TimedLru(
            "iceberg-manifest-lists", manifests, None, weigher=lambda listed: len(listed) + 1
        )

    def clear(self) -> None:
        """Forget what every metadata file, manifest list and manifest references."""
        for cache in (self.versions, self.lists):
            cache.clear()
        MANIFESTS.clear()


REFERENCES = ReferenceCache()
"""The process's cache of what immutable table files reference (see :func:`referenced_files`)."""


def referenced_files(table: Table) -> set[str]:
    """Every file the table's metadata needs: the metadata files of its log, and what any snapshot of the current
    metadata file or of one still in the log references (manifest lists, manifests, data and delete files,
    statistics). A reader that loaded an earlier version of the table (a scan under way, a Kafka fetch's cached
    plan) thus keeps its files until that version leaves the log (``write.metadata.previous-versions-max``).
    What each file references comes from :data:`REFERENCES` (and what each manifest lists from
    :data:`rsm.iceberg.file_bounds.MANIFESTS`) when an earlier call read it."""
    meta = table.metadata
    refs = {normal_location(table.metadata_location)} | {normal_location(e.metadata_file) for e in meta.metadata_log}
    current = REFERENCES.versions.get(table.metadata_location)
    if current is None:
        current = _version(meta)
        REFERENCES.versions.put(table.metadata_location, current)
    ids = bound_ids(table)
    seen_lists: set[str] = set()
    seen_manifests: set[str] = set()
    for version in [current, *_previous_versions(table)]:
        refs |= version.statistics
        for manifest_list in version.manifest_lists:
            if manifest_list in seen_lists:
                continue
            seen_lists.add(manifest_list)
            refs.add(normal_location(manifest_list))
            for manifest in _manifests(table.io, manifest_list):
                if manifest.manifest_path in seen_manifests:
                    continue
                seen_manifests.add(manifest.manifest_path)
                refs.add(normal_location(manifest.manifest_path))
                refs |= MANIFESTS.listed(table.io, manifest, ids).locations
    return refs


def _manifests(io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
    manifests = REFERENCES.lists.get(manifest_list)
    if manifests is None:
        manifests = tuple(read_manifest_list(io.new_input(manifest_list)))
        REFERENCES.lists.put(manifest_list, manifests)
    return manifests


def _previous_versions(table: Table) -> Iterator[_Version]:
    """What the metadata files the table's metadata log lists reference, read once each (:data:`REFERENCES`);
    one already deleted (by the writer, past ``previous-versions-max``, or by hand) references nothing any more
    and is skipped. One deleted by hand after it was read keeps its references while cached: more files are
    kept, never fewer."""
    for entry in table.metadata.metadata_log:
        cached = REFERENCES.versions.get(entry.metadata_file)
        if cached is not None:
            yield cached
            continue
        try:
            version = _version(FromInputFile.table_metadata(table.io.new_input(entry.metadata_file)))
        except FileNotFoundError:
            log.debug("table %s: metadata file %s of its log is gone", table.name(), entry.metadata_file)
            continue
        except Exception as e:
            raise RemoteStorageException(
                f"cannot read {entry.metadata_file}, a metadata file in the log of table {'.'.join(table.name())}: "
                f"{type(e).__name__}: {e}; no orphan file of the table is removed while it cannot tell what that "
                "version references (check the warehouse, or drop the entry by committing to the table)"
            ) from e
        REFERENCES.versions.put(entry.metadata_file, version)
        yield version
