"""Record values parsed into the Iceberg row's ``value`` struct, where the topic has a schema.

A topic gets a schema in one of three ways (declared in ``VALUES_CONFIG_DEF``):

- an Avro schema (``iceberg.value.schema.<id>.avro``: inline JSON or a file path): each value is Avro binary;
- a JSON Schema (``iceberg.value.schema.<id>.json``: inline JSON or a file path): each value is JSON text that
  must validate;
- a Confluent-compatible schema registry (``iceberg.value.schema.registry.url``): each value is the registry's
  wire format (byte 0 is the magic 0, bytes 1-4 the big-endian schema id, then Avro binary). The table's struct
  comes from ``iceberg.value.schema.registry.<id>.schema.id``, else the latest schema of the subject
  ``<topic>-value`` when the table writer asks (else, for a bare parser, the first id seen); values written with
  another id are read through Avro schema resolution into it.

``<id>`` is the topic name, or any name without a dot together with ``iceberg.value.schema.<id>.topic`` for a
topic whose name has dots. A value that does not parse (wrong bytes, fails validation, an unknown schema id, a
schema that cannot be resolved) keeps ``value`` null; its bytes are always in ``value_raw``.

Avro is read with fastavro and JSON Schema validated with jsonschema; the Arrow type of the struct is derived
from the schema (:func:`arrow_type_from_avro`, :func:`arrow_type_from_json_schema`) and holds only types an
Iceberg table can store.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import logging
import os
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from backends.configdef import PARSERS, ConfigException
from rsm.iceberg.value_hook import ValueColumn, ValueColumnFactory
from rsm.iceberg.values_config import VALUES_CONFIG_DEF

log = logging.getLogger(__name__)

#: The magic byte that starts a value in the Confluent wire format.
CONFLUENT_MAGIC = 0

_PREFIX = "iceberg.value.schema."


# ---------------------------------------------------------------------------------------------- Avro -> Arrow


class UnsupportedSchema(ConfigException):
    """A schema holds a type the Iceberg `value` struct cannot store; the message names where."""


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


def avro_to_arrow_value(schema: Any, datum: Any) -> Any:
    """A fastavro-decoded datum as the Python value ``pa.array`` takes for :func:`arrow_type_from_avro`'s type."""
    return _avro_value(schema, datum, {}, None)


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


# ---------------------------------------------------------------------------------------- JSON Schema -> Arrow


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


# ---------------------------------------------------------------------------------------------- the parsers


def _schema_text(key: str, text: str) -> Any:
    """Parse a schema given inline (JSON) or as a file path."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[", '"')):
        try:
            with open(os.path.expanduser(stripped), encoding="utf-8") as f:
                stripped = f.read()
        except OSError as e:
            raise ConfigException(
                f"Invalid value {text!r} for configuration {key}: neither inline JSON nor a readable file ({e})"
            ) from e
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as e:
        raise ConfigException(f"Invalid value for configuration {key}: the schema is not valid JSON ({e})") from e


class ValueParser:
    """Turns a topic's raw values into the ``value`` struct column (null where a value does not parse)."""

    arrow_type: pa.DataType

    def parse_one(self, raw: bytes) -> Any:
        """The Python value for ``arrow_type``; raises (any exception) when ``raw`` does not parse."""
        raise NotImplementedError

    def parse(self, raws: Sequence[bytes | None]) -> pa.Array:
        """One ``value`` per raw value, null for a null value or one that does not parse."""
        out: list[Any] = []
        for raw in raws:
            if raw is None:
                out.append(None)
                continue
            try:
                v = self.parse_one(bytes(raw))
                pa.scalar(v, type=self.arrow_type)  # a value the type cannot hold is one that did not parse
            except Exception:
                v = None
            out.append(v)
        return pa.array(out, type=self.arrow_type)


class AvroValueParser(ValueParser):
    """Values in Avro binary of one writer schema."""

    def __init__(self, schema: Any) -> None:
        import fastavro

        self.schema = schema
        self.arrow_type = arrow_type_from_avro(schema)
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
        return avro_to_arrow_value(self.schema, datum)


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


