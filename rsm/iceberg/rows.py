"""A segment file turned into Arrow rows of the topic's table, one row per record (control records included).

Rows come in tables of at most about ``max_bytes`` of records at a time (decompressed: what the rows hold), in
offset order. A segment the table
cannot rebuild exactly (a legacy magic 0/1 entry, a batch without records, records Kafka's own parser would
refuse) raises ``NotRepresentable``: the plugin then tiers that segment in the classic format.

Two walks give the same rows. The compiled record walk (``rsm/kafka/_recordwalk.c`` with ``details``) writes
each record's fields straight into Arrow buffers, and the batch's fields are repeated over its rows by Arrow;
the Python walk (``decode_records``, a ``Record`` per record) is its reference, used where the module is not
built and by the tests that hold the two to the same rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c
import pyarrow as pa
import pyarrow.compute as pc

from rsm.iceberg.schema import HEADERS_ARROW_TYPE, KAFKA_FIELDS, arrow_schema, kafka_arrow_type
from rsm.iceberg.value_hook import ValueColumn
from rsm.iceberg.walk_arrays import binary_array, fixed_array, headers_array
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds
from rsm.kafka.errors import KafkaFormatError
from rsm.kafka.indexes import AbortedTxn
from rsm.kafka.log_scan import iter_batches
from rsm.kafka.record_columns import COMPILED_WALK, RecordBuilder
from rsm.kafka.records import BATCH_HEADER_SIZE, BatchHeader, decode_records, parse_control_key

_TS_US_MAX = ((1 << 63) - 1) // 1000
_TS_US_MIN = -(1 << 63) // 1000 + 1
# Every record of a batch is a row: offsets and timestamps over all of int64.
_ALL_ROWS = (-(1 << 63), (1 << 63) - 1, None, None)

__all__ = ["NotRepresentable", "RowOrigin", "SegmentSummary", "reference_row_tables", "segment_row_tables"]


class NotRepresentable(Exception):
    """The segment holds something the table cannot give back byte-for-byte as Kafka's records."""


@dataclass(frozen=True)
class RowOrigin:
    """What every row of a segment carries about who wrote it: Kafka Uuid strings of the topic and of the remote
    log segment (``kafka.topic_id``, ``kafka.segment_id``)."""

    topic_id: str
    segment_id: str


@dataclass
class SegmentSummary:
    """What the walk saw: filled in as ``segment_row_tables`` runs, complete once it is exhausted."""

    rows: int = 0
    batches: int = 0
    first_offset: int = -1
    last_offset: int = -1
    size: int = 0
    crc32c: int = 0


class _Columns:
    def __init__(self) -> None:
        self.kafka: dict[str, list[object]] = {name: [] for name, _, _ in KAFKA_FIELDS}
        self.headers: list[list[dict[str, object]]] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []

    def __len__(self) -> int:
        return len(self.keys)

    def table(self, value_column: ValueColumn | None) -> pa.Table:
        k = kafka_arrow_type()
        kafka = pa.StructArray.from_arrays(
            [pa.array(self.kafka[f.name], type=f.type) for f in k],
            fields=list(k),
        )
        arrays = [
            kafka,
            pa.array(self.headers, type=HEADERS_ARROW_TYPE),
            pa.array(self.keys, type=pa.binary()),
            pa.array(self.values, type=pa.binary()),
        ]
        value_type = key_type = None
        if value_column is not None:
            parsed, value_type, key_type = value_column.parsed(lambda: self.keys, lambda: self.values)
            arrays += parsed
        return pa.Table.from_arrays(arrays, schema=arrow_schema(value_type, key_type))


def _aborted_spans(aborted: Sequence[AbortedTxn]) -> dict[int, list[tuple[int, int]]]:
    spans: dict[int, list[tuple[int, int]]] = {}
    for a in aborted:
        spans.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
    return spans


