"""Maintenance of the plugin's Iceberg tables, each step on its own: snapshot expiry, old metadata files,
manifest merging, compaction of small data files, removal of orphan files.

Only tables the plugin made are touched (``kafka.topic`` is set, by the writer, on every table it creates), and
only files under such a table's location. Every step is safe beside Kafka's copies and beside other engines'
maintenance (Spark's procedures): expiry only drops snapshots from the metadata (their files go later, as
orphans); compaction commits an overwrite that removes exactly the files it read, and gives up on a table that
changed under it; a file is an orphan only when no snapshot references it, of the current metadata file or of
one still in the metadata log, and it is older than the grace period, so a copy or a rewrite still in flight (its
files not yet committed) and a reader of an earlier version of the table are never hit.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ValidationException,
)
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile, read_manifest_list
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import IntegerType, LongType

from rsm.errors import RemoteStorageException
from rsm.fetch.lru import TimedLru
from rsm.iceberg.config import IcebergConfig, MaintenanceSettings
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.schema import partition_spec
from rsm.iceberg.tables import METADATA_PROPERTIES, compacted_file_properties
from rsm.iceberg.transaction import transaction

log = logging.getLogger(__name__)

OWNER_PROPERTY = "kafka.topic"
"""Set by the writer on every table it creates: the mark of a table whose files maintenance may touch."""
COMPACTION_SNAPSHOT_PROPERTY = "kafka.maintenance"
Guard = Callable[[], AbstractContextManager[object]]


@dataclass
class StepResult:
    """What one step did (or, in a dry run, would do)."""

    step: str
    count: int = 0
    bytes: int = 0
    details: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0
    given_up: int = 0  # compaction: bins left because their files changed meanwhile


def is_ours(table: Table) -> bool:
    return OWNER_PROPERTY in table.properties


# --- metadata files ---------------------------------------------------------------------------------------------


def set_metadata_properties(table: Table, dry_run: bool = False) -> StepResult:
    """Give the table the properties that make each commit delete old metadata files (unless set already)."""
    result = StepResult("metadata-properties")
    missing = {k: v for k, v in METADATA_PROPERTIES.items() if k not in table.properties}
    result.count = len(missing)
    result.details = [f"set {k}={v}" for k, v in missing.items()]
    if missing and not dry_run:
        with table.transaction() as txn:
            txn.set_properties(missing)
    return result


# --- snapshots --------------------------------------------------------------------------------------------------


def snapshots_to_expire(table: Table, settings: MaintenanceSettings, now_ms: int) -> list[int]:
    """Snapshots older than the max age or past the newest ``snapshot_max_keep``, never the newest
    ``snapshot_min_keep`` nor any branch or tag head."""
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    newest_first = sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))[::-1]
    cutoff = now_ms - int(settings.snapshot_max_age_s * 1000)
    expired = []
    for rank, snap in enumerate(newest_first):
        if rank < settings.snapshot_min_keep or snap.snapshot_id in protected:
            continue
        if snap.timestamp_ms < cutoff or rank >= settings.snapshot_max_keep:
            expired.append(snap.snapshot_id)
    return expired


def expire_snapshots(table: Table, settings: MaintenanceSettings, dry_run: bool = False) -> StepResult:
    """Drop old snapshots from the table's metadata. Their files are left: the orphan step removes them once no
    remaining snapshot references them and the grace period has passed (a reader of an expired snapshot that
    started before has that long to finish)."""
    result = StepResult("expire-snapshots")
    ids = snapshots_to_expire(table, settings, int(time.time() * 1000))
    result.count = len(ids)
    if ids and not dry_run:
        table.maintenance.expire_snapshots().by_ids(ids).commit()
    return result


# --- manifests --------------------------------------------------------------------------------------------------


def rewrite_manifests(table: Table, settings: MaintenanceSettings, dry_run: bool = False) -> StepResult:
    """Merge the current snapshot's data manifests when there are more than ``manifests_max`` (each commit that
    replaces files adds some; planning a scan or a commit reads every one).

    pyiceberg 0.12 has no rewrite-manifests action; its merging append does the same when given no files:
    one commit whose manifests hold the same live files, merged up to ``commit.manifest.target-size-bytes``.
    The minimum count to merge is lowered inside the same transaction only, so the table keeps its own."""
    result = StepResult("rewrite-manifests")
    snapshot = table.current_snapshot()
    if snapshot is None:
        return result
    manifests = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA]
    result.details = [f"{len(manifests)} data manifests"]
    if len(manifests) <= settings.manifests_max:
        return result
    result.count = len(manifests)
    if dry_run:
        return result
    temporary = {"commit.manifest.min-count-to-merge": "2", "commit.manifest-merge.enabled": "true"}
    txn = transaction(table)
    txn.set_properties(temporary)
    with txn.update_snapshot(snapshot_properties={COMPACTION_SNAPSHOT_PROPERTY: "rewrite-manifests"}).merge_append():
        pass
    kept = {k: table.properties[k] for k in temporary if k in table.properties}
    if kept:
        txn.set_properties(kept)
    if len(kept) < len(temporary):
        txn.remove_properties(*(k for k in temporary if k not in kept))
    txn.commit_transaction()
    return result


# --- compaction -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Small:
    task: FileScanTask
    day: object
    partition: int
    first: int
    last: int

    @property
    def size(self) -> int:
        return int(self.task.file.file_size_in_bytes)

    @property
    def rows(self) -> int:
        return int(self.task.file.record_count)


@dataclass(frozen=True)
class CompactionBin:
    """Small files of one Kafka partition and one day, contiguous in offsets, to become one file."""

    partition: int
    day: object
    files: tuple[_Small, ...]

    @property
    def first(self) -> int:
        return min(f.first for f in self.files)

    @property
    def last(self) -> int:
        return max(f.last for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def describe(self) -> str:
        return (
            f"partition {self.partition} day {self.day}: {len(self.files)} files, {self.bytes:,} bytes, "
            f"offsets {self.first}-{self.last}"
        )


def _bounds(f: DataFile, ids: tuple[int, int]) -> tuple[int, int, int] | None:
    """(partition, first offset, last offset) when the file's bounds say it holds one partition's rows."""
    lower, upper, nulls = f.lower_bounds or {}, f.upper_bounds or {}, f.null_value_counts or {}
    if any(i not in lower or i not in upper or nulls.get(i) != 0 for i in ids):
        return None
    p_lo, p_hi = (from_bytes(IntegerType(), b[ids[0]]) for b in (lower, upper))
    if p_lo != p_hi:
        return None
    return int(p_lo), int(from_bytes(LongType(), lower[ids[1]])), int(from_bytes(LongType(), upper[ids[1]]))


ROW_SLACK = 1.1
"""How much larger than another a file's row count may be and still count as the same size, in compaction."""


