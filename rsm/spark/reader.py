"""Reading tiered records without Spark, and the per-slice reading that Spark's executors run.

``TieredReader(options)`` plans with the same options as the data source and yields Arrow record batches (or
plain dicts for a quick look): "the records of orders/3 between these offsets" is
``TieredReader({...storage..., "topic": "orders"}).records(partition=3, first_offset=100, last_offset=199)``.

A slice is read through ``RemoteStorageManager.fetch_log_segment`` from its start position, so only the chunks
under it are fetched and decrypted, and decoded by :class:`rsm.kafka.columnar.LogBatchDecoder` into columns: Arrow
buffers written by the compiled record walk, which become record batches without a copy (lists where the
compiled walk is not built). An Iceberg-mode segment's slice is read as its table's rows instead
(``RemoteStorageManager.fetch_segment_rows``, found as a broker fetch finds them) and converted column by column,
no batch rebuilt or decoded (``icebergRead=batches`` keeps the old way).
Damage is reported as :class:`rsm.errors.CorruptDataException` naming topic, partition, segment and byte
position. One manager per process and configuration is kept (executors reuse Python workers across tasks).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rsm.core.manager import RemoteStorageManager
from rsm.errors import CorruptDataException
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.record_columns import Columns, RecordBuffers
from rsm.kafka.records import CorruptRecordBatch
from rsm.spark.arrow_batches import HEADERS_COLUMN, KAFKA_COLUMNS, arrow_field, batch_schema, to_record_batch
from rsm.spark.options import TieredReadOptions
from rsm.spark.planning import PushedBounds, SegmentSlice, plan_slices

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ReadStats", "SkippedBatch", "TieredReader", "manager_for", "read_slice"]

log = logging.getLogger(__name__)

#: A batch of rows is handed on once its keys, values and headers weigh this much, whatever ``rowsPerBatch`` says:
#: an Arrow binary column holds at most 2 GiB, and a batch of large values would otherwise hold that much memory.
BATCH_BYTES = 128 << 20

_MANAGERS: dict[str, RemoteStorageManager] = {}
_MANAGERS_LOCK = threading.Lock()


def _close_managers() -> None:
    with _MANAGERS_LOCK:
        for m in _MANAGERS.values():
            m.close()
        _MANAGERS.clear()


atexit.register(_close_managers)


def manager_for(config: Mapping[str, str]) -> RemoteStorageManager:
    """A configured manager shared by every read in this process with the same configuration.

    Executors run many tasks in one reused Python worker; configuring a manager (key ring, backend client,
    pools) per task would cost more than reading a small slice.
    """
    digest = hashlib.sha256(json.dumps(sorted(config.items())).encode()).hexdigest()
    with _MANAGERS_LOCK:
        m = _MANAGERS.get(digest)
        if m is None:
            m = RemoteStorageManager()
            m.configure(dict(config))
            _MANAGERS[digest] = m
        return m


@dataclass(frozen=True)
class SkippedBatch:
    """A damaged batch skipped under ``failOnCorruption=false``: enough to find it again and re-tier or inspect it."""

    topic: str
    partition: int
    segment_id: str
    segment_start_offset: int
    position: int
    reason: str

    def describe(self) -> str:
        return (
            f"{self.topic}-{self.partition}: segment {self.segment_id} (start offset {self.segment_start_offset}), "
            f"byte position {self.position}: {self.reason}"
        )


@dataclass
class ReadStats:
    """What a read did: rows kept, batches decoded, control and aborted batches dropped, damaged ones skipped.

    ``skipped`` is the corruption report: one :class:`SkippedBatch` per batch skipped, in reading order, so a
    lenient read never loses data silently.
    """

    rows: int = 0
    batches: int = 0
    control_batches: int = 0
    aborted_batches: int = 0
    skipped: list[SkippedBatch] = field(default_factory=list)

    @property
    def skipped_batches(self) -> int:
        return len(self.skipped)

    def add(self, decoder: LogBatchDecoder) -> None:
        self.batches += decoder.batches
        self.control_batches += decoder.control_batches
        self.aborted_batches += decoder.aborted_batches


def _decoded_columns(
    manager: RemoteStorageManager,
    piece: SegmentSlice,
    opts: TieredReadOptions,
    pushed: PushedBounds | None = None,
    stats: ReadStats | None = None,
    columns: Sequence[str] | None = None,
) -> Iterator[Columns | RecordBuffers]:
    """The slice's batches fetched and decoded, as columns of about ``opts.rows_per_batch`` rows each (fewer when
    they weigh :data:`BATCH_BYTES`); keys and values only when ``columns``, the Kafka source's columns the caller
    will build, names them (default all). They are Arrow buffers for :func:`to_record_batch` where the compiled
    walk is built."""
    pushed = pushed or PushedBounds()
    # startingTimestamp/endingTimestamp are already offsets in the slice (planning); only pushed filters on
    # `timestamp` select rows by their timestamps.
    bounds = ReadBounds(
        max(piece.first_offset, pushed.first_offset),
        min(piece.last_offset, pushed.last_offset),
        pushed.min_timestamp,
        pushed.end_timestamp,
    )
    aborted: dict[int, list[tuple[int, int]]] | None = None
    if opts.read_committed:
        aborted = {}
        for pid, first, last in piece.aborted:
            aborted.setdefault(pid, []).append((first, last))
    decoder = LogBatchDecoder(
        bounds,
        include_headers=opts.include_headers,
        aborted=aborted,
        fail_on_corruption=opts.fail_on_corruption,
        max_decompressed=opts.max_batch_bytes,
        keys=columns is None or "key" in columns,
        values=columns is None or "value" in columns,
    )
    seg = piece.segment
    out = decoder.new_columns(arrow=True)
    reported = 0
    try:
        with manager.fetch_log_segment(seg.metadata_stub(), piece.start_position) as f:
            for position, entry in iter_log_entries(f, piece.start_position, piece.end_position):
                more = decoder.feed(position, entry, out)
                if decoder.skipped_batches > reported:
                    reported = _report_skipped(piece, decoder, reported, stats)
                if not more:
                    break
                if len(out) >= opts.rows_per_batch or out.nbytes >= BATCH_BYTES:
                    yield out
                    out = decoder.new_columns(arrow=True)
    except CorruptRecordBatch as exc:
        raise CorruptDataException(
            f"{seg.topic}-{seg.partition}: corrupt record batch in segment {seg.segment_id} (start offset "
            f"{seg.start_offset}) at byte position {exc.position}: {exc.reason}. The tiered copy is damaged; "
            f"re-tier the segment from a replica if one still has it, or read with failOnCorruption=false to "
            f"skip damaged batches (they are counted and logged)"
        ) from None
    except CorruptDataException as exc:
        raise CorruptDataException(
            f"{seg.topic}-{seg.partition}: segment {seg.segment_id} (start offset {seg.start_offset}) cannot be "
            f"read from byte position {piece.start_position}: {exc}"
        ) from None
    finally:
        if stats is not None:
            stats.add(decoder)
    if len(out):
        yield out


def _report_skipped(piece: SegmentSlice, decoder: LogBatchDecoder, reported: int, stats: ReadStats | None) -> int:
    """Log (and record in ``stats``) the batches the decoder skipped since ``reported``; returns the new count.

    One WARNING per batch, as it is skipped: Spark's Python data sources have no task metrics, so the executor
    log (or ``python_worker_logs`` with ``spark.sql.pyspark.worker.logging.enabled``) is where a lenient Spark
    read reports its losses; the running count tells how many this task has dropped so far.
    """
    seg = piece.segment
    for exc in decoder.skipped[reported:]:
        reported += 1
        skipped = SkippedBatch(seg.topic, seg.partition, seg.segment_id, seg.start_offset, exc.position, exc.reason)
        if stats is not None:
            stats.skipped.append(skipped)
        log.warning(
            "skipped damaged record batch (failOnCorruption=false) in %s; %d batch(es) skipped so far by the task "
            "reading bytes %d..%s",
            skipped.describe(),
            reported,
            piece.start_position,
            "end" if piece.end_position is None else piece.end_position,
        )
    return reported


def read_slice(
    manager: RemoteStorageManager,
    piece: SegmentSlice,
    opts: TieredReadOptions,
    pushed: PushedBounds | None = None,
    stats: ReadStats | None = None,
    columns: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """One slice as Arrow batches of the Kafka source's columns (or of ``columns``, spelled ``names``).

    The path is chosen here: an Iceberg-mode segment's rows come straight from its table's files (unless
    ``icebergRead=batches``); any other segment's batches, and an Iceberg-mode one's under
    ``icebergRead=batches``, are fetched and decoded."""
    if piece.iceberg and opts.iceberg_rows:
        yield from _iceberg_batches(manager, piece, opts, pushed or PushedBounds(), stats, columns, names)
        return
    for cols in _decoded_columns(manager, piece, opts, pushed, stats, columns):
        if stats is not None:
            stats.rows += len(cols)
        yield to_record_batch(cols, piece.topic, piece.partition, columns, names)


#: The fields of the rows' ``kafka`` struct the conversion uses (only these are read from the files).
_KAFKA_FIELDS = (
    "offset",
    "timestamp_ms",
    "batch_timestamp_type",
    "batch_max_timestamp",
    "is_control",
    "is_transactional",
    "batch_producer_id",
    "batch_base_offset",
)


def _kept_rows(t: pa.Table, piece: SegmentSlice, opts: TieredReadOptions, bounds: ReadBounds) -> pa.Table:
    """The rows of ``t`` a consumer would get within ``bounds``: no control records and, read_committed, none of
    the slice's aborted transactions; the same rows the batch decoder keeps."""
    import pyarrow.compute as pc

    kafka = t.column("kafka")

    def field_of(name: str) -> Any:
        return pc.struct_field(kafka, name)

    offsets = field_of("offset")
    keep = pc.and_(
        pc.invert(pc.fill_null(field_of("is_control"), False)),
        pc.and_(pc.greater_equal(offsets, bounds.first_offset), pc.less_equal(offsets, bounds.last_offset)),
    )
    if bounds.min_timestamp is not None:
        # the decoder skips a batch whose maxTimestamp is below the bound before it looks at its records
        keep = pc.and_(keep, pc.greater_equal(field_of("batch_max_timestamp"), bounds.min_timestamp))
        keep = pc.and_(keep, pc.greater_equal(field_of("timestamp_ms"), bounds.min_timestamp))
    if bounds.end_timestamp is not None:
        keep = pc.and_(keep, pc.less(field_of("timestamp_ms"), bounds.end_timestamp))
    if opts.read_committed and piece.aborted:
        pids, bases = field_of("batch_producer_id"), field_of("batch_base_offset")
        for pid, first, last in piece.aborted:
            aborted = pc.and_(
                pc.and_(pc.fill_null(field_of("is_transactional"), False), pc.equal(pids, pid)),
                pc.and_(pc.greater_equal(bases, first), pc.less_equal(bases, last)),
            )
            keep = pc.and_(keep, pc.invert(aborted))
    return t.filter(pc.fill_null(keep, False))


