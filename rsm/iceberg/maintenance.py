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
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
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
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestFile, read_manifest_list
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import IntegerType, LongType

from rsm.deletion.fileio_holding import FileIOHolding, list_locations, normal_location
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import Quarantine, new_run_id
from rsm.deletion.rules import (
    TABLE_UNREFERENCED,
    TABLE_UNREFERENCED_FOR_GRACE,
    DeletionRefused,
    Evidence,
    authorize,
)
from rsm.errors import RemoteStorageException
from rsm.fetch.lru import TimedLru
from rsm.iceberg.config import IcebergConfig, MaintenanceSettings
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.file_bounds import file_bounds, overlaps
from rsm.iceberg.schema import has_field, partition_spec
from rsm.iceberg.tables import FORCED_METADATA_PROPERTIES, METADATA_PROPERTIES, compacted_file_properties
from rsm.iceberg.transaction import transaction

log = logging.getLogger(__name__)

OWNER_PROPERTY = "kafka.topic"
"""Set by the writer on every table it creates: the mark of a table whose files maintenance may touch."""
COMPACTION_SNAPSHOT_PROPERTY = "kafka.maintenance"
ICEBERG_ORPHAN = "iceberg-orphan"
"""The deletion rule (``rsm.deletion.rules``) of a table's orphan files."""
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
    refused: str = ""  # why the step did nothing and will not until an operator acts (not a conflict)


def is_ours(table: Table) -> bool:
    return OWNER_PROPERTY in table.properties


# --- metadata files ---------------------------------------------------------------------------------------------


def set_metadata_properties(table: Table, dry_run: bool = False) -> StepResult:
    """Give the table the properties that bound its metadata log (unless set already), and turn off pyiceberg's
    deletion of old metadata files on commit (their removal is the orphan step's, through the quarantine)."""
    result = StepResult("metadata-properties")
    missing = {
        k: v
        for k, v in METADATA_PROPERTIES.items()
        if k not in table.properties or (k in FORCED_METADATA_PROPERTIES and table.properties[k] != v)
    }
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
    since: int = 0
    """The sequence number of the snapshot the plan read: delete files committed after it are new to the bin."""

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
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    since = snapshot.sequence_number or 0
    schema, spec = table.schema(), table.spec()
    if not has_field(schema, "kafka.timestamp"):
        return []  # a latest-per-key table: each commit rewrites its buckets whole, one file each
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
                bins.append(CompactionBin(p, day, tuple(stretch[start:end]), since))
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
        bounds = file_bounds(f, *ids)
        for held, b in zip(holders, bins, strict=True):
            if f.spec_id != b.files[0].task.file.spec_id or f.partition[0] != b.day:
                continue
            if overlaps(bounds, b.partition, b.first, b.last):
                held.add(f.file_path)
    return holders


POSITION_PATH_FIELD_ID = 2147483546
"""Field id of ``file_path`` in position delete files (Iceberg's spec): its bounds name the data files they hit."""


def _may_apply(delete: DataFile, data: DataFile) -> bool:
    """Whether a delete file (position or equality deletes) may apply to a data file. Position deletes whose
    ``file_path`` bounds leave the data file out do not; otherwise a delete of the same spec and another
    partition does not; anything else may (an equality delete of an unpartitioned spec hits every partition)."""
    if delete.content == DataFileContent.POSITION_DELETES:
        lower = (delete.lower_bounds or {}).get(POSITION_PATH_FIELD_ID)
        upper = (delete.upper_bounds or {}).get(POSITION_PATH_FIELD_ID)
        if lower is not None and upper is not None:
            path = data.file_path.encode()
            return lower <= path <= upper
    return delete.spec_id != data.spec_id or delete.partition == data.partition


