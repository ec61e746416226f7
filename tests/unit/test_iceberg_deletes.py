"""rsm.iceberg.deletes on a real SQLite catalog: a retention delete takes only the rows its segment wrote (rows
written before rows carried ids go by offsets), from the table its manifest names."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from iceberg_tables import kafka_rows, sql_catalog, table_rows, topic_table

from rsm.iceberg.data_files import write_data_files
from rsm.iceberg.deletes import delete_segment_rows
from rsm.iceberg.replace import Replacer, RowSelection
from rsm.iceberg.section import IcebergSection, section_identifier

A, B = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
OLD, NEW = "oldsegmentxxxxxxxxxxxx", "newsegmentxxxxxxxxxxxx"


def _section(table: str, partition: int, first: int, last: int) -> IcebergSection:
    return IcebergSection(table, 1, partition, first, last, last - first + 1, 1, 100, ())


def _copy(replacer: Replacer, catalog: object, table: str, rows_args: tuple, selection: RowSelection) -> None:
    t = topic_table(catalog, table)  # type: ignore[arg-type]
    files = write_data_files(t, kafka_rows(*rows_args), uuid.uuid4(), itertools.count())
    replacer.replace(("kafka", table), selection, files, {}, "copy", "the commit to")


def test_deleting_a_superseded_segment_leaves_the_rows_of_the_one_that_replaced_it(tmp_path: Path) -> None:
    """A new leader's segment replaced offsets 5..14 of the old segment 0..14; retention then deletes the old
    segment (its manifest still says 0..14): offsets 0..4 go, the new segment's 5..14 stay."""
    catalog = sql_catalog(tmp_path)
    replacer = Replacer(lambda: catalog, 3)
    _copy(replacer, catalog, "orders", (0, range(15), A, OLD), RowSelection(0, 0, 14, A))
    _copy(replacer, catalog, "orders", (0, range(5, 15), A, NEW), RowSelection(0, 5, 14, A))
    delete_segment_rows(replacer, _section("kafka.orders", 0, 0, 14), "orders", A, OLD, "delete of old")
    assert table_rows(topic_table(catalog)) == [(0, o, A, NEW) for o in range(5, 15)]


def test_a_recreated_topics_delete_leaves_the_old_topics_rows(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    replacer = Replacer(lambda: catalog, 3)
    _copy(replacer, catalog, "orders", (0, range(10), A, OLD), RowSelection(0, 0, 9, A))
    _copy(replacer, catalog, "orders", (0, range(10), B, NEW), RowSelection(0, 0, 9, B))
    delete_segment_rows(replacer, _section("kafka.orders", 0, 0, 9), "orders", B, NEW, "delete of new")
    assert table_rows(topic_table(catalog)) == [(0, o, A, OLD) for o in range(10)]


def test_rows_without_ids_are_deleted_by_their_offsets(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    replacer = Replacer(lambda: catalog, 3)
    _copy(replacer, catalog, "orders", (0, range(10), None, None), RowSelection(0, 0, 9))
    _copy(replacer, catalog, "orders", (1, range(10), None, None), RowSelection(1, 0, 9))
    delete_segment_rows(replacer, _section("kafka.orders", 0, 3, 9), "orders", A, OLD, "delete")
    assert table_rows(topic_table(catalog)) == [(0, o, None, None) for o in range(3)] + [
        (1, o, None, None) for o in range(10)
    ]


def test_the_delete_goes_to_the_table_the_manifest_names(tmp_path: Path) -> None:
    """The namespace the configuration names now is not read: a manifest of ``old_ns.orders`` deletes there."""
    catalog = sql_catalog(tmp_path)
    catalog.create_namespace("old_ns")
    replacer = Replacer(lambda: catalog, 3)
    t = topic_table(catalog)
    from rsm.iceberg.tables import load_or_create

    old = load_or_create(catalog, ("old_ns", "orders"), "orders", None, 1 << 20, 3)
    files = write_data_files(old, kafka_rows(0, range(10), A, OLD), uuid.uuid4(), itertools.count())
    replacer.replace(("old_ns", "orders"), RowSelection(0, 0, 9, A), files, {}, "copy", "the commit to")
    _copy(replacer, catalog, "orders", (0, range(10), A, OLD), RowSelection(0, 0, 9, A))
    delete_segment_rows(replacer, _section("old_ns.orders", 0, 0, 9), "orders", A, OLD, "delete")
    assert table_rows(old) == []
    assert len(table_rows(t)) == 10


def test_a_table_that_is_gone_is_nothing_to_delete(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    replacer = Replacer(lambda: catalog, 3)
    delete_segment_rows(replacer, _section("kafka.gone", 0, 0, 9), "gone", A, OLD, "delete")


@given(
    namespace=st.from_regex(r"[a-z_]{1,8}(\.[a-z_]{1,8}){0,2}", fullmatch=True),
    topic=st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True),
)
def test_section_identifier_splits_off_the_topic_whatever_its_dots(namespace: str, topic: str) -> None:
    assert section_identifier(f"{namespace}.{topic}", topic) == (namespace, topic)


def test_a_table_not_named_after_the_topic_splits_at_the_last_dot() -> None:
    assert section_identifier("lake.kafka.t_orders", "orders") == ("lake.kafka", "t_orders")
    with pytest.raises(ValueError, match="not namespace.name"):
        section_identifier("orders", "orders")
