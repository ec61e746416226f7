"""Debezium change events as rows of a latest-per-key table: the columns of ``after``, or a delete.

An event's value is Debezium's envelope (``before``, ``after``, ``op``, ``source``, ``ts_ms``), as the topic's
parsed ``value`` struct (Avro through the registry, JSON Schema) or as JSON in ``value_raw``, with the JSON
converter's ``{"schema": ..., "payload": ...}`` wrapper or without it. ``c`` (create), ``u`` (update) and ``r``
(a snapshot's read) give the row ``after``; ``d`` and a tombstone (null value) delete the key. Other events
(``t``, truncate; a value that is no envelope) change nothing.

Column types come from the wrapper's schema where there is one (Kafka Connect's types: int8/16/32 as int, int64
as long, float32 as float, float64 as double, boolean, string, bytes as binary, structs as structs), from the
parsed struct for Avro, and are inferred from the values otherwise.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rsm.errors import RemoteStorageException
from rsm.iceberg.latest_config import LatestTable, NotKeyable, key_bytes

__all__ = ["DebeziumColumns", "connect_type", "envelope_of"]

_UPSERT_OPS = ("c", "u", "r")
_RESERVED = ("_kafka", "_deleted")
_CONNECT_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int32(),
    "int16": pa.int32(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


_ABSENT = object()


def _field(row: dict[str, Any] | None, path: str) -> Any:
    """The value at ``path`` (``value.a.b``: field ``a``, then ``b``) of a row; None where a level is null,
    ``_ABSENT`` where a level has no such field."""
    for name in path.split(".")[1:]:
        if not isinstance(row, dict):
            return None
        if name not in row:
            return _ABSENT
        row = row[name]
    return row


def connect_type(schema: dict[str, Any]) -> pa.DataType:
    """The Arrow type of a Kafka Connect JSON schema (what the JSON converter writes with ``schemas.enable``)."""
    kind = schema.get("type")
    if kind == "struct":
        return pa.struct([pa.field(f["field"], connect_type(f)) for f in schema.get("fields", [])])
    if kind == "array":
        return pa.list_(connect_type(schema.get("items", {"type": "string"})))
    if kind == "map":
        return pa.map_(connect_type(schema.get("keys", {"type": "string"})), connect_type(schema["values"]))
    if kind in _CONNECT_TYPES:
        return _CONNECT_TYPES[kind]
    raise ValueError(f"unknown Kafka Connect type {kind!r}")


def _decode_bytes(value: Any, t: pa.DataType) -> Any:
    """A JSON value as ``t`` takes it: base64 text of ``bytes`` fields decoded, structs and lists walked."""
    if value is None:
        return None
    if pa.types.is_binary(t) and isinstance(value, str):
        return base64.b64decode(value)
    if pa.types.is_struct(t) and isinstance(value, dict):
        return {f.name: _decode_bytes(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t) and isinstance(value, list):
        return [_decode_bytes(v, t.value_type) for v in value]
    return value


def envelope_of(raw: bytes) -> tuple[dict[str, Any] | None, pa.DataType | None]:
    """The envelope in a JSON value and the Arrow type of its ``after`` when the value carries a schema; (None,
    None) for a value that is no envelope. A tombstone of the JSON converter with schemas
    (``{"schema": null, "payload": null}``) gives an envelope with ``op`` ``d``."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    after_type = None
    if set(obj) == {"schema", "payload"}:
        schema, obj = obj["schema"], obj["payload"]
        if obj is None:
            return {"op": "d"}, None
        if isinstance(schema, dict):
            for f in schema.get("fields", []):
                if f.get("field") == "after":
                    try:
                        after_type = connect_type(f)
                    except (KeyError, ValueError):
                        after_type = None
    if not isinstance(obj, dict) or "op" not in obj:
        return None, None
    return obj, after_type


