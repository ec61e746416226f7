"""A topic's schema changes while it is tiered in Iceberg mode: the table's ``value`` struct evolves with it (added
fields, int->long, float->double, fields made optional), brokers on different versions all commit, and an
incompatible version never stops tiering (its rows keep ``value`` null and their bytes). Avro, Protobuf and JSON
Schema through a schema registry: the fake of tests/support and Apicurio Registry (real, started offline from the
jar ``make setup`` assembles); inline schemas edited between brokers. Kafka fetches stay byte-identical."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from iceberg_testing import Rec, avro_bytes, iceberg_config, load_table, new_tip, segment_of
from schema_registry import APICURIO_JAR, apicurio_registry, fake_registry, register

from rsm import RemoteStorageException, RemoteStorageManager
from rsm.iceberg.values import STATS, wire_value
from rsm.iceberg.values.protobuf import compile_proto
from rsm.metadata import TopicIdPartition

# --------------------------------------------------------------------------------- one schema in three versions

# v1: id (int), name; v2 adds `score` (float), widens id to long, score later to double in v3; v2 also makes
# `name` optional. `bad` changes `name` to a number: incompatible.
AVRO = {
    "v1": {
        "type": "record",
        "name": "U",
        "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}],
    },
    "v2": {
        "type": "record",
        "name": "U",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "score", "type": ["null", "float"], "default": None},
        ],
    },
    "v3": {
        "type": "record",
        "name": "U",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "score", "type": ["null", "double"], "default": None},
        ],
    },
    "bad": {
        "type": "record",
        "name": "U",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "long"}],
    },
}
PROTO = {
    "v1": "message U { int32 id = 1; string name = 2; }",
    "v2": "message U { int64 id = 1; optional string name = 2; optional float score = 3; }",
    "v3": "message U { int64 id = 1; optional string name = 2; optional double score = 3; }",
    "bad": "message U { int64 id = 1; int64 name = 2; }",
}
_JS = "https://json-schema.org/draft/2020-12/schema"
JSON_SCHEMA = {
    "v1": {"$schema": _JS, "type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}},
    "v2": {
        "$schema": _JS,
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": ["string", "null"]}, "score": {"type": "number"}},
    },
    "bad": {"$schema": _JS, "type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "boolean"}}},
}


@dataclass
class Format:
    kind: str
    texts: dict[str, str]
    encode: Callable[[str, dict[str, Any]], bytes]


def _avro_format() -> Format:
    return Format("AVRO", {v: json.dumps(s) for v, s in AVRO.items()}, lambda v, d: avro_bytes(AVRO[v], d))


def _proto_format() -> Format:
    from google.protobuf import message_factory

    texts = {v: 'syntax = "proto3";\npackage kts.evo;\n' + t for v, t in PROTO.items()}
    classes = {
        v: message_factory.GetMessageClass(
            compile_proto("u.proto", {"u.proto": t}).pool.FindMessageTypeByName("kts.evo.U")
        )
        for v, t in texts.items()
    }

    def encode(v: str, d: dict[str, Any]) -> bytes:
        return bytes(classes[v](**{k: x for k, x in d.items() if x is not None}).SerializeToString())

    return Format("PROTOBUF", texts, encode)


def _json_format() -> Format:
    return Format("JSON", {v: json.dumps(s) for v, s in JSON_SCHEMA.items()}, lambda _v, d: json.dumps(d).encode())


FORMATS = {"avro": _avro_format, "protobuf": _proto_format, "json": _json_format}


@pytest.fixture(scope="module", params=["fake", "apicurio"])
def registry_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "fake":
        with fake_registry() as reg:
            yield reg.url
        return
    if not APICURIO_JAR.is_file():
        pytest.skip(f"no {APICURIO_JAR}: make setup assembles Apicurio Registry")
    with apicurio_registry(tmp_path_factory.mktemp("apicurio")) as url:
        yield url


def _recs(first: int, values: list[bytes | None]) -> list[Rec]:
    return [Rec(first + i, b"k%d" % i, v, 1_767_225_600_000 + (first + i) * 1000) for i, v in enumerate(values)]


class Broker:
    """One plugin instance, as one broker runs it."""

    def __init__(self, config: dict[str, str], work: Path) -> None:
        self.m = RemoteStorageManager()
        self.m.configure(dict(config))
        self.work = work
        self.n = 0

    def tier(self, tip: TopicIdPartition, recs: list[Rec]) -> tuple[Any, bytes]:
        self.n += 1
        files = segment_of(self.work / f"seg-{id(self)}-{self.n}", recs)
        meta = files.to_metadata(tip)
        self.m.copy_log_segment_data(meta, files.to_log_segment_data())
        return meta, files.log.read_bytes()

    def close(self) -> None:
        self.m.close()


def _rows(config: dict[str, str], topic: str) -> list[dict[str, Any]]:
    table = load_table(config, topic)
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"]))


def _value_fields(config: dict[str, str], topic: str) -> dict[str, str]:
    struct = load_table(config, topic).schema().find_field("value").field_type
    return {f.name: str(f.field_type) for f in struct.fields}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_registry_versions_evolve_the_table(
    fmt: str, registry_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = FORMATS[fmt]()
    topic = f"evo-{fmt}-{tmp_path.name[-8:]}".replace("_", "-")
    subject = f"{topic}-value"
    config = iceberg_config(tmp_path, topics=topic, **{"iceberg.value.schema.registry.url": registry_url})
    indexes = [0] if f.kind == "PROTOBUF" else None

    def wire(sid: int, version: str, d: dict[str, Any]) -> bytes:
        return wire_value(sid, f.encode(version, d), indexes)

    v1 = register(registry_url, subject, f.texts["v1"], f.kind)
    a, b = Broker(config, tmp_path), Broker(config, tmp_path)
    p0, p1 = new_tip(topic, 0), TopicIdPartition(new_tip(topic, 0).topic_id, topic, 1)
    p1 = TopicIdPartition(p0.topic_id, topic, 1)
    try:
        seg0 = a.tier(p0, _recs(0, [wire(v1, "v1", {"id": i, "name": f"n{i}"}) for i in range(3)]))
        assert set(_value_fields(config, topic)) == {"id", "name"}
        # v2 adds a field, widens id and makes name optional: the broker that first sees it evolves the table.
        v2 = register(registry_url, subject, f.texts["v2"], f.kind)
        d2 = {"id": 2**40, "name": None, "score": 0.5}
        seg1 = b.tier(p1, _recs(0, [wire(v2, "v2", d2), wire(v1, "v1", {"id": 7, "name": "old"}), b"raw"]))
        fields = _value_fields(config, topic)
        assert list(fields) == ["id", "name", "score"]
        assert fields["id"] == "long"
        # Broker a, on its first version until now, commits again (v1 values) and sees v2 too.
        a.tier(p0, _recs(3, [wire(v1, "v1", {"id": 3, "name": "n3"})]))
        if "v3" in f.texts:  # float -> double
            v3 = register(registry_url, subject, f.texts["v3"], f.kind)
            b.tier(p1, _recs(3, [wire(v3, "v3", {"id": 9, "name": "x", "score": 0.1})]))
            assert _value_fields(config, topic)["score"] == "double"
        # An incompatible version: tiering goes on, its rows keep value null and their bytes.
        before = STATS.incompatible_rows
        bad = register(registry_url, f"{topic}-other", f.texts["bad"], f.kind)
        bad_raw = wire(bad, "bad", {"id": 5, "name": 5 if fmt != "json" else True})
        with caplog.at_level(logging.WARNING):
            b.tier(p1, _recs(10, [bad_raw, wire(v1, "v1", {"id": 11, "name": "after"})]))
            b.tier(p1, _recs(12, [bad_raw]))
        assert STATS.incompatible_rows - before == 2
        bean = next(v for k, v in b.m.metrics().items() if "type=iceberg-values-metrics" in k)
        assert bean["incompatible-rows-total"] == STATS.incompatible_rows
        named = [r for r in caplog.records if f"schema id {bad} is incompatible" in r.getMessage()]
        assert len(named) == 1

        rows = {(r["kafka"]["partition"], r["kafka"]["offset"]): r for r in _rows(config, topic)}
        assert rows[(0, 0)]["value"] == {"id": 0, "name": "n0", "score": None}
        assert rows[(1, 0)]["value"] == d2
        assert rows[(1, 1)]["value"] == {"id": 7, "name": "old", "score": None}
        assert rows[(1, 2)]["value"] is None and rows[(1, 2)]["value_raw"] == b"raw"
        assert rows[(0, 3)]["value"] == {"id": 3, "name": "n3", "score": None}
        assert rows[(1, 10)]["value"] is None and rows[(1, 10)]["value_raw"] == bad_raw
        assert rows[(1, 11)]["value"] == {"id": 11, "name": "after", "score": None}
        # Kafka reads give back the segments byte for byte, before and after the evolution.
        for meta, original in (seg0, seg1):
            assert a.m.fetch_log_segment(meta, 0).read() == original
    finally:
        a.close()
        b.close()


def test_brokers_on_different_inline_schemas_both_commit(tmp_path: Path) -> None:
    topic = "evo-inline"
    base = iceberg_config(tmp_path, topics=topic)
    new = Broker({**base, f"iceberg.value.schema.{topic}.avro": json.dumps(AVRO["v2"])}, tmp_path)
    old = Broker({**base, f"iceberg.value.schema.{topic}.avro": json.dumps(AVRO["v1"])}, tmp_path)
    p0 = new_tip(topic, 0)
    p1 = TopicIdPartition(p0.topic_id, topic, 1)
    try:
        new.tier(p0, _recs(0, [avro_bytes(AVRO["v2"], {"id": 2**33, "name": "new", "score": 1.5})]))
        meta, original = old.tier(p1, _recs(0, [avro_bytes(AVRO["v1"], {"id": 1, "name": "old"})]))
        old.tier(p1, _recs(1, [avro_bytes(AVRO["v1"], {"id": 2, "name": "old2"})]))
    finally:
        new.close()
        old.close()
    assert list(_value_fields(base, topic)) == ["id", "name", "score"]
    values = [r["value"] for r in _rows(base, topic)]
    assert values == [
        {"id": 2**33, "name": "new", "score": 1.5},
        {"id": 1, "name": "old", "score": None},
        {"id": 2, "name": "old2", "score": None},
    ]
    with RemoteStorageManager() as m:
        m.configure(dict(base))
        assert m.fetch_log_segment(meta, 0).read() == original


def test_an_inline_schema_edited_incompatibly_is_refused_by_name(tmp_path: Path) -> None:
    topic = "evo-inline-bad"
    base = iceberg_config(tmp_path, topics=topic)
    tip = new_tip(topic, 0)
    first = Broker({**base, f"iceberg.value.schema.{topic}.avro": json.dumps(AVRO["v1"])}, tmp_path)
    edited = Broker({**base, f"iceberg.value.schema.{topic}.avro": json.dumps(AVRO["bad"])}, tmp_path)
    try:
        first.tier(tip, _recs(0, [avro_bytes(AVRO["v1"], {"id": 1, "name": "a"})]))
        with pytest.raises(RemoteStorageException, match=r"value.name: string became int64.*restore the field"):
            edited.tier(tip, _recs(1, [avro_bytes(AVRO["bad"], {"id": 2, "name": 3})]))
    finally:
        first.close()
        edited.close()
    assert [r["value"] for r in _rows(base, topic)] == [{"id": 1, "name": "a"}]


def _recs_kv(first: int, pairs: list[tuple[bytes | None, bytes | None]]) -> list[Rec]:
    return [Rec(first + i, k, v, 1_767_225_600_000 + (first + i) * 1000) for i, (k, v) in enumerate(pairs)]


def test_keys_parsed_through_the_registry_evolve_like_values(tmp_path: Path) -> None:
    topic = "keyed.orders"  # a dotted name: the registry's key topics are a regex, no <id> needed
    key_v1 = {"type": "record", "name": "K", "fields": [{"name": "customer", "type": "int"}]}
    key_v2 = {
        "type": "record",
        "name": "K",
        "fields": [{"name": "customer", "type": "long"}, {"name": "region", "type": ["null", "string"]}],
    }
    with fake_registry() as reg:
        config = iceberg_config(
            tmp_path,
            topics=r"keyed\.orders",
            **{
                "iceberg.value.schema.registry.url": reg.url,
                "iceberg.key.schema.registry.topics": r"keyed\..*",
            },
        )
        k1 = register(reg.url, f"{topic}-key", json.dumps(key_v1))
        v1 = register(reg.url, f"{topic}-value", json.dumps(AVRO["v1"]))
        broker = Broker(config, tmp_path)
        tip = new_tip(topic, 0)
        try:
            value = wire_value(v1, avro_bytes(AVRO["v1"], {"id": 1, "name": "a"}))
            meta, original = broker.tier(
                tip, _recs_kv(0, [(wire_value(k1, avro_bytes(key_v1, {"customer": 5})), value), (b"plain", value)])
            )
            k2 = register(reg.url, f"{topic}-key", json.dumps(key_v2))
            broker.tier(
                tip, _recs_kv(2, [(wire_value(k2, avro_bytes(key_v2, {"customer": 2**35, "region": "eu"})), None)])
            )
            assert broker.m.fetch_log_segment(meta, 0).read() == original
        finally:
            broker.close()
    table = load_table(config, topic)
    assert [f.name for f in table.schema().fields][-2:] == ["value", "key"]
    rows = _rows(config, topic)
    assert [r["key"] for r in rows] == [{"customer": 5, "region": None}, None, {"customer": 2**35, "region": "eu"}]
    assert rows[1]["key_raw"] == b"plain"
    assert [r["value"] for r in rows] == [{"id": 1, "name": "a"}, {"id": 1, "name": "a"}, None]


def test_an_inline_key_schema_alone_gives_a_key_column(tmp_path: Path) -> None:
    topic = "keyed-json"
    key_schema = {"type": "object", "properties": {"user": {"type": "string"}, "n": {"type": "integer"}}}
    config = iceberg_config(tmp_path, topics=topic, **{f"iceberg.key.schema.{topic}.json": json.dumps(key_schema)})
    broker = Broker(config, tmp_path)
    try:
        broker.tier(new_tip(topic, 0), _recs_kv(0, [(b'{"user": "ann", "n": 3}', b"v"), (b"not json", b"w")]))
    finally:
        broker.close()
    names = [f.name for f in load_table(config, topic).schema().fields]
    assert "key" in names and "value" not in names
    assert [r["key"] for r in _rows(config, topic)] == [{"user": "ann", "n": 3}, None]
