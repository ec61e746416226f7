"""The merge behind the latest-per-key table, against a fake table held in memory: newest offset wins,
tombstones delete, aborted transactions and control records never count, replays and retried copies change
nothing; and its configuration keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from backends.configdef import ConfigException
from rsm.iceberg.config import IcebergConfig
from rsm.iceberg.latest import (
    META,
    NotKeyable,
    buckets_of,
    changes_of,
    merge,
    newest_per_key,
    past_watermarks,
    watermarks_after,
)
from rsm.iceberg.latest_config import LatestTable
from rsm.iceberg.latest_table import LatestChanges
from rsm.iceberg.schema import arrow_schema

TOPIC_ID = "t1"
SPEC = LatestTable("orders", "kafka", "orders_latest", buckets=4)


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    aborted: bool = False
    control: bool = False


def chunk(records: list[Rec], topic_id: str = TOPIC_ID) -> pa.Table:
    """Log rows in the log table's Arrow layout (the fields the merge reads filled, the others null)."""
    schema = arrow_schema()
    kafka_type = schema.field("kafka").type
    kafka = []
    for r in records:
        row: dict[str, Any] = {f.name: None for f in kafka_type}
        row.update(
            partition=r.partition,
            offset=r.offset,
            timestamp=1_767_225_600_000_000 + r.offset,
            is_control=r.control,
            aborted=r.aborted,
            topic_id=topic_id,
        )
        kafka.append(row)
    return pa.Table.from_pydict(
        {
            "kafka": pa.array(kafka, type=kafka_type),
            "headers": pa.array([[] for _ in records], type=schema.field("headers").type),
            "key_raw": pa.array([r.key for r in records], type=pa.binary()),
            "value_raw": pa.array([r.value for r in records], type=pa.binary()),
        },
        schema=schema,
    )


@dataclass
class FakeLatestTable:
    """The latest table as the Iceberg writer keeps it (``LatestWriter._attempt``), in memory: whole rows, the
    watermarks, and only the touched buckets read and rewritten."""

    rows: pa.Table | None = None
    watermarks: dict[tuple[str, int], int] = field(default_factory=dict)
    commits: int = 0
    rewritten_buckets: list[set[int]] = field(default_factory=list)

    def apply(self, changes: LatestChanges) -> None:
        if changes.changes is None or changes.changes.num_rows == 0:
            return
        pending = past_watermarks(changes.changes, self.watermarks)
        if pending.num_rows == 0:
            return
        buckets = buckets_of(pending)
        if self.rows is None:
            touched = pending.slice(0, 0).drop_columns(["_deleted"])
            untouched = touched
        else:
            in_bucket = pc.is_in(pc.struct_field(self.rows.column(META), "key_bucket"), pa.array(sorted(buckets)))
            touched, untouched = self.rows.filter(in_bucket), self.rows.filter(pc.invert(in_bucket))
        merged = merge(touched, pending)
        self.rows = pa.concat_tables([untouched, merged]) if untouched.num_rows else merged
        self.watermarks.update(watermarks_after(pending))
        self.commits += 1
        self.rewritten_buckets.append(buckets)

    def state(self) -> dict[tuple[int, bytes], tuple[int, bytes | None]]:
        if self.rows is None:
            return {}
        out = {}
        for row in self.rows.to_pylist():
            k = (row[META]["partition"], row[META]["key"])
            assert k not in out, f"key {k} twice"
            out[k] = (row[META]["offset"], row["value_raw"])
        return out


def copy(table: FakeLatestTable, records: list[Rec], chunk_size: int = 3, topic_id: str = TOPIC_ID) -> None:
    """One copy: its log rows seen a chunk at a time, as the table writer sees them, then applied."""
    changes = LatestChanges(SPEC)
    for i in range(0, len(records), chunk_size):
        changes.add(chunk(records[i : i + chunk_size], topic_id))
    table.apply(changes)