def compaction_runs(files: Sequence[tuple[int, int]], fan_in: int, target_bytes: int) -> list[tuple[int, int]]:
    """The runs to compact among ``files`` ((rows, bytes) each, in offset order): [start, end) index ranges.

    Size-tiered from the newest file back, as an LSM tree: a run grows by the next older file while that file has no
    more rows than the run so far (and the run stays under ``target_bytes``); a run of at least ``fan_in`` files
    whose result has at least twice the rows of each is compacted, and the search goes on from the file before it.
    Rows are compared with a slack of ``ROW_SLACK`` (copies of one topic differ in size by a few percent: two of
    them must still make a run). So copies become one file, those a larger one, and so on: a row is rewritten at
    most about log2(rows of the partition-day / rows of a copy) times, a compacted file waits until newer files hold
    as many rows, and however old the table a partition-day keeps a few files per doubling of its rows (rows, not
    bytes: a Parquet file's footer weighs as much as a small file's rows). Runs are not cut at ``fan_in`` files: a
    copy left older than a compacted file would stay there, between larger files, for good.
    """
    runs: list[tuple[int, int]] = []
    end = len(files)
    while end > 0:
        start = end - 1
        rows, size = files[start]
        while start > 0:
            older_rows, older_size = files[start - 1]
            if older_rows > rows * ROW_SLACK or size + older_size > target_bytes:
                break
            start -= 1
            rows, size = rows + older_rows, size + older_size
        if end - start >= fan_in and 2 * max(r for r, _ in files[start:end]) <= rows * ROW_SLACK:
            runs.append((start, end))
            end = start
        else:
            end -= 1
    return runs[::-1]


