"""rsm.iceberg.topic_tables: a topic's table name (the mapping of names Iceberg identifiers cannot hold, and the
configured names) and the partition spec it is configured with."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.configdef import ConfigException
from rsm.iceberg.config import IcebergConfig
from rsm.iceberg.topic_tables import PartitionTerm, default_table_name, parse_partition_by

# Kafka's legal topic names: letters, digits, '.', '_', '-', at most 249 characters
TOPICS = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=249)


@given(TOPICS)
def test_every_topic_gets_a_valid_table_name(topic: str) -> None:
    name = default_table_name(topic)
    assert re.fullmatch(r"[A-Za-z0-9_]+", name)
    assert len(name) == len(topic)
    assert default_table_name(name) == name  # names that are valid already stay as they are


@pytest.mark.parametrize(
    ("topic", "table"),
    [("orders", "orders"), ("payments.eu", "payments_eu"), ("ice-orders", "ice_orders"), ("a.b-c_D", "a_b_c_D")],
)
def test_documented_mapping(topic: str, table: str) -> None:
    cfg = IcebergConfig.from_map({"iceberg.mode.topics.regex": r"payments\..*|.*", "iceberg.mode.catalog.uri": "x"})
    assert cfg.table_of(topic).identifier == ("kafka", table)


def test_configured_names_for_a_topic_with_dots() -> None:
    cfg = IcebergConfig.from_map(
        {
            "iceberg.mode.topics.regex": ".*",
            "iceberg.mode.catalog.uri": "x",
            "iceberg.mode.namespace": "streams",
            "iceberg.mode.table.pay.topic": "payments.eu",
            "iceberg.mode.table.pay.name": "finance.payments_europe",
            "iceberg.mode.table.orders.name": "all_orders",
            "iceberg.mode.table.orders.partition.by": "hour, bucket[16](value.id)",
        }
    )
    assert cfg.table_of("payments.eu").identifier == ("finance", "payments_europe")
    assert cfg.table_of("orders").identifier == ("streams", "all_orders")
    assert cfg.table_of("orders").partition_by == (
        PartitionTerm("hour", "kafka.timestamp"),
        PartitionTerm("bucket", "value.id", 16),
    )
    assert cfg.table_of("payments.eu").partition_by is None  # not configured: the table's spec is left alone
    assert cfg.table_of("other.topic").identifier == ("streams", "other_topic")


@pytest.mark.parametrize("name", ["a.b.c", "bad-name", "x.", ".x", "ns.na me"])
def test_a_table_name_that_is_no_identifier_is_refused(name: str) -> None:
    with pytest.raises(ConfigException, match=r"iceberg\.mode\.table\.t\.name"):
        IcebergConfig.from_map({"iceberg.mode.catalog.uri": "x", "iceberg.mode.table.t.name": name})


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("day", (PartitionTerm("day", "kafka.timestamp"),)),
        ("month", (PartitionTerm("month", "kafka.timestamp"),)),
        ("none", ()),
        (
            "identity(value.country), truncate[4](value.sku)",
            (PartitionTerm("identity", "value.country"), PartitionTerm("truncate", "value.sku", 4)),
        ),
        (
            "identity(kafka.partition),day",
            (PartitionTerm("identity", "kafka.partition"), PartitionTerm("day", "kafka.timestamp")),
        ),
    ],
)
def test_partition_by(text: str, terms: tuple[PartitionTerm, ...]) -> None:
    assert parse_partition_by("k", text) == terms
    if terms:
        assert parse_partition_by("k", ", ".join(map(str, terms))) == terms  # printed as parsed


@pytest.mark.parametrize(
    "text",
    [
        "week",
        "day, hour",
        "bucket(value.id)",
        "bucket[0](value.id)",
        "identity[3](value.id)",
        "truncate[2]()",
        "",
        "day,,",
    ],
)
def test_a_partition_by_that_does_not_parse_names_its_key(text: str) -> None:
    with pytest.raises(ConfigException, match="iceberg.mode.table.t.partition.by"):
        IcebergConfig.from_map({"iceberg.mode.catalog.uri": "x", "iceberg.mode.table.t.partition.by": text})


def test_field_names() -> None:
    assert [t.field_name for t in parse_partition_by("k", "day, bucket[8](value.a.b), truncate[3](value.s)")] == [
        "day",
        "value_a_b_bucket_8",
        "value_s_trunc_3",
    ]


_COLUMNS = st.from_regex(r"(value|kafka)(\.[a-z_][a-z0-9_]{0,8}){1,3}", fullmatch=True)
_TERMS = st.one_of(
    st.builds(PartitionTerm, st.just("identity"), _COLUMNS),
    st.builds(PartitionTerm, st.sampled_from(["bucket", "truncate"]), _COLUMNS, st.integers(1, 10_000)),
)


@given(
    time=st.sampled_from([None, "hour", "day", "month"]),
    terms=st.lists(_TERMS, max_size=4, unique_by=lambda t: t.field_name),
    spaces=st.sampled_from([",", ", ", " , "]),
)
def test_partition_by_reads_back_what_it_prints(time: str | None, terms: list[PartitionTerm], spaces: str) -> None:
    spec = ([PartitionTerm(time, "kafka.timestamp")] if time else []) + terms
    if not spec:
        return
    assert parse_partition_by("k", spaces.join(map(str, spec))) == tuple(spec)
