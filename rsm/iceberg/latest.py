"""The merge behind a latest-per-key table, in Arrow and without pyiceberg: what a copy changes, and the rows of
the affected buckets afterwards.

A copy's log rows become *changes*: one row per (Kafka partition, key) holding the record of the highest offset
in the copy, with ``_deleted`` set for a tombstone (or a Debezium delete). Control records, records of aborted
transactions and records without a key are left out. Changes at or below the offset already applied to the table
for their partition and topic id (its watermark) are dropped, so a retried copy or a replay changes nothing.
``merge`` then gives the new rows of the buckets the changes touch: the old rows of other keys, and the changed
keys' newest records unless deleted.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from rsm.iceberg.debezium import DebeziumColumns
from rsm.iceberg.latest_config import LatestTable, NotKeyable, key_bytes

__all__ = [
    "DELETED",
    "LATEST_KAFKA",
    "META",
    "NotKeyable",
    "changes_of",
    "conform",
    "key_bucket",
    "merge",
    "newest_per_key",
    "past_watermarks",
    "watermark_property",
]

META = "_kafka"
"""The latest table's struct of where each row's record sits in Kafka."""
DELETED = "_deleted"
"""A change's flag: the key's newest record deletes it (never written to the table)."""
LATEST_KAFKA = pa.struct(
    [
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("topic_id", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("key_bucket", pa.int32()),
    ]
)
_RECORD_COLUMNS = ("headers", "key_raw", "value_raw", "value", "key")
WATERMARK_PREFIX = "kafka.latest.offset."


def watermark_property(topic_id: str, partition: int) -> str:
    """The table property holding the last offset applied for the partition of that topic id."""
    return f"{WATERMARK_PREFIX}{topic_id}.{partition}"


def key_bucket(key: bytes, buckets: int) -> int:
    """The bucket of a key: CRC-32 of its bytes modulo the buckets (stable across processes and releases)."""
    return zlib.crc32(key) % buckets


def _keys(chunk: pa.Table, spec: LatestTable) -> list[bytes | None]:
    """Each row's key bytes: the record key, or the chosen value fields encoded as JSON (null: not keyable)."""
    if spec.by_kafka_key:
        return chunk.column("key_raw").to_pylist()  # type: ignore[no-any-return]
    if "value" not in chunk.column_names:
        raise NotKeyable(
            f"the latest table {'.'.join(spec.identifier)} is keyed by {', '.join(spec.key)} but topic "
            f"{spec.topic!r} has no parsed value: give it a value schema (iceberg.value.schema.*) or key it by "
            "kafka.key (iceberg.mode.table.<id>.latest.key)"
        )
    columns = []
    for path in spec.key:
        array: pa.ChunkedArray = chunk.column("value")
        for name in path.split(".")[1:]:
            if not pa.types.is_struct(array.type) or array.type.get_field_index(name) < 0:
                raise NotKeyable(
                    f"the latest table {'.'.join(spec.identifier)} is keyed by {path}, which the parsed value of "
                    f"topic {spec.topic!r} does not have; fix iceberg.mode.table.<id>.latest.key"
                )
            array = pc.struct_field(array, name)
        columns.append(array.to_pylist())
    return [key_bytes(values) for values in zip(*columns, strict=True)]


def changes_of(chunk: pa.Table, spec: LatestTable, debezium: DebeziumColumns | None = None) -> pa.Table:
    """The changes of one chunk of log rows (the log table's Arrow layout): ``_kafka``, ``_deleted`` and the
    row's own columns (the record's, or ``after``'s for Debezium), records without a key, control records and
    aborted ones left out. Several changes of one key may remain (``newest_per_key`` keeps one)."""
    kafka = chunk.column("kafka")
    keep = pc.invert(
        pc.or_kleene(
            pc.fill_null(pc.struct_field(kafka, "is_control"), False),
            pc.fill_null(pc.struct_field(kafka, "aborted"), False),
        )
    )
    chunk = chunk.filter(keep)
    change = None
    if spec.format == "debezium":
        # A Debezium topic's value fields are those of the row: ``after``, or ``before`` for a delete.
        columns, deleted, change, row_keys = (debezium or DebeziumColumns()).parse(chunk, spec)
        keys = _keys(chunk, spec) if row_keys is None else row_keys
        keyed = pa.array([k is not None for k in keys], type=pa.bool_())
        if columns.num_columns:  # none when no event has a row to give columns
            columns = columns.filter(keyed)
        deleted, change = deleted.filter(keyed), change.filter(keyed)
        chunk = chunk.filter(keyed)
    else:
        keys = _keys(chunk, spec)
        chunk = chunk.filter(pa.array([k is not None for k in keys], type=pa.bool_()))
        columns = pa.table({n: chunk.column(n) for n in _RECORD_COLUMNS if n in chunk.column_names})
        deleted = pc.is_null(chunk.column("value_raw"))
    key_array = pa.array([k for k in keys if k is not None], type=pa.binary())
    kafka = chunk.column("kafka")
    buckets = pa.array([key_bucket(k, spec.buckets) for k in key_array.to_pylist()], type=pa.int32())
    meta = pa.StructArray.from_arrays(
        [
            pc.struct_field(kafka, "partition").combine_chunks(),
            pc.struct_field(kafka, "offset").combine_chunks(),
            pc.struct_field(kafka, "timestamp").combine_chunks(),
            pc.struct_field(kafka, "topic_id").combine_chunks(),
            key_array,
            buckets,
        ],
        fields=list(LATEST_KAFKA),
    )
    out = pa.table({META: meta, DELETED: deleted})
    for name in columns.column_names:
        out = out.append_column(columns.schema.field(name), columns.column(name))
    return out if change is None else out.filter(change)