def plan_compaction(table: Table, settings: MaintenanceSettings) -> list[CompactionBin]:
    """The bins worth rewriting: per Kafka partition and day, in offset order, the runs of ``compaction_runs``
    among the files under the target size (a file at the target size, or one that cannot be compacted, ends a
    run). Files with delete files attached, of another partition spec, or without the plugin's bounds are left
    alone."""
    if table.current_snapshot() is None:
        return []
    schema, spec = table.schema(), table.spec()
    if len(spec.fields) != 1 or spec.fields[0] != partition_spec(schema).fields[0]:
        return []
    ids = (schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id)
    # Per partition and day, (first offset, the file or None for one left alone), to sort by offset.
    groups: dict[tuple[int, object], list[tuple[int, _Small | None]]] = {}
    for task in table.scan().plan_files():
        f = task.file
        bounds = _bounds(f, ids)
        if bounds is None:
            continue
        p, first, last = bounds
        small = (
            not task.delete_files and f.spec_id == spec.spec_id and f.file_size_in_bytes < settings.target_file_bytes
        )
        entry = _Small(task, f.partition[0], p, first, last) if small else None
        groups.setdefault((p, f.partition[0]), []).append((first, entry))
    fan_in = max(2, settings.min_input_files)
    bins: list[CompactionBin] = []
    for (p, day), entries in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        # Runs never cross a file left alone: a bin's offsets must hold only its own files.
        stretch: list[_Small] = []
        for _, entry in [*sorted(entries, key=lambda e: e[0]), (0, None)]:
            if entry is not None:
                stretch.append(entry)
                continue
            for start, end in compaction_runs([(f.rows, f.size) for f in stretch], fan_in, settings.target_file_bytes):
                bins.append(CompactionBin(p, day, tuple(stretch[start:end])))
            stretch = []
    return bins


def _sorted_rows(table: Table, b: CompactionBin) -> pa.Table:
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=[f.task for f in b.files])
    kafka = rows.column("kafka")
    keys = pa.table({"p": pc.struct_field(kafka, "partition"), "o": pc.struct_field(kafka, "offset")})
    return rows.take(pc.sort_indices(keys, sort_keys=[("p", "ascending"), ("o", "ascending")]))


def _rewrite(table: Table, b: CompactionBin) -> list[DataFile]:
    """The bin's rows, sorted by (partition, offset), written as new data files (not yet committed) in large row
    groups (``compacted_file_properties``)."""
    rows = _sorted_rows(table, b)
    expected = sum(f.task.file.record_count for f in b.files)
    if rows.num_rows != expected:
        raise RemoteStorageException(
            f"compaction of {table.name()} {b.describe()}: read {rows.num_rows} rows where the files' metadata "
            f"says {expected}; nothing was changed, check the data files"
        )
    return write_data_files(
        table, rows, uuid.uuid4(), itertools.count(0), compacted_file_properties(table.metadata.properties)
    )


