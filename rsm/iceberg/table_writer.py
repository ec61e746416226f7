"""One segment into its topic's table: rows -> Parquet data files -> one commit that replaces the segment's
offset range in that partition.

The data files are written first (through pyiceberg's FileIO, into the table's location) and hold only this
segment's rows; then one transaction deletes whatever rows the table already holds for the partition's offsets
``first..last`` (a retried copy, an overlapping segment from a new leader) and adds the new files. Another
writer committing first (other partitions of the topic, other brokers) makes the commit fail; it is then
retried on the fresh table state with the same files, up to ``iceberg.mode.commit.retries`` times. A copy that
cannot commit deletes the files it wrote.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    TableAlreadyExistsError,
    ValidationException,
)
from pyiceberg.expressions import And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThanOrEqual
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from rsm.errors import RemoteStorageException
from rsm.iceberg.catalog import CatalogHandle
from rsm.iceberg.rows import NotRepresentable, SegmentSummary, segment_row_tables
from rsm.iceberg.schema import arrow_schema, iceberg_schema, partition_spec
from rsm.iceberg.section import DataFileRef, IcebergSection
from rsm.iceberg.value_hook import ValueColumn
from rsm.kafka.indexes import AbortedTxn

log = logging.getLogger(__name__)

__all__ = ["NotRepresentable", "TableWriter", "offset_range_filter"]

_RETRY_PAUSE_S = 0.05
ROW_GROUP_ROWS = 32768
"""Rows per Parquet row group of the tables this writer creates: a fetch reads whole row groups, so this bounds
what it reads past the broker's start position."""


def offset_range_filter(partition: int, first: int, last: int) -> BooleanExpression:
    """The rows of ``partition`` with offsets ``first..last`` (what a segment's commit replaces)."""
    return And(
        EqualTo("kafka.partition", partition),
        And(GreaterThanOrEqual("kafka.offset", first), LessThanOrEqual("kafka.offset", last)),
    )


@dataclass(frozen=True)
class SegmentToWrite:
    topic: str
    partition: int
    segment_id: str
    log_path: Path
    aborted: Sequence[AbortedTxn]


