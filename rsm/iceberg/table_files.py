"""The live files of a table's snapshot, indexed by Kafka partition and offset bounds: what a fetch picks a
segment's data files from without reading the table's manifests again.

A scan planned per segment decodes every manifest entry of the table (the table is partitioned by day, so no
manifest is skipped for a partition and offset filter): its cost grows with the table. Here each manifest is
read once (manifests never change once written; what each lists is kept by path) and each snapshot is indexed
once, when a fetch first plans on it. A segment's files are then found by bisection in its partition's files,
sorted by lowest offset.

Which files are picked follows Iceberg's inclusive metrics rules for the fetch's filter (``kafka.partition`` equal,
``kafka.offset`` in range, ``kafka.segment_id`` equal or null): a file is left out only when its bounds say it
holds no row of the segment (a missing bound may hold anything; a file of no rows holds none). The position
delete files that apply to a picked file come from pyiceberg's own delete index, matched as its scan matches
them.

Memory: both caches are weighed in files (a live data or delete file each) and hold at most ``max_files`` each, in
all tables together; a table whose snapshot lists more live files than that is not indexed
(:class:`TooManyFiles`: its fetches plan a scan each, as before).
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    INITIAL_SEQUENCE_NUMBER,
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.delete_file_index import DeleteFileIndex
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record
from pyiceberg.utils.concurrent import ExecutorFactory

from rsm.errors import RemoteStorageException
from rsm.fetch.lru import TimedLru
from rsm.iceberg.file_bounds import Bounds, file_bounds, overlaps

__all__ = ["FieldIds", "LiveFile", "SnapshotFiles", "TableFiles", "TooManyFiles", "may_hold_segment"]

FieldIds = tuple[int, int, int | None]
"""Field ids of ``kafka.partition``, ``kafka.offset`` and ``kafka.segment_id`` (None: the table has none)."""

_BELOW = -(1 << 64)  # below every offset: a missing lower bound
_ABOVE = 1 << 64  # above every offset: a missing upper bound


@dataclass(frozen=True, slots=True)
class LiveFile:
    """A live data file: ``file`` without its column metrics (what a scan task reads it by), its data sequence
    number (which delete files apply), its partition and offset ``bounds``, and what its metrics say of
    ``kafka.segment_id``: (lower, upper, may hold null), None where the table has no such field."""

    file: DataFile
    sequence_number: int
    bounds: Bounds
    segment_ids: tuple[bytes | None, bytes | None, bool] | None

    @property
    def low(self) -> int:
        return _BELOW if self.bounds[2] is None else self.bounds[2]

    @property
    def high(self) -> int:
        return _ABOVE if self.bounds[3] is None else self.bounds[3]


def may_hold_segment(f: LiveFile, partition: int, first: int, last: int, segment_id: str | None) -> bool:
    """Whether ``f`` may hold rows of ``partition`` at offsets ``first..last`` whose segment id is ``segment_id``
    or null (``segment_id`` None: any), by Iceberg's inclusive metrics rules."""
    if not overlaps(f.bounds, partition, first, last):
        return False
    if segment_id is None or f.segment_ids is None:
        return True
    lower, upper, nulls = f.segment_ids
    if nulls:
        return True  # rows without a segment id are taken by their offsets
    wanted = segment_id.encode()  # UTF-8 orders as the strings' code points do, as Iceberg compares them
    return (lower is None or lower <= wanted) and (upper is None or wanted <= upper)


def _stripped(f: DataFile, partition: Record) -> DataFile:
    """``f`` without its column metrics: what reading it and matching delete files to it need."""
    out = DataFile.from_args(
        content=f.content,
        file_path=f.file_path,
        file_format=f.file_format,
        partition=partition,
        record_count=f.record_count,
        file_size_in_bytes=f.file_size_in_bytes,
        sort_order_id=f.sort_order_id,
    )
    out.spec_id = f.spec_id
    return out


def _live_file(f: DataFile, sequence_number: int, ids: FieldIds, partition: Record) -> LiveFile:
    partition_id, offset_id, segment_id = ids
    segment_ids = None
    if segment_id is not None:
        lower, upper, nulls = f.lower_bounds or {}, f.upper_bounds or {}, f.null_value_counts or {}
        low, high = lower.get(segment_id), upper.get(segment_id)
        segment_ids = (low, low if high == low else high, nulls.get(segment_id) != 0)
    return LiveFile(_stripped(f, partition), sequence_number, file_bounds(f, partition_id, offset_id), segment_ids)


