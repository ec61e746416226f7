"""Arrow arrays over the buffers of the compiled record walk (``rsm.kafka.record_columns.RecordBuffers.parts``),
without a copy: what a segment's rows (``rsm.iceberg.rows``) and the Spark source's batches (``rsm.spark.reader``)
are built of."""

from __future__ import annotations

import pyarrow as pa

BinaryPart = tuple[object, object, object, int]
"""A binary or string column as the walk gives it: (validity, offsets, data, null count)."""
HeadersPart = tuple[object, BinaryPart, BinaryPart, int]
"""The headers as the walk gives them: (list offsets, names, values, header count)."""


def buffer(memory: object | None) -> pa.Buffer | None:
    """``memory`` (a buffer of the walk's) as an Arrow buffer, shared; None stays None."""
    return None if memory is None else pa.py_buffer(memory)


def fixed_array(kind: pa.DataType, rows: int, memory: object) -> pa.Array:
    """A column of fixed-width values without nulls (offsets, timestamps, attributes)."""
    return pa.Array.from_buffers(kind, rows, [None, buffer(memory)])


def binary_array(part: BinaryPart, rows: int, kind: pa.DataType) -> pa.Array:
    """A binary or string column."""
    validity, offsets, data, nulls = part
    return pa.Array.from_buffers(kind, rows, [buffer(validity), buffer(offsets), buffer(data)], null_count=nulls)


def headers_array(part: HeadersPart, rows: int, kind: pa.ListType) -> pa.Array:
    """The headers column: per record, a list of (name, value) structs of ``kind``'s value type."""
    lists, names, values, count = part
    entries = pa.StructArray.from_arrays(
        [binary_array(names, count, pa.string()), binary_array(values, count, pa.binary())],
        fields=list(kind.value_type),
    )
    return pa.Array.from_buffers(kind, rows, [None, buffer(lists)], children=[entries])
