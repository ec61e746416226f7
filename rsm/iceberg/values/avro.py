"""Avro values: a writer schema given inline or as a file (``iceberg.value.schema.<id>.avro``), or fetched from
a schema registry; each value is Avro binary, read with fastavro. The Arrow type of the struct comes from the
schema (:func:`arrow_type_from_avro`) and holds only types an Iceberg table can store."""

from __future__ import annotations

import datetime
import decimal
import io
import uuid
from typing import Any

import pyarrow as pa

from rsm.iceberg.values.common import UnsupportedSchema, ValueParser


def _avro_named(schema: Any, named: dict[str, Any], namespace: str | None) -> Any:
    """Resolve a reference to a named type (a string that is not a primitive)."""
    if isinstance(schema, str) and schema not in _AVRO_PRIMITIVES:
        full = schema if "." in schema or namespace is None else f"{namespace}.{schema}"
        if full in named:
            return named[full]
        if schema in named:
            return named[schema]
        raise UnsupportedSchema(f"Avro schema refers to the unknown named type {schema!r}")
    return schema


_AVRO_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def _union_branch_name(branch: Any) -> str:
    if isinstance(branch, str):
        return branch.rsplit(".", 1)[-1]
    if isinstance(branch, dict):
        if "logicalType" in branch:
            return str(branch["logicalType"]).replace("-", "_")
        if "name" in branch:
            return str(branch["name"]).rsplit(".", 1)[-1]
        return str(branch["type"])
    return "union"


def arrow_type_from_avro(schema: Any) -> pa.DataType:
    """The Arrow type of values of an Avro schema (parsed JSON), restricted to what Iceberg stores.

    Records become structs, enums strings, arrays lists, maps maps with string keys, fixed binary; a union of
    null and one type is that type (nullable); a union of several types is a struct with one field per branch,
    only the matching one set. Logical types: decimal, date, time (microseconds), timestamp (UTC or local,
    microseconds) and uuid (as its string). A recursive record raises :class:`UnsupportedSchema`.
    """
    return _avro_type(schema, {}, None, ())


def _avro_type(schema: Any, named: dict[str, Any], namespace: str | None, stack: tuple[str, ...]) -> pa.DataType:
    schema = _avro_named(schema, named, namespace)
    if isinstance(schema, str):
        return _AVRO_PRIMITIVES[schema]
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if not branches:
            raise UnsupportedSchema("Avro union of null alone has no Iceberg type")
        if len(branches) == 1:
            return _avro_type(branches[0], named, namespace, stack)
        fields = []
        seen: set[str] = set()
        for b in branches:
            name = _union_branch_name(b)
            if name in seen:
                raise UnsupportedSchema(f"Avro union has two branches named {name!r}")
            seen.add(name)
            fields.append(pa.field(name, _avro_type(b, named, namespace, stack)))
        return pa.struct(fields)
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"not an Avro schema: {schema!r}")
    t = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal" and t in ("bytes", "fixed"):
        precision = int(schema["precision"])
        if precision > 38:
            raise UnsupportedSchema(f"Avro decimal of precision {precision} is over Iceberg's 38")
        if "name" in schema:
            _register(schema, named, namespace)
        return pa.decimal128(precision, int(schema.get("scale", 0)))
    if logical == "date" and t == "int":
        return pa.date32()
    if logical in ("time-millis", "time-micros"):
        return pa.time64("us")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("us")
    if logical == "uuid" and t == "string":
        return pa.string()
    if t == "record" or t == "error":
        ns = schema.get("namespace", namespace)
        full = _register(schema, named, namespace)
        if full in stack:
            raise UnsupportedSchema(f"Avro record {full!r} refers to itself; Iceberg has no recursive types")
        if not schema.get("fields"):
            raise UnsupportedSchema(f"Avro record {full!r} has no fields; Iceberg has no empty structs")
        fields = []
        for f in schema["fields"]:
            ft = _avro_type(f["type"], named, ns, (*stack, full))
            if pa.types.is_null(ft):
                raise UnsupportedSchema(f"field {f['name']!r} of Avro record {full!r} is always null")
            fields.append(pa.field(f["name"], ft))
        return pa.struct(fields)
    if t == "enum":
        _register(schema, named, namespace)
        return pa.string()
    if t == "fixed":
        _register(schema, named, namespace)
        return pa.binary()
    if t == "array":
        return pa.list_(_avro_type(schema["items"], named, namespace, stack))
    if t == "map":
        return pa.map_(pa.string(), _avro_type(schema["values"], named, namespace, stack))
    if isinstance(t, (str, list, dict)):
        return _avro_type(t, named, namespace, stack)
    raise UnsupportedSchema(f"Avro type {t!r} is not supported")