def model(records: list[Rec]) -> dict[tuple[int, bytes], tuple[int, bytes | None]]:
    """Latest per (partition, key) of the records: the highest offset, no row for a tombstone; aborted records,
    control records and records without a key left out."""
    newest: dict[tuple[int, bytes], Rec] = {}
    for r in records:
        if r.aborted or r.control or r.key is None:
            continue
        k = (r.partition, r.key)
        if k not in newest or newest[k].offset < r.offset:
            newest[k] = r
    return {k: (r.offset, r.value) for k, r in newest.items() if r.value is not None}


def test_newest_offset_wins_and_a_tombstone_deletes() -> None:
    table = FakeLatestTable()
    copy(table, [Rec(0, 0, b"a", b"1"), Rec(0, 1, b"b", b"1"), Rec(0, 2, b"a", b"2"), Rec(0, 3, b"b", None)])
    assert table.state() == {(0, b"a"): (2, b"2")}
    copy(table, [Rec(0, 4, b"b", b"3"), Rec(0, 5, b"a", None)])
    assert table.state() == {(0, b"b"): (4, b"3")}


def test_aborted_and_control_records_never_reach_it() -> None:
    table = FakeLatestTable()
    copy(
        table,
        [Rec(0, 0, b"a", b"1"), Rec(0, 1, b"a", b"x", aborted=True), Rec(0, 2, None, None, control=True)],
    )
    assert table.state() == {(0, b"a"): (0, b"1")}
    # An aborted tombstone deletes nothing either.
    copy(table, [Rec(0, 3, b"a", None, aborted=True)])
    assert table.state() == {(0, b"a"): (0, b"1")}


def test_records_without_a_key_are_left_out() -> None:
    table = FakeLatestTable()
    copy(table, [Rec(0, 0, None, b"1"), Rec(0, 1, b"k", b"2")])
    assert table.state() == {(0, b"k"): (1, b"2")}


def test_a_replay_of_an_older_copy_changes_nothing() -> None:
    table = FakeLatestTable()
    first = [Rec(0, 0, b"a", b"1"), Rec(0, 1, b"b", b"1")]
    second = [Rec(0, 2, b"a", None), Rec(0, 3, b"b", b"2")]
    copy(table, first)
    copy(table, second)
    commits = table.commits
    copy(table, first)  # replayed after a newer copy: "a" must stay deleted, "b" stay at offset 3
    copy(table, second)  # retried
    assert table.state() == {(0, b"b"): (3, b"2")}
    assert table.commits == commits


def test_an_overlapping_copy_applies_only_what_is_new() -> None:
    table = FakeLatestTable()
    copy(table, [Rec(0, 0, b"a", b"1"), Rec(0, 1, b"a", None)])
    # A new leader's segment covers offsets 0..2: only offset 2 is new.
    copy(table, [Rec(0, 0, b"a", b"1"), Rec(0, 1, b"a", None), Rec(0, 2, b"c", b"9")])
    assert table.state() == {(0, b"c"): (2, b"9")}


def test_an_older_change_never_overwrites_a_newer_row_whatever_the_watermark() -> None:
    """A table whose watermarks were lost (an engine rewrote its properties) still keeps the newer row."""
    table = FakeLatestTable()
    copy(table, [Rec(0, 5, b"a", b"new")])
    table.watermarks.clear()
    copy(table, [Rec(0, 3, b"a", b"old"), Rec(0, 4, b"b", b"x")])
    assert table.state() == {(0, b"a"): (5, b"new"), (0, b"b"): (4, b"x")}


def test_partitions_are_separate_and_a_copy_rewrites_only_its_buckets() -> None:
    table = FakeLatestTable()
    copy(table, [Rec(0, 0, b"a", b"p0"), Rec(1, 0, b"a", b"p1")])
    copy(table, [Rec(1, 1, b"a", None)])
    assert table.state() == {(0, b"a"): (0, b"p0")}
    assert all(len(b) <= SPEC.buckets for b in table.rewritten_buckets)
    assert table.rewritten_buckets[-1] == buckets_of(changes_of(chunk([Rec(1, 1, b"a", None)]), SPEC))


