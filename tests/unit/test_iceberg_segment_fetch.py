"""A fetch rebuilds a segment's batches from rows however the table's files hold them: split over files and row
groups, sorted or shuffled, mixed with rows of other partitions and offsets (what a compaction leaves), from
any batch position. Parquet files on the local disk, read through pyiceberg's FileIO."""

from __future__ import annotations

import os
import random
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from rsm.iceberg.fetch_plan import SegmentRows
from rsm.iceberg.row_slices import SLICE_ROWS
from rsm.iceberg.rows import RowOrigin, SegmentSummary, segment_row_tables
from rsm.iceberg.segment_fetch import RowGroupCache, _with_kafka_fields, iter_segment_rows
from rsm.iceberg.segment_stream import iter_segment_batches
from rsm.kafka.log_scan import batch_view, iter_batches
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_segment


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> tuple[SegmentFiles, pa.Table, pa.Table]:
    """A segment of partition 0 (offsets 1000...), its rows, and the rows of neighbours: the segments before
    and after it in partition 0, a segment of partition 1 over the same offsets, and a later segment of
    partition 0 over some of its offsets (another segment id: a new leader's)."""
    d = tmp_path_factory.mktemp("seg")
    seg = write_segment(d / "s", base_offset=1000, num_batches=30, codec="zstd", seed=3, transactional=True)

    def rows(s: SegmentFiles, partition: int, segment_id: str = "other") -> pa.Table:
        origin = RowOrigin("topic", segment_id)
        tables = segment_row_tables(s.log, partition, s.aborted_txns, 1 << 30, SegmentSummary(), origin=origin)
        return pa.concat_tables(tables)

    before = write_segment(d / "b", base_offset=0, num_batches=8, seed=4)
    after = write_segment(d / "a", base_offset=seg.end_offset + 1, num_batches=8, seed=5)
    other = write_segment(d / "o", base_offset=1000, num_batches=30, seed=6)
    overlap = write_segment(d / "n", base_offset=1100, num_batches=10, seed=7)
    others = pa.concat_tables([rows(before, 0), rows(after, 0), rows(other, 1), rows(overlap, 0, "new")])
    return seg, rows(seg, 0, SEGMENT), others


SEGMENT = "AAAAAAAAAAAAAAAAAAAAAA"


def _rows_for(seg: SegmentFiles, files: list[str]) -> SegmentRows:
    return SegmentRows(PyArrowFileIO(), tuple(files), 0, seg.base_offset, seg.end_offset, SEGMENT, 1)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.integers(1, 4),
    group_rows=st.sampled_from([60, 400, 100_000]),
    layout=st.sampled_from(["segment", "compacted", "shuffled"]),
    start_batch=st.integers(0, 29),
    seed=st.integers(0, 1 << 16),
    slice_rows=st.sampled_from([SLICE_ROWS, 37, 150]),
)
def test_any_file_layout_gives_back_the_same_batches(
    segments: tuple[SegmentFiles, pa.Table, pa.Table],
    tmp_path: Path,
    files: int,
    group_rows: int,
    layout: str,
    start_batch: int,
    seed: int,
    slice_rows: int,
) -> None:
    """Row groups larger than ``slice_rows`` are read a slice at a time where their rows are in order."""
    seg, own, others = segments
    rng = random.Random(seed)
    rows = own if layout == "segment" else pa.concat_tables([own, others])
    kafka = rows.column("kafka")
    if layout == "compacted":  # sorted by partition and offset, as a sorting rewrite leaves it
        order = pc.sort_indices(
            pa.table({"p": pc.struct_field(kafka, "partition"), "o": pc.struct_field(kafka, "offset")}),
            sort_keys=[("p", "ascending"), ("o", "ascending")],
        )
        rows = rows.take(order)
    elif layout == "shuffled":
        index = list(range(rows.num_rows))
        rng.shuffle(index)
        rows = rows.take(pa.array(index))
    cuts = sorted(rng.sample(range(1, rows.num_rows), files - 1))
    paths = []
    d = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis runs examples again while shrinking
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, rows.num_rows], strict=True)):
        path = d / f"f{i}.parquet"
        pq.write_table(rows.slice(a, b - a), path, row_group_size=group_rows)
        paths.append(str(path))
    rng.shuffle(paths)
    original = seg.log.read_bytes()
    positions = [h.position for h, _ in iter_batches(original)]
    start = positions[start_batch]
    cache = RowGroupCache(8 << 20, max_slice_rows=slice_rows)
    for _ in range(2):  # cold, then from the cache
        got = b"".join(iter_segment_batches(_rows_for(seg, paths), start, None, "test", cache))
        assert batch_view(got) == batch_view(original[start:])
    # bounded: the batches that start in [start, end]
    end = positions[min(start_batch + 3, len(positions) - 1)]
    got = b"".join(iter_segment_batches(_rows_for(seg, paths), start, end, "test", cache))
    assert batch_view(got) == batch_view(original[start:])[: len(batch_view(got))]
    assert [f[0] for f, _ in batch_view(got)] == [
        h.base_offset for h, _ in iter_batches(original) if start <= h.position <= end
    ]


