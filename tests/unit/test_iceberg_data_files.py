"""rsm.iceberg.data_files on a real SQLite catalog: the bounds each data file gets are those of its own rows
(one file per day), files sharing a day get none, and uncommitted files are deleted."""

from __future__ import annotations

import itertools
import logging
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iceberg_tables import kafka_rows, sql_catalog, topic_table
from pyiceberg.io.pyarrow import _determine_partitions

from rsm.iceberg.data_files import BOUNDED_FIELDS, delete_data_files, exact_bounds, write_data_files

_chunk = st.tuples(
    st.integers(0, 3),  # partition
    st.lists(st.integers(0, 1 << 40), min_size=1, max_size=20, unique=True),  # offsets
    st.sampled_from(["AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"]),
    st.sampled_from(["s1xxxxxxxxxxxxxxxxxxxx", "s2xxxxxxxxxxxxxxxxxxxx"]),
    st.integers(0, 3),  # day
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(_chunk, min_size=1, max_size=4))
def test_each_file_gets_the_exact_bounds_of_its_rows(
    chunks: list[tuple[int, list[int], str, str, int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    table = topic_table(sql_catalog(tmp_path_factory.mktemp("df")))
    rows = pa.concat_tables([kafka_rows(*c) for c in chunks])
    files = write_data_files(table, rows, uuid.uuid4(), itertools.count())
    assert sum(f.record_count for f in files) == rows.num_rows
    schema = table.schema()
    for f in files:
        kafka = pq.read_table(urlparse(f.file_path).path).column("kafka")
        for name in BOUNDED_FIELDS:
            values = kafka.combine_chunks().field(name).to_pylist()
            assert exact_bounds(f, schema, name) == (min(values), max(values))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(days=st.lists(st.integers(0, 3), min_size=1, max_size=4), spread=st.booleans())
def test_files_get_the_partitions_pyiceberg_gives_their_rows(
    days: list[int], spread: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # One day takes the short way (the rows as they are), several pyiceberg's; both must agree with pyiceberg.
    table = topic_table(sql_catalog(tmp_path_factory.mktemp("parts")))
    rows = pa.concat_tables(
        [
            kafka_rows(0, range(i * 10, i * 10 + 10), "A" * 22, "s" * 22, day if spread else days[0])
            for i, day in enumerate(days)
        ]
    )
    if not spread:  # a null timestamp (out of range) is a partition of its own
        rows = rows if len(days) % 2 else _null_timestamps(rows)
    files = write_data_files(table, rows, uuid.uuid4(), itertools.count())
    expected = sorted(
        (str(p.partition_key.partition), p.arrow_table_partition.num_rows)
        for p in _determine_partitions(table.spec(), table.schema(), rows)
    )
    assert sorted((str(f.partition), f.record_count) for f in files) == expected
    for f in files:
        on_disk = pq.read_table(urlparse(f.file_path).path)
        assert on_disk.num_rows == f.record_count


def _null_timestamps(rows: pa.Table) -> pa.Table:
    kafka = rows.column("kafka").combine_chunks()
    fields = [kafka.field(i) for i in range(kafka.type.num_fields)]
    at = kafka.type.get_field_index("timestamp")
    fields[at] = pa.nulls(len(kafka), kafka.type.field(at).type)
    struct = pa.StructArray.from_arrays(fields, fields=list(kafka.type))
    return rows.set_column(rows.schema.get_field_index("kafka"), "kafka", struct)


def test_files_sharing_a_day_each_get_the_bounds_of_their_own_rows(tmp_path: Path) -> None:
    table = topic_table(sql_catalog(tmp_path))
    with table.transaction() as txn:
        txn.set_properties({"write.target-file-size-bytes": "1"})
    table = table.refresh()
    files = write_data_files(table, kafka_rows(0, range(3000), "A" * 22, "s" * 22), uuid.uuid4(), itertools.count())
    assert len(files) > 1
    bounds = sorted(exact_bounds(f, table.schema(), "offset") for f in files)  # type: ignore[type-var]
    assert bounds[0][0] == 0 and bounds[-1][1] == 2999  # type: ignore[index]
    assert sum(f.record_count for f in files) == 3000
    for (_, high), (low, _) in itertools.pairwise(bounds):  # type: ignore[misc]
        assert high < low  # each file's own rows: the ranges do not overlap


def test_null_values_mean_no_exact_bounds(tmp_path: Path) -> None:
    table = topic_table(sql_catalog(tmp_path))
    rows = pa.concat_tables([kafka_rows(0, [1], None, None), kafka_rows(0, [2], "A" * 22, "s" * 22)])
    (f,) = write_data_files(table, rows, uuid.uuid4(), itertools.count())
    assert exact_bounds(f, table.schema(), "topic_id") is None
    assert exact_bounds(f, table.schema(), "offset") == (1, 2)


def test_uncommitted_files_are_deleted_and_a_failure_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = topic_table(sql_catalog(tmp_path))
    files = write_data_files(table, kafka_rows(0, range(5), "A" * 22, "s" * 22), uuid.uuid4(), itertools.count())
    paths = [Path(urlparse(f.file_path).path) for f in files]
    assert all(p.exists() for p in paths)

    class Refusing:
        def delete(self, path: Any) -> None:
            raise PermissionError(f"refused: {path}")

    with caplog.at_level(logging.ERROR):
        delete_data_files(Refusing(), files, "copy of segment x")  # type: ignore[arg-type]
    assert "copy of segment x: could not delete the uncommitted data file" in caplog.text
    delete_data_files(table.io, files, "copy of segment x")
    assert not any(p.exists() for p in paths)
