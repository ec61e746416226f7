"""Rows of the table turned back into Kafka v2 record batches: one batch per original batch, with its offsets,
timestamps, attributes, producer fields and codec, the CRC-32C computed. Uncompressed batches come out byte for
byte as they were; a compressed one holds the same records, compressed again with the same codec."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from rsm.errors import CorruptDataException
from rsm.kafka.batch_encoder import BatchFields, RecordFields, encode_batch

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
    "offset",
    "record_attributes",
    "timestamp_delta",
)


def encode_row_batches(rows: pa.Table, what: str) -> Iterator[tuple[int, bytes]]:
    """``(original position, batch bytes)`` for the batches of ``rows``, which hold whole batches sorted by
    position and offset. A batch whose rows are not all there is damage (``CorruptDataException`` naming
    ``what``): the rows come from the segment's own data files, which hold every record."""
    if rows.num_rows == 0:
        return
    kafka = rows.column("kafka").combine_chunks()
    col = {name: kafka.field(name).to_pylist() for name in _BATCH_COLUMNS}
    headers = rows.column("headers").to_pylist()
    keys = rows.column("key_raw").to_pylist()
    values = rows.column("value_raw").to_pylist()
    positions = col["batch_byte_offset"]
    n = rows.num_rows
    i = 0
    while i < n:
        position = positions[i]
        j = i + 1
        while j < n and positions[j] == position:
            j += 1
        count = col["batch_record_count"][i]
        if j - i != count:
            raise CorruptDataException(
                f"{what}: the batch at position {position} has {j - i} rows in the table's data files, its header "
                f"says {count} records"
            )
        base = col["batch_base_offset"][i]
        fields = BatchFields(
            base_offset=base,
            partition_leader_epoch=col["batch_partition_leader_epoch"][i],
            attributes=col["batch_attributes"][i],
            last_offset_delta=col["batch_last_offset_delta"][i],
            base_timestamp=col["batch_base_timestamp"][i],
            max_timestamp=col["batch_max_timestamp"][i],
            producer_id=col["batch_producer_id"][i],
            producer_epoch=col["batch_producer_epoch"][i],
            base_sequence=col["batch_base_sequence"][i],
        )
        records = [
            RecordFields(
                attributes=col["record_attributes"][r],
                timestamp_delta=col["timestamp_delta"][r],
                offset_delta=col["offset"][r] - base,
                key=keys[r],
                value=values[r],
                headers=[(h["key"], h["value"]) for h in headers[r] or ()],
            )
            for r in range(i, j)
        ]
        yield position, encode_batch(fields, records)
        i = j
