"""The Kafka source's columns as Arrow: their fields, and record batches built of decoded records (the compiled
walk's buffers without a copy, else lists)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from rsm.kafka.record_columns import Columns, RecordBuffers

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["HEADERS_COLUMN", "KAFKA_COLUMNS", "arrow_field", "batch_schema", "to_record_batch"]


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
def batch_schema(columns: tuple[str, ...], names: tuple[str, ...]) -> pa.Schema:
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


def _buffers_array(name: str, parts: dict[str, Any], topic: str, partition: int) -> pa.Array:
    """One column of a batch from the compiled walk's buffers (:meth:`RecordBuffers.parts`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rsm.iceberg.walk_arrays import binary_array, fixed_array, headers_array

    rows: int = parts["rows"]
    if name in ("key", "value"):
        if parts[name] is None:
            raise ValueError(f"{name!r} was not read: the decoder was told it is not wanted")
        return binary_array(parts[name], rows, pa.binary())
    if name == "topic":
        return pa.repeat(pa.scalar(topic, pa.string()), rows)
    if name == "partition":
        return pa.repeat(pa.scalar(partition, pa.int32()), rows)
    if name == "offset":
        return fixed_array(pa.int64(), rows, parts["offset"])
    if name == "timestamp":
        millis = fixed_array(pa.int64(), rows, parts["timestamp"])
        return pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC"))
    if name == "timestampType":
        return fixed_array(pa.int32(), rows, parts["timestampType"])
    if name == HEADERS_COLUMN and parts["headers"] is not None:
        return headers_array(parts["headers"], rows, arrow_field(HEADERS_COLUMN).type)
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
    return pa.RecordBatch.from_arrays(arrays, schema=batch_schema(wanted, tuple(names) if names else wanted))