def test_a_topic_created_again_starts_its_own_watermarks() -> None:
    table = FakeLatestTable()
    copy(table, [Rec(0, 10, b"a", b"old"), Rec(0, 11, b"b", b"old")], topic_id="old")
    copy(table, [Rec(0, 0, b"a", b"new")], topic_id="new")  # offset 0 again, under a new topic id
    assert table.state() == {(0, b"a"): (0, b"new"), (0, b"b"): (11, b"old")}


def test_keys_from_value_fields() -> None:
    spec = LatestTable("orders", "kafka", "orders_latest", key=("value.customer", "value.region"), buckets=2)
    value_type = pa.struct([pa.field("customer", pa.int64()), pa.field("region", pa.string())])
    rows = chunk([Rec(0, 0, b"x", b"1"), Rec(0, 1, b"y", b"2"), Rec(0, 2, b"z", b"3")])
    rows = rows.append_column(
        "value", pa.array([{"customer": 1, "region": "eu"}, {"customer": 1, "region": "eu"}, None], value_type)
    )
    out = newest_per_key([changes_of(rows, spec)])
    assert out.num_rows == 1  # offsets 0 and 1 share the key; offset 2 has no value fields: left out
    assert pc.struct_field(out.column(META), "key").to_pylist() == [b'[1,"eu"]']
    assert pc.struct_field(out.column(META), "offset").to_pylist() == [1]
    bad = LatestTable("orders", "kafka", "orders_latest", key=("value.nope",))
    with pytest.raises(NotKeyable, match=r"value\.nope.*iceberg\.mode\.table\.<id>\.latest\.key"):
        changes_of(rows, bad)
    with pytest.raises(NotKeyable, match="has no parsed value"):
        changes_of(chunk([Rec(0, 0, b"x", b"1")]), bad)


_keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", None])
_values = st.one_of(st.none(), st.binary(min_size=1, max_size=3))


