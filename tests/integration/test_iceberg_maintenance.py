"""Iceberg mode's table maintenance (rsm.iceberg.maintenance, rsm.iceberg.maintainer) on real tables: segments
tiered through the plugin into a SQLite catalog on the filesystem, each step alone, the lease between brokers,
the plugin's thread, `kts iceberg maintain`. Copies killed at each point, then `kts gc`: test_iceberg_kill_points."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from iceberg_testing import CountingIO, iceberg_config, load_table, new_tip, order_records, segment_of, tier
from pyiceberg.catalog import delete_files
from pyiceberg.conversions import from_bytes
from pyiceberg.io import InputFile, OutputFile
from pyiceberg.types import IntegerType, LongType

import rsm.iceberg.maintenance.run as maintenance_run
from rsm import RemoteStorageManager
from rsm.cli.main import cli
from rsm.deletion.fileio_holding import normal_location
from rsm.errors import RemoteStorageException
from rsm.formats.iceberg import iceberg_format
from rsm.iceberg.config import IcebergConfig, MaintenanceSettings
from rsm.iceberg.maintainer import Maintainer, MaintenanceStats
from rsm.iceberg.maintenance.compaction import compact, compact_bins, plan_compaction
from rsm.iceberg.maintenance.expiry import expire_snapshots, set_metadata_properties
from rsm.iceberg.maintenance.lease import LEASE_PROPERTY, Lease, release_lease, take_lease
from rsm.iceberg.maintenance.manifests import rewrite_manifests
from rsm.iceberg.maintenance.namespace import all_orphans
from rsm.iceberg.maintenance.orphans import find_orphans, remove_orphans, shared_location
from rsm.iceberg.maintenance.references import REFERENCES, referenced_files
from rsm.iceberg.maintenance.run import maintain
from rsm.iceberg.tables import METADATA_PROPERTIES

SUPPORT = Path(__file__).resolve().parents[1] / "support"
SEGMENT_RECORDS = 40
SETTINGS = MaintenanceSettings(
    snapshot_max_age_s=3600, snapshot_min_keep=2, snapshot_max_keep=4, manifests_max=2, min_input_files=2
)


def _tiered(tmp_path: Path, segments: int = 8, tip: Any = None, **extra: str) -> dict[str, str]:
    cfg = iceberg_config(tmp_path, **extra)
    tip = tip or new_tip()
    segs = [
        segment_of(tmp_path / f"seg{i}", order_records(i * SEGMENT_RECORDS, SEGMENT_RECORDS)) for i in range(segments)
    ]
    for s in segs:
        tier(cfg, tip, [s])
    return cfg


def _offsets(table: Any) -> list[int]:
    return sorted(pc.struct_field(table.scan().to_arrow().column("kafka"), "offset").to_pylist())


def _rows(table: Any) -> list[dict[str, Any]]:
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["kafka"]["offset"])


def _data_files(cfg: dict[str, str]) -> set[Path]:
    return set((Path(cfg["iceberg.mode.warehouse"].removeprefix("file://")) / "kafka" / "orders" / "data").rglob("*"))


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_expiry_keeps_the_newest_and_drops_the_rest_by_count_and_age(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=8)
    table = load_table(cfg)
    before = _rows(table)
    newest = [s.snapshot_id for s in table.metadata.snapshots][-4:]
    assert expire_snapshots(table, SETTINGS, dry_run=True).count == 4
    assert len(load_table(cfg).metadata.snapshots) == 8  # a dry run changes nothing
    assert expire_snapshots(table, SETTINGS).count == 4
    table = load_table(cfg)
    assert [s.snapshot_id for s in table.metadata.snapshots] == newest
    assert _rows(table) == before
    # by age: all older than 0 s, but the newest min.keep stay
    aged = MaintenanceSettings(snapshot_max_age_s=0, snapshot_min_keep=2, snapshot_max_keep=100)
    assert expire_snapshots(table, aged).count == 2
    assert [s.snapshot_id for s in load_table(cfg).metadata.snapshots] == newest[-2:]


def test_metadata_properties_bound_the_log_and_old_metadata_files_go_as_orphans(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=2)
    table = load_table(cfg)
    assert {k: table.properties[k] for k in METADATA_PROPERTIES} == METADATA_PROPERTIES  # a new table has them
    assert table.properties["write.metadata.delete-after-commit.enabled"] == "false"
    with table.transaction() as txn:  # as a table made before: no bound on its log, deleting on commit
        txn.remove_properties("write.metadata.previous-versions-max")
        txn.set_properties({"write.metadata.delete-after-commit.enabled": "true"})
    table = load_table(cfg)
    assert set_metadata_properties(table).count == 2
    assert set_metadata_properties(load_table(cfg)).count == 0  # set once; an operator's bound is kept
    tier(cfg, new_tip(), [segment_of(tmp_path / f"more{i}", order_records(1000 + i * 10, 10)) for i in range(14)])
    table = load_table(cfg)
    assert {k: table.properties[k] for k in METADATA_PROPERTIES} == METADATA_PROPERTIES
    kept = int(METADATA_PROPERTIES["write.metadata.previous-versions-max"])
    metadata_dir = Path(table.metadata_location.removeprefix("file://")).parent
    assert len(table.metadata.metadata_log) == kept
    # No commit deleted a metadata file: those out of the log go as orphans, into the quarantine, after the grace
    # (counted from the first pass that saw them so).
    before = set(metadata_dir.glob("*.metadata.json"))
    assert len(before) > kept + 1
    settings = MaintenanceSettings(orphan_grace_s=3600)
    t0 = time.time()
    assert remove_orphans(table, settings, now=t0).count == 0
    held = remove_orphans(load_table(cfg), settings, now=t0 + 3600)
    assert len(list(metadata_dir.glob("*.metadata.json"))) == kept + 1
    assert {Path(d.removeprefix("file://")) for d in held.details} >= before - set(metadata_dir.glob("*"))
    quarantine = Path(cfg["iceberg.mode.warehouse"].removeprefix("file://")) / "kts-quarantine"
    assert len([p for p in quarantine.rglob("*.metadata.json")]) == len(before) - kept - 1


def test_compaction_rewrites_small_files_sorted_with_bounds_and_removes_exactly_what_it_read(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=8)
    table = load_table(cfg)
    before = _rows(table)
    old = {t.file.file_path for t in table.scan().plan_files()}
    assert len(old) == 8
    dry = compact(table, SETTINGS, dry_run=True)
    assert dry.count == 8 and load_table(cfg).metadata_location == table.metadata_location
    assert compact(table, SETTINGS).count == 8
    table = load_table(cfg)
    files = [t.file for t in table.scan().plan_files()]
    assert len(files) == 1 and files[0].file_path not in old
    assert _rows(table) == before
    ids = [table.schema().find_field(f"kafka.{n}").field_id for n in ("partition", "offset")]
    f = files[0]
    assert from_bytes(IntegerType(), f.lower_bounds[ids[0]]) == 0 == from_bytes(IntegerType(), f.upper_bounds[ids[0]])
    assert from_bytes(LongType(), f.lower_bounds[ids[1]]) == 0
    assert from_bytes(LongType(), f.upper_bounds[ids[1]]) == 8 * SEGMENT_RECORDS - 1
    written = pq.read_table(f.file_path.removeprefix("file://"))
    offsets = pc.struct_field(written.column("kafka"), "offset").to_pylist()
    assert offsets == sorted(offsets)
    assert table.current_snapshot().summary["kafka.maintenance"] == "compaction"  # type: ignore[union-attr]
    # a compacted file is not read again until as much new data joined it
    assert plan_compaction(table, SETTINGS) == []


def test_compaction_is_size_tiered_a_compacted_file_waits_until_newer_files_hold_as_many_rows(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=4)
    settings = MaintenanceSettings(min_input_files=4)
    compact(load_table(cfg), settings)
    (big,) = [t.file.file_path for t in load_table(cfg).scan().plan_files()]
    tip = new_tip()
    for i in range(4, 8):
        tier(cfg, tip, [segment_of(tmp_path / f"more{i}", order_records(i * SEGMENT_RECORDS, SEGMENT_RECORDS))])
        if i < 7:  # newer files with fewer rows than the compacted one: they wait
            assert plan_compaction(load_table(cfg), settings) == []
    (b,) = plan_compaction(load_table(cfg), settings)
    assert len(b.files) == 5 and big in {f.task.file.file_path for f in b.files}
    assert (b.first, b.last) == (0, 8 * SEGMENT_RECORDS - 1)
    compact(load_table(cfg), settings)
    assert len(list(load_table(cfg).scan().plan_files())) == 1
    assert _offsets(load_table(cfg)) == list(range(8 * SEGMENT_RECORDS))


def test_compaction_gives_up_when_a_copy_replaced_rows_of_its_files_meanwhile(tmp_path: Path) -> None:
    tip = new_tip()
    cfg = _tiered(tmp_path, segments=4, tip=tip)
    table = load_table(cfg)
    (b,) = plan_compaction(table, SETTINGS)
    # A new leader copies an overlapping segment (offsets 20..59) after the plan, before the commit.
    tier(cfg, tip, [segment_of(tmp_path / "overlap", order_records(20, 40))])
    after_copy = _rows(load_table(cfg))
    data_before = _data_files(cfg)
    assert compact_bins(table, [b]) == []
    table = load_table(cfg)
    assert _rows(table) == after_copy  # nothing lost, nothing twice
    assert _offsets(table) == list(range(4 * SEGMENT_RECORDS))
    assert _data_files(cfg) == data_before  # the rewritten file was deleted


def test_bins_commit_together_and_a_bin_a_copy_changed_is_given_up_alone(tmp_path: Path) -> None:
    p0, p1 = new_tip(partition=0), new_tip(partition=1)
    cfg = _tiered(tmp_path, segments=4, tip=p0)
    for i in range(4):
        tier(cfg, p1, [segment_of(tmp_path / f"p1-{i}", order_records(i * SEGMENT_RECORDS, SEGMENT_RECORDS))])
    table = load_table(cfg)
    bins = plan_compaction(table, SETTINGS)
    assert sorted(b.partition for b in bins) == [0, 1]
    # Partition 0's new leader copies an overlapping segment after the plan, before the commit.
    tier(cfg, p0, [segment_of(tmp_path / "overlap", order_records(20, 40))])
    after_copy = _rows_of_partitions(load_table(cfg))
    snapshots = len(load_table(cfg).snapshots())
    (done,) = compact_bins(table, bins)
    assert done.partition == 1
    table = load_table(cfg)
    assert len(table.snapshots()) == snapshots + 1  # one commit
    assert _rows_of_partitions(table) == after_copy  # nothing lost, nothing twice
    live = [t.file for t in table.scan().plan_files()]
    assert len([f for f in live if f.lower_bounds and _partition_of(table, f) == 1]) == 1
    # The file written for partition 0's bin was deleted: every data file left is one a snapshot references.
    assert {f"file://{f}" for f in _data_files(cfg) if f.is_file()} <= referenced_files(table)


def _rows_of_partitions(table: Any) -> list[dict[str, Any]]:
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"]))


def _partition_of(table: Any, f: Any) -> int:
    field_id = table.schema().find_field("kafka.partition").field_id
    return int(from_bytes(IntegerType(), f.lower_bounds[field_id]))


def test_compaction_counts_the_bins_it_gave_up(tmp_path: Path) -> None:
    tip = new_tip()
    cfg = _tiered(tmp_path, segments=4, tip=tip, **{"iceberg.mode.maintenance.enabled": "false"})
    copied: list[bool] = []

    @contextmanager
    def copy_meanwhile() -> Iterator[None]:
        if not copied:  # a new leader copies an overlapping segment before the first commit
            copied.append(True)
            tier(cfg, tip, [segment_of(tmp_path / "overlap", order_records(20, 40))])
        yield

    result = compact(load_table(cfg), SETTINGS, guard=copy_meanwhile)
    assert copied and result.count == 0 and result.given_up == 1, result
    stats = MaintenanceStats()
    stats.add([result])
    assert stats.stats()["compaction-bins-given-up-total"] == 1 and stats.stats()["conflicts-total"] == 1
    assert _offsets(load_table(cfg)) == list(range(4 * SEGMENT_RECORDS))


def test_compaction_of_a_day_whose_offsets_interleave_with_another_days(tmp_path: Path) -> None:
    """Every 10th record a day later (as a transaction marker, stamped with the broker's time, among records
    with their producer's older timestamps): each copy writes a file per day, their offsets interleaved; both
    days' files are compacted, none given up."""
    cfg = iceberg_config(tmp_path)
    tip, later = new_tip(), 400 * 86_400_000
    for i in range(4):
        recs = order_records(i * SEGMENT_RECORDS, SEGMENT_RECORDS)
        recs = [replace(r, timestamp=r.timestamp + later) if r.offset % 10 == 9 else r for r in recs]
        tier(cfg, tip, [segment_of(tmp_path / f"seg{i}", recs)])
    table = load_table(cfg)
    before = _rows(table)
    assert len(list(table.scan().plan_files())) == 8
    result = compact(table, SETTINGS)
    assert (result.count, result.skipped) == (8, ""), result
    table = load_table(cfg)
    assert len(list(table.scan().plan_files())) == 2
    assert _rows(table) == before


def test_rewrite_manifests_merges_them_and_keeps_every_file(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=6)  # a manifest per copy: merged by the writer only past 100
    table = load_table(cfg)
    files = {t.file.file_path for t in table.scan().plan_files()}
    before = len(table.current_snapshot().manifests(table.io))  # type: ignore[union-attr]
    assert before > SETTINGS.manifests_max
    assert rewrite_manifests(table, SETTINGS).count == before
    table = load_table(cfg)
    assert len(table.current_snapshot().manifests(table.io)) < before  # type: ignore[union-attr]
    assert {t.file.file_path for t in table.scan().plan_files()} == files
    assert "commit.manifest.min-count-to-merge" not in table.properties


def test_orphans_only_ours_only_unreferenced_for_the_grace_and_never_a_referenced_file(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=3)
    table = load_table(cfg)
    warehouse = cfg["iceberg.mode.warehouse"]
    data = Path(table.location().removeprefix("file://")) / "data"
    orphan, later = data / "orphan.parquet", data / "later.parquet"
    pq.write_table(pa.table({"x": [1]}), orphan)
    _age(orphan, 10 * 86400)  # days old by mtime: that alone makes nothing an orphan
    foreign = Path(warehouse.removeprefix("file://")) / "someone-else" / "f.parquet"
    foreign.parent.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), foreign)
    _age(foreign, 10 * 86400)
    refs = referenced_files(table)
    t0 = time.time()
    day = 86400
    assert find_orphans(table, 3600, warehouse=f"file://{tmp_path / 'elsewhere'}", now=t0, record=True) == []
    assert find_orphans(table, 3600, warehouse=warehouse, now=t0 + 2 * day) == []  # no recorded pass saw it yet
    assert find_orphans(table, 3600, warehouse=warehouse, now=t0, record=True) == []  # first seen unreferenced
    pq.write_table(pa.table({"x": [1]}), later)
    assert find_orphans(table, 3600, warehouse=warehouse, now=t0 + day - 1, record=True) == []  # data: a day
    found = find_orphans(table, 3600, warehouse=warehouse, now=t0 + day)
    assert [Path(o.path.removeprefix("file://")) for o in found] == [orphan]
    assert all(o.path not in refs for o in found)
    assert remove_orphans(table, MaintenanceSettings(orphan_grace_s=3600), now=t0 + day).count == 1
    assert not orphan.exists() and later.exists() and foreign.exists()
    assert _offsets(load_table(cfg)) == list(range(3 * SEGMENT_RECORDS))
    # a table the plugin did not make is never looked into
    table.transaction().remove_properties("kafka.topic").commit_transaction()
    assert find_orphans(load_table(cfg), 3600, now=t0 + 10 * day) == []


