"""The table of an Iceberg-mode topic: its Iceberg schema, partition spec and the Arrow schema of its rows.

One table per topic, partitioned by ``day(kafka.timestamp)`` unless configured otherwise. The row layout is
Aiven's (a ``kafka`` struct, ``headers``, ``key_raw``, ``value_raw``, an optional ``value``) with the fields that
make every batch rebuildable exactly: a fetch re-encodes the rows of a batch into the same batch (offsets,
timestamps, producer fields, attributes, codec) at the position the broker's offset index names.

Readers and the writer agree on the names; the catalog assigns the field ids when it creates the table.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.exceptions import ValidationError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from rsm.iceberg.topic_tables import DEFAULT_PARTITION_BY, PartitionTerm, parse_partition_by

__all__ = [
    "KAFKA_FIELDS",
    "VALUE_FIELD_ID_BASE",
    "arrow_schema",
    "iceberg_schema",
    "partition_spec",
]

#: The ``kafka`` struct: (name, Iceberg type, doc). Aiven's fields first, then ours (what rebuilds a batch exactly
#: and what a reader needs to leave out control records and aborted transactions).
KAFKA_FIELDS: tuple[tuple[str, object, str], ...] = (
    ("partition", IntegerType(), "Kafka partition"),
    ("offset", LongType(), "record offset"),
    ("timestamp", TimestamptzType(), "record timestamp as a consumer sees it (LogAppendTime: the batch's)"),
    ("batch_byte_offset", IntegerType(), "position of the record's batch in the original segment file"),
    ("batch_base_offset", LongType(), "base offset of the record's batch"),
    ("batch_partition_leader_epoch", IntegerType(), "partitionLeaderEpoch of the batch"),
    ("batch_magic", IntegerType(), "batch format version (always 2)"),
    ("batch_timestamp_type", IntegerType(), "0 CreateTime, 1 LogAppendTime"),
    ("batch_compression_type", IntegerType(), "0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd"),
    ("batch_max_timestamp", LongType(), "maxTimestamp of the batch (ms)"),
    ("batch_producer_id", LongType(), "producer id (-1: none)"),
    ("batch_producer_epoch", IntegerType(), "producer epoch (-1: none)"),
    ("batch_base_sequence", IntegerType(), "base sequence (-1: none)"),
    ("batch_attributes", IntegerType(), "the batch's attributes field, as written"),
    ("batch_base_timestamp", LongType(), "baseTimestamp of the batch (ms; the delete horizon when flagged)"),
    ("batch_last_offset_delta", IntegerType(), "lastOffsetDelta of the batch"),
    ("batch_record_count", IntegerType(), "records in the batch"),
    ("batch_byte_size", IntegerType(), "size of the original batch in bytes"),
    ("record_attributes", IntegerType(), "the record's attributes byte"),
    ("timestamp_delta", LongType(), "the record's timestamp delta as written"),
    ("timestamp_ms", LongType(), "record timestamp in ms, as a consumer sees it"),
    ("is_transactional", BooleanType(), "the batch is part of a transaction"),
    ("is_control", BooleanType(), "a control record (transaction marker): not data"),
    ("control_type", IntegerType(), "a control record's type: 0 ABORT, 1 COMMIT (null for data records)"),
    ("aborted", BooleanType(), "in a transaction the segment's transaction index names as aborted"),
    # Which incarnation wrote the row (null in rows written before these fields: unknown, go by offsets).
    ("segment_id", StringType(), "Kafka Uuid of the remote log segment whose copy wrote the row"),
    ("topic_id", StringType(), "Kafka Uuid of the topic (a topic created again under the same name has another)"),
)

_KAFKA_ID = 1
_FIRST_KAFKA_FIELD_ID = 100
_HEADERS_ID = 2
_HEADERS_ELEMENT_ID = 3
_HEADER_KEY_ID = 4
_HEADER_VALUE_ID = 5
_KEY_RAW_ID = 6
_VALUE_RAW_ID = 7
_VALUE_ID = 8
#: Field ids of a ``value`` struct start above this (``rsm.iceberg.values`` assigns them).
VALUE_FIELD_ID_BASE = 1000


def _kafka_struct() -> StructType:
    return StructType(
        *(
            NestedField(_FIRST_KAFKA_FIELD_ID + i, name, typ, required=False, doc=doc)  # type: ignore[arg-type]
            for i, (name, typ, doc) in enumerate(KAFKA_FIELDS)
        )
    )


def iceberg_schema(value_type: StructType | None = None) -> Schema:
    """The table's schema; ``value_type`` is the parsed-value struct (ids above ``VALUE_FIELD_ID_BASE``)."""
    fields = [
        NestedField(_KAFKA_ID, "kafka", _kafka_struct(), required=False, doc="where the record sits in Kafka"),
        NestedField(
            _HEADERS_ID,
            "headers",
            ListType(
                _HEADERS_ELEMENT_ID,
                StructType(
                    NestedField(_HEADER_KEY_ID, "key", StringType(), required=False),
                    NestedField(_HEADER_VALUE_ID, "value", BinaryType(), required=False),
                ),
                element_required=False,
            ),
            required=False,
            doc="record headers in order",
        ),
        NestedField(_KEY_RAW_ID, "key_raw", BinaryType(), required=False, doc="record key bytes (null: no key)"),
        NestedField(
            _VALUE_RAW_ID, "value_raw", BinaryType(), required=False, doc="record value bytes (null: no value)"
        ),
    ]
    if value_type is not None:
        fields.append(NestedField(_VALUE_ID, "value", value_type, required=False, doc="the parsed value"))
    return Schema(*fields)