@st.composite
def _history(draw: st.DrawFn) -> tuple[list[Rec], list[list[Rec]]]:
    """Records of two partitions, cut into segments (in offset order per partition), and the sequence of copies
    a broker makes of them: each segment in order, with retries, replays of earlier segments and segments of a
    new leader that overlap what was copied."""
    records: list[Rec] = []
    segments: list[list[Rec]] = []
    for partition in (0, 1):
        recs = []
        for offset in range(draw(st.integers(0, 25))):
            kind = draw(st.integers(0, 7))  # 0: aborted, 1: a control record, else a plain record
            key, value = (None, None) if kind == 1 else (draw(_keys), draw(_values))
            recs.append(Rec(partition, offset, key, value, aborted=kind == 0, control=kind == 1))
        records += recs
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(recs))), max_size=4))))
        bounds = [0, *cuts, len(recs)]
        segments += [recs[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if recs[a:b]]
    # Copies: per partition in order; the two partitions interleaved as drawn.
    by_partition = [[s for s in segments if s[0].partition == p] for p in (0, 1)]
    copies: list[list[Rec]] = []
    done: list[list[Rec]] = []
    while any(by_partition):
        p = draw(st.sampled_from([i for i in (0, 1) if by_partition[i]]))
        seg = by_partition[p].pop(0)
        if done and draw(st.booleans()):
            earlier = draw(st.sampled_from(done))
            if draw(st.booleans()):
                copies.append(earlier)  # a replay
            else:
                # A new leader's segment overlapping what its partition copied before.
                same = [r for r in records if r.partition == seg[0].partition]
                start = draw(st.integers(0, seg[0].offset))
                seg = [r for r in same if start <= r.offset <= seg[-1].offset]
        copies.append(seg)
        if draw(st.booleans()):
            copies.append(seg)  # a retried copy
        done.append(seg)
    return records, copies


@settings(max_examples=60, deadline=None)
@given(_history(), st.integers(1, 5))
def test_any_sequence_of_copies_and_replays_gives_the_models_latest_per_key(
    history: tuple[list[Rec], list[list[Rec]]], chunk_size: int
) -> None:
    records, copies = history
    table = FakeLatestTable()
    for c in copies:
        copy(table, c, chunk_size)
    assert table.state() == model(records)


def _cfg(**extra: str) -> IcebergConfig:
    return IcebergConfig.from_map(
        {"iceberg.mode.topics.regex": ".*", "iceberg.mode.catalog.sqlite.path": "/tmp/unused.db", **extra}
    )


def test_latest_keys_parse_and_default() -> None:
    cfg = _cfg(
        **{
            "iceberg.mode.table.pay.topic": "payments.eu",
            "iceberg.mode.table.pay.name": "finance.payments",
            "iceberg.mode.table.pay.latest.enabled": "true",
            "iceberg.mode.table.pay.latest.key": "value.id, value.region",
            "iceberg.mode.table.cdc.latest.enabled": "true",
            "iceberg.mode.table.cdc.latest.format": "debezium",
            "iceberg.mode.table.cdc.latest.name": "cdc_now",
            "iceberg.mode.table.off.latest.enabled": "false",
        }
    )
    pay = cfg.latest_of("payments.eu")
    assert pay is not None and pay.identifier == ("finance", "payments_latest")
    assert pay.key == ("value.id", "value.region") and pay.format == "record" and pay.buckets == 16
    cdc = cfg.latest_of("cdc")
    assert cdc is not None and cdc.identifier == ("kafka", "cdc_now") and cdc.format == "debezium"
    assert cdc.by_kafka_key
    assert cfg.latest_of("off") is None and cfg.latest_of("other") is None
    # The latest keys are no log-table keys: no topic "cdc.latest" appears.
    assert set(cfg.tables) == {"payments.eu"}
    assert cfg.table_of("cdc").name == "cdc"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("format", "upsert", "format: expected one of record, debezium"),
        ("key", "kafka.value", "neither kafka.key nor a field"),
        ("key", "value.a, value.a", "named twice"),
        ("buckets", "0", "from 1 to 4096"),
        ("buckets", "many", "from 1 to 4096"),
        ("name", "orders", "names the topic's log table"),
        ("name", "a.b.c", "expected <name> or <namespace>.<name>"),
        ("enabled", "yes", "expected true or false"),
    ],
)
def test_bad_latest_keys_are_refused_naming_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigException, match=rf"iceberg\.mode\.table\.orders\.latest\.{key}.*{message}|{message}"):
        _cfg(
            **{
                "iceberg.mode.table.orders.latest.enabled": "true" if key != "enabled" else value,
                f"iceberg.mode.table.orders.latest.{key}": value,
            }
        )


# ------------------------------------------------------------------------------------------ Debezium change events

DEBEZIUM = LatestTable("cdc", "kafka", "cdc_latest", format="debezium", buckets=4)
_column_values = {
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "string": st.text(max_size=5),
    "boolean": st.booleans(),
    "float64": st.floats(allow_nan=False, allow_infinity=False),
    "bytes": st.binary(max_size=5),
}


@st.composite
def _rows(draw: st.DrawFn) -> tuple[dict[str, str], list[tuple[str, dict[str, Any] | None]]]:
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=4, unique=True))
    columns = {n: draw(st.sampled_from(sorted(_column_values))) for n in names}
    events = []
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["c", "u", "r", "d"]))
        after = None if op == "d" else {n: draw(st.none() | _column_values[t]) for n, t in columns.items()}
        events.append((op, after))
    return columns, events


