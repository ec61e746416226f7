"""Iceberg-mode copies of many partitions into one table take turns at the commit: the plugin's own copier
threads never make each other's commits retry, and every row lands exactly once (real manager, SQLite catalog,
filesystem warehouse). A commit to another table, or by another writer, still goes ahead or retries as before."""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from iceberg_tables import kafka_rows, sql_catalog, topic_table
from iceberg_testing import iceberg_config, iter_rows, load_table, order_records, segment_of

import rsm.iceberg.latest_table as latest_module
import rsm.iceberg.replace as replace_module
from rsm import RemoteStorageManager
from rsm.formats.iceberg import iceberg_format
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.latest_table import read_watermarks
from rsm.iceberg.replace import Replacer, RowSelection
from rsm.metadata import TopicIdPartition, random_kafka_uuid

PARTITIONS = 8
SEGMENTS = 3  # per partition, copied one after another by the partition's thread
RECORDS = 200
PLAN_PAUSE_S = 0.05
"""Added to each commit's planning (after the table is loaded, before the commit): a slower catalog's window,
long enough that copies committing at once to a table they each loaded would conflict nearly every time."""


class _Retries(logging.Handler):
    """pyiceberg's log of a commit retried after a concurrent update."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Commit failed due to a concurrent update"):
            self.count += 1


def test_copies_of_many_partitions_into_one_table_never_retry_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = iceberg_config(tmp_path, **{"iceberg.mode.maintenance.enabled": "false"})
    real_stale = replace_module.stale_files

    def slow_stale(*args: Any, **kwargs: Any) -> Any:
        time.sleep(PLAN_PAUSE_S)
        return real_stale(*args, **kwargs)

    monkeypatch.setattr(replace_module, "stale_files", slow_stale)
    retries = _Retries()
    logging.getLogger("pyiceberg").addHandler(retries)
    topic_id = random_kafka_uuid()
    segments = {
        p: [
            segment_of(tmp_path / f"seg-{p}-{s}", order_records(s * RECORDS, RECORDS), per_batch=20)
            for s in range(SEGMENTS)
        ]
        for p in range(PARTITIONS)
    }
    start = threading.Barrier(PARTITIONS)
    try:
        with RemoteStorageManager() as m:
            m.configure(dict(cfg))

            def copy_partition(p: int) -> None:
                tip = TopicIdPartition(topic_id, "orders", p)
                start.wait(timeout=60)
                for files in segments[p]:
                    m.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())

            # The table exists before the copies start, so that they all commit to it, none creating it.
            seed = segment_of(tmp_path / "seed", order_records(0, 10))
            m.copy_log_segment_data(
                seed.to_metadata(TopicIdPartition(topic_id, "orders", PARTITIONS)), seed.to_log_segment_data()
            )
            with concurrent.futures.ThreadPoolExecutor(PARTITIONS) as pool:
                for copy in [pool.submit(copy_partition, p) for p in range(PARTITIONS)]:
                    copy.result()
            replacer = iceberg_format(m).mode().writer.replacer
            assert retries.count == 0, f"pyiceberg retried {retries.count} commits"
            assert replacer.conflicts == 0
            assert len(replacer.locks) == 0  # no table's entry outlives its commits
    finally:
        logging.getLogger("pyiceberg").removeHandler(retries)
    rows = list(iter_rows(load_table(cfg)))
    got = sorted((r["kafka"]["partition"], r["kafka"]["offset"]) for r in rows if r["kafka"]["partition"] < PARTITIONS)
    assert got == [(p, o) for p in range(PARTITIONS) for o in range(SEGMENTS * RECORDS)]  # each row exactly once


def test_latest_table_updates_of_many_partitions_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each copy's update of the topic's latest-per-key table replaces the files of the key buckets it touches,
    which the other partitions' updates read too: they take turns from the table's load to the commit, so none
    starts over, and every partition's newest offset is applied."""
    cfg = iceberg_config(
        tmp_path,
        **{"iceberg.mode.maintenance.enabled": "false", "iceberg.mode.table.orders.latest.enabled": "true"},
    )
    real_past = latest_module.past_watermarks

    def slow_past(*args: Any, **kwargs: Any) -> Any:
        time.sleep(PLAN_PAUSE_S)  # between the table's load and its commit
        return real_past(*args, **kwargs)

    monkeypatch.setattr(latest_module, "past_watermarks", slow_past)
    retries = _Retries()
    logging.getLogger("pyiceberg").addHandler(retries)
    topic_id = random_kafka_uuid()
    segments = {
        p: segment_of(tmp_path / f"seg-{p}", order_records(0, RECORDS), per_batch=20) for p in range(PARTITIONS)
    }
    start = threading.Barrier(PARTITIONS)
    try:
        with RemoteStorageManager() as m:
            m.configure(dict(cfg))

            def copy_partition(p: int) -> None:
                files = segments[p]
                start.wait(timeout=60)
                m.copy_log_segment_data(
                    files.to_metadata(TopicIdPartition(topic_id, "orders", p)), files.to_log_segment_data()
                )

            with concurrent.futures.ThreadPoolExecutor(PARTITIONS) as pool:
                for copy in [pool.submit(copy_partition, p) for p in range(PARTITIONS)]:
                    copy.result()
            writer = iceberg_format(m).mode().writer
            assert writer.latest.conflicts == 0
            assert retries.count == 0, f"pyiceberg retried {retries.count} commits"
            assert len(writer.latest.locks) == 0
            latest = writer.handle.catalog.load_table(("kafka", "orders_latest"))
    finally:
        logging.getLogger("pyiceberg").removeHandler(retries)
    assert read_watermarks(latest) == {(topic_id, p): RECORDS - 1 for p in range(PARTITIONS)}


def test_another_writers_commit_still_conflicts_and_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit by a writer outside the plugin (another broker) between the plugin's load and its commit: the
    lock does not hide it; the commit retries and lands, and the counter counts the retry."""
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    topic_id = "AAAAAAAAAAAAAAAAAAAAAA"
    other = Replacer(lambda: catalog, 3)  # another broker's plugin: its own locks
    real_stale = replace_module.stale_files
    interfered = threading.Event()

    def stale_then_interfere(tbl: Any, selection: RowSelection) -> Any:
        out = real_stale(tbl, selection)
        if not interfered.is_set():
            interfered.set()
            files = write_data_files(tbl, kafka_rows(1, range(5), topic_id, "other"), *_ids())
            other.replace(("kafka", "orders"), RowSelection(1, 0, 4, topic_id), files, {}, "other", "c")
        return out

    monkeypatch.setattr(replace_module, "stale_files", stale_then_interfere)
    ours = Replacer(lambda: catalog, 3)
    files = write_data_files(table, kafka_rows(0, range(10), topic_id, "ours"), *_ids())
    assert ours.replace(("kafka", "orders"), RowSelection(0, 0, 9, topic_id), files, {}, "ours", "c") is not None
    assert interfered.is_set()
    assert ours.conflicts >= 1
    kafka = catalog.load_table(("kafka", "orders")).scan().to_arrow()["kafka"].combine_chunks()
    got = sorted(zip(kafka.field("partition").to_pylist(), kafka.field("offset").to_pylist(), strict=True))
    assert got == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]


def _ids() -> tuple[uuid.UUID, itertools.count[int]]:
    return uuid.uuid4(), itertools.count()