def _representable_batches(path: Path) -> Iterator[tuple[BatchHeader, bytes]]:
    """The segment's batches, CRC-checked; a batch a table row cannot stand for raises ``NotRepresentable``."""
    for header, batch in iter_batches(path, verify=True):
        if header.records_count == 0:
            raise NotRepresentable(f"the batch at position {header.position} holds no records")
        if header.position > (1 << 31) - 1:
            raise NotRepresentable("the segment is larger than 2 GiB")
        yield header, batch


def segment_row_tables(
    path: Path,
    partition: int,
    aborted: Sequence[AbortedTxn],
    max_bytes: int,
    summary: SegmentSummary,
    value_column: ValueColumn | None = None,
    *,
    origin: RowOrigin,
) -> Iterator[pa.Table]:
    """Arrow tables of the segment's rows, each from at most about ``max_bytes`` of decompressed batches."""
    if not COMPILED_WALK:  # pragma: no cover - the package was installed without a C compiler
        yield from reference_row_tables(path, partition, aborted, max_bytes, summary, value_column, origin=origin)
        return
    spans = _aborted_spans(aborted)
    decoder = LogBatchDecoder(ReadBounds())  # its zstd context inflates every batch
    builder = RecordBuilder(True, True, True, True)
    batches = _BatchColumns()
    held = 0
    crc = 0
    try:
        for header, batch in _representable_batches(path):
            body = memoryview(batch)[BATCH_HEADER_SIZE : header.size]
            try:
                records = decoder.inflate(header.compression, body) if header.compression else body
            except Exception as e:  # codec libraries raise assorted types; so does the decompression cap
                raise NotRepresentable(f"the batch at position {header.position}: cannot decompress: {e}") from None
            try:
                kept = builder.walk(
                    records,
                    header.records_count,
                    header.base_offset,
                    header.base_timestamp,
                    header.max_timestamp if header.timestamp_type == 1 else None,
                    _ALL_ROWS,
                )
            except ValueError as e:
                raise NotRepresentable(f"the batch at position {header.position}: malformed records: {e}") from None
            if kept != header.records_count:
                raise NotRepresentable(f"the batch at position {header.position} has an offset beyond 64 bits")
            crc = _crc32c.crc32c(batch, crc)
            control_type: int | None = None
            if header.is_control:  # a marker batch: one small record, read the plain way for its key
                try:
                    control_type = int(parse_control_key(decode_records(batch, position=header.position)[0].key)[1])
                except ValueError as e:
                    raise NotRepresentable(f"control batch at position {header.position}: {e}") from None
            aborted_batch = (
                header.is_transactional
                and not header.is_control
                and any(lo <= header.base_offset <= hi for lo, hi in spans.get(header.producer_id, ()))
            )
            batches.add(header, control_type, aborted_batch)
            summary.last_offset = header.last_offset
            summary.rows += header.records_count
            summary.batches += 1
            summary.size = header.end_position
            held += BATCH_HEADER_SIZE + len(records)  # decompressed: a compressed segment's rows are larger
            if held >= max_bytes:
                yield _buffers_table(builder.take(), batches, partition, origin, summary, value_column)
                batches = _BatchColumns()
                held = 0
    except KafkaFormatError as e:
        raise NotRepresentable(str(e)) from None
    summary.crc32c = crc
    if len(builder):
        yield _buffers_table(builder.take(), batches, partition, origin, summary, value_column)


