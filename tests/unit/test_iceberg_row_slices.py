"""Large row groups read a slice at a time (rsm.iceberg.row_slices): the slice index against a plain reading of
the same rows, the cursor against pyarrow's whole-group read, the pool of idle cursors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.errors import RemoteStorageException
from rsm.iceberg.config_keys import SLICE_BYTES
from rsm.iceberg.row_slices import SLICE_ROWS, SliceCursor, SliceCursors, SliceIndex, slice_rows


@st.composite
def _groups(draw: st.DrawFn) -> tuple[list[int], list[int], list[bool], int]:
    """Rows of a sorted group: offsets, their batch positions (a batch of several offsets shares one), whether
    each is the segment's; and a slice size."""
    n = draw(st.integers(1, 300))
    offsets, positions = [], []
    offset, position = draw(st.integers(0, 1000)), 0
    while len(offsets) < n:
        batch = draw(st.integers(1, 12))
        for _ in range(min(batch, n - len(offsets))):
            offsets.append(offset)
            positions.append(position)
            offset += draw(st.integers(1, 3))  # gaps: a compacted topic
        position += draw(st.integers(61, 500))
    own = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return offsets, positions, own, draw(st.integers(1, 64))


def _index(offsets: list[int], positions: list[int], own: list[bool], slice_rows: int) -> SliceIndex:
    return SliceIndex.build(
        pa.chunked_array([pa.array(offsets, pa.int64())]),
        pa.chunked_array([pa.array(positions, pa.int64())]),
        pa.chunked_array([pa.array(own)]),
        slice_rows,
    )


@given(_groups(), st.integers(0, 5000), st.one_of(st.none(), st.integers(0, 5000)), st.one_of(st.none(), st.integers()))
def test_the_slices_wanted_hold_every_row_wanted_and_frontiers_bound_what_follows(
    group: tuple[list[int], list[int], list[bool], int], start: int, end: int | None, after: int | None
) -> None:
    offsets, positions, own, slice_rows = group
    index = _index(offsets, positions, own, slice_rows)
    assert index.in_order
    wanted = list(index.wanted(start, end, after))
    slices = [k for k, _low, _frontier in wanted]
    rows = [i for i in range(len(offsets)) if own[i] and positions[i] >= start and (end is None or positions[i] <= end)]
    assert {i // slice_rows for i in rows} <= set(slices)
    assert slices == sorted(set(slices))
    for k, low, frontier in wanted:
        mine = [offsets[i] for i in range(k * slice_rows, min((k + 1) * slice_rows, len(offsets))) if own[i]]
        assert mine and low == min(mine)
        later = [offsets[i] for i in range((k + 1) * slice_rows, len(offsets)) if own[i]]
        bound = min([*later, *([after] if after is not None else [])], default=None)
        assert frontier == bound


def test_rows_out_of_order_are_not_read_in_slices() -> None:
    assert not _index([1, 2, 3, 2], [0, 70, 140, 70], [True] * 4, 2).in_order
    assert not _index([1, 2, 3, 4], [0, 140, 70, 210], [True] * 4, 2).in_order
    # rows of other segments do not count
    assert _index([1, 9, 2, 3], [0, 0, 70, 140], [True, False, True, True], 2).in_order


def test_a_slice_with_none_of_the_segments_rows_is_skipped() -> None:
    index = _index([1, 2, 3, 4, 5, 6], [0, 70, 140, 210, 280, 350], [True, True, False, False, True, True], 2)
    assert [k for k, _, _ in index.wanted(0, None, None)] == [0, 2]
    assert list(index.wanted(0, None, None))[0] == (0, 1, 5)


@pytest.fixture
def group_file(tmp_path: Path) -> Path:
    path = tmp_path / "g.parquet"
    n = 1000
    pq.write_table(
        pa.table({"n": pa.array(range(n), pa.int64()), "v": pa.array([b"v%d" % i for i in range(n)])}),
        path,
        row_group_size=700,
    )
    return path


def test_a_cursor_reads_exact_slices_forward(group_file: Path) -> None:
    whole = pq.read_table(group_file)
    cursor = SliceCursor(pa.OSFile(str(group_file)), 0, ["n", "v"], "test", 300)
    assert cursor.read(0).equals(whole.slice(0, 300))
    assert cursor.read(2).equals(whole.slice(600, 100))  # the group's last, shorter slice; slice 1 skipped
    assert cursor.next_slice == 3
    with pytest.raises(ValueError, match="behind the cursor"):
        cursor.read(1)
    with pytest.raises(RemoteStorageException, match="slice 3 of a row group of 700 rows came back with none"):
        cursor.read(3)
    cursor.close()
    second = SliceCursor(pa.OSFile(str(group_file)), 1, ["v"], "test", 300)
    assert second.read(0).column("v").equals(whole.slice(700, 300).column("v"))
    second.close()


class _Cursor:
    def __init__(self, at: int) -> None:
        self.next_slice = at
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_pool_gives_the_nearest_idle_cursor_and_closes_the_oldest_past_its_bound() -> None:
    pool = SliceCursors(max_open=3)
    a, b, c = _Cursor(2), _Cursor(5), _Cursor(9)
    for cursor in (a, b, c):
        pool.give_back("g", cursor)  # type: ignore[arg-type]
    new = _Cursor(0)
    assert pool.take("g", 6, lambda: new) is b  # type: ignore[arg-type,return-value]
    assert pool.take("g", 1, lambda: new) is new  # type: ignore[arg-type,return-value]
    assert pool.take("other", 9, lambda: new) is new  # type: ignore[arg-type,return-value]
    assert pool.opened == 2 and pool.idle == 2
    for cursor in (_Cursor(0), _Cursor(0)):
        pool.give_back("h", cursor)  # type: ignore[arg-type]
    assert a.closed and not c.closed and pool.idle == 3


def test_slices_hold_fewer_rows_of_larger_records() -> None:
    assert slice_rows(SLICE_ROWS, 13_000_000) == SLICE_ROWS  # a copy's group of 400-byte records: read whole
    assert slice_rows(1 << 20, 400 << 20) == SLICE_ROWS  # compaction's group of them: 32,768 rows a slice
    large = slice_rows(SLICE_ROWS, 36_000_000)  # a copy's group of 1 KB records
    assert large < SLICE_ROWS and abs(large * 36_000_000 / SLICE_ROWS / SLICE_BYTES - 1) < 0.01
    assert slice_rows(10, 1 << 30) == 1024  # never below 1024 rows
    assert slice_rows(1 << 20, 1 << 20, 37) == 37


def test_a_cursor_idle_too_long_is_closed() -> None:
    now = [0.0]
    pool = SliceCursors(max_open=3, idle_s=60, clock=lambda: now[0])
    old, recent = _Cursor(1), _Cursor(1)
    pool.give_back("g", old)  # type: ignore[arg-type]
    now[0] = 50
    pool.give_back("h", recent)  # type: ignore[arg-type]
    now[0] = 61
    new = _Cursor(0)
    assert pool.take("g", 5, lambda: new) is new  # type: ignore[arg-type,return-value]
    assert old.closed and not recent.closed and pool.idle == 1


def test_a_closed_pool_closes_its_idle_cursors_and_those_given_back_later() -> None:
    pool = SliceCursors(max_open=3)
    idle, taken = _Cursor(1), _Cursor(2)
    pool.give_back("g", idle)  # type: ignore[arg-type]
    pool.close()
    assert idle.closed and pool.idle == 0
    pool.give_back("h", taken)  # type: ignore[arg-type]  # a fetch under way when the plugin closed
    assert taken.closed and pool.idle == 0