def test_a_full_run_then_expired_files_go_as_orphans_and_rows_stay(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=8)
    before = _rows(load_table(cfg))
    for p in Path(cfg["iceberg.mode.warehouse"].removeprefix("file://")).rglob("*"):
        if p.is_file():
            _age(p, 7200)
    settings = MaintenanceSettings(
        snapshot_max_age_s=0, snapshot_min_keep=1, snapshot_max_keep=1, min_input_files=2, orphan_grace_s=3600
    )
    steps = {r.step: r for r in maintain(load_table(cfg), settings)}
    assert steps["compaction"].count == 8 and steps["expire-snapshots"].count == 7
    # The small files are still referenced by the snapshot before the compaction (kept: min.keep counts it
    # only after the next expiry); a second run expires it.
    _age_all(cfg)
    steps = {r.step: r for r in maintain(load_table(cfg), settings)}
    table = load_table(cfg)
    assert len(table.metadata.snapshots) == 1
    assert _rows(table) == before
    live = {Path(t.file.file_path.removeprefix("file://")) for t in table.scan().plan_files()}
    small = {p for p in _data_files(cfg) if p.is_file()} - live
    # Versions of the table still in its metadata log reference them: a reader of such a version keeps its files.
    assert len(small) == 8 and {f"file://{p}" for p in small} <= referenced_files(table)
    # Once those versions leave the log, past the grace, orphan removal takes them.
    with table.transaction() as txn:
        txn.set_properties({"write.metadata.previous-versions-max": "1"})
    with load_table(cfg).transaction() as txn:
        txn.set_properties({"kafka.test": "one more commit"})
    assert remove_orphans(load_table(cfg), settings).count == 0  # first seen unreferenced now
    assert remove_orphans(load_table(cfg), settings, now=time.time() + 86400).count >= 8  # data files: a day
    assert {p for p in _data_files(cfg) if p.is_file()} == live
    assert _rows(load_table(cfg)) == before


