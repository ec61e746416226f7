"""rsm.iceberg.transaction on a real SQLite catalog: the metadata view is pyiceberg's own, kept while nothing
changes, built again when an update is staged or the table is refreshed; a replace builds it a few times only."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest
from iceberg_tables import kafka_rows, sql_catalog, table_rows, topic_table
from pyiceberg.table import Transaction

from rsm.iceberg import transaction as transaction_module
from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.replace import Replacer, RowSelection
from rsm.iceberg.transaction import transaction

A, S1, S2 = "AAAAAAAAAAAAAAAAAAAAAA", "segment1xxxxxxxxxxxxxx", "segment2xxxxxxxxxxxxxx"


def _replace(catalog: Any, table: Any, offsets: range, segment: str) -> None:
    files = write_data_files(table, kafka_rows(0, offsets, A, segment), uuid.uuid4(), itertools.count())
    sel = RowSelection(0, offsets[0], offsets[-1], A)
    Replacer(lambda: catalog, 3).replace(("kafka", "orders"), sel, files, {}, "t", "c")


def test_the_view_is_pyicebergs_and_is_kept_until_a_change(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    _replace(catalog, table, range(10), S1)
    table = catalog.load_table(("kafka", "orders"))
    txn = transaction(table)
    first = txn.table_metadata
    assert txn.table_metadata is first
    assert first.model_dump() == Transaction(table).table_metadata.model_dump()
    txn.set_properties({"kafka.test": "1"})
    staged = txn.table_metadata
    assert staged is not first
    assert staged.properties["kafka.test"] == "1"
    assert txn.table_metadata is staged
    txn.commit_transaction()
    assert catalog.load_table(("kafka", "orders")).properties["kafka.test"] == "1"


def test_a_refreshed_table_gives_a_new_view(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    txn = transaction(table)
    before = txn.table_metadata
    _replace(catalog, topic_table(catalog), range(5), S1)  # another writer commits
    table.refresh()
    after = txn.table_metadata
    assert after is not before
    assert after.current_snapshot_id is not None and before.current_snapshot_id is None


def test_a_replace_builds_the_view_a_few_times_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyiceberg's own transaction builds (and deep-copies) it on every read: 16 times for a merge append."""
    catalog = sql_catalog(tmp_path)
    table = topic_table(catalog)
    _replace(catalog, table, range(10), S1)
    built = 0
    real = transaction_module.update_table_metadata

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal built
        built += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(transaction_module, "update_table_metadata", counting)
    _replace(catalog, table, range(10, 20), S1)  # a merge append
    _replace(catalog, table, range(5, 20), S2)  # an overwrite: removes and rewrites files
    assert 0 < built <= 8
    assert table_rows(catalog.load_table(("kafka", "orders"))) == [(0, o, A, S1) for o in range(5)] + [
        (0, o, A, S2) for o in range(5, 20)
    ]
