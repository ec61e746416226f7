"""Reading tiered records without Spark, and the per-slice reading that Spark's executors run.

``TieredReader(options)`` plans with the same options as the data source and yields Arrow record batches (or
plain dicts for a quick look): "the records of orders/3 between these offsets" is
``TieredReader({...storage..., "topic": "orders"}).records(partition=3, first_offset=100, last_offset=199)``.

A slice is read through ``RemoteStorageManager.fetch_log_segment`` from its start position, so only the chunks
under it are fetched and decrypted, and decoded by :class:`rsm.kafka.columnar.LogBatchDecoder` into columns: Arrow
buffers written by the compiled record walk, which become record batches without a copy (lists where the
compiled walk is not built).
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
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from rsm.core.manager import RemoteStorageManager
from rsm.errors import CorruptDataException
from rsm.kafka.columnar import Columns, LogBatchDecoder, ReadBounds, RecordBuffers, iter_log_entries
from rsm.kafka.records import CorruptRecordBatch
from rsm.spark.options import TieredReadOptions
from rsm.spark.planning import PushedBounds, SegmentSlice, plan_slices

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "HEADERS_COLUMN",
    "KAFKA_COLUMNS",
    "ReadStats",
    "SkippedBatch",
    "TieredReader",
    "arrow_field",
    "manager_for",
    "read_slice_columns",
    "to_record_batch",
]

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


def read_slice_columns(
    manager: RemoteStorageManager,
    piece: SegmentSlice,
    opts: TieredReadOptions,
    pushed: PushedBounds | None = None,
    stats: ReadStats | None = None,
    columns: Sequence[str] | None = None,
) -> Iterator[Columns | RecordBuffers]:
    """Columns of about ``opts.rows_per_batch`` rows each (fewer when they weigh :data:`BATCH_BYTES`), for one
    slice (keys and values only when ``columns``, the Kafka source's columns the caller will build, names them;
    default all). They are Arrow buffers for :func:`to_record_batch` where the compiled walk is built."""
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


#: The columns of Spark's Kafka source, in its order (``headers`` only with ``includeHeaders``).
KAFKA_COLUMNS: tuple[str, ...] = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
HEADERS_COLUMN = "headers"


@cache
def arrow_field(name: str) -> pa.Field:
    """A Kafka source column's Arrow field, as the batches carry it (Spark's type for it follows from it)."""
    import pyarrow as pa

    types = {
        "key": pa.binary(),
        "value": pa.binary(),
        "topic": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestampType": pa.int32(),
        HEADERS_COLUMN: pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
    }
    return pa.field(name, types[name])


@lru_cache(maxsize=64)
def _schema(columns: tuple[str, ...], names: tuple[str, ...]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([arrow_field(c).with_name(n) for c, n in zip(columns, names, strict=True)])


def _array(name: str, cols: Columns, topic: str, partition: int) -> pa.Array:
    """One column of a batch; the constant ones without per-row objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if name == "key":
        return pa.array(cols.keys, pa.binary())
    if name == "value":
        return pa.array(cols.values, pa.binary())
    if name == "topic":
        return pa.repeat(pa.scalar(topic, pa.string()), len(cols))
    if name == "partition":
        return pa.repeat(pa.scalar(partition, pa.int32()), len(cols))
    if name == "offset":
        return pa.array(cols.offsets, pa.int64())
    if name == "timestamp":
        return pc.multiply(pa.array(cols.timestamps, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    if name == "timestampType":
        return pa.array(cols.timestamp_types, pa.int32())
    if name == HEADERS_COLUMN and cols.headers is not None:
        return pa.array([[{"key": k, "value": v} for k, v in hs] for hs in cols.headers], arrow_field(name).type)
    raise ValueError(f"{name!r} is not a column of the Kafka source read with these options")


def _wrap(memory: object | None) -> pa.Buffer | None:
    import pyarrow as pa

    return None if memory is None else pa.py_buffer(memory)


def _binary(part: tuple[object, object, object, int], rows: int, kind: pa.DataType) -> pa.Array:
    """A binary or string column from the compiled walk's (validity, offsets, data, null count), without a copy."""
    import pyarrow as pa

    validity, offsets, data, nulls = part
    return pa.Array.from_buffers(kind, rows, [_wrap(validity), _wrap(offsets), _wrap(data)], null_count=nulls)


def _buffers_array(name: str, parts: dict[str, Any], topic: str, partition: int) -> pa.Array:
    """One column of a batch from the compiled walk's buffers (:meth:`RecordBuffers.parts`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows: int = parts["rows"]
    if name in ("key", "value"):
        if parts[name] is None:
            raise ValueError(f"{name!r} was not read: the decoder was told it is not wanted")
        return _binary(parts[name], rows, pa.binary())
    if name == "topic":
        return pa.repeat(pa.scalar(topic, pa.string()), rows)
    if name == "partition":
        return pa.repeat(pa.scalar(partition, pa.int32()), rows)
    if name == "offset":
        return pa.Array.from_buffers(pa.int64(), rows, [None, _wrap(parts["offset"])])
    if name == "timestamp":
        millis = pa.Array.from_buffers(pa.int64(), rows, [None, _wrap(parts["timestamp"])])
        return pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC"))
    if name == "timestampType":
        return pa.Array.from_buffers(pa.int32(), rows, [None, _wrap(parts["timestampType"])])
    if name == HEADERS_COLUMN and parts["headers"] is not None:
        lists, names, values, count = parts["headers"]
        kind = arrow_field(HEADERS_COLUMN).type
        entries = pa.StructArray.from_arrays(
            [_binary(names, count, pa.string()), _binary(values, count, pa.binary())],
            fields=list(kind.value_type),
        )
        return pa.Array.from_buffers(kind, rows, [None, _wrap(lists)], children=[entries])
    raise ValueError(f"{name!r} is not a column of the Kafka source read with these options")


def to_record_batch(
    cols: Columns | RecordBuffers,
    topic: str,
    partition: int,
    columns: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """One Arrow batch in the Kafka source's column order, or of ``columns`` only (a pruned read), in their order.

    ``names`` spells the columns as the caller's schema does (Spark compares the batch's schema with it exactly).
    Only the asked columns are built: a value column copies every value byte, so a read of keys alone is cheaper.
    :class:`RecordBuffers` become the batch's buffers without a copy (and are sealed: they take no more rows).
    """
    import pyarrow as pa

    if columns is None:
        columns = KAFKA_COLUMNS + (HEADERS_COLUMN,) if cols.has_headers else KAFKA_COLUMNS
    wanted = tuple(columns)
    if isinstance(cols, RecordBuffers):
        parts = cols.parts()
        arrays = [_buffers_array(c, parts, topic, partition) for c in wanted]
    else:
        arrays = [_array(c, cols, topic, partition) for c in wanted]
    return pa.RecordBatch.from_arrays(arrays, schema=_schema(wanted, tuple(names) if names else wanted))


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
            for cols in read_slice_columns(self.manager, piece, self.options, pushed, self.stats):
                self.stats.rows += len(cols)
                yield piece, cols

    def record_batches(self, pushed: PushedBounds | None = None) -> Iterator[pa.RecordBatch]:
        for piece, cols in self.columns(pushed):
            yield to_record_batch(cols, piece.topic, piece.partition)

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
