"""One segment into its topic's table: rows -> Parquet data files -> one commit that replaces the segment's
offset range in that partition; and a retention delete of the rows one segment wrote.

A thin facade over the parts, each tested alone: ``tables`` (the table and its properties), ``data_files``
(writing Parquet with the ``kafka`` bounds), ``replace`` (the commit, retried on conflict, read back when its
outcome is unknown) and ``deletes`` (which rows a retention delete takes, from which table).

The data files are written as the segment is walked and hold only this segment's rows. The commit removes the
rows the table already holds for the partition's offsets ``first..last`` written by the same topic (a retried
copy, an overlapping segment from a new leader; a topic created again under the same name leaves the old
topic's rows alone) and adds the new files. A copy that cannot commit deletes the files it wrote, unless the
commit may have landed.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from rsm.iceberg.catalog import CatalogHandle
from rsm.iceberg.data_files import delete_data_files, write_data_files
from rsm.iceberg.deletes import delete_segment_rows
from rsm.iceberg.replace import CommitOutcomeUnknown, Replacer, RowSelection, offset_range_filter
from rsm.iceberg.rows import NotRepresentable, RowOrigin, SegmentSummary, segment_row_tables
from rsm.iceberg.section import DataFileRef, IcebergSection
from rsm.iceberg.tables import load_or_create, split_bytes
from rsm.iceberg.value_hook import ValueColumn
from rsm.kafka.indexes import AbortedTxn

__all__ = ["NotRepresentable", "SegmentToWrite", "TableWriter", "offset_range_filter", "split_bytes"]


@dataclass(frozen=True)
class SegmentToWrite:
    topic: str
    topic_id: str
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
        self.replacer = Replacer(lambda: handle.catalog, commit_retries)

    def table(self, topic: str, value_column: ValueColumn | None = None, segment_bytes: int = 1 << 30) -> Table:
        """The topic's table (``tables.load_or_create``)."""
        ident = self.handle.table_identifier(topic)
        return load_or_create(self.handle.catalog, ident, topic, value_column, segment_bytes, self.commit_retries)

    def write(self, seg: SegmentToWrite, what: str, before_commit: Callable[[], None] | None = None) -> IcebergSection:
        """Write the segment's rows and commit them; raises ``NotRepresentable`` (no data file left, nothing
        committed) for a segment the table cannot give back exactly. ``before_commit`` is called right before
        the commit (a cancelled copy raises there)."""
        value_column = self.value_column_for(seg.topic)  # type: ignore[operator]
        summary = SegmentSummary()
        # One walk: each chunk of rows becomes data files as it comes. A segment found not representable part
        # of the way (or any other failure) deletes the files written so far; nothing is committed. The table
        # is loaded (or created) only once the first chunk is built, so a segment refused there touches nothing.
        chunks = segment_row_tables(
            seg.log_path,
            seg.partition,
            seg.aborted,
            self.write_batch_bytes,
            summary,
            value_column,
            origin=RowOrigin(seg.topic_id, seg.segment_id),
        )
        first = next(chunks, None)
        if first is None:
            raise NotRepresentable("the segment holds no records")
        table = self.table(seg.topic, value_column, seg.log_path.stat().st_size)
        ident = self.handle.table_identifier(seg.topic)
        write_uuid = uuid.uuid4()
        counter = itertools.count(0)
        written: list[DataFile] = []
        try:
            for chunk in itertools.chain((first,), chunks):
                written += write_data_files(table, chunk, write_uuid, counter)
            properties = {
                "kafka.segment.id": seg.segment_id,
                "kafka.topic.id": seg.topic_id,
                "kafka.partition": str(seg.partition),
                "kafka.offsets": f"{summary.first_offset}-{summary.last_offset}",
            }
            selection = RowSelection(seg.partition, summary.first_offset, summary.last_offset, seg.topic_id)
            snapshot_id = self.replacer.replace(
                ident, selection, written, properties, what, "the commit to", before_commit
            )
        except CommitOutcomeUnknown:
            raise  # the files may be in a committed snapshot: they stay
        except BaseException:
            delete_data_files(table.io, written, what)
            raise
        assert snapshot_id is not None
        return IcebergSection(
            table=".".join(ident),
            snapshot_id=snapshot_id,
            partition=seg.partition,
            first_offset=summary.first_offset,
            last_offset=summary.last_offset,
            rows=summary.rows,
            batches=summary.batches,
            segment_size=summary.size,
            files=tuple(DataFileRef(f.file_path, f.record_count, f.file_size_in_bytes) for f in written),
        )

    def delete_rows(self, section: IcebergSection, topic: str, topic_id: str, segment_id: str, what: str) -> None:
        """Delete the rows the segment wrote from the table its manifest names (``deletes``)."""
        delete_segment_rows(self.replacer, section, topic, topic_id, segment_id, what)