FIELDS = ["timestamp_ms", "is_control", "batch_producer_id"]


def _write_layout(rows: pa.Table, directory: Path, files: int, group_rows: int, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, rows.num_rows), files - 1))
    paths = []
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, rows.num_rows], strict=True)):
        path = directory / f"f{i}.parquet"
        pq.write_table(rows.slice(a, b - a), path, row_group_size=group_rows)
        paths.append(str(path))
    return paths


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.integers(1, 3),
    group_rows=st.sampled_from([60, 400, 100_000]),
    compacted=st.booleans(),
    start_batch=st.integers(0, 29),
    seed=st.integers(0, 1 << 16),
    slice_rows=st.sampled_from([SLICE_ROWS, 45]),
)
def test_rows_with_some_kafka_fields_are_the_rows_with_all(
    segments: tuple[SegmentFiles, pa.Table, pa.Table],
    tmp_path: Path,
    files: int,
    group_rows: int,
    compacted: bool,
    start_batch: int,
    seed: int,
    slice_rows: int,
) -> None:
    """What Spark reads of a segment (some columns, some fields of ``kafka``) is the broker's rows, projected."""
    seg, own, others = segments
    rng = random.Random(seed)
    rows = pa.concat_tables([own, others]) if compacted else own
    if compacted:
        kafka = rows.column("kafka")
        order = pc.sort_indices(
            pa.table({"p": pc.struct_field(kafka, "partition"), "o": pc.struct_field(kafka, "offset")}),
            sort_keys=[("p", "ascending"), ("o", "ascending")],
        )
        rows = rows.take(order)
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    paths = _write_layout(rows, d, files, group_rows, rng)
    start = [h.position for h, _ in iter_batches(seg.log.read_bytes())][start_batch]
    full = pa.concat_tables(iter_segment_rows(_rows_for(seg, paths), start, None, "test"))
    cache = RowGroupCache(8 << 20, max_slice_rows=slice_rows)
    for _ in range(2):  # cold, then from the cache
        part = pa.concat_tables(
            iter_segment_rows(_rows_for(seg, paths), start, None, "test", cache, ["kafka", "value_raw"], FIELDS)
        )
        assert part.column_names == ["kafka", "value_raw"]
        assert [f.name for f in part.column("kafka").type][-len(FIELDS) :] == FIELDS
        assert part.column("value_raw").equals(full.column("value_raw"))
        for name in ["offset", *FIELDS]:
            want = pc.struct_field(full.column("kafka"), name)
            assert pc.struct_field(part.column("kafka"), name).equals(want), name