def _holders(table: Table, bins: Sequence[CompactionBin]) -> list[set[str]]:
    """For each bin, the live files of its partition value (day) that may hold offsets of its range, from one
    plan of the table. Files of other days are left out: their offsets may interleave with the bin's
    (transaction markers carry the broker's time, records their producer's) and the bin does not touch them. A
    file without the plugin's bounds may hold any offset."""
    schema = table.schema()
    ids = (schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id)
    holders: list[set[str]] = [set() for _ in bins]
    for task in table.scan().plan_files():
        f = task.file
        bounds = _bounds(f, ids)
        for held, b in zip(holders, bins, strict=True):
            if f.spec_id != b.files[0].task.file.spec_id or f.partition[0] != b.day:
                continue
            if bounds is None or (bounds[0] == b.partition and bounds[1] <= b.last and bounds[2] >= b.first):
                held.add(f.file_path)
    return holders


def compact_bins(
    table: Table, bins: Sequence[CompactionBin], attempts: int = 5, guard: Guard = nullcontext
) -> list[CompactionBin]:
    """Rewrite each bin's files as one file, sorted by (partition, offset), and commit one overwrite that removes
    exactly those files, holding ``guard`` once (the plugin's copies to the table wait meanwhile). The table is
    read again under the guard: a bin whose range's live files are no longer exactly its own (a copy replaced
    some, another engine rewrote them) is given up and its new file deleted. Returns the bins committed."""
    new: dict[int, list[DataFile]] = {}
    try:
        for i, b in enumerate(bins):
            new[i] = _rewrite(table, b)
        for attempt in range(attempts):
            try:
                with guard():
                    # Loaded under the guard: the copies that committed while the bins were rewritten are in it,
                    # so the commit does not fail on stale metadata (nor does pyiceberg's retry sleep in the guard).
                    current = table.catalog.load_table(table.name())
                    holders = _holders(current, [bins[i] for i in new])
                    for i, held in zip(list(new), holders, strict=True):
                        if held != {f.task.file.file_path for f in bins[i].files}:
                            _delete(table.io, [f.file_path for f in new.pop(i)])
                    if not new:
                        return []
                    txn = transaction(current)
                    with txn.update_snapshot(
                        snapshot_properties={COMPACTION_SNAPSHOT_PROPERTY: "compaction"}
                    ).overwrite() as ow:
                        for i, files in new.items():
                            for f in bins[i].files:
                                ow.delete_data_file(f.task.file)
                            for f in files:
                                ow.append_data_file(f)
                    txn.commit_transaction()
                return [bins[i] for i in new]
            except (CommitFailedException, ValidationException) as e:
                log.debug("compaction of %s: conflict (attempt %d): %s", table.name(), attempt + 1, e)
    except CommitStateUnknownException:
        # It may have landed: the new files stay (the orphan step removes them later if it did not).
        raise
    except BaseException:
        _delete(table.io, [f.file_path for files in new.values() for f in files])
        raise
    _delete(table.io, [f.file_path for files in new.values() for f in files])
    return []


def compact(
    table: Table, settings: MaintenanceSettings, dry_run: bool = False, guard: Guard = nullcontext
) -> StepResult:
    result = StepResult("compaction")
    bins = plan_compaction(table, settings)
    result.details = [b.describe() for b in bins]
    if dry_run:
        result.count = sum(len(b.files) for b in bins)
        result.bytes = sum(b.bytes for b in bins)
        return result
    done = compact_bins(table, bins, guard=guard) if bins else []
    result.count = sum(len(b.files) for b in done)
    result.bytes = sum(b.bytes for b in done)
    if len(done) < len(bins):
        result.given_up = len(bins) - len(done)
        result.skipped = f"{result.given_up} bins changed meanwhile (left for the next run)"
    return result


# --- orphan files -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrphanFile:
    path: str
    size: int
    age_s: float


_AZURE_SCHEMES = ("abfs", "abfss", "wasb", "wasbs")


def _normal(uri: str) -> str:
    """A location as a comparable string: ``file:/x``, ``file:///x`` and ``/x`` are the same file, and so are
    Azure's ``abfs://container@account.dfs.core.windows.net/x`` (what tables reference) and
    ``abfs://container/x`` (what listing the container gives)."""
    u = urlparse(uri)
    if u.scheme in ("", "file"):
        return "file://" + os.path.normpath(u.path)
    netloc = u.netloc.split("@", 1)[0] if u.scheme in _AZURE_SCHEMES else u.netloc
    return f"{u.scheme}://{netloc}{u.path}"


