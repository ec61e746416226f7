"""Which delete files compaction (rsm.iceberg.maintenance.compaction) takes as applying to a data file it planned to
rewrite: position deletes by their ``file_path`` bounds, else by spec and partition; equality deletes by spec and
partition, an unpartitioned spec's hitting every partition. Data files built directly (no table)."""

from __future__ import annotations

from datetime import date

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from rsm.iceberg.maintenance.compaction import POSITION_PATH_FIELD_ID, _may_apply

DAY1, DAY2 = Record(date(2026, 1, 1)), Record(date(2026, 1, 2))
DATA = "file:///w/kafka/orders/data/day=2026-01-01/00000-0-b.parquet"


def _file(
    content: DataFileContent, path: str, partition: Record, spec_id: int = 0, paths: tuple[str, str] | None = None
) -> DataFile:
    lower = {POSITION_PATH_FIELD_ID: paths[0].encode()} if paths else None
    upper = {POSITION_PATH_FIELD_ID: paths[1].encode()} if paths else None
    f = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=1,
        file_size_in_bytes=1,
        lower_bounds=lower,
        upper_bounds=upper,
    )
    f.spec_id = spec_id
    return f


DATA_FILE = _file(DataFileContent.DATA, DATA, DAY1)


def test_position_deletes_apply_by_their_path_bounds_whatever_the_partition() -> None:
    pos = DataFileContent.POSITION_DELETES
    assert _may_apply(_file(pos, "d1", DAY1, paths=(DATA, DATA)), DATA_FILE)
    assert _may_apply(_file(pos, "d2", DAY2, paths=(DATA[:-9], DATA + "z")), DATA_FILE)
    assert not _may_apply(_file(pos, "d3", DAY1, paths=(DATA + "a", DATA + "z")), DATA_FILE)
    assert not _may_apply(_file(pos, "d4", DAY1, paths=("file:///a", DATA[:-1])), DATA_FILE)


def test_deletes_without_path_bounds_apply_in_their_partition_or_from_another_spec() -> None:
    for content in (DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES):
        assert _may_apply(_file(content, "d1", DAY1), DATA_FILE)
        assert not _may_apply(_file(content, "d2", DAY2), DATA_FILE)
        assert _may_apply(_file(content, "d3", Record(), spec_id=1), DATA_FILE)  # e.g. unpartitioned: global