class SchemaRegistryClient:
    """Fetches Avro schemas by id from a Confluent-compatible registry (``GET /schemas/ids/{id}``), cached."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._cache: dict[int, Any] = {}
        self._missing: set[int] = set()
        self._lock = threading.Lock()

    def schema(self, schema_id: int) -> Any | None:
        """The parsed Avro schema of ``schema_id``, or None when the registry has no such id."""
        with self._lock:
            if schema_id in self._cache:
                return self._cache[schema_id]
            if schema_id in self._missing:
                return None
        req = urllib.request.Request(
            f"{self.url}/schemas/ids/{schema_id}", headers={"Accept": "application/vnd.schemaregistry.v1+json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                with self._lock:
                    self._missing.add(schema_id)
                return None
            raise
        if body.get("schemaType", "AVRO") != "AVRO":
            with self._lock:
                self._missing.add(schema_id)
            return None
        schema = json.loads(body["schema"])
        with self._lock:
            self._cache[schema_id] = schema
        return schema

    def latest(self, subject: str) -> tuple[int, Any] | None:
        """``(id, schema)`` of the latest version of ``subject`` (``GET /subjects/{subject}/versions/latest``),
        or None when the registry has no such subject or it is not Avro."""
        req = urllib.request.Request(
            f"{self.url}/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest",
            headers={"Accept": "application/vnd.schemaregistry.v1+json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        if body.get("schemaType", "AVRO") != "AVRO":
            return None
        schema_id, schema = int(body["id"]), json.loads(body["schema"])
        with self._lock:
            self._cache.setdefault(schema_id, schema)
        return schema_id, schema


def split_wire_format(raw: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a value in the Confluent wire format; ValueError when it is not one."""
    if len(raw) < 5 or raw[0] != CONFLUENT_MAGIC:
        raise ValueError("not the schema registry wire format")
    (schema_id,) = struct.unpack(">I", raw[1:5])
    return schema_id, raw[5:]


class RegistryValueParser(ValueParser):
    """Values in the Confluent wire format, read into the struct of one reader schema.

    The reader schema is the schema of ``schema_id``, or of the first id this parser sees. A value of
    another id is read with that id's schema as the writer schema and resolved into the reader schema.
    """

    def __init__(self, client: SchemaRegistryClient, schema_id: int | None = None) -> None:
        self.client = client
        self.schema_id = schema_id
        self._reader: AvroValueParser | None = None
        self._writers: dict[int, Any] = {}
        if schema_id is not None:
            self._set_reader(schema_id)

    def _set_reader(self, schema_id: int) -> bool:
        schema = self.client.schema(schema_id)
        if schema is None:
            return False
        self._reader = AvroValueParser(schema)
        self.schema_id = schema_id
        self.arrow_type = self._reader.arrow_type
        return True

    def prepare(self, raws: Iterable[bytes | None]) -> bool:
        """Fix the reader schema from the first value in the wire format; False when none has a known id."""
        if self._reader is not None:
            return True
        for raw in raws:
            if raw is None:
                continue
            try:
                sid, _ = split_wire_format(bytes(raw))
            except ValueError:
                continue
            if self._set_reader(sid):
                return True
        return False

    def parse_one(self, raw: bytes) -> Any:
        import fastavro

        assert self._reader is not None
        sid, payload = split_wire_format(raw)
        if sid == self.schema_id:
            return self._reader.parse_one(payload)
        writer = self._writers.get(sid)
        if writer is None:
            schema = self.client.schema(sid)
            if schema is None:
                raise ValueError(f"unknown schema id {sid}")
            writer = self._writers[sid] = fastavro.parse_schema(schema)
        buf = io.BytesIO(payload)
        datum = fastavro.schemaless_reader(buf, writer, self._reader._parsed)
        if buf.tell() != len(payload):
            raise ValueError("trailing bytes after the Avro value")
        return avro_to_arrow_value(self._reader.schema, datum)

    def parse(self, raws: Sequence[bytes | None]) -> pa.Array:
        if not self.prepare(raws):
            raise LookupError("no value in the registry's wire format with a known schema id")
        return super().parse(raws)


