"""The fetch index's rules (rsm.iceberg.table_files): a file is kept exactly when Iceberg's inclusive metrics
evaluator (the oracle here) says it may hold rows of the segment, and a lookup finds every file whose bounds
overlap the segment's partition and offsets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.conversions import to_bytes
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.types import IntegerType, LongType, StringType

from rsm.iceberg.schema import iceberg_schema
from rsm.iceberg.selection import RowSelection
from rsm.iceberg.table_files import LiveFile, SnapshotFiles, _live_file, may_hold_segment

SCHEMA = iceberg_schema()
PARTITION_ID = SCHEMA.find_field("kafka.partition").field_id
OFFSET_ID = SCHEMA.find_field("kafka.offset").field_id
SEGMENT_ID = SCHEMA.find_field("kafka.segment_id").field_id

_bound = st.one_of(st.none(), st.integers(0, 12))
_ids = st.sampled_from(["A" * 22, "B" * 22, "BA" + "A" * 20, "C" * 22, "B" * 16])


@st.composite
def _files(draw: st.DrawFn) -> tuple[DataFile, LiveFile]:
    """A data file's metrics (any bound may be missing; nulls counted or not; 0 rows or more) as Iceberg keeps
    them, and the index's view of it."""
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    nulls: dict[int, int] = {}
    rows = draw(st.integers(0, 5))
    for field_id, kind in ((PARTITION_ID, IntegerType()), (OFFSET_ID, LongType())):
        low, high = draw(_bound), draw(_bound)
        if low is not None and high is not None and low > high:
            low, high = high, low
        if low is not None:
            lower[field_id] = to_bytes(kind, low)
        if high is not None:
            upper[field_id] = to_bytes(kind, high)
        nulls[field_id] = 0
    low_id, high_id = draw(st.one_of(st.none(), _ids)), draw(st.one_of(st.none(), _ids))
    if low_id is not None and high_id is not None and low_id > high_id:
        low_id, high_id = high_id, low_id
    if low_id is not None:
        lower[SEGMENT_ID] = to_bytes(StringType(), low_id)
    if high_id is not None:
        upper[SEGMENT_ID] = to_bytes(StringType(), high_id)
    segment_nulls = draw(st.one_of(st.none(), st.integers(0, rows)))
    if segment_nulls is not None:
        nulls[SEGMENT_ID] = segment_nulls
    f = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="f.parquet",
        file_format=FileFormat.PARQUET,
        record_count=rows,
        file_size_in_bytes=1,
        value_counts={PARTITION_ID: rows, OFFSET_ID: rows, SEGMENT_ID: rows},
        null_value_counts=nulls,
        lower_bounds=lower,
        upper_bounds=upper,
    )
    f.spec_id = 0
    return f, _live_file(f, 0, (PARTITION_ID, OFFSET_ID, SEGMENT_ID), f.partition)


@settings(max_examples=400, deadline=None)
@given(_files(), st.integers(0, 12), st.integers(0, 12), st.integers(0, 6), _ids)
def test_a_file_is_kept_exactly_when_icebergs_inclusive_metrics_say_it_may_match(
    files: tuple[DataFile, LiveFile], partition: int, first: int, span: int, segment_id: str
) -> None:
    """A file left out may hold no row of the segment; and the index leaves out what Iceberg's planning leaves
    out (files of no rows are never indexed)."""
    data_file, live = files
    selection = RowSelection(partition, first, first + span, segment_id=segment_id)
    iceberg = _InclusiveMetricsEvaluator(SCHEMA, selection.expression(SCHEMA)).eval(data_file)
    ours = may_hold_segment(live, partition, first, first + span, segment_id)
    if data_file.record_count == 0:
        assert not iceberg
    else:
        assert ours == iceberg


def _live(path: str, bounds: tuple[int | None, int | None, int | None, int | None]) -> LiveFile:
    f = DataFile.from_args(content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET)
    return LiveFile(f, 0, bounds, None)


_maybe = st.one_of(st.none(), st.integers(0, 40))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 2), _maybe, _maybe), max_size=30),
    st.integers(0, 4),
    st.integers(0, 45),
    st.integers(0, 10),
)
def test_the_index_finds_every_file_whose_bounds_overlap(
    specs: list[tuple[int | None, int, int | None, int | None]], partition: int, first: int, span: int
) -> None:
    """Files of one partition, of several, or of unknown partitions and offsets: a lookup returns exactly the
    files a check of every file's bounds keeps, in offset order."""
    files = []
    for i, (p, width, low, high) in enumerate(specs):
        if low is not None and high is not None and low > high:
            low, high = high, low
        files.append(_live(f"f{i}", (p, None if p is None else p + width, low, high)))
    last = first + span
    index = SnapshotFiles(list(files), None, {})
    got = [t.file.file_path for t in index.tasks(partition, first, last, None)]
    wanted = [f for f in files if may_hold_segment(f, partition, first, last, None)]
    assert sorted(got) == sorted(f.file.file_path for f in wanted)
    lows = [next(f.low for f in files if f.file.file_path == path) for path in got]
    assert lows == sorted(lows)