class TableWriter:
    """Writes segments into their topics' tables; thread-safe (each call loads the table it commits to)."""

    def __init__(
        self, handle: CatalogHandle, write_batch_bytes: int, commit_retries: int, value_column_for: object
    ) -> None:
        self.handle = handle
        self.write_batch_bytes = write_batch_bytes
        self.commit_retries = commit_retries
        self.value_column_for = value_column_for

    # --- the table ---------------------------------------------------------------------------------------------

    def table(self, topic: str, value_column: ValueColumn | None = None) -> Table:
        """The topic's table, created (partitioned by day) when missing; a ``value`` column the hook now gives
        is added to an existing table."""
        catalog = self.handle.catalog
        ident = self.handle.table_identifier(topic)
        try:
            table = catalog.load_table(ident)
        except NoSuchTableError:
            schema = iceberg_schema()
            try:
                table = catalog.create_table(
                    ident,
                    schema=schema,
                    partition_spec=partition_spec(schema),
                    properties={
                        "kafka.topic": topic,
                        "write.parquet.compression-codec": "zstd",
                        "write.parquet.row-group-limit": str(ROW_GROUP_ROWS),
                    },
                )
            except TableAlreadyExistsError:  # another writer created it in between
                table = catalog.load_table(ident)
        if value_column is not None and "value" not in {f.name for f in table.schema().fields}:
            with table.update_schema() as update:
                update.union_by_name(arrow_schema(value_column.arrow_type))
            table = catalog.load_table(ident)
        return table

    # --- a segment -----------------------------------------------------------------------------------------------

    def write(self, seg: SegmentToWrite, what: str) -> IcebergSection:
        """Write the segment's rows and commit them; raises ``NotRepresentable`` (no data file left, nothing
        committed) for a segment the table cannot give back exactly."""
        value_column = self.value_column_for(seg.topic)  # type: ignore[operator]
        summary = SegmentSummary()
        # One walk: each chunk of rows becomes data files as it comes. A segment found not representable part
        # of the way (or any other failure) deletes the files written so far; nothing is committed. The table
        # is loaded (or created) only once the first chunk is built, so a segment refused there touches nothing.
        chunks = segment_row_tables(
            seg.log_path, seg.partition, seg.aborted, self.write_batch_bytes, summary, value_column
        )
        first = next(chunks, None)
        if first is None:
            raise NotRepresentable("the segment holds no records")
        table = self.table(seg.topic, value_column)
        write_uuid = uuid.uuid4()
        written: list[DataFile] = []
        try:
            counter = itertools.count(0)
            for chunk in itertools.chain((first,), chunks):
                written += list(
                    _dataframe_to_data_files(
                        table_metadata=table.metadata, df=chunk, io=table.io, write_uuid=write_uuid, counter=counter
                    )
                )
            snapshot_id = self._commit(seg, summary, written, what)
        except BaseException:
            self._delete_files(table, written, what)
            raise
        return IcebergSection(
            table=".".join(self.handle.table_identifier(seg.topic)),
            snapshot_id=snapshot_id,
            partition=seg.partition,
            first_offset=summary.first_offset,
            last_offset=summary.last_offset,
            rows=summary.rows,
            batches=summary.batches,
            segment_size=summary.size,
            files=tuple(DataFileRef(f.file_path, f.record_count, f.file_size_in_bytes) for f in written),
        )

    def _commit(self, seg: SegmentToWrite, summary: SegmentSummary, files: list[DataFile], what: str) -> int:
        catalog = self.handle.catalog
        ident = self.handle.table_identifier(seg.topic)
        replaced = offset_range_filter(seg.partition, summary.first_offset, summary.last_offset)
        properties = {
            "kafka.segment.id": seg.segment_id,
            "kafka.partition": str(seg.partition),
            "kafka.offsets": f"{summary.first_offset}-{summary.last_offset}",
        }
        attempts = self.commit_retries + 1
        for attempt in range(attempts):
            table = catalog.load_table(ident)
            try:
                txn = table.transaction()
                if table.current_snapshot() is not None:
                    txn.delete(replaced, snapshot_properties=properties)
                with txn.update_snapshot(snapshot_properties=properties).fast_append() as append:
                    for f in files:
                        append.append_data_file(f)
                committed = txn.commit_transaction()
            # pyiceberg retries a conflicting commit itself and may then fail its own validation of the delete:
            # a conflict too, retried here on a freshly loaded table.
            except (CommitFailedException, ValidationException) as e:
                if attempt + 1 == attempts:
                    raise RemoteStorageException(
                        f"{what}: the commit to table {'.'.join(ident)} failed {attempts} times, each time after "
                        f"another writer committed first ({e}); raise iceberg.mode.commit.retries if the topic has "
                        f"many partitions tiered at once"
                    ) from e
                log.debug("%s: commit conflict on %s (attempt %d): %s", what, ".".join(ident), attempt + 1, e)
                time.sleep(_RETRY_PAUSE_S * (attempt + 1))
                continue
            snapshot = committed.current_snapshot()
            assert snapshot is not None
            return snapshot.snapshot_id
        raise AssertionError("unreachable")

    def _delete_files(self, table: Table, files: list[DataFile], what: str) -> None:
        for f in files:
            try:
                table.io.delete(f.file_path)
            except Exception as e:  # the original error matters more
                log.error("%s: could not delete the data file %s of the failed copy: %s", what, f.file_path, e)

    # --- delete ------------------------------------------------------------------------------------------------

    def delete_rows(self, topic: str, partition: int, first: int, last: int, what: str) -> None:
        """Delete the partition's offsets ``first..last`` from the topic's table (retried on conflict)."""
        catalog = self.handle.catalog
        ident = self.handle.table_identifier(topic)
        attempts = self.commit_retries + 1
        for attempt in range(attempts):
            try:
                table = catalog.load_table(ident)
            except NoSuchTableError:
                return
            try:
                table.delete(offset_range_filter(partition, first, last))
                return
            # pyiceberg retries a conflicting commit itself and may then fail its own validation of the delete:
            # a conflict too, retried here on a freshly loaded table.
            except (CommitFailedException, ValidationException) as e:
                if attempt + 1 == attempts:
                    raise RemoteStorageException(
                        f"{what}: deleting its rows from table {'.'.join(ident)} failed {attempts} times: {e}"
                    ) from e
                time.sleep(_RETRY_PAUSE_S * (attempt + 1))