def _identity(rows: pa.Table) -> pa.Array:
    """(topic-independent) identity of each row: its Kafka partition and key bytes, as one binary value."""
    meta = rows.column(META)
    partition = pc.cast(pc.cast(pc.struct_field(meta, "partition"), pa.string()), pa.binary())
    key = pc.cast(pc.struct_field(meta, "key"), pa.binary())
    return pc.binary_join_element_wise(partition, key, b"/").combine_chunks()


def newest_per_key(changes: Sequence[pa.Table]) -> pa.Table:
    """One change per (partition, key): the one of the highest offset (``changes`` may repeat a key, in any
    order; their schemas are unified, columns only some have are null in the others)."""
    tables = [t for t in changes if t.num_rows]
    if not tables:
        return changes[0].slice(0, 0) if changes else pa.table({META: pa.array([], LATEST_KAFKA)})
    rows = pa.concat_tables(tables, promote_options="permissive").combine_chunks()
    ident = _identity(rows)
    offsets = pc.struct_field(rows.column(META), "offset")
    order = pc.sort_indices(pa.table({"i": ident, "o": offsets}), sort_keys=[("i", "ascending"), ("o", "descending")])
    rows = rows.take(order)
    ident = ident.take(order)
    if rows.num_rows < 2:
        return rows
    first = pa.concat_arrays(
        [pa.array([True]), pc.not_equal(ident.slice(1), ident.slice(0, len(ident) - 1))]  # type: ignore[list-item]
    )
    return rows.filter(first)


def past_watermarks(changes: pa.Table, watermarks: Mapping[tuple[str, int], int]) -> pa.Table:
    """The changes above the last offset applied for their (topic id, partition): what a copy still has to
    apply. A change without a topic id is compared with the watermark of the empty id."""
    if not watermarks or not changes.num_rows:
        return changes
    meta = changes.column(META)
    pairs = zip(
        pc.struct_field(meta, "topic_id").to_pylist(),
        pc.struct_field(meta, "partition").to_pylist(),
        pc.struct_field(meta, "offset").to_pylist(),
        strict=True,
    )
    mask = [o > watermarks.get((t or "", p), -1) for t, p, o in pairs]
    return changes.filter(pa.array(mask, type=pa.bool_()))


def watermarks_after(changes: pa.Table) -> dict[tuple[str, int], int]:
    """The highest offset of the changes, per (topic id, partition)."""
    out: dict[tuple[str, int], int] = {}
    meta = changes.column(META)
    for t, p, o in zip(
        pc.struct_field(meta, "topic_id").to_pylist(),
        pc.struct_field(meta, "partition").to_pylist(),
        pc.struct_field(meta, "offset").to_pylist(),
        strict=True,
    ):
        k = (t or "", p)
        out[k] = max(out.get(k, -1), o)
    return out


def conform(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """``array`` as ``target``: struct fields matched by name (those missing are null, extra ones dropped), other
    types cast (int32 -> int64, float -> double; what schema evolution allows)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type.equals(target):
        return array
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        children = []
        for f in target:
            index = array.type.get_field_index(f.name)
            child = array.field(index) if index >= 0 else pa.nulls(len(array), f.type)
            children.append(conform(child, f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), target)
    return array.cast(target)


def as_schema(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns (missing ones null, extra ones dropped, types conformed)."""
    arrays = [
        conform(rows.column(f.name), f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def merge(existing: pa.Table, changes: pa.Table) -> pa.Table:
    """The rows of the buckets ``changes`` touch once they apply: ``existing`` (those buckets' current rows)
    without the changed keys, plus the changes that are not deletes. A change older than the row it would
    replace (same topic id, lower offset) leaves that row as it is: an older offset never overwrites a newer one.
    The result keeps ``existing``'s schema when it has one (``changes`` conformed to it), and has no
    ``_deleted`` column."""
    schema = existing.schema if existing.num_columns else changes.drop_columns([DELETED]).schema
    if existing.num_rows and changes.num_rows:
        old_ident = _identity(existing)
        new_ident = _identity(changes)
        # Newer rows already in the table win over the changes of their key.
        old_offsets = dict(
            zip(
                old_ident.to_pylist(),
                zip(
                    pc.struct_field(existing.column(META), "topic_id").to_pylist(),
                    pc.struct_field(existing.column(META), "offset").to_pylist(),
                    strict=True,
                ),
                strict=True,
            )
        )
        meta = changes.column(META)
        stale = [
            (i in old_offsets and old_offsets[i][0] == t and old_offsets[i][1] >= o)
            for i, t, o in zip(
                new_ident.to_pylist(),
                pc.struct_field(meta, "topic_id").to_pylist(),
                pc.struct_field(meta, "offset").to_pylist(),
                strict=True,
            )
        ]
        if any(stale):
            changes = changes.filter(pc.invert(pa.array(stale, type=pa.bool_())))
            new_ident = _identity(changes)
        existing = existing.filter(pc.invert(pc.is_in(old_ident, value_set=new_ident)))
    written = changes.filter(pc.invert(pc.fill_null(changes.column(DELETED), False))).drop_columns([DELETED])
    parts = [as_schema(t, schema) for t in (existing, written) if t.num_rows]
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts)


def buckets_of(changes: pa.Table) -> set[int]:
    """The buckets the changes touch."""
    return set(pc.unique(pc.struct_field(changes.column(META), "key_bucket")).to_pylist())


def unify(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """One schema that holds each of ``schemas`` (fields added, types widened)."""
    return pa.unify_schemas(list(schemas), promote_options="permissive")