def _wire(op: str, after: dict[str, Any] | None, columns: dict[str, str], with_schema: bool) -> bytes:
    import base64
    import json

    encoded = None
    if after is not None:
        encoded = {
            n: base64.b64encode(v).decode() if isinstance(v, bytes) and with_schema else v for n, v in after.items()
        }
    envelope = {"before": None, "after": encoded, "op": op, "source": {}, "ts_ms": 0}
    if not with_schema:
        return json.dumps(envelope).encode()
    row = {"type": "struct", "optional": True, "fields": [{"field": n, "type": t} for n, t in columns.items()]}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}]}
    return json.dumps({"schema": schema, "payload": envelope}).encode()


@settings(max_examples=80, deadline=None)
@given(_rows())
@example(({"a": "boolean"}, [("d", None)]))  # only deletes: the schema alone gives the columns
def test_debezium_json_with_schema_gives_after_as_columns_of_the_schemas_types(
    rows: tuple[dict[str, str], list[tuple[str, dict[str, Any] | None]]],
) -> None:
    columns, events = rows
    records = [Rec(0, i, b"k%d" % i, _wire(op, after, columns, True)) for i, (op, after) in enumerate(events)]
    out = changes_of(chunk(records), DEBEZIUM)
    assert out.column("_deleted").to_pylist() == [op == "d" for op, _ in events]
    types = {"int32": pa.int32(), "int64": pa.int64(), "string": pa.string(), "boolean": pa.bool_()}
    types |= {"float64": pa.float64(), "bytes": pa.binary()}
    for name, kind in columns.items():
        assert out.schema.field(name).type == types[kind]
        assert out.column(name).to_pylist() == [after[name] if after else None for _, after in events]


@settings(max_examples=40, deadline=None)
@given(_rows())
def test_debezium_json_without_schema_gives_the_same_values(
    rows: tuple[dict[str, str], list[tuple[str, dict[str, Any] | None]]],
) -> None:
    columns, events = rows
    columns = {n: t for n, t in columns.items() if t in ("string", "boolean", "int32")}  # JSON keeps these exact
    events = [(op, {n: v for n, v in a.items() if n in columns} if a else a) for op, a in events]
    records = [Rec(0, i, b"k%d" % i, _wire(op, after, columns, False)) for i, (op, after) in enumerate(events)]
    out = changes_of(chunk(records), DEBEZIUM)
    assert out.column("_deleted").to_pylist() == [op == "d" for op, _ in events]
    for name in columns:
        if name in out.column_names:
            assert out.column(name).to_pylist() == [after.get(name) if after else None for _, after in events]
        else:  # a column that is null in every event has no type to infer
            assert all(after is None or after.get(name) is None for _, after in events)


def test_debezium_other_events_change_nothing_and_tombstones_delete() -> None:
    records = [
        Rec(0, 0, b"k", b'{"op": "t", "before": null, "after": null}'),
        Rec(0, 1, b"k", b"not json"),
        Rec(0, 2, b"k", b'{"schema": null, "payload": null}'),
        Rec(0, 3, b"j", None),
        Rec(0, 4, b"i", b'{"op": "c", "after": {"id": 1}}'),
    ]
    out = changes_of(chunk(records), DEBEZIUM)
    assert pc.struct_field(out.column(META), "offset").to_pylist() == [2, 3, 4]
    assert out.column("_deleted").to_pylist() == [True, True, False]
    assert out.column("id").to_pylist() == [None, None, 1]


def test_a_debezium_column_named_like_ours_is_refused_by_name() -> None:
    from rsm.errors import RemoteStorageException

    with pytest.raises(RemoteStorageException, match="column '_kafka'.*latest.format=record"):
        changes_of(chunk([Rec(0, 0, b"k", b'{"op": "c", "after": {"_kafka": 1}}')]), DEBEZIUM)


def test_avro_values_whose_null_branch_defines_a_named_type_parse() -> None:
    """Debezium's Avro envelope defines its row record in ``before`` and refers to it by name in ``after``; a
    create event has ``before`` null."""
    import io

    import fastavro

    from rsm.iceberg.values.avro import AvroValueParser

    row = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": "int"}]}
    schema = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "op", "type": "string"},
        ],
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), {"before": None, "after": {"id": 7}, "op": "c"})
    assert AvroValueParser(schema).parse_one(buf.getvalue()) == {"before": None, "after": {"id": 7}, "op": "c"}


