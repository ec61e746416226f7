"""Every schema source of rsm.iceberg.values, alone, against one table of cases: Avro, JSON Schema and Protobuf
given inline or as a file, and the same three through a schema registry (a fake here; Apicurio Registry in
tests/integration/test_iceberg_registry.py). Each case is a record type written in each source's own language,
some values of it, and the struct each must come out as."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from schema_registry import fake_registry, register

from rsm.iceberg.values import (
    ProtobufFileValueParser,
    ValueSchemas,
    parse_values,
    wire_value,
)
from rsm.iceberg.values.protobuf import compile_proto

# A field kind: "string", "long", "int", "double", "bool", "bytes", ("list", kind), ("struct", fields),
# ("optional", kind). Fields: a list of (name, kind).
Kind = Any


@dataclass(frozen=True)
class Case:
    name: str
    fields: list[tuple[str, Kind]]
    rows: list[dict[str, Any]]
    #: Arrow type of each leaf kind per source where they differ (JSON has only one integer type).
    json_ok: bool = True


CASES = [
    Case(
        "flat",
        [("id", "long"), ("name", "string"), ("ok", "bool"), ("x", "double")],
        [
            {"id": 1, "name": "a", "ok": True, "x": 1.5},
            {"id": -(2**40), "name": "", "ok": False, "x": -0.25},
        ],
    ),
    Case("int32", [("n", "int")], [{"n": 2**31 - 1}, {"n": -(2**31)}]),
    Case(
        "nested",
        [("id", "long"), ("addr", ("struct", [("city", "string"), ("zip", "string")]))],
        [
            {"id": 7, "addr": {"city": "Oslo", "zip": "0150"}},
        ],
    ),
    Case(
        "lists",
        [("tags", ("list", "string")), ("points", ("list", ("struct", [("x", "long"), ("y", "long")])))],
        [
            {"tags": ["a", "b"], "points": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]},
            {"tags": [], "points": []},
        ],
    ),
    Case(
        "optional",
        [("id", "long"), ("note", ("optional", "string"))],
        [
            {"id": 1, "note": "hi"},
            {"id": 2, "note": None},
        ],
    ),
    Case("bytes", [("blob", "bytes")], [{"blob": b"\x00\xff"}], json_ok=False),
]


# ------------------------------------------------------------------------------------- the cases in each language

_counter = [0]


def _avro_kind(kind: Kind) -> Any:
    if isinstance(kind, str):
        return {"bool": "boolean"}.get(kind, kind)
    tag, inner = kind
    if tag == "list":
        return {"type": "array", "items": _avro_kind(inner)}
    if tag == "optional":
        return ["null", _avro_kind(inner)]
    _counter[0] += 1
    return {
        "type": "record",
        "name": f"R{_counter[0]}",
        "fields": [{"name": n, "type": _avro_kind(k)} for n, k in inner],
    }


def avro_schema(case: Case) -> Any:
    return {"type": "record", "name": "Top", "fields": [{"name": n, "type": _avro_kind(k)} for n, k in case.fields]}


def avro_encode(schema: Any, row: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), row)
    return buf.getvalue()


def _json_kind(kind: Kind) -> Any:
    if isinstance(kind, str):
        return {"type": {"long": "integer", "int": "integer", "double": "number", "bool": "boolean"}.get(kind, kind)}
    tag, inner = kind
    if tag == "list":
        return {"type": "array", "items": _json_kind(inner)}
    if tag == "optional":
        return {"type": [_json_kind(inner)["type"], "null"]}
    return {"type": "object", "properties": {n: _json_kind(k) for n, k in inner}, "required": [n for n, _ in inner]}


def json_schema(case: Case) -> Any:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **_json_kind(("struct", case.fields))}


_PROTO_SCALARS = {
    "long": "int64",
    "int": "int32",
    "double": "double",
    "bool": "bool",
    "string": "string",
    "bytes": "bytes",
}


def proto_text(case: Case) -> str:
    messages: list[str] = []

    def message(name: str, fields: list[tuple[str, Kind]]) -> str:
        lines = []
        for i, (n, k) in enumerate(fields, 1):
            prefix = ""
            if isinstance(k, tuple) and k[0] == "optional":
                prefix, k = "optional ", k[1]
            if isinstance(k, tuple) and k[0] == "list":
                prefix, k = "repeated ", k[1]
            if isinstance(k, tuple):  # a struct
                _counter[0] += 1
                t = message(f"M{_counter[0]}", k[1])
            else:
                t = _PROTO_SCALARS[k]
            lines.append(f"  {prefix}{t} {n} = {i};")
        messages.append(f"message {name} {{\n" + "\n".join(lines) + "\n}\n")
        return name

    message("Top", case.fields)
    top = messages.pop()  # Top first: message index 0 is the value's message
    return 'syntax = "proto3";\npackage kts.test;\n' + top + "".join(messages)


def _fill(msg: Any, row: dict[str, Any]) -> None:
    for name, v in row.items():
        if v is None:
            continue
        fd = msg.DESCRIPTOR.fields_by_name[name]
        if fd.message_type is not None and isinstance(v, list):
            for item in v:
                _fill(getattr(msg, name).add(), item)
        elif isinstance(v, list):
            getattr(msg, name).extend(v)
        elif isinstance(v, dict):
            _fill(getattr(msg, name), v)
        else:
            setattr(msg, name, v)


def proto_encoder(text: str) -> Callable[[dict[str, Any]], bytes]:
    from google.protobuf import message_factory

    file = compile_proto("case.proto", {"case.proto": text})
    cls = message_factory.GetMessageClass(file.pool.FindMessageTypeByName("kts.test.Top"))

    def encode(row: dict[str, Any]) -> bytes:
        msg = cls()
        _fill(msg, row)
        return bytes(msg.SerializeToString())

    return encode


def descriptor_set(text: str, directory: Path) -> Path:
    """The descriptor set file protoc writes for ``text`` (grpcio-tools' protoc, as a user would run it)."""
    (directory / "case.proto").write_text(text)
    out = directory / "case.pb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{directory}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            "case.proto",
        ],
        check=True,
    )
    return out