class _BatchColumns:
    """The batch fields of the rows, one entry per batch (repeated over its records when the table is built)."""

    _INT_FIELDS = (
        "batch_byte_offset",
        "batch_base_offset",
        "batch_partition_leader_epoch",
        "batch_magic",
        "batch_timestamp_type",
        "batch_compression_type",
        "batch_max_timestamp",
        "batch_producer_id",
        "batch_producer_epoch",
        "batch_base_sequence",
        "batch_attributes",
        "batch_base_timestamp",
        "batch_last_offset_delta",
        "batch_record_count",
        "batch_byte_size",
    )

    def __init__(self) -> None:
        self.fields: dict[str, list[int]] = {name: [] for name in self._INT_FIELDS}
        self.transactional: list[bool] = []
        self.control: list[bool] = []
        self.control_type: list[int | None] = []
        self.aborted: list[bool] = []

    def add(self, h: BatchHeader, control_type: int | None, aborted: bool) -> None:
        values = (
            h.position,
            h.base_offset,
            h.partition_leader_epoch,
            h.magic,
            h.timestamp_type,
            int(h.compression),
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.attributes,
            h.base_timestamp,
            h.last_offset_delta,
            h.records_count,
            h.size,
        )
        for column, v in zip(self.fields.values(), values, strict=True):
            column.append(v)
        self.transactional.append(h.is_transactional)
        self.control.append(h.is_control)
        self.control_type.append(control_type)
        self.aborted.append(aborted)


def _buffers_table(
    parts: dict[str, object],
    batches: _BatchColumns,
    partition: int,
    origin: RowOrigin,
    summary: SegmentSummary,
    value_column: ValueColumn | None,
) -> pa.Table:
    """The rows of the compiled walk's buffers and their batches' fields, as the table's Arrow schema."""
    rows: int = parts["rows"]  # type: ignore[assignment]
    k = kafka_arrow_type()
    # Row -> its batch: the parent indices of a list array whose lists are the batches' records.
    ends = pa.array([0, *itertools.accumulate(batches.fields["batch_record_count"])], type=pa.int32())
    batch_of_row = pc.list_parent_indices(pa.ListArray.from_arrays(ends, pa.nulls(rows)))

    def repeat(values: Sequence[object], field: str) -> pa.Array:
        return pc.take(pa.array(values, type=k.field(field).type), batch_of_row)

    millis = fixed_array(pa.int64(), rows, parts["timestamp"])
    in_range = pc.and_(pc.greater_equal(millis, _TS_US_MIN), pc.less_equal(millis, _TS_US_MAX))
    micros = pc.multiply(pc.if_else(in_range, millis, pa.scalar(None, pa.int64())), 1000)
    columns: dict[str, pa.Array] = {
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), rows),
        "offset": fixed_array(pa.int64(), rows, parts["offset"]),
        "timestamp": micros.cast(k.field("timestamp").type),
        **{name: repeat(values, name) for name, values in batches.fields.items()},
        "record_attributes": fixed_array(pa.int32(), rows, parts["attributes"]),
        "timestamp_delta": fixed_array(pa.int64(), rows, parts["timestampDelta"]),
        "timestamp_ms": millis,
        "is_transactional": repeat(batches.transactional, "is_transactional"),
        "is_control": repeat(batches.control, "is_control"),
        "control_type": repeat(batches.control_type, "control_type"),
        "aborted": repeat(batches.aborted, "aborted"),
        "segment_id": pa.repeat(pa.scalar(origin.segment_id, pa.string()), rows),
        "topic_id": pa.repeat(pa.scalar(origin.topic_id, pa.string()), rows),
    }
    kafka = pa.StructArray.from_arrays([columns[f.name] for f in k], fields=list(k))
    headers = headers_array(parts["headers"], rows, HEADERS_ARROW_TYPE)  # type: ignore[arg-type]
    values = binary_array(parts["value"], rows, pa.binary())  # type: ignore[arg-type]
    keys = binary_array(parts["key"], rows, pa.binary())  # type: ignore[arg-type]
    arrays = [kafka, headers, keys, values]
    value_type = key_type = None
    if value_column is not None:
        parsed, value_type, key_type = value_column.parsed(keys.to_pylist, values.to_pylist)
        arrays += parsed
    if summary.first_offset < 0:
        summary.first_offset = columns["offset"][0].as_py()
    return pa.Table.from_arrays(arrays, schema=arrow_schema(value_type, key_type))