def list_files(io: FileIO, location: str) -> Iterator[tuple[str, int, float]]:
    """(URI, size, modified epoch seconds) of every file under ``location`` (nothing when it does not exist)."""
    u = urlparse(location)
    scheme = u.scheme or "file"
    if isinstance(io, PyArrowFileIO):
        _, netloc, path = io.parse_location(location)
        fs = io.fs_by_scheme(scheme, netloc)
        infos = fs.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
        for info in infos:
            if info.type == pafs.FileType.File:
                mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
                yield (f"file://{info.path}" if scheme == "file" else f"{scheme}://{info.path}"), info.size or 0, mtime
        return
    get_fs = getattr(io, "get_fs", None)
    if get_fs is None:
        raise RemoteStorageException(
            f"cannot list {location}: the FileIO {type(io).__name__} lists no files; orphan files are not removed"
        )
    fs = get_fs(scheme)
    root = location.split("://", 1)[-1].rstrip("/")
    for path, info in fs.find(root, detail=True).items():
        modified = info.get("last_modified") or info.get("mtime") or info.get("LastModified") or time.time()
        epoch = modified.timestamp() if isinstance(modified, datetime) else float(modified)
        yield f"{scheme}://{path}", int(info.get("size") or 0), epoch


@dataclass(frozen=True)
class _Version:
    """What one metadata file references directly: statistics files (normalised) and its snapshots' manifest
    lists."""

    statistics: frozenset[str]
    manifest_lists: tuple[str, ...]


def _version(meta: TableMetadata) -> _Version:
    stats = [s.statistics_path for s in meta.statistics] + [s.statistics_path for s in meta.partition_statistics]
    return _Version(frozenset(_normal(p) for p in stats), tuple(s.manifest_list for s in meta.snapshots))


class ReferenceCache:
    """What metadata files, manifest lists and manifests reference, kept by their location.

    None of these files changes once written (each name is new), so a maintenance pass reads only those it has
    not seen: the metadata files of versions committed since the last pass and their new manifest lists and
    manifests. Bounded, least recently used out first (and read again when needed): ``versions`` metadata files,
    manifest lists naming ``manifests`` manifests in all, manifests listing ``paths`` files in all."""

    def __init__(self, versions: int = 1024, manifests: int = 50_000, paths: int = 200_000) -> None:
        self.versions: TimedLru[str, _Version] = TimedLru("iceberg-metadata-files", versions, None)
        self.lists: TimedLru[str, tuple[ManifestFile, ...]] = TimedLru(
            "iceberg-manifest-lists", manifests, None, weigher=lambda listed: len(listed) + 1
        )
        self.manifests: TimedLru[str, frozenset[str]] = TimedLru(
            "iceberg-manifests", paths, None, weigher=lambda files: len(files) + 1
        )

    def clear(self) -> None:
        for cache in (self.versions, self.lists, self.manifests):
            cache.clear()


REFERENCES = ReferenceCache()
"""The process's cache of what immutable table files reference (see :func:`referenced_files`)."""


def referenced_files(table: Table) -> set[str]:
    """Every file the table's metadata needs: the metadata files of its log, and what any snapshot of the current
    metadata file or of one still in the log references (manifest lists, manifests, data and delete files,
    statistics). A reader that loaded an earlier version of the table (a scan under way, a Kafka fetch's cached
    plan) thus keeps its files until that version leaves the log (``write.metadata.previous-versions-max``).
    What each file references comes from :data:`REFERENCES` when an earlier call read it."""
    meta = table.metadata
    refs = {_normal(table.metadata_location)} | {_normal(e.metadata_file) for e in meta.metadata_log}
    current = REFERENCES.versions.get(table.metadata_location)
    if current is None:
        current = _version(meta)
        REFERENCES.versions.put(table.metadata_location, current)
    seen_lists: set[str] = set()
    seen_manifests: set[str] = set()
    for version in [current, *_previous_versions(table)]:
        refs |= version.statistics
        for manifest_list in version.manifest_lists:
            if manifest_list in seen_lists:
                continue
            seen_lists.add(manifest_list)
            refs.add(_normal(manifest_list))
            for manifest in _manifests(table.io, manifest_list):
                if manifest.manifest_path in seen_manifests:
                    continue
                seen_manifests.add(manifest.manifest_path)
                refs.add(_normal(manifest.manifest_path))
                refs |= _live_files(table.io, manifest)
    return refs


