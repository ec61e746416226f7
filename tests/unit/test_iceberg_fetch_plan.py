"""A fetch plans a segment's data files from an index of the table's snapshot (rsm.iceberg.table_files), not a
scan of every manifest: it picks what pyiceberg's scan picks; a catch-up reads each manifest once; a new snapshot
reads only its new manifests. Real pyiceberg tables on a SQLite catalog and a local warehouse."""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_tables import kafka_rows, topic_table
from iceberg_testing import iceberg_config
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table

from rsm.iceberg.catalog import CatalogHandle, catalog_properties
from rsm.iceberg.config import IcebergConfig
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.fetch_plan import FetchPlanner
from rsm.iceberg.section import IcebergSection
from rsm.iceberg.selection import RowSelection

TOPIC_ID = "T" * 22
ROWS = 20  # offsets a segment holds


def _handle(tmp: Path) -> CatalogHandle:
    """The plugin's catalog over a SQLite file and a local warehouse in ``tmp``, namespace ``kafka`` made."""
    (tmp / "warehouse").mkdir(parents=True, exist_ok=True)
    cfg = IcebergConfig.from_map(iceberg_config(tmp))
    handle = CatalogHandle(cfg, catalog_properties(cfg, "filesystem", {"root": str(tmp / "store")}, ""))
    handle.catalog.create_namespace_if_not_exists("kafka")
    return handle


def _commit(table: Table, rows: pa.Table, bounds: bool = True) -> int:
    """``rows`` as data files of one commit (one manifest); ``bounds=False``: without the ``kafka`` bounds (as
    another engine may write them). The new snapshot's id."""
    with table.transaction() as txn, txn.update_snapshot().fast_append() as append:
        for f in write_data_files(table, rows, uuid.uuid4(), itertools.count()):
            if not bounds:
                f.lower_bounds.clear()
                f.upper_bounds.clear()
            append.append_data_file(f)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


class _Segment:
    def __init__(self, partition: int, first: int, last: int, segment_id: str, snapshot_id: int) -> None:
        self.partition, self.first, self.last, self.segment_id = partition, first, last, segment_id
        self.section = IcebergSection("kafka.orders", snapshot_id, partition, first, last, last - first + 1, 1, 99, ())


def _tier(table: Table, partitions: int, per_partition: int) -> list[_Segment]:
    """Segments of ``partitions`` partitions, ``per_partition`` each, one commit each, partitions interleaved as
    a broker copies them."""
    out = []
    for k in range(per_partition):
        for p in range(partitions):
            sid = uuid.uuid4().hex[:22]
            first, last = k * ROWS, (k + 1) * ROWS - 1
            out.append(
                _Segment(p, first, last, sid, _commit(table, kafka_rows(p, range(first, last + 1), TOPIC_ID, sid)))
            )
    return out


@pytest.fixture
def manifest_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The path of every manifest whose entries are read (by pyiceberg's scan or by the index)."""
    reads: list[str] = []
    real = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, *args: Any, **kwargs: Any) -> Any:
        reads.append(self.manifest_path)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    yield reads


def _scan_files(table: Table, s: _Segment) -> set[str]:
    """The files pyiceberg's scan plans for the segment (what a fetch planned per segment before the index)."""
    selection = RowSelection(s.partition, s.first, s.last, segment_id=s.segment_id)
    return {t.file.file_path for t in table.scan(row_filter=selection.expression(table.schema())).plan_files()}


def test_a_catch_up_reads_each_manifest_once_and_a_new_commit_only_its_own(
    tmp_path: Path, manifest_reads: list[str]
) -> None:
    """A consumer catching up through every segment of a table of 18 commits, each segment fetched 4 times:
    18 manifest reads in all, not 18 per segment. A commit later, the fetches read the one new manifest."""
    handle = _handle(tmp_path)
    table = topic_table(handle.catalog)
    segments = _tier(table, partitions=3, per_partition=6)
    expected = [_scan_files(table, s) for s in segments]
    assert all(len(files) == 1 for files in expected)
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    assert len(manifests) == len(segments)  # one per commit
    planner = FetchPlanner(handle, refresh_s=3600)
    manifest_reads.clear()
    for s, files in zip(segments, expected, strict=True):
        for _ in range(4):
            assert set(planner.rows(s.section, s.segment_id, "orders", "catch-up").files) == files
    assert sorted(manifest_reads) == sorted(m.manifest_path for m in manifests)

    first, last = 6 * ROWS, 7 * ROWS - 1
    snapshot_id = _commit(table, kafka_rows(0, range(first, last + 1), TOPIC_ID, "n" * 22))
    new = _Segment(0, first, last, "n" * 22, snapshot_id)
    (added,) = set(table.current_snapshot().manifests(table.io)) - set(manifests)  # type: ignore[union-attr]
    manifest_reads.clear()
    assert planner.rows(new.section, new.segment_id, "orders", "new").files  # reloads: its commit is newer
    for s, files in zip(segments, expected, strict=True):
        assert set(planner.rows(s.section, s.segment_id, "orders", "again").files) == files  # the new snapshot
    assert manifest_reads == [added.manifest_path]


