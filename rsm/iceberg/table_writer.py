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
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from rsm.errors import RemoteStorageException
from rsm.iceberg.catalog import CatalogHandle
from rsm.iceberg.config import WRITE_CONCURRENCY_DEFAULT
from rsm.iceberg.data_files import StreamingDataFiles, evolve_spec, spec_matches
from rsm.iceberg.deletes import delete_segment_rows
from rsm.iceberg.latest_table import LatestChanges, LatestWriter
from rsm.iceberg.replace import CommitOutcomeUnknown, Replacer, RowSelection, offset_range_filter
from rsm.iceberg.rows import NotRepresentable, RowOrigin, SegmentSummary, segment_row_tables
from rsm.iceberg.schema import has_field, partition_spec
from rsm.iceberg.section import DataFileRef, IcebergSection
from rsm.iceberg.tables import load_or_create, split_bytes
from rsm.iceberg.topic_tables import PartitionTerm
from rsm.iceberg.value_hook import ValueColumn
from rsm.kafka.indexes import AbortedTxn

log = logging.getLogger(__name__)

PIECE_BYTES = 1 << 20
"""Records (decompressed) the walk turns into rows at a time while a segment is written."""

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
        self,
        handle: CatalogHandle,
        write_batch_bytes: int,
        commit_retries: int,
        value_column_for: object,
        write_concurrency: int = WRITE_CONCURRENCY_DEFAULT,
    ) -> None:
        self.handle = handle
        self.write_batch_bytes = write_batch_bytes
        # Batches being built and written at once, across all copies (iceberg.mode.write.concurrency).
        self.batch_slots = threading.BoundedSemaphore(write_concurrency)
        self.batches_in_flight = 0
        self.batches_in_flight_peak = 0
        self._count_lock = threading.Lock()
        self.commit_retries = commit_retries
        self.value_column_for = value_column_for
        self.replacer = Replacer(lambda: handle.catalog, commit_retries)
        self.latest = LatestWriter(lambda: handle.catalog, commit_retries, self.replacer.locks)
        self._legacy: set[str] = set()  # topics whose table is under the topic's own name (an earlier release's)

    def table(self, topic: str, value_column: ValueColumn | None = None, segment_bytes: int = 1 << 30) -> Table:
        """The topic's table (``tables.load_or_create``), created partitioned as configured (by day by default);
        a configured partition spec the table does not have yet replaces its spec."""
        catalog = self.handle.catalog
        settings = self.handle.cfg.table_of(topic)
        ident = settings.identifier
        table = load_or_create(
            catalog,
            ident,
            topic,
            value_column,
            segment_bytes,
            self.commit_retries,
            load=lambda i: self._load_own(topic, i),
            first_spec=lambda schema: self._first_spec(settings.partition_by, schema, topic),
            create_namespace=ident[0] != self.handle.cfg.namespace,
        )
        ident = table.name()  # type: ignore[assignment]
        terms = settings.partition_by
        for attempt in range(self.commit_retries + 1):
            if terms is None or self._spec_matches(table, terms, topic):
                break
            try:
                evolve_spec(table, terms)
                log.info("table %s of topic %s: partition spec now %s", ".".join(ident), topic, table.spec())
            except CommitFailedException:  # another broker evolved it first (most likely, the same way)
                if attempt == self.commit_retries:
                    raise
            table = catalog.load_table(ident)
        return table

    def _load_own(self, topic: str, ident: tuple[str, str]) -> Table:
        """The table ``ident`` if it is this topic's. A table an earlier release made under the topic's own name
        (before names were mapped) is found there while no name is configured. Another topic's table is refused:
        two topics' rows in one table would replace each other's offsets."""
        catalog = self.handle.catalog
        legacy = (ident[0], topic)
        named = self.handle.cfg.table_of(topic).named
        try:
            table = catalog.load_table(legacy if topic in self._legacy and not named else ident)
        except NoSuchTableError:
            self._legacy.discard(topic)
            if named or legacy == ident:
                raise
            table = catalog.load_table(legacy)  # NoSuchTableError: none there either
            if table.properties.get("kafka.topic") != topic:
                raise NoSuchTableError(".".join(ident)) from None
            self._legacy.add(topic)
        owner = table.properties.get("kafka.topic")
        if owner is not None and owner != topic:
            raise RemoteStorageException(
                f"table {'.'.join(ident)} holds the rows of topic {owner!r}, not of {topic!r}: give topic {topic!r} "
                f"a table of its own with iceberg.mode.table.<id>.name (and iceberg.mode.table.<id>.topic={topic})"
            )
        return table

    def _first_spec(self, terms: tuple[PartitionTerm, ...] | None, schema: Schema, topic: str) -> PartitionSpec:
        """The spec a new table is created with: the configured fields of columns it has from the start; those
        of ``value`` are added once the value column is (the table's second spec)."""
        if terms is not None:
            terms = tuple(t for t in terms if has_field(schema, t.source))
        try:
            return partition_spec(schema, terms)
        except ValueError as e:
            raise self._bad_spec(topic, e) from e

    def _spec_matches(self, table: Table, terms: tuple[PartitionTerm, ...], topic: str) -> bool:
        try:
            return spec_matches(table, terms)
        except ValueError as e:
            raise self._bad_spec(topic, e) from e

    def _bad_spec(self, topic: str, e: ValueError) -> RemoteStorageException:
        return RemoteStorageException(
            f"the partition spec configured for topic {topic!r} (iceberg.mode.table.<id>.partition.by) does not fit "
            f"its table: {e}; name a column of the table (kafka.*, value.*) and restart the broker; the segment "
            "stays on the broker's disk meanwhile"
        )

    def _take_slot(self) -> None:
        self.batch_slots.acquire()
        with self._count_lock:
            self.batches_in_flight += 1
            self.batches_in_flight_peak = max(self.batches_in_flight_peak, self.batches_in_flight)

    def _give_slot(self) -> None:
        with self._count_lock:
            self.batches_in_flight -= 1
        self.batch_slots.release()

    def write(
        self,
        seg: SegmentToWrite,
        what: str,
        before_commit: Callable[[], None] | None = None,
        summary: SegmentSummary | None = None,
    ) -> IcebergSection:
        """Write the segment's rows and commit them; raises ``NotRepresentable`` (no data file left, nothing
        committed) for a segment the table cannot give back exactly. ``before_commit`` is called right before
        the commit (a cancelled copy raises there). ``summary``, when given, receives what the walk saw (the
        segment file's CRC-32C among it)."""
        value_column = self.value_column_for(seg.topic)  # type: ignore[operator]
        summary = summary if summary is not None else SegmentSummary()
        # One walk, a small table of rows at a time (PIECE_BYTES of records), each given to the open data files
        # at once: a copy holds at most one row group's rows. A segment found not representable part of the way
        # (or any other failure) deletes the files written so far; nothing is committed. The table is loaded (or
        # created) only once the first rows are built, so a segment refused there touches nothing.
        piece_bytes = min(PIECE_BYTES, self.write_batch_bytes)
        pieces = segment_row_tables(
            seg.log_path,
            seg.partition,
            seg.aborted,
            piece_bytes,
            summary,
            value_column,
            origin=RowOrigin(seg.topic_id, seg.segment_id),
        )
        # A copy writes each write.batch.bytes of records (a data file per partition) holding one of the slots
        # all copies share; the first keeps its slot while the table is loaded (or created) for it.
        self._take_slot()
        try:
            first = next(pieces, None)
            if first is None:
                raise NotRepresentable("the segment holds no records")
            table = self.table(seg.topic, value_column, seg.log_path.stat().st_size)
        except BaseException:
            self._give_slot()
            raise
        ident = table.name()
        files = StreamingDataFiles(table, uuid.uuid4(), itertools.count(0))
        latest_spec = self.handle.cfg.latest_of(seg.topic)
        latest = LatestChanges(latest_spec) if latest_spec is not None else None
        try:
            try:
                piece: pa.Table | None = first
                del first
                held = 0
                while piece is not None:
                    files.add(piece)
                    if latest is not None:
                        latest.add(piece)
                    held += piece_bytes  # each piece but the last holds at least this many bytes of records
                    del piece
                    if held >= self.write_batch_bytes:
                        files.close()
                        held = 0
                        self._give_slot()
                        self._take_slot()
                    piece = next(pieces, None)
                files.close()
            finally:
                self._give_slot()
            written = files.written
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
            files.abort(what)
            raise
        assert snapshot_id is not None
        if latest is not None:
            # After the log rows, never before: a failure here fails the copy, and Kafka's retry replaces its own
            # log rows and applies what the latest table lacks (its watermarks skip the rest).
            self.latest.apply(latest, ".".join(ident), what)
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