def _row_array(name: str, t: pa.Table, topic: str, partition: int) -> pa.Array | pa.ChunkedArray:
    """One Kafka source column from a table's rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = t.num_rows
    if name in ("key", "value"):
        return t.column(f"{name}_raw").cast(pa.binary())
    if name == "topic":
        return pa.repeat(pa.scalar(topic, pa.string()), n)
    if name == "partition":
        return pa.repeat(pa.scalar(partition, pa.int32()), n)
    kafka = t.column("kafka")
    if name == "offset":
        return pc.struct_field(kafka, "offset")
    if name == "timestamp":
        millis = pc.struct_field(kafka, "timestamp_ms")
        return pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC"))
    if name == "timestampType":
        return pc.struct_field(kafka, "batch_timestamp_type").cast(pa.int32())
    if name == HEADERS_COLUMN:
        return t.column("headers").cast(arrow_field(HEADERS_COLUMN).type)
    raise ValueError(f"{name!r} is not a column of the Kafka source read with these options")


def _iceberg_batches(
    manager: RemoteStorageManager,
    piece: SegmentSlice,
    opts: TieredReadOptions,
    pushed: PushedBounds,
    stats: ReadStats | None,
    columns: Sequence[str] | None,
    names: Sequence[str] | None,
) -> Iterator[pa.RecordBatch]:
    """An Iceberg-mode slice from its table's rows, converted column by column (no batch is rebuilt)."""
    import pyarrow as pa

    if columns is None:
        columns = KAFKA_COLUMNS + (HEADERS_COLUMN,) if opts.include_headers else KAFKA_COLUMNS
    wanted = tuple(columns)
    schema = batch_schema(wanted, tuple(names) if names else wanted)
    bounds = ReadBounds(
        max(piece.first_offset, pushed.first_offset),
        min(piece.last_offset, pushed.last_offset),
        pushed.min_timestamp,
        pushed.end_timestamp,
    )
    read = ["kafka"]
    read += ["key_raw"] if "key" in wanted else []
    read += ["value_raw"] if "value" in wanted else []
    read += ["headers"] if HEADERS_COLUMN in wanted else []
    seg = piece.segment
    end = None if piece.end_position is None else piece.end_position - 1  # slices end before end_position
    tables = manager.fetch_segment_rows(seg.metadata_stub(), piece.start_position, end, read, _KAFKA_FIELDS)
    try:
        for t in tables:
            if t.num_rows and _first_offset(t) > bounds.last_offset:
                break  # rows come in offset order: none further is wanted
            kept = _kept_rows(t, piece, opts, bounds)
            if not kept.num_rows:
                continue
            out = pa.Table.from_arrays([_row_array(c, kept, seg.topic, seg.partition) for c in wanted], schema=schema)
            if stats is not None:
                stats.rows += out.num_rows
            weight = sum(out.column(i).nbytes for i, c in enumerate(wanted) if c in ("key", "value", HEADERS_COLUMN))
            step = opts.rows_per_batch
            if weight:
                step = max(1, min(step, out.num_rows * BATCH_BYTES // weight))
            yield from out.to_batches(max_chunksize=step)
    finally:
        close = getattr(tables, "close", None)
        if close is not None:
            close()


def _first_offset(t: pa.Table) -> int:
    import pyarrow.compute as pc

    return int(pc.struct_field(t.column("kafka"), "offset")[0].as_py())


class TieredReader:
    """The data source's reading, in plain Python: plan once, then iterate slices in order."""

    def __init__(
        self, options: Mapping[str, str] | TieredReadOptions, manager: RemoteStorageManager | None = None
    ) -> None:
        self.options = options if isinstance(options, TieredReadOptions) else TieredReadOptions.from_options(options)
        self._manager = manager
        self.stats = ReadStats()

    def __repr__(self) -> str:
        return f"TieredReader({self.options!r}, config={self.options.redacted_config()})"

    @property
    def manager(self) -> RemoteStorageManager:
        if self._manager is None:
            self._manager = manager_for(self.options.plugin_config)
        return self._manager

    def plan(self, pushed: PushedBounds | None = None) -> list[SegmentSlice]:
        return plan_slices(self.manager, self.options, pushed)

    def columns(self, pushed: PushedBounds | None = None) -> Iterator[tuple[SegmentSlice, Columns | RecordBuffers]]:
        """Each slice's rows as the decoder holds them: Arrow buffers (:class:`RecordBuffers`) where the compiled
        walk is built, else lists; ``to_columns()`` gives :class:`Columns` lists either way."""
        for piece in self.plan(pushed):
            for cols in _decoded_columns(self.manager, piece, self.options, pushed, self.stats):
                self.stats.rows += len(cols)
                yield piece, cols

    def record_batches(self, pushed: PushedBounds | None = None) -> Iterator[pa.RecordBatch]:
        """The batches Spark gets: Iceberg-mode segments as their table's rows (``icebergRead``)."""
        for piece in self.plan(pushed):
            yield from read_slice(self.manager, piece, self.options, pushed, self.stats)

    def records(
        self, partition: int | None = None, first_offset: int = 0, last_offset: int = (1 << 63) - 1
    ) -> Iterator[dict[str, Any]]:
        """Rows as dicts (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp`` in ms,
        ``timestampType`` and ``headers`` when asked), for a partition and an inclusive offset range."""
        pushed = PushedBounds(
            partitions=None if partition is None else frozenset({partition}),
            first_offset=first_offset,
            last_offset=last_offset,
        )
        for piece, out in self.columns(pushed):
            cols = out.to_columns()
            headers = cols.headers
            for i in range(len(cols)):
                row: dict[str, Any] = {
                    "key": cols.keys[i],
                    "value": cols.values[i],
                    "topic": piece.topic,
                    "partition": piece.partition,
                    "offset": cols.offsets[i],
                    "timestamp": cols.timestamps[i],
                    "timestampType": cols.timestamp_types[i],
                }
                if headers is not None:
                    row["headers"] = headers[i]
                yield row