@dataclass(frozen=True)
class _Listed:
    """What one manifest lists as live: data files with rows, or position delete files (their entries, as
    pyiceberg's delete index takes them); ``equality``: it lists equality delete files (which pyiceberg cannot
    apply)."""

    data: tuple[LiveFile, ...]
    deletes: tuple[ManifestEntry, ...]
    equality: bool


class _Run:
    """Files sorted by lowest offset, with the highest offset any of the first i reaches: the files overlapping an
    offset range are a slice found by two bisections, then checked one by one."""

    def __init__(self, files: list[LiveFile]) -> None:
        files.sort(key=lambda f: (f.low, f.file.file_path))
        self.files = files
        self.lows = [f.low for f in files]
        self.reach = list(itertools.accumulate((f.high for f in files), max))

    def overlapping(self, first: int, last: int) -> Iterator[LiveFile]:
        start = bisect_left(self.reach, first)  # before it, no file reaches ``first``
        stop = bisect_right(self.lows, last)  # from it on, every file starts after ``last``
        return (f for f in self.files[start:stop] if f.high >= first)


ManifestKey = tuple[str, int]
"""A manifest's path and sequence number (what it inherits to the entries it added)."""


class SnapshotFiles:
    """A snapshot's live data files by Kafka partition (files whose bounds span several partitions, or say
    nothing of them, apart), its position delete files, and what each of its manifests lists (what indexing the
    table's next snapshot takes over)."""

    def __init__(
        self, data: list[LiveFile], deletes: DeleteFileIndex | None, manifests: dict[ManifestKey, _Listed]
    ) -> None:
        self.count = len(data)
        self.manifests = manifests
        by_partition: dict[int, list[LiveFile]] = {}
        spanning: list[LiveFile] = []
        for f in data:
            low, high = f.bounds[0], f.bounds[1]
            if low is not None and low == high:
                by_partition.setdefault(low, []).append(f)
            else:
                spanning.append(f)
        self._runs = {p: _Run(files) for p, files in by_partition.items()}
        self._spanning = _Run(spanning)
        self._deletes = deletes

    @property
    def weight(self) -> int:
        """Files it holds (data and delete), and one for itself."""
        return sum(len(m.data) + len(m.deletes) for m in self.manifests.values()) + 1

    def tasks(self, partition: int, first: int, last: int, segment_id: str | None) -> list[FileScanTask]:
        """Scan tasks of the files that may hold the segment's rows (see :func:`may_hold_segment`), with the
        delete files that apply to each, in offset order."""
        run = self._runs.get(partition)
        near = itertools.chain(run.overlapping(first, last) if run else (), self._spanning.overlapping(first, last))
        found = sorted(
            (f for f in near if may_hold_segment(f, partition, first, last, segment_id)),
            key=lambda f: (f.low, f.file.file_path),
        )
        return [FileScanTask(f.file, delete_files=self._delete_files(f)) for f in found]

    def _delete_files(self, f: LiveFile) -> set[DataFile] | None:
        if self._deletes is None:
            return None
        return self._deletes.for_data_file(f.sequence_number, f.file, partition_key=f.file.partition)


class TooManyFiles(Exception):
    """The snapshot lists more live files than the index may hold."""


SnapshotKey = tuple[str, int, FieldIds]
"""A table's uuid, a snapshot id, and the field ids its bounds were read by."""


