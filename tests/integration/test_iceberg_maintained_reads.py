"""Kafka reads of Iceberg-mode segments after table maintenance: a fetch finds a segment's rows through the table's
current snapshot, so a rewrite that keeps the rows, snapshot expiry and orphan-file removal leave every fetch
byte-identical; rows deleted by SQL leave the gap a compacted topic shows; a catalog that does not answer is
survived while the table state or the copy's own files allow it. Real SQLite catalog, real filesystem warehouse;
Spark's own procedures in the last test."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from iceberg_testing import iceberg_config, load_table, rewrite_sorted, spark_maintain, spark_sql_statements

from rsm import RemoteStorageManager, RetriableRemoteStorageException
from rsm.formats.iceberg import iceberg_format
from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintainer import MaintenanceStats
from rsm.iceberg.maintenance.compaction import compact, plan_compaction
from rsm.kafka.large_segment import write_large_segment
from rsm.kafka.log_scan import batch_view, iter_batches
from rsm.kafka.records import decode_records
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_segment
from rsm.metadata import RemoteLogSegmentMetadata, TopicIdPartition, random_kafka_uuid

TOPIC_ID = random_kafka_uuid()


def _tip(partition: int) -> TopicIdPartition:
    return TopicIdPartition(TOPIC_ID, "orders", partition)


def _segments(tmp: Path) -> list[tuple[TopicIdPartition, SegmentFiles]]:
    """Three consecutive segments of partition 0 (codecs differ) and one of partition 1, same day."""
    out = []
    base = 0
    for i, codec in enumerate(("none", "zstd", "lz4")):
        seg = write_segment(
            tmp / f"p0-{i}", base_offset=base, num_batches=25, codec=codec, seed=i, transactional=i == 1
        )
        out.append((_tip(0), seg))
        base = seg.end_offset + 1
    out.append((_tip(1), write_segment(tmp / "p1", num_batches=25, codec="gzip", seed=7)))
    return out


def _manager(config: dict[str, str]) -> RemoteStorageManager:
    m = RemoteStorageManager()
    m.configure(dict(config))
    return m


def _tier(m: RemoteStorageManager, segments: list[tuple[TopicIdPartition, SegmentFiles]]) -> list[Any]:
    metas = []
    for tip, seg in segments:
        meta = seg.to_metadata(tip)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        metas.append(meta)
    return metas


def _assert_reads(
    m: RemoteStorageManager, metas: list[RemoteLogSegmentMetadata], segments: list[Any], every: int = 1
) -> None:
    """Every segment, fetched from every (``every``-th) batch position, gives the batches of the original."""
    for meta, (_tip, seg) in zip(metas, segments, strict=True):
        original = seg.log.read_bytes()
        positions = [h.position for h, _ in iter_batches(original)]
        for position in [*positions[::every], positions[-1]]:
            got = m.fetch_log_segment(meta, position).read()
            assert batch_view(got) == batch_view(original[position:]), (meta.describe(), position)
            if seg.codec == "none":
                assert got == original[position:]


def test_a_compaction_with_expiry_and_orphan_removal_keeps_every_fetch_byte_identical(tmp_path: Path) -> None:
    config = iceberg_config(tmp_path)
    segments = _segments(tmp_path)
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        _assert_reads(m, metas, segments, every=3)  # loads the table state the compaction then makes stale
        rewrite_sorted(config)
        # The cached table state names deleted files: the first fetch reloads it at once.
        _assert_reads(m, metas, segments)
        # A fresh plugin plans on the compacted table from the start.
        with _manager(config) as fresh:
            _assert_reads(fresh, metas, segments, every=2)
    finally:
        m.close()


def test_the_plugins_compaction_writes_large_row_groups_and_fetches_read_them_in_slices(tmp_path: Path) -> None:
    """Two segments of about 24,000 records each, compacted into one file of one row group with dictionary-encoded
    keys; fetches from positions across both segments read it a slice (32,768 rows) at a time."""
    config = iceberg_config(tmp_path)
    segments = []
    base = 0
    for i in range(2):
        seg = write_large_segment(tmp_path / f"large{i}", 10 << 20, seed=i, base_offset=base, codec="zstd")
        segments.append((_tip(0), seg))
        base = seg.end_offset + 1
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        table = load_table(config)
        settings = MaintenanceSettings(min_input_files=2)
        assert compact(table, settings).count == 2
        table = load_table(config)
        (task,) = table.scan().plan_files()
        meta = pq.ParquetFile(task.file.file_path.removeprefix("file://")).metadata
        rows = sum(seg.end_offset - seg.base_offset + 1 for _tip_, seg in segments)
        assert meta.num_row_groups == 1 and meta.row_group(0).num_rows == rows > 32768
        key = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == "key_raw")
        assert meta.row_group(0).column(key).has_dictionary_page
        assert table.properties["write.parquet.row-group-limit"] == "32768"  # the table itself is unchanged
        with _manager(config) as fresh:
            for meta_, (_, seg) in zip(metas, segments, strict=True):
                original = seg.log.read_bytes()
                positions = [h.position for h, _ in iter_batches(original)]
                for position in [*positions[:: len(positions) // 4], positions[-1]]:
                    with fresh.fetch_log_segment(meta_, position) as stream:
                        got = stream.read()
                    assert batch_view(got) == batch_view(original[position:]), (meta_.describe(), position)
    finally:
        m.close()


def _offsets(data: bytes) -> list[list[int]]:
    return [[r.offset for r in decode_records(body)] for _h, body in iter_batches(data, verify=True)]


def _assert_gap(got: bytes, original: bytes, lo: int, hi: int) -> None:
    """``got`` holds the batches of ``original`` without the records of offsets ``lo..hi``: base offset,
    lastOffsetDelta and attributes kept, the record count that of the records left, every CRC right; a batch
    with no record left is not there."""
    want = []
    for h, body in iter_batches(original):
        kept = [r for r in decode_records(body) if not lo <= r.offset <= hi]
        if kept:
            want.append((h, kept))
    got_batches = list(iter_batches(got, verify=True))  # every CRC checks
    assert [[r.offset for r in decode_records(b)] for _h, b in got_batches] == [[r.offset for r in k] for _h, k in want]
    for (gh, gb), (wh, kept) in zip(got_batches, want, strict=True):
        assert (gh.base_offset, gh.last_offset_delta, gh.attributes, gh.records_count) == (
            wh.base_offset,
            wh.last_offset_delta,
            wh.attributes,
            len(kept),
        )
        assert [(r.key, r.value) for r in decode_records(gb)] == [(r.key, r.value) for r in kept]


def test_rows_deleted_by_sql_leave_the_gap_a_compacted_topic_shows(tmp_path: Path) -> None:
    """A batch that lost some records comes back with the rest (base offset, lastOffsetDelta and codec kept, CRC
    of the new contents); a batch that lost all is skipped; the other batches are untouched."""
    config = iceberg_config(tmp_path, **{"iceberg.mode.fetch.table.refresh.ms": "0"})
    segments = _segments(tmp_path)[:2]  # uncompressed, then zstd
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        originals = [seg.log.read_bytes() for _tip, seg in segments]
        headers = [[h for h, _ in iter_batches(o)] for o in originals]
        # A range from the middle of one batch of each segment to the middle of a later one.
        ranges, picks = [], []
        for hs in headers:
            multi = [i for i, h in enumerate(hs) if i >= 3 and h.last_offset > h.base_offset]
            a = multi[0]
            b = next(i for i in multi if i >= a + 3)
            picks.append((a, b))
            ranges.append((hs[a].base_offset + 1, hs[b].base_offset))
        # What a copy-on-write DELETE does (pyiceberg's own delete cannot filter on kafka.offset, see
        # docs/iceberg.md): every data file rewritten without the rows.
        table = load_table(config)
        rows = table.scan().to_arrow()
        offsets = pc.struct_field(rows.column("kafka"), "offset")
        hit = pc.and_(pc.greater_equal(offsets, ranges[0][0]), pc.less_equal(offsets, ranges[0][1]))
        for lo, hi in ranges[1:]:
            hit = pc.or_(hit, pc.and_(pc.greater_equal(offsets, lo), pc.less_equal(offsets, hi)))
        table.overwrite(rows.filter(pc.invert(hit)))
        for meta, original, hs, (lo, hi), (a, b) in zip(metas, originals, headers, ranges, picks, strict=True):
            for position in (0, hs[a + 1].position, hs[b + 1].position):
                _assert_gap(m.fetch_log_segment(meta, position).read(), original[position:], lo, hi)
            # a batch wholly deleted is not there at all
            got = m.fetch_log_segment(meta, 0).read()
            assert hs[a + 1].base_offset not in {h.base_offset for h, _ in iter_batches(got)}
    finally:
        m.close()


def _break_catalog(m: RemoteStorageManager | None, config: dict[str, str]) -> bytes:
    """The catalog's SQLite file replaced by bytes that are no database: every query fails."""
    path = Path(config["iceberg.mode.catalog.sqlite.path"])
    saved = path.read_bytes()
    path.write_bytes(b"not a database" * 512)
    if m is not None:
        iceberg_format(m).mode().handle.catalog.engine.dispose()  # type: ignore[attr-defined]
    return saved


