"""The latest table's schema on a real SQLite catalog: a copy whose columns the table already has evolves
nothing (pyiceberg reads Iceberg's strings, binaries and lists back as Arrow's large types), one that brings a new
column evolves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from test_iceberg_latest_merge import SPEC, Rec, chunk

from rsm.iceberg.latest import DELETED
from rsm.iceberg.latest_table import LatestChanges, LatestWriter, needs_evolution


def changes(first: int, keys: list[bytes]) -> LatestChanges:
    pending = LatestChanges(SPEC)
    pending.add(chunk([Rec(0, first + i, k, b"v-%d" % (first + i)) for i, k in enumerate(keys)]))
    return pending


def test_a_copy_with_the_tables_columns_evolves_no_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}")
    writer = LatestWriter(lambda: catalog, 3)
    assert writer.apply(changes(0, [b"a", b"b"]), "kafka.orders", "copy 1") is not None
    evolutions: list[str] = []
    real = Table.update_schema

    def counted(self: Table, *args: Any, **kwargs: Any) -> Any:
        evolutions.append(self.name()[-1])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Table, "update_schema", counted)
    second = changes(2, [b"a", b"c"])
    assert second.changes is not None
    table = catalog.load_table(SPEC.identifier)
    assert not needs_evolution(schema_to_pyarrow(table.schema()), second.changes.drop_columns([DELETED]).schema)
    assert writer.apply(second, "kafka.orders", "copy 2") is not None
    assert evolutions == []
    rows = catalog.load_table(SPEC.identifier).scan().to_arrow()
    assert sorted(rows.column("key_raw").to_pylist()) == [b"a", b"b", b"c"]


def test_a_new_column_or_a_wider_type_still_evolves() -> None:
    have = pa.schema([("key_raw", pa.large_binary()), ("n", pa.int32()), ("tags", pa.large_list(pa.large_string()))])
    assert not needs_evolution(have, pa.schema([("key_raw", pa.binary()), ("tags", pa.list_(pa.string()))]))
    assert needs_evolution(have, pa.schema([("extra", pa.string())]))
    assert needs_evolution(have, pa.schema([("n", pa.int64())]))
    assert needs_evolution(have, pa.schema([("tags", pa.list_(pa.int64()))]))
    assert needs_evolution(have, pa.schema([("key_raw", pa.string())]))