# --------------------------------------------------------------------------- Debezium keyed by value fields

BY_ID = LatestTable("cdc", "kafka", "cdc_latest", key=("value.id", "value.region"), format="debezium", buckets=4)
_ROW = {"id": "int32", "region": "string", "name": "string"}


def _envelope(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, with_schema: bool) -> bytes:
    import json

    envelope = {"before": before, "after": after, "op": op, "source": {}, "ts_ms": 0}
    if not with_schema:
        return json.dumps(envelope).encode()
    row = {"type": "struct", "optional": True, "fields": [{"field": n, "type": t} for n, t in _ROW.items()]}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}]}
    return json.dumps({"schema": schema, "payload": envelope}).encode()


_AVRO_ROW = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "region", "type": ["null", "string"], "default": None},
        {"name": "name", "type": ["null", "string"], "default": None},
    ],
}
_AVRO_ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {"name": "before", "type": ["null", _AVRO_ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"},
    ],
}


def _with_avro_values(records: list[Rec]) -> pa.Table:
    """The log rows of ``records`` whose values are Avro envelopes, with ``value`` parsed as the plugin does."""
    from rsm.iceberg.values.avro import AvroValueParser

    parser = AvroValueParser(_AVRO_ENVELOPE)
    values = [None if r.value is None else parser.parse_one(r.value) for r in records]
    return chunk(records).append_column("value", pa.array(values, type=parser.arrow_type))


def _avro(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(_AVRO_ENVELOPE), {"before": before, "after": after, "op": op})
    return buf.getvalue()


