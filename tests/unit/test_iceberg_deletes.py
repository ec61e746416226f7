"""rsm.iceberg.deletes on a real SQLite catalog: a retention delete takes only the rows its segment wrote (rows
written before rows carried ids are never deleted on a segment's behalf), from the table its manifest names."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from iceberg_tables import kafka_rows, sql_catalog, table_rows, topic_table

from rsm.iceberg import schema as schema_module
from rsm.iceberg import tables as tables_module
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


def _append(table: Any, rows: pa.Table) -> None:
    """Rows committed as they are, replacing nothing (whatever history left them side by side)."""
    with table.transaction() as txn, txn.update_snapshot().fast_append() as append:
        for f in write_data_files(table, rows, uuid.uuid4(), itertools.count()):
            append.append_data_file(f)


_OLD_FIELDS = tuple(f for f in schema_module.KAFKA_FIELDS if f[0] not in ("segment_id", "topic_id"))


def test_a_dead_topics_segment_delete_leaves_rows_without_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows written before rows carried ids (null) cannot tell which topic incarnation wrote them: deleting the
    rows of a dead topic's segment takes only rows with its ids, never those, nor the live topic's."""
    catalog = sql_catalog(tmp_path)
    with monkeypatch.context() as before:  # the writer as it was: a table without the id fields
        for module in (schema_module, tables_module):
            before.setattr(module, "KAFKA_FIELDS", _OLD_FIELDS)
        table = topic_table(catalog)
        assert "topic_id" not in {f.name for f in table.schema().find_type("kafka").fields}  # type: ignore[attr-defined]
        _append(table, kafka_rows(0, range(20), None, None, fields=[n for n, _, _ in _OLD_FIELDS]))
    table = topic_table(catalog)  # loaded by this release: the fields are added, old rows read null
    _append(table, kafka_rows(0, range(5, 15), A, OLD))  # the dead topic's segment
    _append(table, kafka_rows(0, range(15, 30), B, NEW))  # the live topic, created again
    delete_segment_rows(Replacer(lambda: catalog, 3), _section("kafka.orders", 0, 5, 14), "orders", A, OLD, "t")
    rows = [(0, o, None, None) for o in range(20)] + [(0, o, B, NEW) for o in range(15, 30)]
    assert table_rows(table) == sorted(rows, key=lambda r: (r[0], r[1], r[2] or "", r[3] or ""))


def test_a_segment_delete_on_a_table_without_the_id_fields_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = sql_catalog(tmp_path)
    monkeypatch.setattr(schema_module, "KAFKA_FIELDS", _OLD_FIELDS)
    monkeypatch.setattr(tables_module, "KAFKA_FIELDS", _OLD_FIELDS)
    table = topic_table(catalog)
    _append(table, kafka_rows(0, range(20), None, None, fields=[n for n, _, _ in _OLD_FIELDS]))
    snapshots = len(table.refresh().snapshots())
    delete_segment_rows(Replacer(lambda: catalog, 3), _section("kafka.orders", 0, 0, 19), "orders", A, OLD, "t")
    assert len(table.refresh().snapshots()) == snapshots
    assert [r[1] for r in table_rows(table)] == list(range(20))


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