def test_a_kafka_field_a_file_lacks_reads_as_null() -> None:
    kafka = pa.array([{"offset": 5, "partition": 0}, {"offset": 6, "partition": 0}])
    t = _with_kafka_fields(pa.table({"kafka": kafka}), ("partition", "offset", "is_control"))
    got = t.column("kafka")
    assert [f.name for f in got.type] == ["partition", "offset", "is_control"]
    assert got.to_pylist() == [
        {"partition": 0, "offset": 5, "is_control": None},
        {"partition": 0, "offset": 6, "is_control": None},
    ]
    assert _with_kafka_fields(t, None) is t


def _one_group(rows: pa.Table, path: Path) -> list[str]:
    pq.write_table(rows, path, row_group_size=rows.num_rows)
    return [str(path)]


def test_a_broker_catching_up_through_a_large_row_group_decodes_each_slice_once(
    segments: tuple[SegmentFiles, pa.Table, pa.Table], tmp_path: Path
) -> None:
    """Fetches from successive positions (a broker reading a little of each) take the cursor where the last
    one left it; a fetch behind it opens a new one."""
    seg, own, others = segments
    kafka = pa.concat_tables([own, others]).column("kafka")
    rows = pa.concat_tables([own, others])
    order = pc.sort_indices(
        pa.table({"p": pc.struct_field(kafka, "partition"), "o": pc.struct_field(kafka, "offset")}),
        sort_keys=[("p", "ascending"), ("o", "ascending")],
    )
    paths = _one_group(rows.take(order), tmp_path / "compacted.parquet")
    original = seg.log.read_bytes()
    positions = [h.position for h, _ in iter_batches(original)]
    cache = RowGroupCache(8 << 20, max_slice_rows=40)
    for position in positions:
        first = next(iter_segment_batches(_rows_for(seg, paths), position, None, "test", cache))
        assert first == original[position : position + len(first)]
    assert cache.cursors.opened == 1
    assert cache.cursors.idle == 1
    # The next segment in the file (partition 1's, after partition 0's rows) takes the same cursor onward.
    kafka_rows = rows.take(order).column("kafka")
    partition_1 = pc.equal(pc.struct_field(kafka_rows, "partition"), 1)
    offsets_1 = pc.filter(pc.struct_field(kafka_rows, "offset"), partition_1)
    first, last = pc.min(offsets_1).as_py(), pc.max(offsets_1).as_py()
    neighbour = SegmentRows(PyArrowFileIO(), tuple(paths), 1, first, last, "other", 1)
    got_rows = pa.concat_tables(iter_segment_rows(neighbour, 0, None, "test", cache))
    assert got_rows.num_rows == pc.sum(partition_1).as_py()
    assert cache.cursors.opened == 1
    # A fetch of every slice again comes from the cache; with nothing cached it needs a new cursor.
    got = b"".join(iter_segment_batches(_rows_for(seg, paths), 0, None, "test", cache))
    assert batch_view(got) == batch_view(original) and cache.cursors.opened == 1
    uncached = RowGroupCache(0, 0, max_slice_rows=40)
    for position in (positions[-1], positions[0]):
        got = b"".join(iter_segment_batches(_rows_for(seg, paths), position, None, "test", uncached))
        assert batch_view(got) == batch_view(original[position:])
    assert uncached.cursors.opened == 2


@pytest.mark.parametrize("readers", [4, 10])
def test_the_broker_reader_threads_catching_up_at_once_each_keep_their_cursor(
    segments: tuple[SegmentFiles, pa.Table, pa.Table], tmp_path: Path, readers: int
) -> None:
    """As many readers as Kafka's default reader threads, each fetching successive positions of its own large row
    group in step with the others (a barrier between fetches), open one cursor each and never again."""
    seg, own, _others = segments
    paths = [_one_group(own, tmp_path / f"group{i}.parquet") for i in range(readers)]
    original = seg.log.read_bytes()
    positions = [h.position for h, _ in iter_batches(original)]
    cache = RowGroupCache(8 << 20, max_slice_rows=40)
    in_step = threading.Barrier(readers)

    def catch_up(files: list[str]) -> None:
        for position in positions:
            first = next(iter_segment_batches(_rows_for(seg, files), position, None, "test", cache))
            assert first == original[position : position + len(first)]
            in_step.wait(60)

    with ThreadPoolExecutor(readers) as pool:
        for done in [pool.submit(catch_up, files) for files in paths]:
            done.result()
    assert own.num_rows > 2 * 40  # several slices a group: every reader moved its cursor on
    assert cache.cursors.opened == readers
    assert cache.cursors.idle == readers