def _gained_deletes(table: Table, bins: Sequence[CompactionBin]) -> list[list[str]]:
    """For each bin, the delete files committed since its plan's snapshot that may apply to one of its files
    (another engine's merge-on-read DELETE, UPDATE or MERGE): rewriting the bin's rows as they were read would
    bring the deleted rows back. Read from the delete manifests of the current snapshot."""
    gained: list[list[str]] = [[] for _ in bins]
    snapshot = table.current_snapshot()
    if snapshot is None or not bins:
        return gained
    since = min(b.since for b in bins)
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DELETES or (manifest.sequence_number or 0) <= since:
            continue  # a manifest holds no entry newer than the snapshot that wrote it
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            delete = entry.data_file
            for found, b in zip(gained, bins, strict=True):
                if (entry.sequence_number or 0) > b.since and any(_may_apply(delete, f.task.file) for f in b.files):
                    found.append(delete.file_path)
    return gained


def compact_bins(
    table: Table, bins: Sequence[CompactionBin], attempts: int = 5, guard: Guard = nullcontext
) -> list[CompactionBin]:
    """Rewrite each bin's files as one file, sorted by (partition, offset), and commit one overwrite that removes
    exactly those files, holding ``guard`` once (the plugin's copies to the table wait meanwhile). The table is
    read again under the guard: a bin whose range's live files are no longer exactly its own (a copy replaced
    some, another engine rewrote them), or one of whose files gained delete files since the plan (as Iceberg's
    ``RewriteFiles`` validates), is given up and its new file deleted. Another writer committing between that
    read and the commit fails the commit, and the checks run again. Returns the bins committed."""
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
                    gained = _gained_deletes(current, [bins[i] for i in new])
                    for i, deletes in zip(list(new), gained, strict=True):
                        if deletes:
                            log.info(
                                "compaction of %s %s given up: its files gained delete files %s",
                                ".".join(table.name()),
                                bins[i].describe(),
                                ", ".join(deletes[:3]),
                            )
                            _delete(table.io, [f.file_path for f in new.pop(i)])
                    if not new:
                        return []
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


DATA_FILE_MIN_GRACE_S = 86400.0
"""The least grace of a data file (under a table's ``data/``), whatever ``orphan.grace.ms`` says: a Spark job or
a long compaction may write for hours before its commit, and a reader of an expired snapshot reads as long."""
LEDGER_PATH = "kts/unreferenced.json"
"""Where, under a table's location (outside ``data/`` and ``metadata/``), the plugin keeps when each of the
table's unreferenced files was first seen so (:class:`UnreferencedLedger`)."""


@dataclass(frozen=True)
class OrphanFile:
    """A file of a table that no kept version references. ``age_s``: seconds since it was first seen so."""

    path: str
    size: int
    age_s: float
    evidence: tuple[Evidence, ...] = ()


def orphan_grace_s(relative: str, grace_s: float) -> float:
    """The grace of a file at ``relative`` (its path under the table's location): ``grace_s``, at least
    :data:`DATA_FILE_MIN_GRACE_S` for a file outside ``metadata/``."""
    return grace_s if relative.startswith("metadata/") else max(grace_s, DATA_FILE_MIN_GRACE_S)


_normal = normal_location
list_files = list_locations


