"""The per-table ledger of unreferenced files (rsm.iceberg.maintenance.orphans.UnreferencedLedger): what is written
reads back the same, and a ledger that cannot be read starts over empty (files then wait longer, never less)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from rsm.iceberg.maintenance.orphans import LEDGER_PATH, UnreferencedLedger, orphan_grace_s

paths = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)


@given(first_seen=st.dictionaries(paths, times, max_size=20))
def test_a_ledger_reads_back_what_was_written(first_seen: dict[str, float]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        io, location = PyArrowFileIO(), f"file://{tmp}/table"
        UnreferencedLedger(f"{location}/{LEDGER_PATH}", dict(first_seen)).write(io)
        assert UnreferencedLedger.read(io, location).first_seen == first_seen


def test_a_missing_or_unreadable_ledger_starts_over_empty(tmp_path: Path) -> None:
    io, location = PyArrowFileIO(), f"file://{tmp_path}/table"
    assert UnreferencedLedger.read(io, location).first_seen == {}
    path = tmp_path / "table" / LEDGER_PATH
    path.parent.mkdir(parents=True)
    for bad in (b"{not json", b'{"format": 1}', b'{"first_seen": {"data/x": "soon"}}', b"[]"):
        path.write_bytes(bad)
        assert UnreferencedLedger.read(io, location).first_seen == {}, bad


def test_data_files_wait_a_day_whatever_the_grace_metadata_files_the_grace() -> None:
    assert orphan_grace_s("data/day=2026-01-01/x.parquet", 3600) == 86400
    assert orphan_grace_s("data/x.parquet", 3 * 86400) == 3 * 86400
    assert orphan_grace_s("metadata/00001-x.metadata.json", 3600) == 3600