def test_a_catalog_that_does_not_answer(tmp_path: Path) -> None:
    """The last loaded table state serves; without one, the copy's own files while they are there; else a
    retriable exception naming the catalog and the segment."""
    config = iceberg_config(tmp_path, **{"iceberg.mode.fetch.table.refresh.ms": "0"})
    segments = _segments(tmp_path)[:2]
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        _assert_reads(m, metas, segments, every=5)
        saved = _break_catalog(m, config)
        _assert_reads(m, metas, segments, every=5)  # the table state loaded before
        with _manager(config) as fresh:
            _assert_reads(fresh, metas, segments, every=5)  # the files the copy wrote
        Path(config["iceberg.mode.catalog.sqlite.path"]).write_bytes(saved)
        rewrite_sorted(config)
        _break_catalog(None, config)
        with _manager(config) as fresh:
            with pytest.raises(RetriableRemoteStorageException) as e:
                fresh.fetch_log_segment(metas[0], 0)
            message = str(e.value)
            assert metas[0].describe() in message and "sql catalog" in message and "Kafka retries" in message
    finally:
        m.close()


@pytest.mark.timeout(1200)  # a JVM start and Iceberg's runtime; minutes on a loaded machine
def test_spark_rewrite_expire_and_orphan_removal_keep_every_fetch_byte_identical(tmp_path: Path) -> None:
    config = iceberg_config(tmp_path)
    segments = _segments(tmp_path)
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        rows = load_table(config).scan().to_arrow().num_rows
        files = {t.file.file_path for t in load_table(config).scan().plan_files()}
        _assert_reads(m, metas, segments, every=4)
        time.sleep(1.0)  # the files the copy wrote are older than the procedures' cut-off
        out = spark_maintain(config["iceberg.mode.catalog.sqlite.path"], config["iceberg.mode.warehouse"])
        assert out["rows"] == rows
        assert out["rewrite"]["rewritten_data_files_count"] == len(files), out
        # expire_snapshots deletes the files only the expired snapshots named; orphan removal finds the rest
        assert out["expire"]["deleted_data_files_count"] + out["orphans"] >= len(files), out
        assert not any(os.path.exists(urlparse(f).path) for f in files)
        _assert_reads(m, metas, segments)
        with _manager(config) as fresh:
            _assert_reads(fresh, metas, segments, every=2)
    finally:
        m.close()