def _manifests(io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
    manifests = REFERENCES.lists.get(manifest_list)
    if manifests is None:
        manifests = tuple(read_manifest_list(io.new_input(manifest_list)))
        REFERENCES.lists.put(manifest_list, manifests)
    return manifests


def _live_files(io: FileIO, manifest: ManifestFile) -> frozenset[str]:
    """The data and delete files a manifest lists, normalised. A DELETED entry is a file its snapshot removed:
    not part of it (an older snapshot that has the file lists it as live)."""
    files = REFERENCES.manifests.get(manifest.manifest_path)
    if files is None:
        entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
        files = frozenset(_normal(e.data_file.file_path) for e in entries)
        REFERENCES.manifests.put(manifest.manifest_path, files)
    return files


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


def find_orphans(
    table: Table, grace_s: float, others: list[str] | None = None, warehouse: str | None = None
) -> list[OrphanFile]:
    """Files under the table's ``data/`` and ``metadata/`` that no snapshot references and that are older than
    ``grace_s``; none of a table that is not ours or (``warehouse`` given) lies outside the warehouse.
    ``others``: locations of other tables, whose files are left alone even when under this table's location."""
    location = table.location().rstrip("/")
    if not is_ours(table) or (warehouse and not _normal(location).startswith(_normal(warehouse).rstrip("/") + "/")):
        return []
    now = time.time()
    listed = [
        f for sub in ("data", "metadata") for f in list_files(table.io, f"{location}/{sub}/") if now - f[2] > grace_s
    ]
    if not listed:
        return []
    refs = referenced_files(table)
    nested = [_normal(o).rstrip("/") + "/" for o in others or [] if _normal(o).startswith(_normal(location) + "/")]
    orphans = []
    for path, size, mtime in listed:
        p = _normal(path)
        if p in refs or any(p.startswith(n) for n in nested):
            continue
        orphans.append(OrphanFile(path, size, now - mtime))
    return orphans


def remove_orphans(
    table: Table,
    settings: MaintenanceSettings,
    dry_run: bool = False,
    others: list[str] | None = None,
    warehouse: str | None = None,
) -> StepResult:
    result = StepResult("remove-orphans")
    orphans = find_orphans(table, settings.orphan_grace_s, others, warehouse)
    result.count = len(orphans)
    result.bytes = sum(o.size for o in orphans)
    result.details = [o.path for o in orphans]
    if not dry_run:
        _delete(table.io, [o.path for o in orphans])
    return result


def _delete(io: FileIO, paths: list[str]) -> None:
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass


# --- a run ------------------------------------------------------------------------------------------------------


def maintain(
    table: Table,
    settings: MaintenanceSettings,
    dry_run: bool = False,
    orphans: bool = True,
    others: list[str] | None = None,
    guard: Guard = nullcontext,
    attempts: int = 3,
    warehouse: str | None = None,
    proceed: Callable[[], bool] | None = None,
) -> list[StepResult]:
    """Every step once on ``table`` (ours only; another table gives nothing). Compaction comes before the
    manifest rewrite (its overwrite adds manifests) and the orphan removal after expiry. ``proceed``, asked
    before each step: False ends the run there (the steps not run are not in the results).

    ``guard``: held around each commit (the plugin's copies to the same table wait meanwhile, so a commit of
    maintenance is not starved by a table that commits without pause). A step whose commit loses to another
    writer is tried again on the table as it is then, ``attempts`` times, and otherwise left for the next run."""
    if not is_ours(table):
        return []
    results = []
    steps: list[tuple[str, Callable[[Table], StepResult], bool]] = [
        ("metadata-properties", lambda t: set_metadata_properties(t, dry_run), True),
        ("expire-snapshots", lambda t: expire_snapshots(t, settings, dry_run), True),
        ("compaction", lambda t: compact(t, settings, dry_run, guard), False),
        ("rewrite-manifests", lambda t: rewrite_manifests(t, settings, dry_run), True),
    ]
    if orphans:
        steps.append(("remove-orphans", lambda t: remove_orphans(t, settings, dry_run, others, warehouse), False))
    for name, step, guarded in steps:
        if proceed is not None and not proceed():
            log.info("maintenance of %s: stopped before %s", table.name(), name)
            break
        started = time.monotonic()
        result = StepResult(name, skipped=f"lost {attempts} commits to other writers (left for the next run)")
        for attempt in range(attempts):
            try:
                if guarded and not dry_run:
                    with guard():
                        # Loaded under the guard, for the reason compact_bins gives.
                        result = step(table.catalog.load_table(table.name()))
                else:
                    result = step(table)
                break
            except (CommitFailedException, ValidationException) as e:
                log.debug("maintenance of %s, %s: conflict (attempt %d): %s", table.name(), name, attempt + 1, e)
                table = table.catalog.load_table(table.name())
        result.seconds = time.monotonic() - started
        results.append(result)
        if not dry_run:
            table = table.catalog.load_table(table.name())
    return results


# --- the plugin's tables, for tools --------------------------------------------------------------------------


def open_existing_catalog(cfg: IcebergConfig, props: Mapping[str, str]) -> Catalog | None:
    """The catalog the keys name, or None when it holds nothing yet (no SQLite file, no namespace): opened
    without creating anything, for tools that must not."""
    uri = props.get("uri", "")
    if props.get("type") == "sql" and uri.startswith("sqlite:///") and not Path(urlparse(uri).path).is_file():
        return None
    catalog = load_catalog(cfg.catalog_name, **dict(props))
    return catalog if catalog.namespace_exists(cfg.namespace) else None


def plugin_tables(catalog: Catalog, namespace: str) -> tuple[list[Table], dict[str, str]]:
    """The namespace's tables the plugin made, and the location of every table of the namespace by name."""
    ours, locations = [], {}
    for ident in catalog.list_tables(namespace):
        try:
            table = catalog.load_table(ident)
        except NoSuchTableError:
            continue
        locations[ident[-1]] = table.location()
        if is_ours(table):
            ours.append(table)
    return ours, locations


def all_orphans(catalog: Catalog, namespace: str, grace_s: float, warehouse: str) -> list[OrphanFile]:
    """The orphan files of every table of the plugin in ``namespace`` whose location is inside ``warehouse``."""
    ours, locations = plugin_tables(catalog, namespace)
    out = []
    for table in ours:
        name = table.name()[-1]
        out += find_orphans(table, grace_s, [loc for n, loc in locations.items() if n != name], warehouse)
    return out


def delete_if_orphans(
    catalog: Catalog, namespace: str, paths: list[str], warehouse: str
) -> tuple[list[str], list[str]]:
    """Delete those of ``paths`` that are still orphans now (no grace: they were found older than it before);
    (deleted, kept: referenced meanwhile or no longer under a table of the plugin)."""
    still = {_normal(o.path) for o in all_orphans(catalog, namespace, 0.0, warehouse)}
    deleted, kept = [], []
    io = catalog.load_table(catalog.list_tables(namespace)[0]).io if paths and still else None
    for path in paths:
        if _normal(path) in still and io is not None:
            _delete(io, [path])
            deleted.append(path)
        else:
            kept.append(path)
    return deleted, kept
