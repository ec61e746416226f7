"""rsm.iceberg.replace on a real SQLite catalog: which rows a selection takes (by offsets, topic and segment;
null ids by offsets alone), files dropped whole by their bounds or rewritten, conflicts retried, a commit whose
outcome is unknown read back before anything is deleted, and the hook that stops a cancelled copy's commit."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from iceberg_tables import kafka_rows, sql_catalog, table_rows, topic_table
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from sqlalchemy.exc import OperationalError

from rsm.errors import RemoteStorageException
from rsm.iceberg import replace as replace_module
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.replace import COMMIT_ID, CommitOutcomeUnknown, Replacer, RowSelection
from rsm.iceberg.transaction import transaction

A, B = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"  # topic ids
S1, S2 = "segment1xxxxxxxxxxxxxx", "segment2xxxxxxxxxxxxxx"


def _exists(path: str) -> bool:
    return Path(urlparse(path).path).exists()


def _files(table: Any, rows: pa.Table) -> list[Any]:
    return write_data_files(table, rows, uuid.uuid4(), itertools.count())


_ids = st.sampled_from([A, B, None])
_row = st.tuples(st.integers(0, 2), st.integers(0, 30), _ids, st.sampled_from([S1, S2, None]))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(_row, min_size=1, max_size=40),
    partition=st.integers(0, 2),
    first=st.integers(0, 30),
    span=st.integers(0, 30),
    topic_id=_ids,
    segment_id=st.sampled_from([S1, S2, None]),
    ids_required=st.booleans(),
)
def test_the_mask_selects_by_offsets_then_by_ids_where_rows_have_them(
    rows: list[tuple[int, int, str | None, str | None]],
    partition: int,
    first: int,
    span: int,
    topic_id: str | None,
    segment_id: str | None,
    ids_required: bool,
) -> None:
    """Rows without ids are selected by their offsets alone, unless the ids are required."""
    sel = RowSelection(partition, first, first + span, topic_id, segment_id, ids_required)
    table = pa.concat_tables([kafka_rows(p, [o], t, s) for p, o, t, s in rows])

    def matches(wanted: str | None, have: str | None) -> bool:
        return wanted is None or have == wanted or (have is None and not ids_required)

    want = [
        p == partition and first <= o <= first + span and matches(topic_id, t) and matches(segment_id, s)
        for p, o, t, s in rows
    ]
    assert sel.mask(table).to_pylist() == want


def test_rows_without_the_id_fields_are_selected_by_offset() -> None:
    old = kafka_rows(1, [5, 6, 20], None, None, fields=["partition", "offset", "timestamp"])
    assert RowSelection(1, 0, 10, A, S1).mask(old).to_pylist() == [True, True, False]


def test_a_file_inside_the_selection_goes_whole_and_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    replacer = Replacer(lambda: catalog, 3)
    replacer.replace(
        ("kafka", "orders"), RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c"
    )

    def no_reads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a data file was read")

    monkeypatch.setattr(replace_module, "ArrowScan", no_reads)
    new = _files(table, kafka_rows(0, range(10), A, S2))
    replacer.replace(("kafka", "orders"), RowSelection(0, 0, 9, A), new, {}, "t", "c")
    assert table_rows(table) == [(0, o, A, S2) for o in range(10)]


def test_a_file_partly_selected_is_rewritten_without_those_rows(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    replacer = Replacer(lambda: catalog, 3)
    replacer.replace(
        ("kafka", "orders"), RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c"
    )
    new = _files(table, kafka_rows(0, range(5, 15), A, S2))
    replacer.replace(("kafka", "orders"), RowSelection(0, 5, 14, A), new, {}, "t", "c")
    assert table_rows(table) == [(0, o, A, S1) for o in range(5)] + [(0, o, A, S2) for o in range(5, 15)]


def test_another_topics_rows_at_the_same_offsets_stay(tmp_path: Path) -> None:
    """A topic deleted and created again under the same name starts at offset 0 again: its copies replace only
    its own rows (and rows without a topic id, written before rows had one)."""
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    replacer = Replacer(lambda: catalog, 3)
    ident = ("kafka", "orders")
    replacer.replace(ident, RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c")
    replacer.replace(
        ident, RowSelection(0, 10, 14, None), _files(table, kafka_rows(0, range(10, 15), None, None)), {}, "t", "c"
    )
    replacer.replace(ident, RowSelection(0, 0, 14, B), _files(table, kafka_rows(0, range(15), B, S2)), {}, "t", "c")
    assert table_rows(table) == sorted(
        [(0, o, A, S1) for o in range(10)] + [(0, o, B, S2) for o in range(15)], key=lambda r: (r[1], r[2])
    )


class _Flaky:
    """The catalog's ``commit_table``, failing as told: ``before`` raises without committing, ``after`` commits and
    then raises (the reply was lost), each once; ``reads_fail`` makes every later ``load_table`` fail too."""

    def __init__(self, catalog: Any, error: Exception, when: str, reads_fail: bool = False) -> None:
        self.catalog = catalog
        self.error = error
        self.when = when
        self.reads_fail = reads_fail
        self.failed = False
        self.down = False
        self.real_commit = catalog.commit_table
        self.real_load = catalog.load_table
        catalog.commit_table = self.commit_table
        catalog.load_table = self.load_table

    def commit_table(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed:
            return self.real_commit(*args, **kwargs)
        self.failed = True
        if self.when == "before":
            raise self.error
        self.real_commit(*args, **kwargs)
        self.down = self.reads_fail
        raise self.error

    def load_table(self, ident: Any) -> Any:
        if self.down:
            raise OperationalError("SELECT", {}, ConnectionError("the database went away"))
        return self.real_load(ident)


_LOST = OperationalError("COMMIT", {}, ConnectionError("server closed the connection unexpectedly"))


@pytest.mark.parametrize("error", [_LOST, CommitStateUnknownException("502 Bad Gateway")], ids=["lost", "rest"])
def test_a_commit_that_landed_though_it_failed_keeps_its_files(tmp_path: Path, error: Exception) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    replacer = Replacer(lambda: catalog, 3)
    ident = ("kafka", "orders")
    replacer.replace(ident, RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c")
    _Flaky(catalog, error, "after")
    # The new segment overlaps half of the first one's file: that file is rewritten in the same commit.
    new = _files(table, kafka_rows(0, range(5, 15), A, S2))
    snapshot_id = replacer.replace(ident, RowSelection(0, 5, 14, A), new, {}, "t", "c")
    table = table.refresh()
    assert snapshot_id == table.current_snapshot().snapshot_id
    assert table.current_snapshot().summary[COMMIT_ID]
    assert table_rows(table) == [(0, o, A, S1) for o in range(5)] + [(0, o, A, S2) for o in range(5, 15)]
    assert all(_exists(task.file.file_path) for task in table.scan().plan_files())


def test_a_commit_that_did_not_land_deletes_its_rewrites_and_fails(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    replacer = Replacer(lambda: catalog, 3)
    ident = ("kafka", "orders")
    replacer.replace(ident, RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c")
    before = table.refresh().current_snapshot().snapshot_id
    _Flaky(catalog, _LOST, "before")
    data_dir = Path(urlparse(table.location()).path) / "data"
    files_before = set(data_dir.rglob("*.parquet"))
    new = _files(table, kafka_rows(0, range(5, 15), A, S2))
    with pytest.raises(OperationalError):
        replacer.replace(ident, RowSelection(0, 5, 14, A), new, {}, "t", "c")
    assert table.refresh().current_snapshot().snapshot_id == before
    # the rewrite of the first file is gone; the new segment's files are the caller's to delete
    assert set(data_dir.rglob("*.parquet")) == files_before | {Path(urlparse(f.file_path).path) for f in new}


def test_a_commit_that_cannot_be_read_back_deletes_nothing(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    replacer = Replacer(lambda: catalog, 3)
    ident = ("kafka", "orders")
    replacer.replace(ident, RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c")
    flaky = _Flaky(catalog, _LOST, "after", reads_fail=True)
    new = _files(table, kafka_rows(0, range(5, 15), A, S2))
    with pytest.raises(CommitOutcomeUnknown, match="(?s)could not be read back.*kept"):
        replacer.replace(ident, RowSelection(0, 5, 14, A), new, {}, "copy of segment x", "c")
    flaky.down = False
    table = table.refresh()
    assert table_rows(table) == [(0, o, A, S1) for o in range(5)] + [(0, o, A, S2) for o in range(5, 15)]
    assert all(_exists(task.file.file_path) for task in table.scan().plan_files())


def test_conflicts_are_retried_then_named(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    ident = ("kafka", "orders")
    _Flaky(catalog, CommitFailedException("another writer"), "before")
    Replacer(lambda: catalog, 1).replace(
        ident, RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c"
    )
    assert len(table_rows(table)) == 10
    real = catalog.commit_table

    def always(*args: Any, **kwargs: Any) -> Any:
        raise CommitFailedException("another writer")

    catalog.commit_table = always
    with pytest.raises(RemoteStorageException, match=r"failed 2 times.*iceberg.mode.commit.retries"):
        Replacer(lambda: catalog, 1).replace(ident, RowSelection(0, 0, 4, A), [], {}, "t", "deleting from")
    catalog.commit_table = real
    assert len(table_rows(table)) == 10


def test_a_hook_that_raises_before_the_commit_commits_nothing(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    ident = ("kafka", "orders")
    replacer = Replacer(lambda: catalog, 3)
    replacer.replace(ident, RowSelection(0, 0, 9, A), _files(table, kafka_rows(0, range(10), A, S1)), {}, "t", "c")
    before = table.refresh().current_snapshot().snapshot_id
    data_dir = Path(urlparse(table.location()).path) / "data"
    files_before = set(data_dir.rglob("*.parquet"))

    class Cancelled(Exception):
        pass

    def cancelled() -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        replacer.replace(ident, RowSelection(0, 5, 9, A), [], {}, "t", "c", before_commit=cancelled)
    assert table.refresh().current_snapshot().snapshot_id == before
    assert set(data_dir.rglob("*.parquet")) == files_before  # its rewrite of the first file is deleted


def test_the_cached_transaction_metadata_follows_each_staged_change(tmp_path: Path) -> None:
    table = topic_table(sql_catalog(tmp_path))
    txn = transaction(table)
    first = txn.table_metadata
    assert txn.table_metadata is first  # derived once while nothing changes
    txn.set_properties({"kafka.test": "1"})
    assert txn.table_metadata.properties["kafka.test"] == "1"
    with txn.update_snapshot().fast_append() as append:
        for f in _files(table, kafka_rows(0, range(5), A, S1)):
            append.append_data_file(f)
    committed = txn.commit_transaction()
    assert committed.properties["kafka.test"] == "1"
    assert len(table_rows(committed)) == 5
