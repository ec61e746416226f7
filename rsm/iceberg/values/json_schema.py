"""JSON Schema values: a schema given inline or as a file (``iceberg.value.schema.<id>.json``), or fetched from
a schema registry; each value is JSON text that must validate (jsonschema). The Arrow type of the struct comes
from the schema (:func:`arrow_type_from_json_schema`)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from rsm.iceberg.values.common import UnsupportedSchema, ValueParser


def arrow_type_from_json_schema(schema: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type of values of a JSON Schema.

    ``object`` with ``properties`` becomes a struct (every field nullable), ``object`` with only
    ``additionalProperties`` a map with string keys, ``array`` a list of its ``items``, ``string`` a string (a
    ``date-time`` format a UTC timestamp, ``date`` a date), ``integer`` a long, ``number`` a double, ``boolean``
    a boolean. A type list with ``null`` is that type; anything else (several types, ``oneOf``, no ``type``)
    is kept as its JSON text in a string. ``$ref`` to ``#/$defs/...`` or ``#/definitions/...`` is followed.
    """
    return _json_type(schema, schema, ())


def _json_resolve(schema: Any, root: Mapping[str, Any], stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    while isinstance(schema, Mapping) and "$ref" in schema:
        ref = str(schema["$ref"])
        if not ref.startswith("#/"):
            raise UnsupportedSchema(f"JSON Schema $ref {ref!r} points outside the schema")
        if ref in stack:
            raise UnsupportedSchema(f"JSON Schema $ref {ref!r} refers to itself; Iceberg has no recursive types")
        stack = (*stack, ref)
        node: Any = root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        schema = node
    return schema, stack


_JSON_TEXT = pa.string()


def _json_kind(schema: Any) -> str | None:
    t = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(t, list):
        kinds = [k for k in t if k != "null"]
        return kinds[0] if len(kinds) == 1 else None
    if t is None and isinstance(schema, Mapping) and "properties" in schema:
        return "object"
    return t if isinstance(t, str) else None


def _json_type(schema: Any, root: Mapping[str, Any], stack: tuple[str, ...]) -> pa.DataType:
    schema, stack = _json_resolve(schema, root, stack)
    kind = _json_kind(schema)
    if kind == "object":
        props = schema.get("properties") or {}
        if props:
            return pa.struct([pa.field(name, _json_type(s, root, stack)) for name, s in props.items()])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and _json_kind(_json_resolve(extra, root, stack)[0]) is not None:
            return pa.map_(pa.string(), _json_type(extra, root, stack))
        return _JSON_TEXT
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            return pa.list_(_json_type(items, root, stack))
        return _JSON_TEXT
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return pa.timestamp("us", tz="UTC")
        if fmt == "date":
            return pa.date32()
        return pa.string()
    if kind == "integer":
        return pa.int64()
    if kind == "number":
        return pa.float64()
    if kind == "boolean":
        return pa.bool_()
    return _JSON_TEXT


def json_to_arrow_value(arrow_type: pa.DataType, value: Any) -> Any:
    """A parsed JSON value as the Python value ``pa.array`` takes for ``arrow_type``."""
    if value is None:
        return None
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, Mapping):
            raise ValueError("expected an object")
        return {f.name: json_to_arrow_value(f.type, value.get(f.name)) for f in arrow_type}
    if pa.types.is_map(arrow_type):
        if not isinstance(value, Mapping):
            raise ValueError("expected an object")
        return [(k, json_to_arrow_value(arrow_type.item_type, v)) for k, v in value.items()]
    if pa.types.is_list(arrow_type):
        if not isinstance(value, list):
            raise ValueError("expected an array")
        return [json_to_arrow_value(arrow_type.value_type, v) for v in value]
    if pa.types.is_timestamp(arrow_type):
        dt = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return dt if dt.tzinfo else dt.replace(tzinfo=datetime.UTC)
    if pa.types.is_date(arrow_type):
        return datetime.date.fromisoformat(str(value))
    if pa.types.is_string(arrow_type):
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    if pa.types.is_int64(arrow_type):
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise ValueError("expected a 64-bit integer")
        return value
    if pa.types.is_float64(arrow_type):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("expected a number")
        return float(value)
    if pa.types.is_boolean(arrow_type):
        if not isinstance(value, bool):
            raise ValueError("expected a boolean")
        return value
    raise ValueError(f"no conversion to {arrow_type}")


class JsonSchemaValueParser(ValueParser):
    """Values as JSON text that validates against a JSON Schema."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        import jsonschema

        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
        except jsonschema.SchemaError as e:
            raise UnsupportedSchema(f"not a valid JSON Schema: {e.message}") from e
        self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self.arrow_type = arrow_type_from_json_schema(schema)

    def parse_one(self, raw: bytes) -> Any:
        value = json.loads(raw.decode("utf-8"))
        self._validator.validate(value)
        return json_to_arrow_value(self.arrow_type, value)
