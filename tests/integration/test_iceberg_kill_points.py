"""Iceberg-mode copies and retention deletes killed (SIGKILL) at every point of their way, one point per test:
the table stays whole, the retry succeeds and reads back byte-identical, and `kts gc --delete` (grace 0) then
removes everything the dead process left, in the warehouse (into its quarantine, once the table's orphan grace
has passed) and in the store, and nothing else.

Real SQLite catalog and filesystem warehouse and store; the child (tests/support/kill_point_child.py) kills
itself at the named point, so each point is hit every run."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from iceberg_testing import age_ledger, iceberg_config, load_table, new_tip, order_records, segment_of
from kill_point_child import NOT_REACHED, POINTS

from backends.filesystem_files import TEMP_PREFIX
from rsm import RemoteStorageManager
from rsm.cli.main import cli
from rsm.deletion.fileio_holding import list_locations, normal_location
from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.maintenance.compaction import compact
from rsm.iceberg.maintenance.references import referenced_files
from rsm.kafka.segment_files import SegmentFiles

SUPPORT = Path(__file__).resolve().parents[1] / "support"
COPY_POINTS = [p for p in POINTS if not p.startswith("delete-")]
DELETE_POINTS = [p for p in POINTS if p.startswith("delete-")]
FOREIGN_OBJECT = "other-app/00000000000000000000.indexes"  # another application's object in the store

# Where the dead process had committed: its rows are in the table (a delete: its rows are gone).
LANDED = {"after-catalog-commit", "mid-indexes-upload", "after-indexes-upload", "after-segment-manifest"}
LANDED |= {"delete-after-catalog-commit", "delete-after-segment-manifest"}
DATA, MANIFESTS, METADATA = ".parquet", ".avro", ".metadata.json"
LEFT = {  # the kinds of file under the table that no version of it references, right after the kill
    "mid-data-file": {DATA},
    "after-data-files": {DATA},
    "after-manifests-and-list": {DATA, MANIFESTS},
    "after-metadata-file": {DATA, MANIFESTS, METADATA},
    "delete-after-rewritten-file": {DATA},
    "delete-after-manifests-and-list": {DATA, MANIFESTS},
    "delete-after-metadata-file": {DATA, MANIFESTS, METADATA},
}


def _config(tmp_path: Path) -> dict[str, str]:
    return iceberg_config(
        tmp_path,
        **{"iceberg.mode.maintenance.enabled": "false", "iceberg.mode.delete.rows.enabled": "true"},
    )


def _kill(cfg: dict[str, str], point: str, op: str, meta: Any, seg: SegmentFiles | None, tmp_path: Path) -> None:
    """Run the copy (or delete) in a child that SIGKILLs itself at ``point``; fails when it never got there."""
    job = tmp_path / "kill-job.pickle"
    data = seg.to_log_segment_data() if seg is not None else None
    job.write_bytes(pickle.dumps({"configs": cfg, "point": point, "op": op, "meta": meta, "data": data}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run(
        [sys.executable, str(SUPPORT / "kill_point_child.py"), str(job)], env=env, capture_output=True, timeout=300
    )
    assert child.returncode != NOT_REACHED, f"{op} ran to its end without reaching {point}"
    assert child.returncode == -9, f"{op} failed before {point}: {child.stderr.decode()[-2000:]}"


def _offsets(cfg: dict[str, str]) -> list[int]:
    rows = load_table(cfg).scan().to_arrow()
    return sorted(pc.struct_field(rows.column("kafka"), "offset").to_pylist())


def _segment_ids(cfg: dict[str, str]) -> set[str | None]:
    rows = load_table(cfg).scan().to_arrow()
    return set(pc.struct_field(rows.column("kafka"), "segment_id").to_pylist())


def _reads_back(m: RemoteStorageManager, segments: list[tuple[Any, SegmentFiles]]) -> None:
    for meta, seg in segments:
        assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes(), meta.describe()


def _table_files(cfg: dict[str, str]) -> tuple[set[str], set[str]]:
    """(every file under the table's data/ and metadata/, those the table's metadata references)."""
    table = load_table(cfg)
    location = table.location().rstrip("/")
    listed = {
        normal_location(f[0]) for sub in ("data", "metadata") for f in list_locations(table.io, f"{location}/{sub}/")
    }
    return listed, referenced_files(table)


def _unreferenced_kinds(cfg: dict[str, str]) -> set[str]:
    listed, refs = _table_files(cfg)
    return {kind for path in listed - refs for kind in (DATA, MANIFESTS, METADATA) if path.endswith(kind)}


def _store_objects(cfg: dict[str, str]) -> set[str]:
    """The store's objects, without what `kts gc --delete` holds in its quarantine."""
    root = Path(cfg["storage.root"])
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "kts-quarantine" not in p.parts}


