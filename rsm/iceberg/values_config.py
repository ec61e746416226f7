"""The keys of value parsing in Iceberg mode (``iceberg.value.schema.*``), declared once; read by
``rsm.iceberg.values`` (which needs pyarrow, fastavro, jsonschema and protobuf; this module imports none of them)."""

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
            "iceberg.value.schema.<id>.protobuf",
            "string",
            None,
            "Path of a Protobuf descriptor set file (protoc --include_imports --descriptor_set_out) whose message "
            "the topic's values are. Values are Protobuf binary, plain or in the registry's wire format; each one "
            "that parses fills the row's `value` struct.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.value.schema.<id>.protobuf.message",
            "string",
            None,
            "Full name of the message of iceberg.value.schema.<id>.protobuf the values are (default: the first "
            "message of the set's last file).",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.value.schema.registry.url",
            "string",
            None,
            "Base URL of a Confluent-compatible schema registry (Confluent's, Apicurio's /apis/ccompat/v7, ...). "
            "Values of topics without a schema of their own are read in its wire format (magic byte 0, 4-byte "
            "schema id, Protobuf message indexes, then Avro, Protobuf or JSON). The `value` struct is the merge "
            "of every version of the subject <topic>-value and every schema id met in values: added fields, "
            "int->long, float->double and fields made optional evolve the table; values of an incompatible id "
            "keep `value` null.",
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
            "iceberg.key.schema.<id>.topic",
            "string",
            None,
            "Topic whose keys the key schema <id> describes (default: <id> itself; needed when the topic name has "
            "dots).",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.key.schema.<id>.avro",
            "string",
            None,
            "Avro schema of the topic's keys (inline JSON or a file path): each key that decodes fills the row's "
            "`key` struct, beside `key_raw`. Likewise .json (JSON Schema), .protobuf (a descriptor set file) and "
            ".protobuf.message, as for values.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.key.schema.<id>.json",
            "string",
            None,
            "JSON Schema of the topic's keys (inline JSON or a file path); see iceberg.key.schema.<id>.avro.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.key.schema.<id>.protobuf",
            "string",
            None,
            "Protobuf descriptor set file of the topic's keys; see iceberg.value.schema.<id>.protobuf.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.key.schema.<id>.protobuf.message",
            "string",
            None,
            "Full name of the message of iceberg.key.schema.<id>.protobuf the keys are.",
            group="iceberg",
            dynamic=True,
        ),
        ConfigKey(
            "iceberg.key.schema.registry.topics",
            "string",
            None,
            "Topics (whole name) whose keys are in the schema registry's wire format (subject <topic>-key): each "
            "fills the row's `key` struct, which follows the subject's versions as `value` does.",
            group="iceberg",
        ),
        ConfigKey(
            "iceberg.value.schema.registry.<id>.schema.id",
            "int",
            None,
            "Registry schema id whose schema is the first of topic <id>'s `value` struct, the subject's versions "
            "merged into it (default: the subject <id>-value's versions alone).",
            group="iceberg",
            dynamic=True,
        ),
    ]
)