# ------------------------------------------------------------------------------------------ the sources


@pytest.fixture(scope="module")
def registry_url() -> Iterator[str]:
    with fake_registry() as reg:
        yield reg.url


def _bytes_safe(row: dict[str, Any]) -> dict[str, Any]:
    return {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v for k, v in row.items()}


def _source(source: str, case: Case, tmp: Path, url: str) -> tuple[Any, list[bytes]]:
    """(a parser for the case's topic, each row's value bytes) as that source takes them."""
    topic = f"t-{case.name}-{source}"
    if source.startswith("avro"):
        schema = avro_schema(case)
        raws = [avro_encode(schema, r) for r in case.rows]
        text, kind = json.dumps(schema), "AVRO"
    elif source.startswith("json"):
        schema = json_schema(case)
        raws = [json.dumps(r).encode() for r in case.rows]
        text, kind = json.dumps(schema), "JSON"
    else:
        text, kind = proto_text(case), "PROTOBUF"
        raws = [proto_encoder(text)(r) for r in case.rows]
    if source.endswith("registry"):
        sid = register(url, f"{topic}-value", text, kind)
        raws = [wire_value(sid, r, [0] if kind == "PROTOBUF" else None) for r in raws]
        schemas = ValueSchemas.from_config({"iceberg.value.schema.registry.url": url})
    elif kind == "PROTOBUF":
        path = descriptor_set(text, tmp)
        schemas = ValueSchemas.from_config({f"iceberg.value.schema.{topic}.protobuf": str(path)})
        assert isinstance(schemas.parser_for(topic), ProtobufFileValueParser)
    else:
        suffix = "avro" if kind == "AVRO" else "json"
        schemas = ValueSchemas.from_config({f"iceberg.value.schema.{topic}.{suffix}": text})
    return schemas.parser_for(topic), raws


SOURCES = ["avro", "json", "protobuf", "avro-registry", "json-registry", "protobuf-registry"]


def _names(t: pa.DataType) -> Any:
    """The struct's shape by field name (leaf types differ by source: JSON has one integer type)."""
    if pa.types.is_struct(t):
        return {f.name: _names(f.type) for f in t}
    if pa.types.is_list(t):
        return [_names(t.value_type)]
    return "leaf"


def _shape(kind: Kind) -> Any:
    if isinstance(kind, str):
        return "leaf"
    tag, inner = kind
    if tag == "list":
        return [_shape(inner)]
    if tag == "optional":
        return _shape(inner)
    return {n: _shape(k) for n, k in inner}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("source", SOURCES)
def test_each_source_reads_the_case_table(source: str, case: Case, tmp_path: Path, registry_url: str) -> None:
    if source.startswith("json") and not case.json_ok:
        pytest.skip("JSON has no bytes type")
    parser, raws = _source(source, case, tmp_path, registry_url)
    arr = parse_values(parser, [*raws, None, b"\x00\x00\x00\x00\x63garbage", b"\x07not a value"])
    assert arr is not None
    got = arr.to_pylist()
    assert got[: len(case.rows)] == case.rows
    assert got[len(case.rows) :] == [None, None, None]
    assert _names(arr.type) == _shape(("struct", case.fields))


def test_a_descriptor_set_topic_also_takes_the_wire_format(tmp_path: Path) -> None:
    case = CASES[0]
    text = proto_text(case)
    path = descriptor_set(text, tmp_path)
    parser = ValueSchemas.from_config({"iceberg.value.schema.t.protobuf": str(path)}).parser_for("t")
    raws = [proto_encoder(text)(r) for r in case.rows]
    framed = [wire_value(42, r, [0]) for r in raws]
    assert parse_values(parser, framed) == parse_values(parser, raws)
    assert parse_values(parser, framed).to_pylist() == case.rows  # type: ignore[union-attr]
