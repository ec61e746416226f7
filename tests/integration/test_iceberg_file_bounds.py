"""rsm.iceberg.file_bounds: whether live files may hold an offset range, from manifests read once each, and the one
cache of what each manifest lists that copies and the orphan search share."""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st
from iceberg_testing import CountingIO, iceberg_config, load_table, new_tip, order_records, segment_of, tier

from rsm.iceberg.file_bounds import MANIFESTS, ManifestCache, overlaps
from rsm.iceberg.maintenance.references import REFERENCES, referenced_files

RECORDS = 40


def _tier(cfg: dict[str, str], tmp_path: Path, tip: object, first: int) -> None:
    tier(cfg, tip, [segment_of(tmp_path / f"seg-{id(tip)}-{first}", order_records(first, RECORDS))])  # type: ignore[arg-type]


def test_may_hold_follows_the_live_files_partitions_and_offsets(tmp_path: Path) -> None:
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.maintenance.enabled": "false"})
    p0, p1 = new_tip(partition=0), new_tip(partition=1)
    bounds = ManifestCache()
    _tier(cfg, tmp_path, p0, 0)
    _tier(cfg, tmp_path, p0, RECORDS)
    _tier(cfg, tmp_path, p1, 0)
    table = load_table(cfg)
    assert bounds.may_hold(table, 0, 0, 0) and bounds.may_hold(table, 0, 2 * RECORDS - 1, 10_000)
    assert bounds.may_hold(table, 1, RECORDS - 1, RECORDS)
    assert not bounds.may_hold(table, 0, 2 * RECORDS, 10_000)  # the next segment: past all that is tiered
    assert not bounds.may_hold(table, 1, RECORDS, 2 * RECORDS - 1)
    assert not bounds.may_hold(table, 2, 0, 10)


def test_each_manifest_is_read_once(tmp_path: Path) -> None:
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.maintenance.enabled": "false"})
    tip = new_tip()
    for i in range(4):
        _tier(cfg, tmp_path, tip, i * RECORDS)
    bounds = ManifestCache()

    def reads() -> list[str]:
        table = load_table(cfg)
        table.io = io = CountingIO(table.io)
        assert not bounds.may_hold(table, 0, 10 * RECORDS, 11 * RECORDS)
        return io.reads

    table = load_table(cfg)
    manifest_list = table.current_snapshot().manifest_list
    first = reads()
    assert manifest_list in first and len(first) == 1 + len(table.current_snapshot().manifests(table.io)) > 2
    assert reads() == [manifest_list]  # the manifests' bounds are kept
    _tier(cfg, tmp_path, tip, 4 * RECORDS)
    snapshot = load_table(cfg).current_snapshot()
    assert len(reads()) == 2  # the new manifest list and the copy's one new manifest
    assert snapshot.manifest_list != manifest_list


def test_the_orphan_search_reads_no_manifest_a_copy_has_read(tmp_path: Path) -> None:
    """What a manifest lists is kept once: after a copy's check read the current manifests, the orphan search's
    references read none of them again (and a search from cold does read them)."""
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.maintenance.enabled": "false"})
    tip = new_tip()
    for i in range(3):
        _tier(cfg, tmp_path, tip, i * RECORDS)
    table = load_table(cfg)
    current = {m.manifest_path for m in table.current_snapshot().manifests(table.io)}

    def manifests_read() -> set[str]:
        table = load_table(cfg)
        table.io = io = CountingIO(table.io)
        referenced_files(table)
        return set(io.reads) & current

    REFERENCES.clear()  # and what manifests list
    assert manifests_read() == current
    REFERENCES.clear()
    assert not MANIFESTS.may_hold(load_table(cfg), 0, 10 * RECORDS, 11 * RECORDS)
    assert manifests_read() == set()


bound = st.one_of(st.none(), st.integers(0, 12))


@given(st.tuples(bound, bound, bound, bound), st.integers(0, 12), st.integers(0, 12), st.integers(0, 12))
def test_overlaps_is_true_exactly_when_a_row_may_be_in_both(
    b: tuple[int | None, int | None, int | None, int | None], partition: int, first: int, width: int
) -> None:
    last = first + width
    p_lo, p_hi, o_lo, o_hi = b
    # A file's lower bound is never above its upper bound.
    assume((p_lo is None or p_hi is None or p_lo <= p_hi) and (o_lo is None or o_hi is None or o_lo <= o_hi))
    partitions = range(0 if p_lo is None else p_lo, (13 if p_hi is None else p_hi) + 1)
    offsets = range(0 if o_lo is None else o_lo, (25 if o_hi is None else o_hi) + 1)
    brute = partition in partitions and any(first <= o <= last for o in offsets)
    assert overlaps(b, partition, first, last) == brute