class DebeziumColumns:
    """Turns a chunk of log rows into the latest table's columns for a Debezium topic."""

    def parse(
        self, chunk: pa.Table, spec: LatestTable
    ) -> tuple[pa.Table, pa.Array, pa.Array, list[bytes | None] | None]:
        """(the columns of ``after``, whether each row deletes its key, whether each row is a change at all, and
        each row's key when the table is keyed by value fields: those of ``after``, or of ``before`` for a
        delete; None when it is keyed by the Kafka key). A delete whose ``before`` lacks a key field raises
        :class:`NotKeyable`."""
        if "value" in chunk.column_names:
            value = chunk.column("value")
            names = value.type.names if pa.types.is_struct(value.type) else []
            if "op" in names and "after" in names:
                return self._parsed(chunk, spec)
        return self._json(chunk, spec)

    def _parsed(
        self, chunk: pa.Table, spec: LatestTable
    ) -> tuple[pa.Table, pa.Array, pa.Array, list[bytes | None] | None]:
        value = chunk.column("value").combine_chunks()
        op = pc.struct_field(value, "op")
        after = pc.struct_field(value, "after")
        tombstone = pc.is_null(chunk.column("value_raw")).combine_chunks()
        deleted = pc.or_(tombstone, pc.fill_null(pc.equal(op, "d"), False))
        upsert = pc.fill_null(pc.is_in(op, value_set=pa.array(_UPSERT_OPS)), False)
        change = pc.or_(deleted, upsert)
        keys = None
        if not spec.by_kafka_key:
            names = value.type.names
            befores = pc.struct_field(value, "before").to_pylist() if "before" in names else [None] * len(value)
            rows = zip(op.to_pylist(), tombstone.to_pylist(), befores, after.to_pylist(), strict=True)
            keys = [
                self._row_key(spec, chunk, i, o, gone, before, row) for i, (o, gone, before, row) in enumerate(rows)
            ]
        return self._columns(after, spec), deleted, change, keys

    def _json(
        self, chunk: pa.Table, spec: LatestTable
    ) -> tuple[pa.Table, pa.Array, pa.Array, list[bytes | None] | None]:
        afters: list[dict[str, Any] | None] = []
        types: list[pa.DataType] = []
        deleted: list[bool] = []
        change: list[bool] = []
        keys: list[bytes | None] = []
        for i, raw in enumerate(chunk.column("value_raw").to_pylist()):
            if raw is None:
                afters.append(None)
                deleted.append(True)
                change.append(True)
                keys.append(None)
                continue
            envelope, after_type = envelope_of(raw)
            op = envelope.get("op") if envelope is not None else None
            after = envelope.get("after") if envelope is not None else None
            if op == "d":
                if after_type is not None:  # the schema still says what the columns are
                    types.append(after_type)
                afters.append(None)
                deleted.append(True)
                change.append(True)
                before = envelope.get("before") if envelope is not None else None
                if after_type is not None and isinstance(before, dict):
                    before = _decode_bytes(before, after_type)  # as ``after`` is, so that keys compare equal
                keys.append(None if spec.by_kafka_key else self._row_key(spec, chunk, i, op, False, before, None))
            elif op in _UPSERT_OPS and isinstance(after, dict):
                if after_type is not None:
                    after = _decode_bytes(after, after_type)
                    types.append(after_type)
                afters.append(after)
                deleted.append(False)
                change.append(True)
                keys.append(None if spec.by_kafka_key else self._row_key(spec, chunk, i, op, False, None, after))
            else:
                afters.append(None)
                deleted.append(False)
                change.append(False)
                keys.append(None)
        if types:
            unified = pa.unify_schemas([pa.schema(list(t)) for t in types], promote_options="permissive")
            array = pa.array(afters, type=pa.struct(list(unified)))
        else:
            array = pa.array(afters) if any(a for a in afters) else pa.nulls(len(afters), pa.struct([]))
        return (
            self._columns(array, spec),
            pa.array(deleted, type=pa.bool_()),
            pa.array(change, type=pa.bool_()),
            None if spec.by_kafka_key else keys,
        )

    @staticmethod
    def _row_key(
        spec: LatestTable,
        chunk: pa.Table,
        index: int,
        op: str | None,
        tombstone: bool,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> bytes | None:
        """The key of one event from the value fields ``spec`` names: ``after``'s for a create, update or read,
        ``before``'s for a delete (None for a tombstone or another event: it is left out)."""
        if tombstone or op not in (*_UPSERT_OPS, "d"):
            return None
        row = before if op == "d" else after
        values = [_field(row, path) for path in spec.key]
        if op != "d" and any(v is _ABSENT for v in values):
            raise NotKeyable(
                f"the latest table {'.'.join(spec.identifier)} is keyed by {', '.join(spec.key)}, which the rows "
                f"('after') of the change events of topic {spec.topic!r} do not have; fix "
                "iceberg.mode.table.<id>.latest.key (value.<column> names a column of the source table)"
            )
        values = [None if v is _ABSENT else v for v in values]
        if op == "d" and any(v is None for v in values):
            kafka = chunk.column("kafka")[index].as_py()
            missing = [p for p, v in zip(spec.key, values, strict=True) if v is None]
            raise NotKeyable(
                f"the delete event at offset {kafka['offset']} of partition {kafka['partition']} of topic "
                f"{spec.topic!r} has no {', '.join(missing)} in its 'before' (Debezium sends the key columns "
                f"there), so the latest table {'.'.join(spec.identifier)} cannot tell which row it deletes. Set "
                "REPLICA IDENTITY DEFAULT (or FULL) on the source table, with the key columns in its primary key, "
                "or key the table by kafka.key (iceberg.mode.table.<id>.latest.key); the copy fails until then"
            )
        return key_bytes(values)

    def _columns(self, after: pa.Array | pa.ChunkedArray, spec: LatestTable) -> pa.Table:
        if isinstance(after, pa.ChunkedArray):
            after = after.combine_chunks()
        if not pa.types.is_struct(after.type):
            return pa.table({})
        for name in after.type.names:
            if name in _RESERVED:
                raise RemoteStorageException(
                    f"the change events of topic {spec.topic!r} have a column {name!r}, which the latest table "
                    f"{'.'.join(spec.identifier)} uses itself; rename it in the source (or with a Debezium "
                    "transform) or set iceberg.mode.table.<id>.latest.format=record"
                )
        return pa.Table.from_arrays(after.flatten(), names=after.type.names)
