"""Orphan files of the plugin's Iceberg tables: their grace counts from when a pass first saw them unreferenced
(the table's ledger), never from their age alone nor from `kts gc --older-than`, and they go into the warehouse's
quarantine, not away. Real SQLite catalog, filesystem warehouse, Spark's own writes and procedures."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from emulators import StoreServer
from iceberg_tables import kafka_rows
from iceberg_testing import (
    SPARK_SQL,
    age_ledger,
    iceberg_config,
    load_table,
    new_tip,
    order_records,
    run_iceberg_spark,
    segment_of,
    spark_jdbc_catalog,
    spark_sql_statements,
    tier,
)
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan

from rsm.cli.main import cli
from rsm.cli.settings import open_manager
from rsm.deletion.fileio_holding import FileIOHolding
from rsm.deletion.quarantine import Quarantine
from rsm.deletion.rules import TABLE_UNREFERENCED, TABLE_UNREFERENCED_FOR_GRACE, Evidence
from rsm.iceberg.config import MaintenanceSettings
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.maintainer import Maintainer
from rsm.iceberg.maintenance.expiry import expire_snapshots
from rsm.iceberg.maintenance.orphans import (
    DATA_FILE_MIN_GRACE_S,
    LEDGER_PATH,
    OrphanFile,
    find_orphans,
    hold_orphans,
    purge_quarantine,
    remove_orphans,
)
from rsm.iceberg.maintenance.references import referenced_files
from rsm.operator_tools.garbage_removal import quarantine_usage

SEGMENT_RECORDS = 40
DAY = 86400.0


def _tiered(tmp_path: Path, segments: int) -> dict[str, str]:
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.maintenance.enabled": "false"})
    tip = new_tip()
    for i in range(segments):
        tier(cfg, tip, [segment_of(tmp_path / f"seg{i}", order_records(i * SEGMENT_RECORDS, SEGMENT_RECORDS))])
    return cfg


def _path(location: str) -> Path:
    return Path(location.removeprefix("file://").removeprefix("file:"))


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def _props_file(tmp_path: Path, cfg: dict[str, str]) -> Path:
    path = tmp_path / "plugin.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _spark_count(cfg: dict[str, str]) -> int:
    settings = spark_jdbc_catalog(
        f"jdbc:sqlite:{cfg['iceberg.mode.catalog.sqlite.path']}", cfg["iceberg.mode.warehouse"]
    )
    out = run_iceberg_spark(SPARK_SQL, json.dumps(settings), "kafka_tiered.kafka.orders")
    return int(json.loads(out.strip().splitlines()[-1])["n"])


@pytest.mark.timeout(1200)  # a JVM start and Iceberg's runtime; minutes on a loaded machine
def test_kts_gc_delete_leaves_a_write_in_flight_whatever_older_than_says(tmp_path: Path) -> None:
    """A writer (a long compaction, a Spark job) wrote data files two hours ago and has not committed yet.
    `kts gc --delete` with its default --older-than of one hour leaves them: the table's orphan grace applies
    (at least a day for data files, counted from the first run that saw them unreferenced). The commit that
    follows references files that are there, and Spark reads every row."""
    cfg = _tiered(tmp_path, segments=2)
    table = load_table(cfg)
    rows = kafka_rows(0, range(1000, 1100), str(uuid.uuid4()), "in-flight")
    staged = write_data_files(table, rows, uuid.uuid4(), itertools.count(0))
    staged_paths = [_path(f.file_path) for f in staged]
    assert staged_paths and all(p.exists() for p in staged_paths)
    for p in staged_paths:
        _age(p, 2 * 3600)
    props = _props_file(tmp_path, cfg)
    ledger = _path(table.location()) / LEDGER_PATH

    out = CliRunner().invoke(cli, ["gc", "--config", str(props)])
    assert out.exit_code == 0, out.output
    assert not ledger.exists(), "a read-only kts gc wrote the ledger"
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--delete"])
    assert out.exit_code == 0, out.output
    assert all(p.exists() for p in staged_paths), out.output
    # The run recorded when it first saw them unreferenced: that, not their mtime, starts their grace.
    first_seen = json.loads(ledger.read_text())["first_seen"]
    assert {f"data/{p.relative_to(_path(table.location()) / 'data')}" for p in staged_paths} <= set(first_seen)

    txn = load_table(cfg).transaction()
    with txn.update_snapshot().fast_append() as append:
        for f in staged:
            append.append_data_file(f)
    txn.commit_transaction()
    assert _spark_count(cfg) == 2 * SEGMENT_RECORDS + 100


@pytest.mark.timeout(1200)
def test_a_reader_of_an_expired_snapshot_keeps_its_files_for_the_grace_then_they_are_held(tmp_path: Path) -> None:
    """A reader planned its scan on a snapshot; Spark then rewrites every data file, the plugin expires that
    snapshot, and the versions that had it leave the metadata log. The planned files are days old by mtime, but
    orphan removal (grace 10 s) keeps them while they have been unreferenced for less than their grace (a day
    for data files, 10 s for metadata files), and the reader reads them all. Past the grace they go into the
    quarantine, byte for byte, and a purge past gc.quarantine.ms removes them."""
    cfg = _tiered(tmp_path, segments=4)
    table = load_table(cfg)
    planned = list(table.scan().plan_files())
    planned_rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=planned)
    planned_paths = [_path(t.file.file_path) for t in planned]
    digests = {p: _digest(p) for p in planned_paths}
    location = _path(table.location())
    for p in location.rglob("*"):
        if p.is_file():
            _age(p, 10 * DAY)
    out = spark_sql_statements(
        cfg["iceberg.mode.catalog.sqlite.path"],
        cfg["iceberg.mode.warehouse"],
        [
            "CALL kafka_tiered.system.rewrite_data_files(table => 'kafka.orders', "
            "options => map('rewrite-all', 'true'))",
        ],
    )
    assert out["rows"] == 4 * SEGMENT_RECORDS
    # The plugin's expiry (only the snapshots go from the metadata), then commits that push the versions that
    # had them out of the metadata log.
    assert expire_snapshots(load_table(cfg), MaintenanceSettings(snapshot_min_keep=1, snapshot_max_keep=1)).count
    with load_table(cfg).transaction() as txn:
        txn.set_properties({"write.metadata.previous-versions-max": "1"})
    with load_table(cfg).transaction() as txn:
        txn.set_properties({"kafka.test": "one more commit"})
    table = load_table(cfg)
    refs = referenced_files(table)
    assert not [p for p in planned_paths if f"file://{p}" in refs], "the rewrite kept a planned file"
    assert all(p.exists() for p in planned_paths)

    settings = MaintenanceSettings(orphan_grace_s=10)
    warehouse = cfg["iceberg.mode.warehouse"]
    t0 = time.time()
    first = remove_orphans(table, settings, warehouse=warehouse, now=t0)
    assert first.count == 0, first  # first seen unreferenced now, whatever their mtime
    again = remove_orphans(load_table(cfg), settings, warehouse=warehouse, now=t0 + 5)
    assert again.count == 0, again
    assert ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=planned) == planned_rows

    # Past 10 s the unreferenced metadata files go; data files wait a day whatever the setting.
    metadata = remove_orphans(load_table(cfg), settings, warehouse=warehouse, now=t0 + 11)
    assert metadata.count > 0 and all("/metadata/" in d for d in metadata.details), metadata
    assert all(p.exists() for p in planned_paths)

    gone = remove_orphans(load_table(cfg), settings, warehouse=warehouse, now=t0 + DATA_FILE_MIN_GRACE_S + 1)
    assert {_path(d) for d in gone.details} >= set(planned_paths), gone
    assert not any(p.exists() for p in planned_paths)
    store = FileIOHolding(table.io, warehouse)
    quarantine = Quarantine(store, store.root, settings.quarantine_s)
    held = {h.original: h for h in quarantine.held()}
    for p in planned_paths:
        h = held[f"file://{p}"]
        assert h.kind == "iceberg-orphan" and h.topic == "orders"
        assert [e.split(":")[0] for e in h.evidence] == [TABLE_UNREFERENCED_FOR_GRACE, TABLE_UNREFERENCED]
        assert _digest(_path(h.location)) == digests[p]
        assert _path(h.location).is_relative_to(_path(warehouse) / "kts-quarantine")
    assert load_table(cfg).scan().to_arrow().num_rows == 4 * SEGMENT_RECORDS
    # The ledger holds only what is still unreferenced and present: nothing now.
    assert json.loads((location / LEDGER_PATH).read_text())["first_seen"] == {}

    retention = settings.quarantine_s  # held that long (gc.quarantine.ms), then purged
    assert purge_quarantine(table.io, warehouse, retention, now=time.time() + 1).count == 0
    purged = purge_quarantine(table.io, warehouse, retention, now=time.time() + retention + 1)
    assert purged.count == len(held)
    assert not any(_path(h.location).exists() for h in held.values()) and quarantine.held() == []


def test_a_file_referenced_again_leaves_the_ledger_and_starts_over(tmp_path: Path) -> None:
    """A staged file seen unreferenced, then committed, is dropped from the ledger; were it unreferenced again
    later, its grace would count from then."""
    cfg = _tiered(tmp_path, segments=1)
    table = load_table(cfg)
    staged = write_data_files(
        table, kafka_rows(0, range(500, 510), str(uuid.uuid4()), "s"), uuid.uuid4(), itertools.count(0)
    )
    ledger = _path(table.location()) / LEDGER_PATH
    t0 = time.time()
    assert find_orphans(table, 3600, now=t0, record=True) == []
    recorded = json.loads(ledger.read_text())["first_seen"]
    (relative,) = [k for k in recorded if k.startswith("data/")]
    assert recorded[relative] == t0
    txn = load_table(cfg).transaction()
    with txn.update_snapshot().fast_append() as append:
        append.append_data_file(staged[0])
    txn.commit_transaction()
    assert find_orphans(load_table(cfg), 3600, now=t0 + 2 * DAY, record=True) == []
    assert relative not in json.loads(ledger.read_text())["first_seen"]


def test_a_move_without_both_signals_is_refused_and_a_file_referenced_meanwhile_kept(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    table = load_table(cfg)
    warehouse = cfg["iceberg.mode.warehouse"]
    (live,) = [t.file.file_path for t in table.scan().plan_files()]
    stray = _path(table.location()) / "data" / "stray.parquet"
    stray.write_bytes(b"PAR1 not really")
    no_grace = OrphanFile(f"file://{stray}", stray.stat().st_size, 0.0)  # no TABLE_UNREFERENCED_FOR_GRACE
    evidence = (Evidence(TABLE_UNREFERENCED_FOR_GRACE, "by hand"),)
    referenced = OrphanFile(live, 1, 0.0, evidence)
    held, kept = hold_orphans(table, [no_grace, referenced], warehouse, 3600)
    assert held == []
    assert "table-unreferenced-for-grace" in kept[0][1] and "references it now" in kept[1][1]
    assert stray.exists() and _path(live).exists()


def test_the_fileio_holding_store_keeps_to_the_warehouse(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    table = load_table(cfg)
    warehouse = cfg["iceberg.mode.warehouse"]
    store = FileIOHolding(table.io, warehouse)
    source = f"{warehouse}/kafka/orders/data/x.bin"
    store.put(source, b"12345")
    assert store.get(source) == b"12345" and store.size(source) == 5 and store.exists(source)
    target = f"{store.root}20261129T041500Z-9f3a/kafka/orders/data/x.bin"
    store.copy(source, target)
    assert store.get(target) == b"12345"
    assert list(store.list(store.root)) == [target]
    store.delete(source)
    store.delete(source)  # gone already: no error
    assert not store.exists(source) and store.size(source) is None
    with pytest.raises(FileNotFoundError):
        store.copy(source, target)
    assert store.relative(source) == "kafka/orders/data/x.bin"
    assert store.relative(f"file://{tmp_path}/elsewhere/y.parquet") is None  # outside the warehouse
    assert store.relative(target) is None  # the quarantine's own


def test_the_maintenance_thread_holds_orphans_in_the_quarantine_and_purges_them_after(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    table = load_table(cfg)
    warehouse = cfg["iceberg.mode.warehouse"]
    location = _path(table.location())
    stray = location / "data" / "stray.parquet"
    stray.write_bytes(b"a copy killed before its commit")
    settings = MaintenanceSettings(orphan_grace_s=3600, quarantine_s=1)
    maintainer = Maintainer(lambda: load_table(cfg).catalog, "kafka", settings, 60, 0.0, owner="a", warehouse=warehouse)
    maintainer.run_pass()
    assert stray.exists()  # first seen unreferenced now
    assert age_ledger(location, 2 * DAY) == 1
    maintainer.run_pass()
    assert not stray.exists()
    store = FileIOHolding(table.io, warehouse)
    (held,) = Quarantine(store, store.root).held()
    assert (
        held.original == f"file://{stray}" and _path(held.location).read_bytes() == b"a copy killed before its commit"
    )
    assert maintainer.stats.stats()["orphan-files-removed-total"] == 1
    time.sleep(1.5)  # past the quarantine's 1 s, with half a second to spare
    maintainer.run_pass()
    assert Quarantine(store, store.root).held() == [] and not _path(held.location).exists()
    assert maintainer.stats.stats()["quarantine-files-purged-total"] == 1
    assert load_table(cfg).scan().to_arrow().num_rows == SEGMENT_RECORDS


def test_kts_gc_delete_holds_orphans_in_the_warehouse_and_purges_them_after_gc_quarantine_ms(tmp_path: Path) -> None:
    cfg = _tiered(tmp_path, segments=1)
    location = _path(load_table(cfg).location())
    warehouse = cfg["iceberg.mode.warehouse"]
    stray = location / "data" / "stray.parquet"
    stray.write_bytes(b"left by a copy killed before its commit")
    props = _props_file(tmp_path, cfg)
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--delete"])
    assert out.exit_code == 0 and stray.exists(), out.output  # first seen unreferenced by this run
    assert age_ledger(location, 3 * DAY) == 1  # the default grace: iceberg.mode.maintenance.orphan.grace.ms
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--delete"])
    assert out.exit_code == 0, out.output
    assert not stray.exists() and "moved 1 objects" in out.output, out.output
    store = FileIOHolding(load_table(cfg).io, warehouse)
    (held,) = Quarantine(store, store.root).held()
    assert held.original == f"file://{stray}" and held.kind == "iceberg-orphan"
    out = CliRunner().invoke(cli, ["gc", "quarantine", "--config", str(props)])
    assert out.exit_code == 0 and f"file://{stray}" in out.output, out.output
    with open_manager(str(props), (), keys=False) as manager:  # what kts ls and kts gc --watch count
        assert quarantine_usage(manager) == (1, len(b"left by a copy killed before its commit"))
    # kts gc restore takes the warehouse's quarantine too: the file comes back byte for byte, and is held again.
    out = CliRunner().invoke(cli, ["gc", "restore", "--config", str(props), "--run", held.run])
    assert out.exit_code == 0 and "restored 1," in out.output, out.output
    assert stray.read_bytes() == b"left by a copy killed before its commit"
    assert Quarantine(store, store.root).held() == []
    # Restored, it waits the whole grace again: the ledger counts from the first pass that sees it unreferenced.
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--delete"])
    assert out.exit_code == 0 and stray.exists(), out.output
    assert age_ledger(location, 3 * DAY) == 1
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--delete"])
    assert out.exit_code == 0 and not stray.exists() and "moved 1 objects" in out.output, out.output
    (held,) = Quarantine(store, store.root).held()
    out = CliRunner().invoke(cli, ["gc", "--config", str(props), "--delete", "--set", "gc.quarantine.ms=0"])
    assert out.exit_code == 0 and "purged 1 objects" in out.output, out.output
    assert Quarantine(store, store.root).held() == [] and not _path(held.location).exists()


def test_orphans_of_a_table_on_s3_are_held_in_the_warehouse_by_a_server_side_copy(
    s3_moto_server: StoreServer,
    tmp_path: Path,
) -> None:
    """The same on S3 (moto): the quarantine's names are the warehouse's s3:// locations, the copy is S3's."""
    prefix = f"orphans-{uuid.uuid4().hex[:8]}/"
    storage = {f"storage.{k}": str(v) for k, v in s3_moto_server.config().items()}
    cfg = iceberg_config(
        tmp_path,
        **{"storage.backend.class": s3_moto_server.backend, "key.prefix": prefix, **storage},
        **{"iceberg.mode.maintenance.enabled": "false", "iceberg.mode.warehouse": ""},
    )
    tier(cfg, new_tip(), [segment_of(tmp_path / "seg", order_records(0, SEGMENT_RECORDS))])
    table = load_table(cfg)
    warehouse = f"s3://{storage['storage.s3.bucket.name']}/{prefix}iceberg"  # the plugin's: under key.prefix
    assert table.location() == f"{warehouse}/kafka/orders"
    stray = f"{table.location()}/data/stray.parquet"
    store = FileIOHolding(table.io, warehouse)
    store.put(stray, b"left by a copy killed before its commit")
    settings = MaintenanceSettings(orphan_grace_s=3600)
    t0 = time.time()
    assert remove_orphans(table, settings, warehouse=warehouse, now=t0).count == 0
    later = t0 + DATA_FILE_MIN_GRACE_S
    assert remove_orphans(load_table(cfg), settings, warehouse=warehouse, now=later).details == [stray]
    assert not store.exists(stray)
    (held,) = Quarantine(store, store.root).held()
    assert held.original == stray and held.location.startswith(f"{warehouse}/kts-quarantine/")
    assert store.get(held.location) == b"left by a copy killed before its commit"
    assert load_table(cfg).scan().to_arrow().num_rows == SEGMENT_RECORDS