@pytest.mark.timeout(1200)
def test_a_merge_on_read_delete_by_spark_leaves_the_same_gap(tmp_path: Path) -> None:
    """Spark's DELETE on a merge-on-read table writes delete files beside the data files: a fetch applies them
    (reading such a file through pyiceberg) and shows the gap."""
    config = iceberg_config(tmp_path, **{"iceberg.mode.fetch.table.refresh.ms": "0"})
    segments = _segments(tmp_path)[:1]
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        original = segments[0][1].log.read_bytes()
        hs = [h for h, _ in iter_batches(original)]
        lo, hi = hs[4].base_offset + 1, hs[7].base_offset
        sql = [
            "ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')",
            f"DELETE FROM {{table}} WHERE kafka.partition = 0 AND kafka.offset BETWEEN {lo} AND {hi}",
        ]
        out = spark_sql_statements(config["iceberg.mode.catalog.sqlite.path"], config["iceberg.mode.warehouse"], sql)
        assert out["rows"] == sum(1 for h in hs for _ in range(h.records_count)) - (hi - lo + 1), out
        tasks = list(load_table(config).scan().plan_files())
        assert any(t.delete_files for t in tasks), "Spark wrote no delete file"
        for position in (0, hs[5].position):
            _assert_gap(m.fetch_log_segment(metas[0], position).read(), original[position:], lo, hi)
    finally:
        m.close()


