"""A segment file turned into Arrow rows of the topic's table, one row per record (control records included).

Rows come in tables of at most about ``max_bytes`` of segment at a time, in offset order. A segment the table
cannot rebuild exactly (a legacy magic 0/1 entry, a batch without records, records Kafka's own parser would
refuse) raises ``NotRepresentable``: the plugin then tiers that segment in the classic format.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c
import pyarrow as pa

from rsm.iceberg.schema import HEADERS_ARROW_TYPE, KAFKA_FIELDS, arrow_schema, kafka_arrow_type
from rsm.iceberg.value_hook import ValueColumn
from rsm.kafka.errors import KafkaFormatError
from rsm.kafka.indexes import AbortedTxn
from rsm.kafka.records import decode_records, iter_batches, parse_control_key

_TS_US_MAX = ((1 << 63) - 1) // 1000
_TS_US_MIN = -(1 << 63) // 1000 + 1

__all__ = ["NotRepresentable", "SegmentSummary", "segment_row_tables"]


class NotRepresentable(Exception):
    """The segment holds something the table cannot give back byte-for-byte as Kafka's records."""


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
        value_type = None
        if value_column is not None:
            value_type = value_column.arrow_type
            arrays.append(value_column.convert(self.values))
        return pa.Table.from_arrays(arrays, schema=arrow_schema(value_type))


def _aborted_spans(aborted: Sequence[AbortedTxn]) -> dict[int, list[tuple[int, int]]]:
    spans: dict[int, list[tuple[int, int]]] = {}
    for a in aborted:
        spans.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
    return spans


def segment_row_tables(
    path: Path,
    partition: int,
    aborted: Sequence[AbortedTxn],
    max_bytes: int,
    summary: SegmentSummary,
    value_column: ValueColumn | None = None,
) -> Iterator[pa.Table]:
    """Arrow tables of the segment's rows, each from at most about ``max_bytes`` of the segment."""
    spans = _aborted_spans(aborted)
    cols = _Columns()
    held = 0
    crc = 0
    try:
        for header, batch in iter_batches(path, verify=True):
            if header.records_count == 0:
                raise NotRepresentable(f"the batch at position {header.position} holds no records")
            if header.position > (1 << 31) - 1:
                raise NotRepresentable("the segment is larger than 2 GiB")
            records = decode_records(batch, position=header.position)
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
                cols.headers.append([{"key": name, "value": value} for name, value in r.headers])
                cols.keys.append(r.key)
                cols.values.append(r.value)
            if summary.first_offset < 0:
                summary.first_offset = records[0].offset
            summary.last_offset = header.last_offset
            summary.rows += len(records)
            summary.batches += 1
            summary.size = header.end_position
            held += header.size
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