def test_the_files_picked_are_those_pyiceberg_scans_plan(tmp_path: Path) -> None:
    """Files of one partition and of several (a compaction's), without bounds, of a later segment over the same
    offsets, of rows without segment ids: for every segment and for ranges across them, the index picks exactly
    the files pyiceberg's scan plans."""
    handle = _handle(tmp_path)
    table = topic_table(handle.catalog)
    segments = _tier(table, partitions=2, per_partition=3)
    both = pa.concat_tables([kafka_rows(p, range(3 * ROWS, 4 * ROWS), TOPIC_ID, "c" * 22) for p in (0, 1)])
    _commit(table, both)  # one file of partitions 0 and 1
    _commit(table, kafka_rows(2, range(0, ROWS), TOPIC_ID, "u" * 22), bounds=False)
    _commit(table, kafka_rows(0, range(ROWS // 2, ROWS + 5), TOPIC_ID, "l" * 22))  # a new leader's, overlapping
    _commit(table, kafka_rows(1, range(4 * ROWS, 5 * ROWS), None, None))  # rows from before segment ids
    snapshot_id = table.refresh().current_snapshot().snapshot_id  # type: ignore[union-attr]
    queries = [*segments]
    for p, (first, last), sid in itertools.product(
        (0, 1, 2, 3), ((0, 9), (15, 25), (30, 75), (79, 80), (100, 120)), ("c" * 22, "l" * 22, "x" * 22)
    ):
        queries.append(_Segment(p, first, last, sid, snapshot_id))
    picked = 0
    for s in queries:
        planner = FetchPlanner(handle, refresh_s=3600)  # plans are kept by segment id: one planner a query
        got = set(planner.rows(s.section, s.segment_id, "orders", "query").files)
        assert got == _scan_files(table, s), (s.partition, s.first, s.last, s.segment_id)
        picked += len(got)
    assert picked > len(queries)  # some pick several files, the one without bounds among them


def test_a_table_with_more_files_than_the_index_holds_is_planned_by_scans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handle = _handle(tmp_path)
    table = topic_table(handle.catalog)
    segments = _tier(table, partitions=2, per_partition=2)
    planner = FetchPlanner(handle, refresh_s=3600, indexed_files=3)
    with caplog.at_level(logging.WARNING, logger="rsm.iceberg.fetch_plan"):
        for s in segments:
            assert set(planner.rows(s.section, s.segment_id, "orders", "scan").files) == _scan_files(table, s)
    warnings = [r.getMessage() for r in caplog.records if "iceberg.mode.fetch.index.files" in r.getMessage()]
    assert len(warnings) == 1 and "4 live data files" in warnings[0] and "kafka.orders" in warnings[0]


def test_concurrent_fetches_on_a_new_snapshot_index_it_once(tmp_path: Path, manifest_reads: list[str]) -> None:
    handle = _handle(tmp_path)
    table = topic_table(handle.catalog)
    segments = _tier(table, partitions=4, per_partition=2)
    planner = FetchPlanner(handle, refresh_s=3600)
    manifest_reads.clear()
    start = threading.Barrier(len(segments))
    errors: list[BaseException] = []

    def fetch(s: _Segment) -> None:
        try:
            start.wait()
            assert len(planner.rows(s.section, s.segment_id, "orders", "concurrent").files) == 1
        except BaseException as e:  # reported below: a thread's assertion is otherwise lost
            errors.append(e)

    threads = [threading.Thread(target=fetch, args=(s,)) for s in segments]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(manifest_reads) == sorted(set(manifest_reads)) and len(manifest_reads) == len(segments)