class TableFiles:
    """Indexes of tables' snapshots, at most ``max_files`` files in all (least recently used out first); the
    index of a table's new snapshot takes over what its last one read of the manifests both list, so a
    manifest is read once while its table stays indexed. Thread-safe: concurrent fetches on a new snapshot index
    it once."""

    def __init__(self, max_files: int) -> None:
        self.max_files = max_files
        self._snapshots: TimedLru[SnapshotKey, SnapshotFiles] = TimedLru(
            "iceberg-fetch-index", max_files, None, weigher=lambda s: s.weight
        )
        self._lock = threading.Lock()
        self._latest: dict[str, SnapshotKey] = {}  # by table uuid: its last snapshot indexed
        #: Manifests read, in all (what a test or a benchmark counts).
        self.manifests_read = 0

    def of(self, table: Table, snapshot: Snapshot, ids: FieldIds) -> SnapshotFiles:
        """The index of ``snapshot`` of ``table``; :class:`TooManyFiles` when it lists more live files than the
        index may hold."""
        key = (str(table.metadata.table_uuid), snapshot.snapshot_id, ids)
        what = f"the live files of snapshot {snapshot.snapshot_id} of {'.'.join(table.name())}"
        return self._snapshots.get_or_load(key, lambda: self._index(table, snapshot, key), None, what)

    def _index(self, table: Table, snapshot: Snapshot, key: SnapshotKey) -> SnapshotFiles:
        """The snapshot indexed, with what the table's last index read of the manifests both list."""
        manifests = snapshot.manifests(table.io)
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        listed = sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in data)
        if listed > self.max_files:
            raise TooManyFiles(f"{listed} live data files")
        with self._lock:
            last = self._latest.get(key[0])
        earlier = self._snapshots.get_with(last, None, False, False) if last is not None and last != key else None
        known = earlier.manifests if earlier is not None and last is not None and last[2] == key[2] else {}
        # As pyiceberg's scan: a delete manifest older than every data file applies to none of them.
        oldest = min((m.min_sequence_number or INITIAL_SEQUENCE_NUMBER for m in data), default=INITIAL_SEQUENCE_NUMBER)
        files: list[LiveFile] = []
        deletes: DeleteFileIndex | None = None
        wanted = {
            (m.manifest_path, m.sequence_number or INITIAL_SEQUENCE_NUMBER): m
            for m in manifests
            if m.content == ManifestContent.DATA or (m.sequence_number or INITIAL_SEQUENCE_NUMBER) >= oldest
        }
        new = [(mkey, m) for mkey, m in wanted.items() if mkey not in known]
        # Read at once, as pyiceberg's scan reads them (a store answers each read after a round trip).
        listed_new = ExecutorFactory.get_or_create().map(lambda km: self._read(table.io, km[1], key[2]), new)
        read = {mkey: known[mkey] for mkey in wanted if mkey in known}
        read.update(zip((mkey for mkey, _ in new), listed_new, strict=True))
        for mkey, m in wanted.items():
            found = read[mkey]
            if found.equality:
                raise RemoteStorageException(
                    f"table {'.'.join(table.name())} has equality delete files (manifest {m.manifest_path}), which "
                    "the plugin cannot apply: rewrite them as position deletes (Spark's rewrite_position_delete_files "
                    "after a rewrite_data_files), or delete rows in copy-on-write mode"
                )
            files.extend(found.data)
            for entry in found.deletes:
                if deletes is None:
                    deletes = DeleteFileIndex()
                deletes.add_delete_file(entry, partition_key=entry.data_file.partition)
        if deletes is not None:
            deletes.referenced_delete_files()  # sorted now, once: concurrent lookups would each sort it, racing
        index = SnapshotFiles(files, deletes, read)
        if index.weight > self.max_files:
            raise TooManyFiles(f"{index.weight - 1} live data and delete files")
        with self._lock:
            self._latest[key[0]] = key
        if last is not None and last != key:
            self._snapshots.invalidate(last)  # superseded: fetches plan on the newest state loaded
        return index

    def _read(self, io: FileIO, manifest: ManifestFile, ids: FieldIds) -> _Listed:
        with self._lock:
            self.manifests_read += 1
        data: list[LiveFile] = []
        deletes: list[ManifestEntry] = []
        equality = False
        partitions: dict[Record, Record] = {}  # one object for the files of one table partition
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            f = entry.data_file
            seq = entry.sequence_number or INITIAL_SEQUENCE_NUMBER
            if f.content == DataFileContent.DATA:
                if f.record_count != 0:  # a file of no rows holds none of a segment's
                    data.append(_live_file(f, seq, ids, partitions.setdefault(f.partition, f.partition)))
            elif f.content == DataFileContent.POSITION_DELETES:
                deletes.append(entry)
            else:
                equality = True
        return _Listed(tuple(data), tuple(deletes), equality)

    def clear(self) -> None:
        self._snapshots.clear()