@pytest.mark.timeout(1200)
def test_a_merge_on_read_delete_committed_during_a_compaction_stays_deleted(tmp_path: Path) -> None:
    """Spark deletes rows (merge-on-read: delete files beside the data files) after the plugin's compaction
    planned a bin of those files and before it commits: the bin is given up and counted, and the rows stay deleted
    for Spark, pyiceberg and Kafka fetches. A later compaction leaves the files with delete files out."""
    config = iceberg_config(tmp_path, **{"iceberg.mode.fetch.table.refresh.ms": "0"})
    segments = _segments(tmp_path)[:3]  # three consecutive segments of partition 0
    settings = MaintenanceSettings(min_input_files=2)
    m = _manager(config)
    try:
        metas = _tier(m, segments)
        original = segments[0][1].log.read_bytes()
        hs = [h for h, _ in iter_batches(original)]
        lo, hi = hs[4].base_offset + 1, hs[7].base_offset
        total = sum(h.records_count for _tip_, seg in segments for h, _ in iter_batches(seg.log.read_bytes()))
        table = load_table(config)
        (planned,) = plan_compaction(table, settings)
        assert metas[0].start_offset >= planned.first and planned.last >= hi  # the bin holds the deleted rows
        sqlite, warehouse = config["iceberg.mode.catalog.sqlite.path"], config["iceberg.mode.warehouse"]
        deleted: list[dict[str, Any]] = []

        @contextmanager
        def delete_meanwhile() -> Iterator[None]:
            if not deleted:  # between the plan and the commit
                sql = [
                    "ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')",
                    f"DELETE FROM {{table}} WHERE kafka.partition = 0 AND kafka.offset BETWEEN {lo} AND {hi}",
                ]
                deleted.append(spark_sql_statements(sqlite, warehouse, sql))
                assert any(t.delete_files for t in load_table(config).scan().plan_files()), "no delete file"
            yield

        result = compact(table, settings, guard=delete_meanwhile)
        assert deleted and deleted[0]["rows"] == total - (hi - lo + 1), deleted

        def assert_deleted() -> None:
            offsets = pc.struct_field(load_table(config).scan().to_arrow().column("kafka"), "offset").to_pylist()
            assert len(offsets) == total - (hi - lo + 1) and not any(lo <= o <= hi for o in offsets)
            _assert_gap(m.fetch_log_segment(metas[0], 0).read(), original, lo, hi)

        assert_deleted()
        assert (result.count, result.given_up) == (0, 1), result
        stats = MaintenanceStats()
        stats.add([result])
        assert stats.stats()["compaction-bins-given-up-total"] == 1
        # Planned again, a bin leaves out the file that has delete files; the rows stay deleted.
        table = load_table(config)
        with_deletes = {t.file.file_path for t in table.scan().plan_files() if t.delete_files}
        assert with_deletes and not any(
            f.task.file.file_path in with_deletes for b in plan_compaction(table, settings) for f in b.files
        )
        compact(table, settings)
        assert_deleted()
        assert spark_sql_statements(sqlite, warehouse, [])["rows"] == total - (hi - lo + 1)
    finally:
        m.close()