@dataclass
class UnreferencedLedger:
    """When each unreferenced file of one table was first seen unreferenced by a pass (epoch seconds, by path
    under the table's location), kept as JSON at :data:`LEDGER_PATH`.

    A file is in it only while it is unreferenced and present: one referenced again, or gone, leaves it at the
    next pass, so it holds the files of about one grace period's commits however old the table. It is written
    only by a pass that may remove files (the maintenance lease holder, ``kts gc --delete``, ``kts iceberg
    maintain``); a read-only look reads it. Lost or unreadable, it starts again empty: files then wait a whole
    grace from the next pass (more kept, never less). Two writers at once (a broker's pass beside ``kts gc
    --delete``) may lose one's update: a file then re-enters later (kept longer), or keeps an earlier time that
    the other had dropped on seeing it referenced; the reference check just before each move still holds. Passes
    run every ``orphan.interval.ms``: a file referenced and dropped again between two passes keeps the time the
    first one saw, so the grace is counted to within that interval."""

    location: str
    first_seen: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def read(io: FileIO, table_location: str) -> UnreferencedLedger:
        location = f"{table_location.rstrip('/')}/{LEDGER_PATH}"
        entry = io.new_input(location)
        try:
            if not entry.exists():
                return UnreferencedLedger(location)
            with entry.open() as f:
                raw = json.loads(f.read())
            first_seen = {str(k): float(v) for k, v in raw["first_seen"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s is unreadable (%s): unreferenced files wait a whole grace from now", location, e)
            return UnreferencedLedger(location)
        return UnreferencedLedger(location, first_seen)

    def write(self, io: FileIO) -> None:
        data = json.dumps({"format": 1, "first_seen": self.first_seen}, sort_keys=True).encode()
        with io.new_output(self.location).create(overwrite=True) as out:
            out.write(data)


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


def shared_location(table: Table, others: Mapping[str, str]) -> str | None:
    """Why the table's orphan files must not be removed, or None: another table (``others``: name to location)
    at the same location, or one whose location holds the table's (a ``register_table`` clone or a backup of
    it). Each table's search would list the other's live files as its own orphans, so the search is refused for
    both, with a message naming them. A table inside this one's location is no such case: its files are left
    alone (``find_orphans``' ``others``)."""
    location = _normal(table.location()).rstrip("/")
    sharing = sorted(
        name
        for name, other in others.items()
        if location == _normal(other).rstrip("/") or location.startswith(_normal(other).rstrip("/") + "/")
    )
    if not sharing:
        return None
    return (
        f"orphan files of table {'.'.join(table.name())} are not removed: table {', '.join(sharing)} is at its "
        f"location {table.location()} or holds it, so each would take the other's live files for orphans; drop "
        "the copy (a register_table clone or a backup) or give each table its own location"
    )


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_orphans(
    table: Table,
    grace_s: float,
    others: list[str] | None = None,
    warehouse: str | None = None,
    now: float | None = None,
    record: bool = False,
) -> list[OrphanFile]:
    """Files under the table's ``data/`` and ``metadata/`` that no kept version of the table references and that
    were first seen so at least their grace ago (:func:`orphan_grace_s`); none of a table that is not ours or
    (``warehouse`` given) lies outside the warehouse. ``others``: locations of other tables, whose files are left
    alone even when under this table's location.

    The grace counts from when a pass first saw the file unreferenced (the table's :class:`UnreferencedLedger`),
    never from its modification time alone: a file of a snapshot expired a minute ago is days old, and a reader
    that planned on that snapshot still reads it. ``record``: write the ledger (only a caller that may remove
    files); a read-only look reads it and finds only what earlier recorded passes saw. Each file found carries
    the evidence ``TABLE_UNREFERENCED_FOR_GRACE``."""
    location = table.location().rstrip("/")
    if not is_ours(table) or (warehouse and not _normal(location).startswith(_normal(warehouse).rstrip("/") + "/")):
        return []
    now = time.time() if now is None else now
    listed = [f for sub in ("data", "metadata") for f in list_files(table.io, f"{location}/{sub}/")]
    ledger = UnreferencedLedger.read(table.io, location)
    refs = referenced_files(table) if listed else set()
    base = _normal(location) + "/"
    nested = [_normal(o).rstrip("/") + "/" for o in others or [] if _normal(o).startswith(base)]
    seen: dict[str, float] = {}
    orphans = []
    for path, size, mtime in listed:
        p = _normal(path)
        if p in refs or any(p.startswith(n) for n in nested) or not p.startswith(base):
            continue
        relative = p[len(base) :]
        first = seen[relative] = ledger.first_seen.get(relative, now)
        since = max(first, mtime)  # a file written again in place starts over
        grace = orphan_grace_s(relative, grace_s)
        if now - since >= grace:
            detail = f"unreferenced since {_iso(since)} (first seen so by a pass), grace {grace:.0f} s"
            orphans.append(OrphanFile(path, size, now - since, (Evidence(TABLE_UNREFERENCED_FOR_GRACE, detail),)))
    if record and seen != ledger.first_seen:
        ledger.first_seen = seen
        ledger.write(table.io)
    return orphans


def _warehouse_of(table: Table, warehouse: str | None) -> str | None:
    """The warehouse the table's files are quarantined in: ``warehouse``, else the catalog's; None when the
    table's location is not inside it."""
    found = warehouse or table.catalog.properties.get("warehouse")
    if not found or not _normal(table.location()).startswith(_normal(found).rstrip("/") + "/"):
        return None
    return found


def hold_orphans(
    table: Table,
    orphans: Sequence[OrphanFile],
    warehouse: str,
    retention_s: float,
    run: str | None = None,
    others: Sequence[str] = (),
) -> tuple[list[Held], list[tuple[OrphanFile, str]]]:
    """Move ``orphans`` of ``table`` into the warehouse's quarantine, each once the deletion rule allows it: the
    table is loaded again and what its kept versions reference read again just before (``TABLE_UNREFERENCED``);
    a file referenced now, or of a table whose location another table shares, is kept. (held, kept with why)."""
    if not orphans:
        return [], []
    fresh = table.catalog.load_table(table.name())
    kept: list[tuple[OrphanFile, str]] = []
    shared = shared_location(fresh, {o: o for o in others})
    if shared is not None:
        return [], [(o, shared) for o in orphans]
    if not is_ours(fresh) or _normal(fresh.location()) != _normal(table.location()):
        why = f"table {'.'.join(fresh.name())} is no longer the plugin's, or moved; its files are kept"
        return [], [(o, why) for o in orphans]
    refs = referenced_files(fresh)
    versions = len(fresh.metadata.metadata_log) + 1
    store = FileIOHolding(fresh.io, warehouse)
    quarantine = Quarantine(store, store.root, retention_s)
    run = run or new_run_id()
    topic = fresh.properties.get(OWNER_PROPERTY)
    held: list[Held] = []
    for orphan in orphans:
        if _normal(orphan.path) in refs:
            kept.append((orphan, "a version of the table references it now"))
            continue
        evidence = (
            *orphan.evidence,
            Evidence(TABLE_UNREFERENCED, f"none of the {versions} kept versions up to {fresh.metadata_location}"),
        )
        try:
            authorize(ICEBERG_ORPHAN, orphan.path, evidence)
        except DeletionRefused as e:
            kept.append((orphan, str(e)))
            continue
        try:
            held += quarantine.hold(ICEBERG_ORPHAN, [(orphan.path, orphan.size)], evidence, run, topic)
        except RemoteStorageException as e:  # not the warehouse's to hold, or written while it was moved
            kept.append((orphan, str(e)))
    if held:  # what was moved leaves the ledger now rather than at the next pass
        ledger = UnreferencedLedger.read(fresh.io, fresh.location())
        base = _normal(fresh.location()).rstrip("/") + "/"
        moved = {_normal(h.original)[len(base) :] for h in held}
        if moved & set(ledger.first_seen):
            ledger.first_seen = {k: v for k, v in ledger.first_seen.items() if k not in moved}
            ledger.write(fresh.io)
    return held, kept


def remove_orphans(
    table: Table,
    settings: MaintenanceSettings,
    dry_run: bool = False,
    others: list[str] | None = None,
    warehouse: str | None = None,
    now: float | None = None,
    run: str | None = None,
) -> StepResult:
    """Move the table's orphan files (:func:`find_orphans`) into the warehouse's quarantine (:func:`hold_orphans`),
    where they stay ``settings.quarantine_s`` before :func:`purge_quarantine` removes them. A dry run records
    nothing and moves nothing."""
    result = StepResult("remove-orphans")
    if not is_ours(table):
        return result
    root = _warehouse_of(table, warehouse)
    if root is None:
        result.skipped = f"the table's location {table.location()} is outside the warehouse: no quarantine to use"
        return result
    orphans = find_orphans(table, settings.orphan_grace_s, others, root, now, record=not dry_run)
    if dry_run:
        result.count = len(orphans)
        result.bytes = sum(o.size for o in orphans)
        result.details = [o.path for o in orphans]
        return result
    held, kept = hold_orphans(table, orphans, root, settings.quarantine_s, run, others or ())
    result.count = len(held)
    result.bytes = sum(h.size for h in held)
    result.details = [h.original for h in held]
    if kept:
        result.skipped = f"{len(kept)} kept: {kept[0][1]}"
    return result


def purge_quarantine(
    io: FileIO, warehouse: str, retention_s: float, now: float | None = None, dry_run: bool = False
) -> StepResult:
    """Remove for good what the warehouse's quarantine has held longer than ``retention_s`` (``gc.quarantine.ms``
    as configured now)."""
    result = StepResult("purge-quarantine")
    store = FileIOHolding(io, warehouse)
    quarantine = Quarantine(store, store.root, retention_s)
    expired = quarantine.expired(time.time() if now is None else now)
    result.count = len(expired)
    result.bytes = sum(h.size for h in expired if h.present)
    result.details = [h.original for h in expired]
    if expired and not dry_run:
        quarantine.purge(expired)
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
    others: Mapping[str, str] | None = None,
    guard: Guard = nullcontext,
    attempts: int = 3,
    warehouse: str | None = None,
    proceed: Callable[[], bool] | None = None,
) -> list[StepResult]:
    """Every step once on ``table`` (ours only; another table gives nothing). Compaction comes before the
    manifest rewrite (its overwrite adds manifests) and the orphan removal after expiry. ``proceed``, asked
    before each step: False ends the run there (the steps not run are not in the results).

    ``others``: the other tables of the namespace, name to location (their files are never this table's
    orphans; one sharing the table's location stops the orphan step, see ``shared_location``).
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
        refused = shared_location(table, others or {})
        if refused is not None:
            log.warning("%s", refused)
            steps.append(("remove-orphans", lambda t: StepResult("remove-orphans", refused=refused), False))
        else:
            locations = list((others or {}).values())
            steps.append(
                ("remove-orphans", lambda t: remove_orphans(t, settings, dry_run, locations, warehouse), False)
            )
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


def all_orphans(
    catalog: Catalog, namespace: str, grace_s: float, warehouse: str, record: bool = False, now: float | None = None
) -> list[OrphanFile]:
    """The orphan files (:func:`find_orphans`) of every table of the plugin in ``namespace`` whose location is
    inside ``warehouse``. ``record``: write each table's ledger (only for a caller that then removes them)."""
    ours, locations = plugin_tables(catalog, namespace)
    out = []
    for table in ours:
        name = table.name()[-1]
        others = {f"{namespace}.{n}": loc for n, loc in locations.items() if n != name}
        refused = shared_location(table, others)
        if refused is not None:
            log.warning("%s", refused)
            continue
        out += find_orphans(table, grace_s, list(others.values()), warehouse, now, record)
    return out


def hold_if_orphans(
    catalog: Catalog,
    namespace: str,
    paths: list[str],
    warehouse: str,
    settings: MaintenanceSettings,
    run: str | None = None,
    now: float | None = None,
) -> tuple[list[Held], list[tuple[str, str]]]:
    """Move into the warehouse's quarantine those of ``paths`` that are orphans past their grace now (each table's
    ledger is updated, its references read again just before the move); (held, kept with why)."""
    wanted = {_normal(p): p for p in paths}
    ours, locations = plugin_tables(catalog, namespace)
    held: list[Held] = []
    kept: list[tuple[str, str]] = []
    run = run or new_run_id(now)
    for table in ours:
        name = table.name()[-1]
        others = {f"{namespace}.{n}": loc for n, loc in locations.items() if n != name}
        if shared_location(table, others) is not None:
            continue  # its files stay: not found as orphans now
        found = find_orphans(table, settings.orphan_grace_s, list(others.values()), warehouse, now, record=True)
        mine = [o for o in found if _normal(o.path) in wanted]
        got, refused = hold_orphans(table, mine, warehouse, settings.quarantine_s, run, list(others.values()))
        held += got
        kept += [(o.path, why) for o, why in refused]
        for o in mine:
            wanted.pop(_normal(o.path), None)
    why = "not an orphan past its grace now (referenced again, gone, or no longer a table's)"
    kept += [(p, why) for p in wanted.values()]
    return held, kept