def transform_of(term: PartitionTerm) -> Transform:  # type: ignore[type-arg]
    """The pyiceberg transform of one configured partition field."""
    simple = {"hour": HourTransform, "day": DayTransform, "month": MonthTransform, "identity": IdentityTransform}
    if term.transform in simple:
        return simple[term.transform]()
    assert term.param is not None
    if term.transform == "bucket":
        return BucketTransform(term.param)
    return TruncateTransform(term.param)


def partition_spec(schema: Schema, terms: tuple[PartitionTerm, ...] | None = None) -> PartitionSpec:
    """The spec of ``terms`` (default ``day(kafka.timestamp)``) over ``schema``; ``ValueError`` naming the column
    a term names that the schema lacks or that its transform cannot take."""
    if terms is None:
        terms = parse_partition_by("default", DEFAULT_PARTITION_BY)
    fields = []
    for i, term in enumerate(terms):
        try:
            source = schema.find_field(term.source)
        except ValueError:
            raise ValueError(f"the table has no column {term.source!r}") from None
        transform = transform_of(term)
        if not transform.can_transform(source.field_type):
            raise ValueError(f"{term} cannot apply to column {term.source!r} of type {source.field_type}")
        fields.append(PartitionField(source.field_id, 1000 + i, transform, term.field_name))
    try:
        return PartitionSpec(*fields)
    except ValidationError as e:
        raise ValueError(str(e)) from e


_ARROW_KAFKA_TYPES: dict[type, pa.DataType] = {
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    BooleanType: pa.bool_(),
    TimestamptzType: pa.timestamp("us", tz="UTC"),
    StringType: pa.string(),
}


def kafka_arrow_type() -> pa.StructType:
    """The ``kafka`` struct as Arrow (names and order of ``KAFKA_FIELDS``)."""
    return pa.struct([pa.field(name, _ARROW_KAFKA_TYPES[type(typ)]) for name, typ, _ in KAFKA_FIELDS])


HEADERS_ARROW_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(value_type: pa.StructType | None = None, key_type: pa.StructType | None = None) -> pa.Schema:
    """The Arrow schema of the rows the writer builds (names match ``iceberg_schema``; pyiceberg maps ids); the
    parsed ``value`` and ``key`` structs last, where the topic has them (the writer adds them to the table)."""
    fields = [
        pa.field("kafka", kafka_arrow_type()),
        pa.field("headers", HEADERS_ARROW_TYPE),
        pa.field("key_raw", pa.binary()),
        pa.field("value_raw", pa.binary()),
    ]
    if value_type is not None:
        fields.append(pa.field("value", value_type))
    if key_type is not None:
        fields.append(pa.field("key", key_type))
    return pa.schema(fields)


def has_field(schema: Schema, name: str) -> bool:
    """Whether ``schema`` has the (dotted) field ``name``; a table made before a field was added has not."""
    try:
        schema.find_field(name)
    except ValueError:
        return False
    return True
