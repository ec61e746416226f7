"""A fetch rebuilds a segment's batches from rows however the table's files hold them: split over files and row
groups, sorted or shuffled, mixed with rows of other partitions and offsets (what a compaction leaves), from
any batch position. Parquet files on the local disk, read through pyiceberg's FileIO."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from rsm.iceberg.fetch_plan import SegmentRows
from rsm.iceberg.rows import RowOrigin, SegmentSummary, segment_row_tables
from rsm.iceberg.segment_fetch import RowGroupCache, iter_segment_batches
from rsm.kafka.records import batch_view, iter_batches
from rsm.kafka.writer import SegmentFiles, write_segment


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


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.integers(1, 4),
    group_rows=st.sampled_from([60, 400, 100_000]),
    layout=st.sampled_from(["segment", "compacted", "shuffled"]),
    start_batch=st.integers(0, 29),
    seed=st.integers(0, 1 << 16),
)
def test_any_file_layout_gives_back_the_same_batches(
    segments: tuple[SegmentFiles, pa.Table, pa.Table],
    tmp_path: Path,
    files: int,
    group_rows: int,
    layout: str,
    start_batch: int,
    seed: int,
) -> None:
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
    d = tmp_path / f"{layout}-{files}-{group_rows}-{seed}"
    d.mkdir()
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, rows.num_rows], strict=True)):
        path = d / f"f{i}.parquet"
        pq.write_table(rows.slice(a, b - a), path, row_group_size=group_rows)
        paths.append(str(path))
    rng.shuffle(paths)
    original = seg.log.read_bytes()
    positions = [h.position for h, _ in iter_batches(original)]
    start = positions[start_batch]
    cache = RowGroupCache(8 << 20)
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
