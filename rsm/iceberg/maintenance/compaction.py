"""Compaction: small data files of one Kafka partition and day, contiguous in offsets, rewritten as one file."""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ValidationException,
)
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import FileScanTask, Table

from rsm.errors import RemoteStorageException
from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.file_bounds import FieldIds, file_bounds, overlaps
from rsm.iceberg.maintenance.step import COMPACTION_SNAPSHOT_PROPERTY, Guard, StepResult
from rsm.iceberg.schema import has_field, partition_spec
from rsm.iceberg.tables import compacted_file_properties
from rsm.iceberg.transaction import transaction

log = logging.getLogger(__name__)


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


def _bounds(f: DataFile, ids: FieldIds) -> tuple[int, int, int] | None:
    """(partition, first offset, last offset) when the file's bounds say it holds one partition's rows."""
    nulls = f.null_value_counts or {}
    p_lo, p_hi, first, last = file_bounds(f, *ids)
    if any(nulls.get(i) != 0 for i in ids) or p_lo is None or p_lo != p_hi or first is None or last is None:
        return None
    return p_lo, first, last


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


def _delete(io: FileIO, paths: list[str]) -> None:
    """Delete the new files of bins given up; one already gone is no error."""
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
