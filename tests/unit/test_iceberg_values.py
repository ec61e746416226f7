"""rsm.iceberg.values: Avro and JSON Schema specifics, the configuration, and the registry's Avro values
(every source against one table of cases: test_iceberg_value_sources.py)."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_registry import FakeRegistry, fake_registry, register

from backends.configdef import ConfigException
from rsm.errors import RemoteStorageException
from rsm.iceberg.values import (
    AvroValueParser,
    IncompatibleSchema,
    JsonSchemaValueParser,
    RegistryValueParser,
    UnsupportedSchema,
    ValueSchemas,
    arrow_type_from_avro,
    arrow_type_from_json_schema,
    merge_types,
    parse_values,
    split_message_indexes,
    split_wire_format,
    value_column_factory,
    wire_value,
)
from rsm.iceberg.values.registry import message_indexes_bytes


def _avro(schema: Any, datum: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


# ------------------------------------------------------------------------------ Avro round trip (property test)

_names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_PRIMS: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "bytes": st.binary(max_size=20),
    "string": st.text(max_size=20),
}


def _schema_and_data(counter: list[int]) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any], Any]]:
    """(schema, strategy of data, function from datum to the expected Arrow Python value)."""

    def prim() -> st.SearchStrategy[Any]:
        return st.sampled_from(sorted(_PRIMS)).map(lambda t: (t, _PRIMS[t], lambda d: d))

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        def record(fields: list[tuple[str, Any]]) -> Any:
            counter[0] += 1
            names = []
            seen = set()
            for n, c in fields:
                if n not in seen:
                    seen.add(n)
                    names.append((n, c))
            schema = {
                "type": "record",
                "name": f"r{counter[0]}",
                "fields": [{"name": n, "type": c[0]} for n, c in names],
            }
            data = st.fixed_dictionaries({n: c[1] for n, c in names})
            return (schema, data, lambda d, names=names: {n: c[2](d[n]) for n, c in names})

        def array(c: Any) -> Any:
            return ({"type": "array", "items": c[0]}, st.lists(c[1], max_size=4), lambda d, c=c: [c[2](x) for x in d])

        def amap(c: Any) -> Any:
            return (
                {"type": "map", "values": c[0]},
                st.dictionaries(st.text(max_size=5), c[1], max_size=3),
                lambda d, c=c: sorted((k, c[2](v)) for k, v in d.items()),
            )

        def nullable(c: Any) -> Any:
            if isinstance(c[0], list):
                return c
            return (["null", c[0]], st.none() | c[1], lambda d, c=c: None if d is None else c[2](d))

        return st.one_of(
            st.lists(st.tuples(_names, children), min_size=1, max_size=4).map(record),
            children.map(array),
            children.map(amap),
            children.map(nullable),
        )

    return st.recursive(prim(), extend, max_leaves=8)


def _normalise(v: Any) -> Any:
    """Maps come back from Arrow as lists of pairs in stored order: compare them sorted."""
    if isinstance(v, dict):
        return {k: _normalise(x) for k, x in v.items()}
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return sorted((k, _normalise(x)) for k, x in v)
        return [_normalise(x) for x in v]
    return v


@st.composite
def _avro_cases(draw: st.DrawFn) -> tuple[Any, list[Any], list[Any]]:
    counter = [0]
    schema, data, expect = draw(_schema_and_data(counter))
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        counter[0] += 1
        inner = (schema, data, expect)
        schema = {"type": "record", "name": "top", "fields": [{"name": "v", "type": inner[0]}]}
        data = st.fixed_dictionaries({"v": inner[1]})
        expect = lambda d, inner=inner: {"v": inner[2](d["v"])}  # noqa: E731
    datums = draw(st.lists(data, min_size=1, max_size=5))
    return schema, datums, [expect(d) for d in datums]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_avro_cases())
def test_avro_round_trip_through_the_converter(case: tuple[Any, list[Any], list[Any]]) -> None:
    schema, datums, expected = case
    parser = AvroValueParser(schema)
    arr = parser.parse([_avro(schema, d) for d in datums])
    assert arr.type == arrow_type_from_avro(schema)
    assert arr.null_count == 0
    got = [_normalise(v) for v in arr.to_pylist()]
    assert got == [_normalise(e) for e in expected]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=40))
def test_garbage_never_raises_and_never_half_parses(raw: bytes) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}, {"name": "s", "type": "string"}]}
    arr = AvroValueParser(schema).parse([raw, None])
    assert arr.type == arrow_type_from_avro(schema)
    v = arr.to_pylist()[0]
    if v is not None:  # it parsed: then it is exactly the value those bytes encode
        assert _avro(schema, v) == raw
    assert arr.to_pylist()[1] is None


def test_avro_logical_types_unions_enums_and_fixed() -> None:
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
            {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}},
            {"name": "either", "type": ["null", "long", "string"]},
            {"name": "again", "type": "State"},
        ],
    }
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    datum = {
        "id": "0b7c3e0e-8d2d-4c4c-9a37-3f1c2b1e0c11",
        "amount": decimal.Decimal("12.34"),
        "day": datetime.date(2026, 1, 2),
        "at": at,
        "state": "PAID",
        "tag": b"\x01\x02",
        "either": "x",
        "again": "NEW",
    }
    t = arrow_type_from_avro(schema)
    assert t.field("amount").type == pa.decimal128(10, 2)
    assert t.field("at").type == pa.timestamp("us", tz="UTC")
    assert t.field("either").type == pa.struct([pa.field("long", pa.int64()), pa.field("string", pa.string())])
    [got] = AvroValueParser(schema).parse([_avro(schema, datum)]).to_pylist()
    assert got["amount"] == decimal.Decimal("12.34")
    assert got["at"] == at
    assert got["state"] == "PAID" and got["again"] == "NEW"
    assert got["either"] == {"long": None, "string": "x"}
    assert got["id"] == datum["id"]


@pytest.mark.parametrize(
    "schema, problem",
    [
        ({"type": "record", "name": "n", "fields": [{"name": "next", "type": ["null", "n"]}]}, "refers to itself"),
        ({"type": "record", "name": "e", "fields": []}, "no fields"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0}, "38"),
        ("Nope", "unknown named type"),
    ],
)
def test_schemas_iceberg_cannot_store_are_refused(schema: Any, problem: str) -> None:
    with pytest.raises(UnsupportedSchema, match=problem):
        arrow_type_from_avro(schema)


# ---------------------------------------------------------------------------------------------- JSON Schema


JSON_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "n": {"type": "integer"},
        "score": {"type": ["number", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "addr": {"$ref": "#/$defs/addr"},
        "any": {},
    },
    "required": ["user", "n"],
    "$defs": {"addr": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def test_json_schema_values_validate_and_fill_the_struct() -> None:
    t = arrow_type_from_json_schema(JSON_SCHEMA)
    assert t.field("n").type == pa.int64()
    assert t.field("attrs").type == pa.map_(pa.string(), pa.int64())
    assert t.field("addr").type == pa.struct([pa.field("city", pa.string())])
    assert t.field("any").type == pa.string()
    good = json.dumps(
        {
            "user": "ann",
            "n": 3,
            "score": 1.5,
            "at": "2026-01-02T03:04:05Z",
            "tags": ["a"],
            "attrs": {"k": 1},
            "addr": {"city": "Oslo"},
            "any": {"deep": [1, 2]},
        }
    ).encode()
    missing_required = json.dumps({"user": "bob"}).encode()
    wrong_type = json.dumps({"user": "cy", "n": "three"}).encode()
    arr = JsonSchemaValueParser(JSON_SCHEMA).parse([good, missing_required, wrong_type, b"{not json", None])
    rows = arr.to_pylist()
    assert rows[0]["user"] == "ann" and rows[0]["n"] == 3 and rows[0]["attrs"] == [("k", 1)]
    assert rows[0]["at"] == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert rows[0]["any"] == '{"deep":[1,2]}'
    assert rows[1:] == [None, None, None, None]


# ----------------------------------------------------------------------------------------------- config


def test_config_inline_file_and_dotted_topic(tmp_path: Path) -> None:
    avro = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    path = tmp_path / "v.avsc"
    path.write_text(json.dumps(avro))
    schemas = ValueSchemas.from_config(
        {
            "iceberg.value.schema.orders.avro": json.dumps(avro),
            "iceberg.value.schema.c.topic": "clicks.v1",
            "iceberg.value.schema.c.avro": str(path),
            "iceberg.value.schema.ev.json": json.dumps(JSON_SCHEMA),
            "unrelated": "x",
        }
    )
    assert isinstance(schemas.parser_for("orders"), AvroValueParser)
    assert isinstance(schemas.parser_for("clicks.v1"), AvroValueParser)
    assert isinstance(schemas.parser_for("ev"), JsonSchemaValueParser)
    assert schemas.parser_for("other") is None
    assert parse_values(schemas.parser_for("other"), [b"x"]) is None


@pytest.mark.parametrize(
    "configs, problem",
    [
        ({"iceberg.value.schema.t.avro": "/nonexistent/s.avsc"}, "iceberg.value.schema.t.avro"),
        ({"iceberg.value.schema.t.avro": "{bad json"}, "not valid JSON"),
        ({"iceberg.value.schema.t.avro": '{"type": "record", "name": "e", "fields": []}'}, "no fields"),
        ({"iceberg.value.schema.t.json": '{"type": 12}'}, "not a valid JSON Schema"),
        ({"iceberg.value.schema.t.topic": "a.b"}, "without a schema"),
        ({"iceberg.value.schema.t.avro": '"long"', "iceberg.value.schema.t.json": "{}"}, "both set"),
        ({"iceberg.value.schema.t.xml": "x"}, "Unknown configuration"),
        ({"iceberg.value.schema.t.protobuf": "/nonexistent/set.pb"}, "not a readable descriptor set"),
        ({"iceberg.value.schema.t.protobuf.message": "a.B"}, "without a schema"),
        ({"iceberg.value.schema.registry.t.schema.id": "one"}, "expected an integer"),
    ],
)
def test_bad_config_names_the_key(configs: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigException, match=problem):
        ValueSchemas.from_config(configs)


# ------------------------------------------------------------------------- schema registry over real HTTP

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"], "default": None}],
}


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with fake_registry() as reg:
        yield reg


def _wire(schema_id: int, schema: Any, datum: Any) -> bytes:
    return bytes([0]) + struct.pack(">I", schema_id) + _avro(schema, datum)


def test_registry_values_of_every_id_fill_the_merged_struct(registry: FakeRegistry) -> None:
    # Ids registered under another subject (not <topic>-value): the ids met in values make the struct.
    v1 = register(registry.url, "other", json.dumps(V1))
    v2 = register(registry.url, "other", json.dumps(V2))
    schemas = ValueSchemas.from_config({"iceberg.value.schema.registry.url": registry.url})
    parser = schemas.parser_for("users")
    assert isinstance(parser, RegistryValueParser)
    raws = [
        _wire(v1, V1, {"name": "ann"}),
        _wire(v2, V2, {"name": "bob", "age": 41}),
        _wire(99, V1, {"name": "ghost"}),  # an id the registry does not know
        b"plain text",  # not the wire format
        _wire(v1, V1, {"name": "cy"})[:-1],  # truncated
        None,
    ]
    arr = parse_values(parser, raws)
    assert arr is not None
    assert arr.type == pa.struct([pa.field("name", pa.string()), pa.field("age", pa.int32())])
    assert arr.to_pylist() == [{"name": "ann", "age": None}, {"name": "bob", "age": 41}, None, None, None, None]
    assert registry.requests.count(f"/schemas/ids/{v1}") == 1  # cached
    assert registry.requests.count("/schemas/ids/99") == 1


def test_registry_configured_id_comes_first(registry: FakeRegistry) -> None:
    v1 = register(registry.url, "users-value", json.dumps(V1))
    v2 = register(registry.url, "pinned", json.dumps(V2))
    schemas = ValueSchemas.from_config(
        {"iceberg.value.schema.registry.url": registry.url, "iceberg.value.schema.registry.users.schema.id": str(v2)}
    )
    arr = parse_values(schemas.parser_for("users"), [_wire(v1, V1, {"name": "ann"})])
    assert arr is not None
    assert arr.to_pylist() == [{"name": "ann", "age": None}]
    # A topic whose values are not in the wire format, and no subject: no `value` column.
    assert parse_values(schemas.parser_for("logs"), [b"hello", None]) is None


def test_registry_unreachable_is_an_error_not_a_silent_null() -> None:
    schemas = ValueSchemas.from_config(
        {"iceberg.value.schema.registry.url": "http://127.0.0.1:9", "iceberg.value.schema.registry.timeout.ms": "2000"}
    )
    with pytest.raises(OSError):
        parse_values(schemas.parser_for("users"), [_wire(1, "long", 5)])
    factory = value_column_factory(
        {"iceberg.value.schema.registry.url": "http://127.0.0.1:9", "iceberg.value.schema.registry.timeout.ms": "2000"}
    )
    with pytest.raises(RemoteStorageException, match="iceberg.value.schema.registry.url"):
        factory("users")


def test_value_column_factory_follows_the_subjects_versions(registry: FakeRegistry) -> None:
    v1 = register(registry.url, "users-value", json.dumps(V1))
    factory = value_column_factory({"iceberg.value.schema.registry.url": registry.url})
    column = factory("users")
    assert column is not None
    assert column.arrow_type == pa.struct([pa.field("name", pa.string())])
    v2 = register(registry.url, "users-value", json.dumps(V2))
    column = factory("users")  # the next segment: the new version is in
    assert column is not None
    assert column.arrow_type == pa.struct([pa.field("name", pa.string()), pa.field("age", pa.int32())])
    got = column.convert([_wire(v1, V1, {"name": "ann"}), _wire(v2, V2, {"name": "b", "age": 3}), b"raw"])
    assert got.to_pylist() == [{"name": "ann", "age": None}, {"name": "b", "age": 3}, None]
    assert factory("nosubject") is None  # no subject: the table keeps value_raw only


# ------------------------------------------------------------------------------------------ schema evolution


@pytest.mark.parametrize(
    "old, new, merged",
    [
        (
            pa.struct([("a", pa.int32())]),
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
        ),
        (
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
            pa.struct([("a", pa.int32())]),
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
        ),
        (
            pa.struct([("x", pa.list_(pa.struct([("f", pa.float32())])))]),
            pa.struct([("x", pa.list_(pa.struct([("f", pa.float64()), ("g", pa.bool_())])))]),
            pa.struct([("x", pa.list_(pa.struct([("f", pa.float64()), ("g", pa.bool_())])))]),
        ),
        (
            pa.struct([("m", pa.map_(pa.string(), pa.int32()))]),
            pa.struct([("m", pa.map_(pa.string(), pa.int64()))]),
            pa.struct([("m", pa.map_(pa.string(), pa.int64()))]),
        ),
        # What pyiceberg gives for a table's struct: large strings, "element" list items.
        (
            pa.struct([("s", pa.large_string()), ("l", pa.list_(pa.field("element", pa.int64())))]),
            pa.struct([("s", pa.string()), ("l", pa.list_(pa.int64()))]),
            pa.struct([("s", pa.string()), ("l", pa.list_(pa.int64()))]),
        ),
    ],
)
def test_merge_types_unions_by_name_and_widens(old: pa.DataType, new: pa.DataType, merged: pa.DataType) -> None:
    assert merge_types(old, new).equals(merged)
    assert merge_types(merged, new).equals(merged)  # a version already merged changes nothing


@pytest.mark.parametrize(
    "old, new, where",
    [
        (pa.struct([("a", pa.string())]), pa.struct([("a", pa.int64())]), "value.a"),
        (
            pa.struct([("s", pa.struct([("b", pa.int64())]))]),
            pa.struct([("s", pa.struct([("b", pa.float64())]))]),
            "value.s.b",
        ),
        (pa.struct([("l", pa.list_(pa.int64()))]), pa.struct([("l", pa.int64())]), "value.l"),
        (
            pa.struct([("m", pa.map_(pa.string(), pa.int64()))]),
            pa.struct([("m", pa.map_(pa.int64(), pa.int64()))]),
            "value.m",
        ),
    ],
)
def test_merge_types_names_the_field_it_cannot_follow(old: pa.DataType, new: pa.DataType, where: str) -> None:
    with pytest.raises(IncompatibleSchema, match=where.replace(".", r"\.")):
        merge_types(old, new)


# ------------------------------------------------------------------------------------ wire format (properties)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.one_of(st.none(), st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=6)),
    st.binary(max_size=30),
)
def test_wire_format_round_trip(schema_id: int, indexes: list[int] | None, payload: bytes) -> None:
    raw = wire_value(schema_id, payload, indexes)
    sid, rest = split_wire_format(raw)
    assert sid == schema_id
    if indexes is None:
        assert rest == payload
    else:
        assert split_message_indexes(rest) == (indexes, payload)


def test_message_indexes_of_the_first_message_are_one_zero_byte() -> None:
    assert wire_value(1, b"P", [0]) == b"\x00\x00\x00\x00\x01\x00P"
    assert split_message_indexes(b"\x00P") == ([0], b"P")
    # Confluent's own encoding of [1, 2]: zigzag varints, count first.
    assert split_message_indexes(b"\x04\x02\x04P") == ([1, 2], b"P")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_wire_format_parsers_take_any_bytes_or_raise_value_error(raw: bytes) -> None:
    try:
        sid, rest = split_wire_format(raw)
    except ValueError:
        assert len(raw) < 5 or raw[0] != 0
        return
    assert raw == b"\x00" + struct.pack(">I", sid) + rest
    try:
        indexes, payload = split_message_indexes(rest)
    except ValueError:
        return
    assert all(i >= 0 for i in indexes) and rest.endswith(payload)
    # What it read, written again the canonical way, reads back the same.
    assert split_message_indexes(message_indexes_bytes(indexes) + payload) == (indexes, payload)