def test_a_large_row_group_out_of_order_is_read_whole(
    segments: tuple[SegmentFiles, pa.Table, pa.Table], tmp_path: Path
) -> None:
    seg, own, _others = segments
    index = list(range(own.num_rows))
    random.Random(5).shuffle(index)
    paths = _one_group(own.take(pa.array(index)), tmp_path / "shuffled.parquet")
    cache = RowGroupCache(8 << 20, max_slice_rows=40)
    got = b"".join(iter_segment_batches(_rows_for(seg, paths), 0, None, "test", cache))
    assert batch_view(got) == batch_view(seg.log.read_bytes())
    assert cache.cursors.opened == 0


def _open_files_under(directory: Path) -> list[str]:
    """The files under ``directory`` this process has open now."""
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


def _two_files(
    segments: tuple[SegmentFiles, pa.Table, pa.Table], directory: Path, group_rows: int
) -> tuple[SegmentFiles, list[str]]:
    """The segment's rows in two files of ``group_rows`` rows a row group."""
    seg, own, _others = segments
    directory.mkdir()
    half = own.num_rows // 2
    paths = [str(directory / "f0.parquet"), str(directory / "f1.parquet")]
    pq.write_table(own.slice(0, half), paths[0], row_group_size=group_rows)
    pq.write_table(own.slice(half), paths[1], row_group_size=group_rows)
    return seg, paths


def _damage_last_group(path: str) -> None:
    """A page of the file's last row group overwritten: a fetch fails once it reaches that group."""
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(meta.num_row_groups - 1)
    chunk = max((group.column(i) for i in range(group.num_columns)), key=lambda c: c.total_compressed_size)
    with open(path, "r+b") as f:
        f.seek(chunk.data_page_offset + 16)
        f.write(b"\xff" * (chunk.total_compressed_size - 32))


@pytest.mark.parametrize(("group_rows", "slice_rows"), [(40, 0), (1 << 20, 40)])
def test_a_fetch_closes_every_file_it_opened_when_it_ends_fails_or_is_left(
    segments: tuple[SegmentFiles, pa.Table, pa.Table], tmp_path: Path, group_rows: int, slice_rows: int
) -> None:
    """Files stay open only as cursors the pool keeps for the next fetch (slices of large row groups), however
    the fetch ends: read to the end, failed on a damaged row group (its traceback still held), or left after its
    first rows (the consumer had enough). Row groups read whole, or one large group a file read in slices."""
    seg, paths = _two_files(segments, tmp_path / "data", group_rows)
    cache = RowGroupCache(0, 0, max_slice_rows=slice_rows)
    got = b"".join(iter_segment_batches(_rows_for(seg, paths), 0, None, "test", cache))
    assert batch_view(got) == batch_view(seg.log.read_bytes())
    assert len(_open_files_under(tmp_path)) == cache.cursors.idle == (2 if slice_rows else 0)

    left = iter_segment_rows(_rows_for(seg, paths), 0, None, "test", cache)
    assert next(left).num_rows > 0
    left.close()
    assert len(_open_files_under(tmp_path)) == cache.cursors.idle

    _damage_last_group(paths[1])
    fresh = RowGroupCache(0, 0, max_slice_rows=slice_rows)
    with pytest.raises(Exception) as failed:
        for _ in iter_segment_rows(_rows_for(seg, paths), 0, None, "test", fresh):
            pass
    assert failed.value.__traceback__ is not None  # held, with the fetch's frames
    assert len(_open_files_under(tmp_path)) == cache.cursors.idle + fresh.cursors.idle
    cache.cursors.close()  # the plugin closing
    fresh.cursors.close()
    assert _open_files_under(tmp_path) == []
