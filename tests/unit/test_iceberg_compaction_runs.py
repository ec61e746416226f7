"""rsm.iceberg.maintenance.compaction.compaction_runs: which consecutive small files of a partition-day a compaction
merges, on long histories of copies (hypothesis): runs of fan_in consecutive files or more under the target, each
file rewritten into one of at least twice its rows, and a file count that stays logarithmic in the rows however long
the table lives (the rule before let files of unlike sizes pile up without end)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.iceberg.maintenance.compaction import ROW_SLACK, compaction_runs

BIG = 1 << 60


def _settle(files: list[tuple[int, int, int]], fan_in: int, target: int) -> None:
    """Compact ``files`` ((rows, bytes, rewrites of its oldest row), offset order) until no run is left,
    checking each run."""
    while runs := compaction_runs([(r, b) for r, b, _ in files], fan_in, target):
        previous_end = 0
        for start, end in runs:
            assert previous_end <= start < end <= len(files)
            assert end - start >= fan_in
            rows = sum(r for r, _, _ in files[start:end])
            assert sum(b for _, b, _ in files[start:end]) <= target
            assert all(2 * r <= rows * ROW_SLACK for r, _, _ in files[start:end])
            previous_end = end
        for start, end in reversed(runs):
            part = files[start:end]
            files[start:end] = [(sum(r for r, _, _ in part), sum(b for _, b, _ in part), 1 + max(w for *_, w in part))]


@settings(max_examples=60, deadline=None)
@given(
    copies=st.lists(st.integers(50, 400), min_size=1, max_size=600),
    fan_in=st.integers(2, 6),
    every=st.integers(1, 40),
)
def test_files_stay_logarithmic_and_each_row_is_rewritten_log_times(copies: list[int], fan_in: int, every: int) -> None:
    files: list[tuple[int, int, int]] = []
    for n, rows in enumerate(copies, 1):
        files.append((rows, rows * 100, 0))
        if n % every == 0 or n == len(copies):  # maintenance runs now and then, not after every copy
            _settle(files, fan_in, BIG)
    total, smallest = sum(copies), min(copies)
    assert sum(r for r, _, _ in files) == total
    doublings = math.log2(total / smallest) + 1
    assert len(files) <= fan_in * (doublings + 1)
    assert max(w for *_, w in files) <= doublings


def test_files_that_the_old_rule_stranded_are_compacted() -> None:
    """Consecutive files no four of which were within 2x of each other: the old rule never merged them."""
    files = [(r * 200, r * 20_000, 0) for r in (10, 8, 19, 20, 9, 11, 7, 14, 34, 11, 18, 28, 29, 6, 10, 25)]
    _settle(files, 4, BIG)
    assert len(files) < 8


@given(fan_in=st.integers(2, 6), count=st.integers(0, 30))
def test_the_target_size_bounds_a_run(fan_in: int, count: int) -> None:
    files = [(100, 1000)] * count
    runs = compaction_runs(files, fan_in, 2500)
    assert runs == [] if fan_in > 2 else all(end - start == 2 for start, end in runs)
    assert all(sum(b for _, b in files[start:end]) <= 2500 for start, end in runs)


def test_a_compacted_file_waits_until_newer_files_hold_as_many_rows() -> None:
    assert compaction_runs([(200, 1)] * 9, 4, BIG) == [(0, 9)]
    assert compaction_runs([(800, 1), (200, 1), (200, 1), (200, 1)], 4, BIG) == []
    assert compaction_runs([(800, 1), (200, 1), (200, 1), (200, 1), (200, 1)], 4, BIG) == [(0, 5)]
    assert compaction_runs([(5000, 1), (800, 1), (200, 1), (200, 1), (200, 1), (200, 1)], 4, BIG) == [(1, 6)]


def test_a_newest_file_larger_than_the_rest_together_is_not_rewritten_to_absorb_them() -> None:
    assert compaction_runs([(200, 1), (200, 1), (200, 1), (900, 1)], 4, BIG) == []


def test_copies_a_few_percent_apart_still_make_a_run() -> None:
    # a broker's files after Spark's rewrite (rows of a real 4.4 broker's test): before the slack no run
    # qualified, and the broker compacted nothing
    files = [(5182, 1), (2329, 1), (2332, 1), (2269, 1)]
    assert compaction_runs(files, 2, BIG) == [(0, 4)]
    assert compaction_runs(files[1:3], 2, BIG) == [(0, 2)]
    assert compaction_runs([(2300, 1), (2000, 1)], 2, BIG) == []  # an older file 15% larger: not joined