def _register(schema: dict[str, Any], named: dict[str, Any], namespace: str | None) -> str:
    name = str(schema["name"])
    ns = schema.get("namespace", namespace)
    full = name if "." in name or not ns else f"{ns}.{name}"
    named.setdefault(full, schema)
    named.setdefault(name, schema)
    return full


def avro_named_types(schema: Any) -> dict[str, Any]:
    """Every named type ``schema`` defines, by full and short name."""
    named: dict[str, Any] = {}
    _avro_type(schema, named, None, ())
    return named


def avro_to_arrow_value(schema: Any, datum: Any, named: dict[str, Any] | None = None) -> Any:
    """A fastavro-decoded datum as the Python value ``pa.array`` takes for :func:`arrow_type_from_avro`'s type.
    ``named``: the schema's named types (``avro_named_types``), known up front because a datum may leave out the
    place that defines one (Debezium's ``before``, null, defines the record type ``after`` refers to)."""
    return _avro_value(schema, datum, named if named is not None else avro_named_types(schema), None)


def _avro_value(schema: Any, datum: Any, named: dict[str, Any], namespace: str | None) -> Any:

    schema = _avro_named(schema, named, namespace)
    if datum is None:
        return None
    if isinstance(schema, str):
        return datum
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _avro_value(branches[0], datum, named, namespace)
        for b in branches:
            if _avro_matches(_avro_named(b, named, namespace), datum, named, namespace):
                return {_union_branch_name(b): _avro_value(b, datum, named, namespace)}
        raise ValueError(f"datum {datum!r} matches no branch of the union")
    t = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "uuid" and isinstance(datum, uuid.UUID):
        return str(datum)
    if t in ("record", "error"):
        ns = schema.get("namespace", namespace)
        _register(schema, named, namespace)
        return {f["name"]: _avro_value(f["type"], datum.get(f["name"]), named, ns) for f in schema["fields"]}
    if t in ("enum", "fixed"):
        _register(schema, named, namespace)
        return datum
    if t == "array":
        return [_avro_value(schema["items"], d, named, namespace) for d in datum]
    if t == "map":
        return [(k, _avro_value(schema["values"], v, named, namespace)) for k, v in datum.items()]
    if isinstance(t, (list, dict)) or (isinstance(t, str) and t not in _AVRO_PRIMITIVES):
        return _avro_value(t, datum, named, namespace)
    return datum


_INT_RANGE = {"int": 2**31, "long": 2**63}


def _avro_matches(schema: Any, datum: Any, named: dict[str, Any], namespace: str | None) -> bool:
    """Whether a decoded datum is of this (union branch) schema: fastavro returns the branch's Python value."""
    if isinstance(schema, str):
        if schema in _INT_RANGE:
            return (
                isinstance(datum, int)
                and not isinstance(datum, bool)
                and -_INT_RANGE[schema] <= datum < _INT_RANGE[schema]
            )
        return {
            "boolean": lambda d: isinstance(d, bool),
            "float": lambda d: isinstance(d, float),
            "double": lambda d: isinstance(d, float),
            "bytes": lambda d: isinstance(d, bytes),
            "string": lambda d: isinstance(d, str),
        }[schema](datum)
    t = schema.get("type")
    logical = schema.get("logicalType")
    if logical is not None:
        kinds = {
            "decimal": decimal.Decimal,
            "date": datetime.date,
            "time-millis": datetime.time,
            "time-micros": datetime.time,
            "uuid": (uuid.UUID, str),
        }
        if logical in kinds:
            return isinstance(datum, kinds[logical])
        if "timestamp" in str(logical):
            return isinstance(datum, datetime.datetime)
    if t in ("record", "error"):
        return isinstance(datum, dict) and set(datum) <= {f["name"] for f in schema["fields"]}
    if t == "enum":
        return isinstance(datum, str) and datum in schema.get("symbols", ())
    if t == "fixed":
        return isinstance(datum, bytes) and len(datum) == int(schema["size"])
    if t == "array":
        return isinstance(datum, list)
    if t == "map":
        return isinstance(datum, dict)
    return _avro_matches(_avro_named(t, named, namespace), datum, named, namespace)


class AvroValueParser(ValueParser):
    """Values in Avro binary of one writer schema."""

    def __init__(self, schema: Any) -> None:
        import fastavro

        self.schema = schema
        self.arrow_type = arrow_type_from_avro(schema)
        self._named = avro_named_types(schema)
        try:
            self._parsed = fastavro.parse_schema(schema)
        except Exception as e:  # fastavro raises several types for a bad schema
            raise UnsupportedSchema(f"not a valid Avro schema: {e}") from e

    def parse_one(self, raw: bytes) -> Any:
        import fastavro

        buf = io.BytesIO(raw)
        datum = fastavro.schemaless_reader(buf, self._parsed, None)
        if buf.tell() != len(raw):
            raise ValueError("trailing bytes after the Avro value")
        return avro_to_arrow_value(self.schema, datum, self._named)