@dataclass
class ValueSchemas:
    """The value parsers of every topic, from the plugin's configuration."""

    by_topic: dict[str, ValueParser]
    registry: SchemaRegistryClient | None = None
    registry_ids: dict[str, int] | None = None

    @staticmethod
    def from_config(configs: Mapping[str, Any]) -> ValueSchemas:
        """Read the ``iceberg.value.schema.*`` keys; a bad schema raises ConfigException naming its key."""
        ids: dict[str, dict[str, Any]] = {}
        registry_ids: dict[str, int] = {}
        url: str | None = None
        timeout_ms = 10_000
        for key, value in configs.items():
            if not key.startswith(_PREFIX):
                continue
            rest = key[len(_PREFIX) :]
            if rest == "registry.url":
                url = str(value).strip() or None
                continue
            if rest == "registry.timeout.ms":
                timeout_ms = VALUES_CONFIG_DEF.keys["iceberg.value.schema.registry.timeout.ms"].parse(value)
                continue
            if rest.startswith("registry.") and rest.endswith(".schema.id"):
                topic = rest[len("registry.") : -len(".schema.id")]
                registry_ids[topic] = _parse_int(key, value)
                continue
            ident, _, kind = rest.partition(".")
            if kind not in ("topic", "avro", "json"):
                raise ConfigException(
                    f"Unknown configuration {key}: expected iceberg.value.schema.<id>.avro, .json or .topic"
                )
            ids.setdefault(ident, {})[kind] = (key, value)
        by_topic: dict[str, ValueParser] = {}
        for ident, parts in sorted(ids.items()):
            topic = str(parts["topic"][1]) if "topic" in parts else ident
            if "avro" in parts and "json" in parts:
                raise ConfigException(
                    f"Configurations {parts['avro'][0]} and {parts['json'][0]} both set: give the topic one schema"
                )
            if "avro" in parts:
                key, text = parts["avro"]
                parser: ValueParser = _configured(key, lambda s: AvroValueParser(s), _schema_text(key, str(text)))
            elif "json" in parts:
                key, text = parts["json"]
                parser = _configured(key, lambda s: JsonSchemaValueParser(s), _schema_text(key, str(text)))
            else:
                raise ConfigException(
                    f"Configuration {parts['topic'][0]} names a topic without a schema: add "
                    f"{_PREFIX}{ident}.avro or {_PREFIX}{ident}.json"
                )
            if topic in by_topic:
                raise ConfigException(f"Topic {topic!r} is given two value schemas ({_PREFIX}*.topic)")
            by_topic[topic] = parser
        registry = SchemaRegistryClient(url, timeout_ms / 1000) if url else None
        return ValueSchemas(by_topic, registry, registry_ids)

    def parser_for(self, topic: str) -> ValueParser | None:
        """The topic's parser: its own schema, else the registry, else None (values stay raw only)."""
        parser = self.by_topic.get(topic)
        if parser is None and self.registry is not None:
            parser = RegistryValueParser(self.registry, (self.registry_ids or {}).get(topic))
            self.by_topic[topic] = parser
        return parser


def _parse_int(key: str, value: Any) -> int:
    parsed: int = PARSERS["int"](key, value)
    return parsed


def value_column_factory(configs: Mapping[str, Any]) -> ValueColumnFactory:
    """The table writer's hook (``rsm.iceberg.value_hook``) for the ``iceberg.value.schema.*`` keys in ``configs``."""
    schemas = ValueSchemas.from_config(configs)

    def factory(topic: str) -> ValueColumn | None:
        parser = schemas.parser_for(topic)
        if parser is None:
            return None
        if isinstance(parser, RegistryValueParser) and parser.schema_id is None:
            assert schemas.registry is not None
            latest = schemas.registry.latest(f"{topic}-value")  # the registry's default subject of a topic
            if latest is None:
                log.warning("topic %s: the schema registry has no subject %s-value; values stay raw", topic, topic)
                return None
            parser._set_reader(latest[0])
        return ValueColumn(parser.arrow_type, parser.parse)

    return factory


def _configured(key: str, make: Callable[[Any], ValueParser], schema: Any) -> ValueParser:
    try:
        return make(schema)
    except UnsupportedSchema as e:
        raise ConfigException(f"Invalid value for configuration {key}: {e}") from e


def parse_values(parser: ValueParser | None, raws: Sequence[bytes | None]) -> pa.Array | None:
    """The ``value`` column for ``raws``, or None when the topic has no schema (or no registry id fits)."""
    if parser is None:
        return None
    try:
        return parser.parse(raws)
    except LookupError:
        return None


__all__ = [
    "CONFLUENT_MAGIC",
    "VALUES_CONFIG_DEF",
    "AvroValueParser",
    "JsonSchemaValueParser",
    "RegistryValueParser",
    "SchemaRegistryClient",
    "UnsupportedSchema",
    "ValueParser",
    "ValueSchemas",
    "arrow_type_from_avro",
    "arrow_type_from_json_schema",
    "avro_to_arrow_value",
    "json_to_arrow_value",
    "parse_values",
    "value_column_factory",
    "split_wire_format",
]