def _gc_and_check(cfg: dict[str, str], tmp_path: Path, live: list[tuple[Any, SegmentFiles]]) -> None:
    """`kts gc --delete --older-than 0s` twice, the table's ledger aged past its grace between, then: no file
    of the table that its metadata does not reference (each in the warehouse's quarantine), the
    store holds exactly the live segments' manifests and indexes and the foreign object, every referenced file
    is there and every live segment reads back byte-identical."""
    warehouse = Path(cfg["iceberg.mode.warehouse"].removeprefix("file://"))
    foreign_file = warehouse / "kafka" / "orders-of-someone" / "data" / "x.parquet"
    props = tmp_path / "plugin.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
    # The dead process's temp files, dated past the longest an upload may run (storage.stale.upload.age.ms, 1 h),
    # as they are by the time gc may take them; gc refuses younger ones (tests/integration/test_gc_quarantine.py).
    two_hours_ago = time.time() - 7200
    for temp in Path(cfg["storage.root"]).rglob(f"{TEMP_PREFIX}*"):
        os.utime(temp, (two_hours_ago, two_hours_ago))
    left = _table_files(cfg)
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--older-than", "0s", "--delete"])
    assert out.exit_code == 0, out.output
    # The table's files wait the table's orphan grace from this first run that saw them unreferenced, whatever
    # --older-than says (a write may still be under way); once it has passed, the next run moves them aside.
    assert _table_files(cfg) == left
    unreferenced = left[0] - left[1]
    assert age_ledger(warehouse / "kafka" / "orders", 4 * 86400) == len(unreferenced)
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--older-than", "0s", "--delete"])
    assert out.exit_code == 0, out.output
    listed, refs = _table_files(cfg)
    assert listed - refs == set(), "left after kts gc --delete"
    quarantine = warehouse / "kts-quarantine"
    held = [p for p in quarantine.rglob("*") if p.is_file() and not p.name.endswith(".kts-held.json")]
    assert len(held) == len(unreferenced), "not all in the quarantine"
    assert refs <= listed, "kts gc removed a referenced file"
    assert foreign_file.exists()
    with RemoteStorageManager() as m:
        m.configure(cfg)
        wanted = {FOREIGN_OBJECT}
        for meta, _seg in live:
            keys = m.manifests.keys(meta)
            wanted |= {keys.manifest, keys.indexes}
        assert _store_objects(cfg) == wanted
        _reads_back(m, live)


def _setup(tmp_path: Path) -> tuple[dict[str, str], Any, list[tuple[Any, SegmentFiles]]]:
    cfg = _config(tmp_path)
    tip = new_tip()
    segs = [segment_of(tmp_path / f"seg{i}", order_records(i * 40, 40)) for i in range(2)]
    live = [(s.to_metadata(tip), s) for s in segs]
    with RemoteStorageManager() as m:
        m.configure(cfg)
        for meta, seg in live:
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
    foreign_file = Path(cfg["iceberg.mode.warehouse"].removeprefix("file://")) / "kafka" / "orders-of-someone"
    (foreign_file / "data").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), foreign_file / "data" / "x.parquet")
    foreign_object = Path(cfg["storage.root"]) / FOREIGN_OBJECT
    foreign_object.parent.mkdir(parents=True)
    foreign_object.write_bytes(b"not ours")
    return cfg, tip, live


@pytest.mark.parametrize("point", COPY_POINTS)
def test_a_copy_killed_at_each_point_leaves_nothing_kts_gc_delete_does_not_remove(point: str, tmp_path: Path) -> None:
    cfg, tip, live = _setup(tmp_path)
    seg = segment_of(tmp_path / "killed", order_records(80, 300), per_batch=5)
    meta = seg.to_metadata(tip)
    before = _store_objects(cfg)
    _kill(cfg, point, "copy", meta, seg, tmp_path)

    # the table is whole: the dead copy's rows are there all or not at all, the others read back
    landed = list(range(80, 380)) if point in LANDED else []
    assert _offsets(cfg) == list(range(80)) + landed
    assert _unreferenced_kinds(cfg) == LEFT.get(point, set())
    left_in_store = _store_objects(cfg) - before
    if point == "mid-indexes-upload":  # the upload's temp file, never renamed to its key
        assert [Path(k).name.startswith(TEMP_PREFIX) for k in left_in_store] == [True]
    else:
        stored = {"after-indexes-upload": [".indexes"], "after-segment-manifest": [".indexes", ".rsm-manifest"]}
        assert sorted(Path(k).suffix for k in left_in_store) == stored.get(point, [])
    with RemoteStorageManager() as m:
        m.configure(cfg)
        _reads_back(m, live)
        # Kafka copies the segment again: it succeeds and reads back byte-identical
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        _reads_back(m, [(meta, seg)])
    assert _offsets(cfg) == list(range(380))
    _gc_and_check(cfg, tmp_path, [*live, (meta, seg)])


@pytest.mark.parametrize("point", DELETE_POINTS)
def test_a_retention_delete_killed_at_each_point_leaves_nothing_kts_gc_delete_does_not_remove(
    point: str, tmp_path: Path
) -> None:
    cfg, _tip, live = _setup(tmp_path)
    # both segments' rows in one file, so deleting the first one's rewrites the file with the second's
    assert compact(load_table(cfg), MaintenanceSettings(min_input_files=2)).count == 2
    (gone_meta, _gone), kept = live[0], live[1]
    _kill(cfg, point, "delete", gone_meta, None, tmp_path)

    assert _offsets(cfg) == (list(range(40, 80)) if point in LANDED else list(range(80)))
    assert _unreferenced_kinds(cfg) == LEFT.get(point, set())
    with RemoteStorageManager() as m:
        m.configure(cfg)
        keys = m.manifests.keys(gone_meta)
        left = {keys.indexes} if point == "delete-after-segment-manifest" else {keys.manifest, keys.indexes}
        assert {keys.manifest, keys.indexes} & _store_objects(cfg) == left
        _reads_back(m, [kept] if point in LANDED else live)
        # Kafka deletes the segment again: its rows go, the other segment's stay and read back
        m.delete_log_segment_data(gone_meta)
        _reads_back(m, [kept])
    assert _offsets(cfg) == list(range(40, 80))
    assert _segment_ids(cfg) == {kept[0].remote_log_segment_id.id}
    _gc_and_check(cfg, tmp_path, [kept])
