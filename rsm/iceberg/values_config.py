"""The keys of value parsing in Iceberg mode (``iceberg.value.schema.*``), declared once; read by
``rsm.iceberg.values`` (which needs pyarrow, fastavro and jsonschema; this module imports none of them)."""

from __future__ import annotations

from backends.configdef import ConfigDef, ConfigKey

VALUES_CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "iceberg.value.schema.<id>.topic",
            "string",
            None,
            "Topic whose values the schema <id> describes (default: <id> itself; needed when the topic name has dots).",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.value.schema.<id>.avro",
            "string",
            None,
            "Avro schema of the topic's values: inline JSON, or the path of a file holding it. Values are Avro "
            "binary; each one that decodes fills the row's `value` struct.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.value.schema.<id>.json",
            "string",
            None,
            "JSON Schema of the topic's values: inline JSON, or the path of a file holding it. Values are JSON "
            "text; each one that validates fills the row's `value` struct.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.value.schema.registry.url",
            "string",
            None,
            "Base URL of a Confluent-compatible schema registry. Values of topics without a schema of their own "
            "are read in its wire format (magic byte 0, 4-byte schema id, Avro binary).",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.value.schema.registry.timeout.ms",
            "int",
            10_000,
            "Timeout of one request to the schema registry.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.value.schema.registry.<id>.schema.id",
            "int",
            None,
            "Registry schema id whose schema gives topic <id>'s `value` struct (default: the latest version of the "
            "subject <id>-value).",
            group="iceberg",
            dynamic=True,
        ),
    ]
)