def _wire_event(encoding: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
    if encoding == "avro":
        return _avro(op, before, after)
    return _envelope(op, before, after, encoding == "json-schema")


def _events_chunk(encoding: str, records: list[Rec]) -> pa.Table:
    return _with_avro_values(records) if encoding == "avro" else chunk(records)


ENCODINGS = ["json-schema", "json-plain", "avro"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_debezium_keys_from_fields_take_after_and_before_for_a_delete(encoding: str) -> None:
    one = {"id": 1, "region": "eu", "name": "ann"}
    two = {"id": 2, "region": "us", "name": "bob"}
    records = [
        Rec(0, 0, None, _wire_event(encoding, "c", None, one)),  # no Kafka key: the fields key it
        Rec(0, 1, b"k", _wire_event(encoding, "r", None, two)),
        Rec(0, 2, b"k", _wire_event(encoding, "u", one, {**one, "name": "ann2"})),
        Rec(0, 3, b"k", _wire_event(encoding, "d", {"id": 2, "region": "us", "name": None}, None)),
        Rec(0, 4, b"k", None),  # the tombstone after the delete: no fields, left out
    ]
    out = newest_per_key([changes_of(_events_chunk(encoding, records), BY_ID)])
    got = {
        k: (o, d)
        for k, o, d in zip(
            pc.struct_field(out.column(META), "key").to_pylist(),
            pc.struct_field(out.column(META), "offset").to_pylist(),
            out.column("_deleted").to_pylist(),
            strict=True,
        )
    }
    assert got == {b'[1,"eu"]': (2, False), b'[2,"us"]': (3, True)}
    assert out.filter(pc.invert(out.column("_deleted"))).column("name").to_pylist() == ["ann2"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_debezium_delete_without_the_key_in_before_is_refused_by_name(encoding: str) -> None:
    records = [
        Rec(0, 0, b"k", _wire_event(encoding, "c", None, {"id": 1, "region": "eu", "name": "x"})),
        Rec(3, 7, b"k", _wire_event(encoding, "d", None, None)),  # REPLICA IDENTITY NOTHING: no before
    ]
    with pytest.raises(NotKeyable) as refused:
        changes_of(_events_chunk(encoding, records), BY_ID)
    message = str(refused.value)
    assert "offset 7 of partition 3 of topic 'cdc'" in message
    assert "value.id, value.region" in message and "REPLICA IDENTITY" in message and "kafka.key" in message


def test_a_debezium_key_field_the_rows_lack_is_refused_by_name() -> None:
    bad = LatestTable("cdc", "kafka", "cdc_latest", key=("value.nope",), format="debezium", buckets=4)
    records = [Rec(0, 0, b"k", _envelope("c", None, {"id": 1, "region": "eu", "name": "x"}, False))]
    with pytest.raises(NotKeyable, match=r"value\.nope.*iceberg\.mode\.table\.<id>\.latest\.key"):
        changes_of(chunk(records), bad)


@st.composite
def _cdc_history(draw: st.DrawFn) -> tuple[str, list[Rec]]:
    """Change events of a source table keyed by (id, region), as Debezium writes them: creates of new rows,
    updates and deletes of existing ones (a delete's ``before`` holds the key columns, followed by a tombstone
    or not), snapshot reads; each in a random partition, under a Kafka key that may be null."""
    encoding = draw(st.sampled_from(ENCODINGS))
    table: dict[tuple[int, str], dict[str, Any]] = {}
    records: list[Rec] = []
    offsets = [0]
    partition = 0  # one partition: a key's events stay in order, as Debezium's keyed partitioning keeps them
    for _ in range(draw(st.integers(1, 30))):
        key = (draw(st.integers(1, 4)), draw(st.sampled_from(["eu", "us"])))
        row = {"id": key[0], "region": key[1], "name": draw(st.text(max_size=3))}
        if key in table and draw(st.booleans()):
            event = _wire_event(encoding, "d", {"id": key[0], "region": key[1], "name": None}, None)
            del table[key]
            tombstone = draw(st.booleans())
        else:
            op = "u" if key in table else draw(st.sampled_from(["c", "r"]))
            event = _wire_event(encoding, op, table.get(key), row)
            table[key] = row
            tombstone = False
        kafka_key = draw(st.sampled_from([None, b"x"]))
        records.append(Rec(partition, offsets[partition], kafka_key, event))
        offsets[partition] += 1
        if tombstone:
            records.append(Rec(partition, offsets[partition], kafka_key, None))
            offsets[partition] += 1
    return encoding, records


@settings(max_examples=60, deadline=None)
@given(_cdc_history(), st.integers(1, 5))
def test_any_debezium_history_keyed_by_fields_gives_the_source_tables_rows(
    history: tuple[str, list[Rec]], chunk_size: int
) -> None:
    encoding, records = history
    want: dict[bytes, str] = {}
    for r in records:
        if r.value is None:
            continue
        if encoding == "avro":
            from rsm.iceberg.values.avro import AvroValueParser

            event = AvroValueParser(_AVRO_ENVELOPE).parse_one(r.value)
        else:
            import json

            event = json.loads(r.value)
            event = event.get("payload", event)
        row = event["before"] if event["op"] == "d" else event["after"]
        k = f'[{row["id"]},"{row["region"]}"]'.encode()
        if event["op"] == "d":
            want.pop(k, None)
        else:
            want[k] = event["after"]["name"]
    table = FakeLatestTable()
    for i in range(0, len(records), 7):  # copies of 7 records, each seen in chunks
        changes = LatestChanges(BY_ID)
        copy_records = records[i : i + 7]
        for j in range(0, len(copy_records), chunk_size):
            changes.add(_events_chunk(encoding, copy_records[j : j + chunk_size]))
        table.apply(changes)
    got = (
        {}
        if table.rows is None
        else dict(
            zip(
                pc.struct_field(table.rows.column(META), "key").to_pylist(),
                table.rows.column("name").to_pylist(),
                strict=True,
            )
        )
    )
    assert got == want