def reference_row_tables(
    path: Path,
    partition: int,
    aborted: Sequence[AbortedTxn],
    max_bytes: int,
    summary: SegmentSummary,
    value_column: ValueColumn | None = None,
    *,
    origin: RowOrigin,
) -> Iterator[pa.Table]:
    """``segment_row_tables`` by the Python walk: a ``Record`` per record, appended field by field."""
    spans = _aborted_spans(aborted)
    cols = _Columns()
    held = 0
    crc = 0
    decoder = LogBatchDecoder(ReadBounds())
    try:
        for header, batch in _representable_batches(path):
            records = decode_records(batch, position=header.position)
            body = memoryview(batch)[BATCH_HEADER_SIZE : header.size]
            inflated = len(decoder.inflate(header.compression, body)) if header.compression else len(body)
            crc = _crc32c.crc32c(batch, crc)
            aborted_batch = (
                header.is_transactional
                and not header.is_control
                and any(lo <= header.base_offset <= hi for lo, hi in spans.get(header.producer_id, ()))
            )
            control_type: int | None = None
            if header.is_control:
                try:
                    control_type = int(parse_control_key(records[0].key)[1])
                except ValueError as e:
                    raise NotRepresentable(f"control batch at position {header.position}: {e}") from None
            k = cols.kafka
            for r in records:
                k["partition"].append(partition)
                k["offset"].append(r.offset)
                ts = r.timestamp
                k["timestamp"].append(ts * 1000 if _TS_US_MIN <= ts <= _TS_US_MAX else None)
                k["batch_byte_offset"].append(header.position)
                k["batch_base_offset"].append(header.base_offset)
                k["batch_partition_leader_epoch"].append(header.partition_leader_epoch)
                k["batch_magic"].append(header.magic)
                k["batch_timestamp_type"].append(header.timestamp_type)
                k["batch_compression_type"].append(int(header.compression))
                k["batch_max_timestamp"].append(header.max_timestamp)
                k["batch_producer_id"].append(header.producer_id)
                k["batch_producer_epoch"].append(header.producer_epoch)
                k["batch_base_sequence"].append(header.base_sequence)
                k["batch_attributes"].append(header.attributes)
                k["batch_base_timestamp"].append(header.base_timestamp)
                k["batch_last_offset_delta"].append(header.last_offset_delta)
                k["batch_record_count"].append(header.records_count)
                k["batch_byte_size"].append(header.size)
                k["record_attributes"].append(r.attributes)
                k["timestamp_delta"].append(r.timestamp_delta)
                k["timestamp_ms"].append(ts)
                k["is_transactional"].append(header.is_transactional)
                k["is_control"].append(header.is_control)
                k["control_type"].append(control_type)
                k["aborted"].append(aborted_batch)
                k["segment_id"].append(origin.segment_id)
                k["topic_id"].append(origin.topic_id)
                cols.headers.append([{"key": name, "value": value} for name, value in r.headers])
                cols.keys.append(r.key)
                cols.values.append(r.value)
            if summary.first_offset < 0:
                summary.first_offset = records[0].offset
            summary.last_offset = header.last_offset
            summary.rows += len(records)
            summary.batches += 1
            summary.size = header.end_position
            held += BATCH_HEADER_SIZE + inflated
            if held >= max_bytes:
                yield cols.table(value_column)
                cols = _Columns()
                held = 0
    except KafkaFormatError as e:
        raise NotRepresentable(str(e)) from None
    summary.crc32c = crc
    if len(cols):
        yield cols.table(value_column)


def file_crc32c(path: Path) -> int:
    """CRC-32C of a whole file (for tests and tools comparing a rebuilt segment)."""
    crc = 0
    with open(path, "rb") as f:
        while piece := f.read(1 << 20):
            crc = _crc32c.crc32c(piece, crc)
    return crc
