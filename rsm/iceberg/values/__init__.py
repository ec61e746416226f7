"""Record values parsed into the Iceberg row's ``value`` struct, where the topic has a schema.

One module per schema source, each turning a value's bytes into the struct's Python value:

- :mod:`~rsm.iceberg.values.avro`: Avro binary of a schema given inline or as a file
  (``iceberg.value.schema.<id>.avro``);
- :mod:`~rsm.iceberg.values.json_schema`: JSON text that validates against a JSON Schema
  (``iceberg.value.schema.<id>.json``);
- :mod:`~rsm.iceberg.values.protobuf`: Protobuf binary of a message of a descriptor set file
  (``iceberg.value.schema.<id>.protobuf``);
- :mod:`~rsm.iceberg.values.registry`: the Confluent wire format, its Avro, Protobuf or JSON Schema fetched from
  a Confluent-compatible registry (``iceberg.value.schema.registry.url``) by schema id; the struct follows the
  subject's versions (added fields, int->long, float->double, fields made optional).

:mod:`~rsm.iceberg.values.common` holds what they share (the parser interface, the merge of two versions of a
type), :mod:`~rsm.iceberg.values.topics` which topic gets which parser and the table writer's hook.
``<id>`` is the topic name, or any name without a dot together with ``iceberg.value.schema.<id>.topic`` for a
topic whose name has dots. A value that does not parse keeps ``value`` null; its bytes are always in
``value_raw``.
"""

from __future__ import annotations

from rsm.iceberg.values.avro import AvroValueParser, arrow_type_from_avro, avro_to_arrow_value
from rsm.iceberg.values.common import IncompatibleSchema, UnsupportedSchema, ValueParser, merge_types
from rsm.iceberg.values.json_schema import JsonSchemaValueParser, arrow_type_from_json_schema, json_to_arrow_value
from rsm.iceberg.values.protobuf import ProtobufValueParser, arrow_type_from_protobuf, protobuf_to_arrow_value
from rsm.iceberg.values.registry import (
    CONFLUENT_MAGIC,
    STATS,
    RegistryValueParser,
    SchemaRegistryClient,
    split_message_indexes,
    split_wire_format,
    wire_value,
)
from rsm.iceberg.values.topics import ProtobufFileValueParser, ValueSchemas, parse_values, value_column_factory
from rsm.iceberg.values_config import VALUES_CONFIG_DEF

__all__ = [
    "CONFLUENT_MAGIC",
    "STATS",
    "VALUES_CONFIG_DEF",
    "AvroValueParser",
    "IncompatibleSchema",
    "JsonSchemaValueParser",
    "ProtobufFileValueParser",
    "ProtobufValueParser",
    "RegistryValueParser",
    "SchemaRegistryClient",
    "UnsupportedSchema",
    "ValueParser",
    "ValueSchemas",
    "arrow_type_from_avro",
    "arrow_type_from_json_schema",
    "arrow_type_from_protobuf",
    "avro_to_arrow_value",
    "json_to_arrow_value",
    "merge_types",
    "parse_values",
    "protobuf_to_arrow_value",
    "split_message_indexes",
    "split_wire_format",
    "value_column_factory",
    "wire_value",
]
