"""Rows of the table turned back into Kafka v2 record batches: one batch per original batch, with its offsets,
timestamps, attributes, producer fields and codec, the CRC-32C computed. Uncompressed batches come out byte for
byte as they were; a compressed one holds the same records, compressed again with the same codec.

A batch some of whose rows were deleted (SQL) comes back as a compacted topic's batch does: the records left,
its base offset, lastOffsetDelta and codec kept, the record count and CRC those of the records left."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from rsm.errors import CorruptDataException
from rsm.kafka.batch_encoder import BatchFields, encode_batch_payload, encode_records

_SLICE_ROWS = 1024
"""Rows turned into Python values at a time (whole batches; a larger batch is one slice)."""

#: What a fetch reads of a row (never the parsed ``value``).
FETCH_COLUMNS = ["kafka", "headers", "key_raw", "value_raw"]

_BATCH_COLUMNS = (
    "batch_byte_offset",
    "batch_base_offset",
    "batch_partition_leader_epoch",
    "batch_attributes",
    "batch_last_offset_delta",
    "batch_base_timestamp",
    "batch_max_timestamp",
    "batch_producer_id",
    "batch_producer_epoch",
    "batch_base_sequence",
    "batch_record_count",
)
"""Fields of the batch, the same in each of its rows: read from its first row."""
_RECORD_COLUMNS = ("offset", "record_attributes", "timestamp_delta")


def row_positions(rows: pa.Table) -> pa.ChunkedArray:
    """Each row's batch position in the segment (``kafka.batch_byte_offset``)."""
    return pc.struct_field(rows.column("kafka"), "batch_byte_offset")


def _batch_bounds(rows: pa.Table) -> list[int]:
    """Where each batch's rows start (rows are sorted by position), and ``rows.num_rows`` at the end."""
    positions = row_positions(rows)
    n = rows.num_rows
    changes = pc.not_equal(positions.slice(1), positions.slice(0, n - 1))
    return [0, *(i + 1 for i in pc.indices_nonzero(changes).to_pylist()), n]


def encode_row_batches(rows: pa.Table, what: str) -> Iterator[tuple[int, bytes]]:
    """``(original position, batch bytes)`` for the batches of ``rows``, which hold whole batches (every row of
    each that the table still has) sorted by position and offset. A batch with more rows than its header's record
    count is damage (``CorruptDataException`` naming ``what``); one with fewer lost rows to a delete and holds the
    records left. Rows become Python values a slice of whole batches at a time, as the batches are taken."""
    if rows.num_rows == 0:
        return
    bounds = _batch_bounds(rows)
    b = 0
    while b + 1 < len(bounds):
        e = b + 1  # batches [b, e) in this slice: at least one, more while they fit in _SLICE_ROWS
        while e + 1 < len(bounds) and bounds[e + 1] - bounds[b] <= _SLICE_ROWS:
            e += 1
        yield from _encode_slice(rows.slice(bounds[b], bounds[e] - bounds[b]), bounds[b : e + 1], what)
        b = e


def _encode_slice(rows: pa.Table, bounds: list[int], what: str) -> Iterator[tuple[int, bytes]]:
    kafka = rows.column("kafka").combine_chunks()
    first = bounds[0]
    heads = kafka.take(pa.array([b - first for b in bounds[:-1]], pa.int32()))
    batch = {name: heads.field(name).to_pylist() for name in _BATCH_COLUMNS}
    col = {name: kafka.field(name).to_pylist() for name in _RECORD_COLUMNS}
    headers = rows.column("headers").to_pylist()
    keys = rows.column("key_raw").to_pylist()
    values = rows.column("value_raw").to_pylist()
    for k in range(len(bounds) - 1):
        i, j = bounds[k] - first, bounds[k + 1] - first
        position = batch["batch_byte_offset"][k]
        count = batch["batch_record_count"][k]
        if j - i > count:
            raise CorruptDataException(
                f"{what}: the batch at position {position} has {j - i} rows in the table's data files, its header "
                f"says {count} records"
            )
        base = batch["batch_base_offset"][k]
        fields = BatchFields(
            base_offset=base,
            partition_leader_epoch=batch["batch_partition_leader_epoch"][k],
            attributes=batch["batch_attributes"][k],
            last_offset_delta=batch["batch_last_offset_delta"][k],
            base_timestamp=batch["batch_base_timestamp"][k],
            max_timestamp=batch["batch_max_timestamp"][k],
            producer_id=batch["batch_producer_id"][k],
            producer_epoch=batch["batch_producer_epoch"][k],
            base_sequence=batch["batch_base_sequence"][k],
        )
        records = encode_records(
            col["record_attributes"][i:j],
            col["timestamp_delta"][i:j],
            [o - base for o in col["offset"][i:j]],
            keys[i:j],
            values[i:j],
            headers[i:j],
        )
        yield position, encode_batch_payload(fields, records, j - i)