def _age_all(cfg: dict[str, str]) -> None:
    for p in Path(cfg["iceberg.mode.warehouse"].removeprefix("file://")).rglob("*"):
        if p.is_file():
            _age(p, 7200)


@given(owner=st.text(min_size=1, max_size=40), expiry=st.integers(0, 2**62))
def test_lease_text_round_trips(owner: str, expiry: int) -> None:
    assert Lease.parse(str(Lease(owner, expiry))) == Lease(owner, expiry)


@pytest.mark.parametrize("text", ["", "no-separator", "a;b", ";"])
def test_lease_text_that_is_not_one_is_no_lease(text: str) -> None:
    assert Lease.parse(text) is None


def test_one_broker_holds_a_tables_lease_until_it_expires_or_is_released(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    table = load_table(cfg)
    now = int(time.time() * 1000)
    assert take_lease(table, "a", 60, now) is not None
    assert take_lease(load_table(cfg), "b", 60, now) is None
    assert take_lease(load_table(cfg), "b", 60, now + 61_000) is not None  # expired: taken over
    assert Lease.parse(load_table(cfg).properties[LEASE_PROPERTY]).owner == "b"  # type: ignore[union-attr]
    release_lease(load_table(cfg), "a")  # not a's any more: nothing happens
    assert LEASE_PROPERTY in load_table(cfg).properties
    release_lease(load_table(cfg), "b")
    assert LEASE_PROPERTY not in load_table(cfg).properties


def test_of_two_brokers_taking_a_free_lease_at_once_one_wins(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    seen_by_a, seen_by_b = load_table(cfg), load_table(cfg)  # both read the table with no lease
    assert take_lease(seen_by_a, "a", 60) is not None
    assert take_lease(seen_by_b, "b", 60) is None
    assert Lease.parse(load_table(cfg).properties[LEASE_PROPERTY]).owner == "a"  # type: ignore[union-attr]


class _CopyAtTheGate:
    """A guard through which a copy commits right before each maintenance commit gets it (as a copy does that
    finished while the maintenance thread waited for the gate); counts how often it was held."""

    def __init__(self, cfg: dict[str, str], tmp_path: Path) -> None:
        self.cfg, self.tmp_path, self.held = cfg, tmp_path, 0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        self.held += 1
        first = 10_000 + self.held * SEGMENT_RECORDS
        tier(
            self.cfg, new_tip(), [segment_of(self.tmp_path / f"gate{self.held}", order_records(first, SEGMENT_RECORDS))]
        )
        yield


def test_maintenance_commits_under_the_gate_see_the_copies_made_meanwhile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _tiered(tmp_path, segments=6)
    guard = _CopyAtTheGate(cfg, tmp_path)
    steps = {r.step: r for r in maintain(load_table(cfg), SETTINGS, orphans=False, guard=guard)}
    assert guard.held >= 4  # properties, expiry, a compaction bin, the manifest rewrite
    assert steps["compaction"].count >= 2 and not steps["compaction"].skipped
    assert steps["expire-snapshots"].count > 0 and not steps["expire-snapshots"].skipped
    # No commit was made on metadata older than the copies: none failed and none waited for pyiceberg's retry.
    assert not [r for r in caplog.records if "concurrent update" in r.getMessage()]
    held = take_lease(load_table(cfg), "a", 60, guard=guard)
    assert held is not None and guard.held >= 5


def test_the_plugins_thread_maintains_its_tables_and_counts_it(tmp_path: Path) -> None:
    cfg = iceberg_config(
        tmp_path,
        **{
            "iceberg.mode.maintenance.interval.ms": "1000",
            "iceberg.mode.maintenance.snapshot.max.keep": "2",
            "iceberg.mode.maintenance.snapshot.min.keep": "1",
            "iceberg.mode.maintenance.compaction.min.files": "2",
        },
    )
    tip = new_tip()
    with RemoteStorageManager() as m:
        m.configure(cfg)
        for i in range(6):
            s = segment_of(tmp_path / f"s{i}", order_records(i * 20, 20))
            m.copy_log_segment_data(s.to_metadata(tip), s.to_log_segment_data())
        stats = iceberg_format(m).maintenance_stats()
        assert stats is not None
        deadline = time.monotonic() + 60
        # a pass compacts, then expires: wait for both (a loaded machine can be read between the two)
        while time.monotonic() < deadline and (
            stats.stats()["files-compacted-total"] < 2 or stats.stats()["snapshots-expired-total"] < 1
        ):
            time.sleep(0.2)
        values = stats.stats()
        assert values["files-compacted-total"] >= 2 and values["passes-total"] >= 1
        assert values["snapshots-expired-total"] >= 1
        rows = m.metrics()
        assert any("iceberg-maintenance-metrics" in bean for bean in rows)
    table = load_table(cfg)
    assert _offsets(table) == list(range(120))
    assert LEASE_PROPERTY not in table.properties  # released after each pass


def test_maintenance_off_starts_no_thread(tmp_path: Path) -> None:
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.maintenance.enabled": "false"})
    tier(cfg, new_tip(), [segment_of(tmp_path / "s", order_records(0, 10))])
    assert not IcebergConfig.from_map(cfg).maintenance_enabled
    assert LEASE_PROPERTY not in load_table(cfg).properties


def test_a_maintainer_pass_skips_tables_of_others_and_of_another_lease(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=3)
    assert take_lease(load_table(cfg), "other", 60) is not None
    mine = Maintainer(lambda: load_table(cfg).catalog, "kafka", SETTINGS, 60, 3600, owner="mine")
    before = load_table(cfg).metadata_location
    mine.run_pass()
    assert load_table(cfg).metadata_location == before  # other's lease: untouched
    assert mine.stats.stats()["passes-total"] == 1


LEASE_TTL_S = 3.0
"""A lease this short is renewed every second by a pass; a renewal may come up to 2 s late and still be in time."""


class _SlowCompaction:
    """The first compaction waits until ``go`` is set (at most a minute) after setting ``started``: a pass
    longer than any lease. Records the thread of every compaction."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started, self.go = threading.Event(), threading.Event()
        self.threads: list[str] = []
        self._compact = maintenance_run.compact
        monkeypatch.setattr(maintenance_run, "compact", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        if len(self.threads) == 1:
            self.started.set()
            assert self.go.wait(60)
        return self._compact(*args, **kwargs)


def _maintainer(cfg: dict[str, str], owner: str) -> Maintainer:
    return Maintainer(
        lambda: load_table(cfg).catalog, "kafka", SETTINGS, 60, 3600, owner=owner, lease_ttl_s=LEASE_TTL_S
    )


def _pass_in_a_thread(maintainer: Maintainer) -> threading.Thread:
    thread = threading.Thread(target=maintainer.run_pass, name="first-pass")
    thread.start()
    return thread


def test_a_pass_longer_than_its_lease_keeps_it_and_releases_it_when_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _tiered(tmp_path, segments=6)
    slow = _SlowCompaction(monkeypatch)
    first, second = _maintainer(cfg, "first"), _maintainer(cfg, "second")
    thread = _pass_in_a_thread(first)
    try:
        assert slow.started.wait(60)
        time.sleep(2 * LEASE_TTL_S)  # the lease taken at the start expired a whole TTL ago, unless renewed
        held = Lease.parse(load_table(cfg).properties.get(LEASE_PROPERTY))
        assert held is not None and held.owner == "first" and held.expiry_ms > time.time() * 1000
        second.run_pass()
        assert slow.threads == ["first-pass"]  # the second broker started no maintenance meanwhile
    finally:
        slow.go.set()
        thread.join(120)
    assert first.stats.stats()["files-compacted-total"] >= 2
    assert LEASE_PROPERTY not in load_table(cfg).properties  # released: the other broker may take it at once
    second.run_pass()
    assert slow.threads == ["first-pass", threading.current_thread().name]


def test_a_pass_whose_lease_another_broker_took_stops_before_its_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _tiered(tmp_path, segments=6)
    slow = _SlowCompaction(monkeypatch)
    first = _maintainer(cfg, "first")
    caplog.set_level(logging.INFO, logger="rsm.iceberg.maintenance.lease")
    thread = _pass_in_a_thread(first)
    try:
        assert slow.started.wait(60)
        theirs = str(Lease("intruder", int(time.time() * 1000) + 3_600_000))
        with load_table(cfg).transaction() as txn:  # as an operator's tool or a broker with a wrong clock would
            txn.set_properties({LEASE_PROPERTY: theirs})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            "another broker holds its lease" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.1)
    finally:
        slow.go.set()
        thread.join(120)
    assert any("another broker holds its lease" in r.getMessage() for r in caplog.records)
    values = first.stats.stats()
    assert values["compaction-time-ms-total"] > 0  # the step under way finished
    assert values["rewrite-manifests-time-ms-total"] == 0 and values["remove-orphans-time-ms-total"] == 0
    assert load_table(cfg).properties[LEASE_PROPERTY] == theirs  # not released: it is not ours


def test_a_pass_that_fails_releases_its_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _tiered(tmp_path, segments=6)

    def failing(*_args: Any, **_kwargs: Any) -> Any:
        raise RemoteStorageException("the warehouse did not answer")

    monkeypatch.setattr(maintenance_run, "compact", failing)
    maintainer = _maintainer(cfg, "mine")
    maintainer.run_pass()
    assert maintainer.stats.stats()["errors-total"] == 1
    assert LEASE_PROPERTY not in load_table(cfg).properties


def test_an_expiry_skips_a_table_dropped_since_and_releases_the_lease(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=6)
    maintainer = _maintainer(cfg, "mine")
    maintainer._expire({"orders", "dropped"})  # noqa: SLF001 - what a commit's wake-up runs
    values = maintainer.stats.stats()
    assert values["errors-total"] == 0
    assert values["snapshots-expired-total"] == 2  # of 6, max.keep 4
    assert LEASE_PROPERTY not in load_table(cfg).properties


# --- kts iceberg maintain -------------------------------------------------------------------------------------


def _props_file(tmp_path: Path, cfg: dict[str, str]) -> Path:
    path = tmp_path / "plugin.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
    return path


def test_kts_iceberg_maintain_dry_run_changes_nothing_then_a_run_does(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=6)
    cfg["iceberg.mode.maintenance.compaction.min.files"] = "2"
    path = _props_file(tmp_path, cfg)
    before = load_table(cfg).metadata_location
    runner = CliRunner()
    out = runner.invoke(cli, ["iceberg", "maintain", "--config", str(path), "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "compaction" in out.output and "orders" in out.output
    assert load_table(cfg).metadata_location == before
    out = runner.invoke(cli, ["iceberg", "maintain", "--config", str(path), "--table", "orders"])
    assert out.exit_code == 0, out.output
    table = load_table(cfg)
    assert len(list(table.scan().plan_files())) == 1
    assert _offsets(table) == list(range(6 * SEGMENT_RECORDS))


def test_kts_iceberg_maintain_table_takes_a_topics_name_or_its_tables(tmp_path: Path) -> None:
    cfg = iceberg_config(tmp_path, topics="my-orders")
    tier(cfg, new_tip("my-orders"), [segment_of(tmp_path / "s", order_records(0, 10))])
    assert load_table(cfg, "my-orders").name()[-1] == "my_orders"  # a dash is not kept in a table's name
    path = str(_props_file(tmp_path, cfg))
    for name in ("my-orders", "my_orders"):
        out = CliRunner().invoke(cli, ["iceberg", "maintain", "--config", path, "--table", name, "--dry-run"])
        assert out.exit_code == 0, out.output
        assert "my_orders" in out.output and "expire-snapshots" in out.output


def test_kts_iceberg_maintain_refuses_a_scope_that_matches_nothing_and_creates_nothing(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    runner = CliRunner()
    out = runner.invoke(cli, ["iceberg", "maintain", "--config", str(_props_file(tmp_path, cfg)), "--table", "nope"])
    assert out.exit_code != 0 and "no table nope" in out.output
    empty = iceberg_config(tmp_path / "empty")
    out = runner.invoke(cli, ["iceberg", "maintain", "--config", str(_props_file(tmp_path, empty)), "--dry-run"])
    assert out.exit_code != 0 and "no namespace" in out.output
    assert not (tmp_path / "empty").exists()


# --- orphan files and the metadata log ---------------------------------------------------------------------


def test_an_unreadable_metadata_file_in_the_log_removes_no_orphan(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=3, **{"iceberg.mode.maintenance.enabled": "false"})
    table = load_table(cfg)
    orphan = Path(table.location().removeprefix("file://")) / "data" / "orphan.parquet"
    pq.write_table(pa.table({"x": [1]}), orphan)
    _age(orphan, 7200)
    previous = Path(table.metadata.metadata_log[-1].metadata_file.removeprefix("file://"))
    previous.write_bytes(b"{not json")
    with pytest.raises(RemoteStorageException, match=previous.name):
        remove_orphans(table, MaintenanceSettings(orphan_grace_s=3600))
    assert orphan.exists()
    previous.unlink()  # gone: it references nothing any more
    assert find_orphans(load_table(cfg), 3600, record=True) == []
    later = find_orphans(load_table(cfg), 3600, now=time.time() + 86400)
    assert [Path(o.path.removeprefix("file://")) for o in later] == [orphan]


def _counted_refs(cfg: dict[str, str]) -> tuple[set[str], list[str]]:
    table = load_table(cfg)
    io = CountingIO(table.io)
    table.io = io
    return referenced_files(table), io.reads


def test_referenced_files_reads_each_metadata_file_and_manifest_once(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=4, **{"iceberg.mode.maintenance.enabled": "false"})
    REFERENCES.clear()
    first, reads = _counted_refs(cfg)
    old_metadata = [r for r in reads if r.endswith(".metadata.json")]
    assert len(old_metadata) == len(load_table(cfg).metadata.metadata_log) >= 3
    assert any(r.endswith("-m0.avro") for r in reads)  # the manifests were read
    again, reads = _counted_refs(cfg)
    assert again == first and reads == []  # nothing changed: nothing read
    # One more commit: only its manifest list and manifest are read, no metadata file.
    tier(cfg, new_tip(), [segment_of(tmp_path / "seg-late", order_records(1000, SEGMENT_RECORDS))])
    later, reads = _counted_refs(cfg)
    assert later > first
    assert reads and not [r for r in reads if r.endswith(".metadata.json")], reads
    assert len(reads) <= 3, reads
    REFERENCES.clear()
    uncached, reads = _counted_refs(cfg)
    assert later == uncached and len(reads) > 3


def test_a_maintenance_pass_on_a_table_loaded_before_copies_logs_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The maintainer's table object is older than the table (copies came in between): the lease's commit deletes,
    as pyiceberg does after a commit, metadata files of its old log that the copies' commits already deleted.
    pyiceberg's "Failed to delete metadata file" for those is dropped."""
    cfg = _tiered(tmp_path, segments=2, **{"iceberg.mode.maintenance.enabled": "false"})
    with load_table(cfg).transaction() as txn:  # as a table of a plugin that had pyiceberg delete them
        txn.set_properties({"write.metadata.delete-after-commit.enabled": "true"})
    table = load_table(cfg)  # as the maintainer loaded it
    old_log = {e.metadata_file for e in table.metadata.metadata_log} | {table.metadata_location}
    late = [segment_of(tmp_path / f"late{i}", order_records(1000 + i * 10, 10)) for i in range(12)]
    tier(cfg, new_tip(), late)
    assert not [f for f in old_log if Path(f.removeprefix("file://")).exists()]  # deleted by the copies' commits
    caplog.set_level(logging.WARNING)
    leased = take_lease(table, "broker-a", 60)
    assert leased is not None
    _age_all(cfg)
    steps = {r.step: r for r in maintain(leased, SETTINGS)}
    assert steps["compaction"].count and steps["expire-snapshots"].count, steps
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert _offsets(load_table(cfg))[-1] == 1000 + 12 * 10 - 1


class _DenyingIO(CountingIO):
    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise PermissionError(f"Cannot delete file, access denied: {location}")


def test_a_metadata_file_that_cannot_be_deleted_is_still_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _tiered(tmp_path, segments=1, **{"iceberg.mode.maintenance.enabled": "false"})
    table = load_table(cfg)
    kept = table.metadata_location
    missing = kept.replace(".metadata.json", "-gone.metadata.json")
    caplog.set_level(logging.WARNING)
    delete_files(table.io, {missing}, "metadata")
    assert caplog.records == []
    delete_files(_DenyingIO(table.io), {kept}, "metadata")
    assert [r.getMessage() for r in caplog.records] == [f"Failed to delete metadata file {kept}"]
    assert Path(kept.removeprefix("file://")).exists()


def test_an_azure_file_listed_by_container_is_the_file_a_table_references() -> None:
    """Tables reference abfs://container@account.../path; listing the container gives abfs://container/path.
    Compared as different, every live data file on Azure was an orphan (caught by the Azurite cloud test)."""
    referenced = "abfs://kts@acct.dfs.core.windows.net/p/iceberg/kafka/orders/data/x.parquet"
    assert normal_location(referenced) == normal_location("abfs://kts/p/iceberg/kafka/orders/data/x.parquet")
    assert normal_location(referenced) != normal_location("abfs://other/p/iceberg/kafka/orders/data/x.parquet")


def test_tables_sharing_a_location_remove_no_orphan_of_either(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A ``register_table`` clone of the topic's table (a backup kept in the namespace) shares its location, and
    the table's new files are not the clone's: the clone's orphan search would delete them (and the table's, once
    its metadata log no longer names the versions the clone has, the clone's files).
    `kts iceberg maintain`'s run, the plugin's thread and gc's search leave every file, and say why, naming both
    tables; both tables stay whole."""
    tip = new_tip()
    cfg = _tiered(tmp_path, segments=4, tip=tip)
    catalog = load_table(cfg).catalog
    clone = catalog.register_table(("kafka", "orders_backup"), load_table(cfg).metadata_location)
    clone_rows = _rows(clone)
    # The topic's table moves on: a new copy, a compaction and expiry; the clone keeps the files it had.
    tier(cfg, tip, [segment_of(tmp_path / "s4", order_records(4 * SEGMENT_RECORDS, SEGMENT_RECORDS))])
    expire_snapshots(load_table(cfg), replace(SETTINGS, snapshot_max_keep=2, snapshot_min_keep=1))
    assert compact(load_table(cfg), SETTINGS).count >= 2
    expire_snapshots(load_table(cfg), replace(SETTINGS, snapshot_max_keep=1, snapshot_min_keep=1))
    table = load_table(cfg)
    assert not referenced_files(clone) >= referenced_files(table)  # the table's new files are not the clone's
    _age_all(cfg)
    settings = replace(SETTINGS, orphan_grace_s=3600)
    warehouse = cfg["iceberg.mode.warehouse"]
    location = table.location()
    caplog.set_level(logging.WARNING, logger="rsm.iceberg.maintenance")
    runs = {
        "kafka.orders": maintain(table, settings, others={"kafka.orders_backup": location}, warehouse=warehouse),
        "kafka.orders_backup": maintain(clone, settings, others={"kafka.orders": location}, warehouse=warehouse),
    }
    Maintainer(lambda: catalog, "kafka", settings, 60, 0, warehouse=warehouse).run_pass()
    found = all_orphans(catalog, "kafka", 3600, warehouse)
    assert _offsets(load_table(cfg)) == list(range(5 * SEGMENT_RECORDS))
    assert _rows(catalog.load_table(("kafka", "orders_backup"))) == clone_rows
    assert found == []
    for name, results in runs.items():
        (step,) = [r for r in results if r.step == "remove-orphans"]
        assert step.count == 0 and "kafka.orders " in step.refused + " " and "kafka.orders_backup" in step.refused
        assert step.refused.startswith(f"orphan files of table {name} are not removed"), step.refused
        stats = MaintenanceStats()
        stats.add(results)
        assert stats.stats()["orphan-removals-refused-total"] == 1 and stats.stats()["conflicts-total"] == 0
    warned = [r.getMessage() for r in caplog.records if "are not removed" in r.getMessage()]
    assert len(warned) >= 2 + 2 + 2  # each table: maintain's run, the thread's, gc's search


def test_a_table_nested_in_another_refuses_orphan_removal_and_the_outer_leaves_its_files(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=2)
    table = load_table(cfg)
    inner = f"{table.location()}/nested"
    assert shared_location(table, {"kafka.inner": inner}) is None  # the inner table's files are left alone
    refused = shared_location(table, {"kafka.outer": table.location().rsplit("/", 1)[0]})
    assert refused is not None and "kafka.outer" in refused and "kafka.orders" in refused
    assert shared_location(table, {"kafka.orders_copy": table.location() + "/"}) is not None
    assert shared_location(table, {"kafka.neighbour": table.location() + "_2"}) is None
