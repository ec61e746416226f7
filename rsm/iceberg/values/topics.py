"""Which parser each topic's values get, from the ``iceberg.value.schema.*`` keys, and the table writer's hook."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from backends.configdef import PARSERS, ConfigException
from rsm.errors import RemoteStorageException
from rsm.iceberg.value_hook import ValueColumn, ValueColumnFactory
from rsm.iceberg.values.avro import AvroValueParser
from rsm.iceberg.values.common import UnsupportedSchema, ValueParser, schema_text
from rsm.iceberg.values.json_schema import JsonSchemaValueParser
from rsm.iceberg.values.protobuf import ProtobufValueParser, descriptor_from_file
from rsm.iceberg.values.registry import (
    RegistryValueParser,
    SchemaRegistryClient,
    split_message_indexes,
    split_wire_format,
)
from rsm.iceberg.values_config import VALUES_CONFIG_DEF

log = logging.getLogger(__name__)

_PREFIX = "iceberg.value.schema."
_KEY_PREFIX = "iceberg.key.schema."
_KINDS = ("topic", "avro", "json", "protobuf", "protobuf.message")
_SOURCES = ("avro", "json", "protobuf")


class ProtobufFileValueParser(ProtobufValueParser):
    """Protobuf values of a descriptor set's message, plain or in the wire format: a Protobuf message never
    starts with byte 0 (field number 0 does not exist), so a value that does is taken as the wire format and
    its schema id and message indexes are skipped."""

    def parse_one(self, raw: bytes) -> Any:
        if raw[:1] == b"\x00":
            _, payload = split_wire_format(raw)
            _, raw = split_message_indexes(payload)
        return super().parse_one(raw)


@dataclass
class ValueSchemas:
    """The value parsers of every topic, from the plugin's configuration."""

    by_topic: dict[str, ValueParser]
    registry: SchemaRegistryClient | None = None
    registry_ids: dict[str, int] | None = None
    #: What is parsed: "value", or "key" (``iceberg.key.schema.*``: the registry only for topics matching
    #: ``registry_topics``, subject ``<topic>-key``).
    what: str = "value"
    registry_topics: re.Pattern[str] | None = None

    @staticmethod
    def from_config(configs: Mapping[str, Any], what: str = "value") -> ValueSchemas:
        """Read the ``iceberg.value.schema.*`` keys (``what="key"``: ``iceberg.key.schema.*``, with the registry of
        ``iceberg.value.schema.registry.url``); a bad schema raises ConfigException naming its key."""
        prefix = _PREFIX if what == "value" else _KEY_PREFIX
        ids: dict[str, dict[str, Any]] = {}
        registry_ids: dict[str, int] = {}
        registry_topics: re.Pattern[str] | None = None
        url: str | None = None
        timeout_ms = 10_000
        for key, value in configs.items():
            if key == f"{_PREFIX}registry.url":
                url = str(value).strip() or None
                continue
            if key == f"{_PREFIX}registry.timeout.ms":
                timeout_ms = VALUES_CONFIG_DEF.keys["iceberg.value.schema.registry.timeout.ms"].parse(value)
                continue
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            if what == "key" and rest == "registry.topics":
                try:
                    registry_topics = re.compile(str(value)) if str(value).strip() else None
                except re.error as e:
                    raise ConfigException(
                        f"Invalid value {value!r} for configuration {key}: not a regular expression ({e})"
                    ) from e
                continue
            if rest in ("registry.url", "registry.timeout.ms"):
                url = str(value).strip() or None
                continue
            if rest == "registry.timeout.ms":
                timeout_ms = VALUES_CONFIG_DEF.keys["iceberg.value.schema.registry.timeout.ms"].parse(value)
                continue
            if what == "value" and rest.startswith("registry.") and rest.endswith(".schema.id"):
                topic = rest[len("registry.") : -len(".schema.id")]
                registry_ids[topic] = _parse_int(key, value)
                continue
            ident, _, kind = rest.partition(".")
            if kind not in _KINDS:
                raise ConfigException(
                    f"Unknown configuration {key}: expected {prefix}<id>.avro, .json, .protobuf, "
                    ".protobuf.message or .topic"
                )
            ids.setdefault(ident, {})[kind] = (key, value)
        by_topic: dict[str, ValueParser] = {}
        for ident, parts in sorted(ids.items()):
            topic = str(parts["topic"][1]) if "topic" in parts else ident
            given = [k for k in _SOURCES if k in parts]
            if len(given) > 1:
                raise ConfigException(
                    f"Configurations {' and '.join(parts[k][0] for k in given)} both set: give the topic one schema"
                )
            if not given:
                first = parts.get("topic") or parts["protobuf.message"]
                raise ConfigException(
                    f"Configuration {first[0]} names a topic without a schema: add {prefix}{ident}.avro, "
                    f"{prefix}{ident}.json or {prefix}{ident}.protobuf"
                )
            key, text = parts[given[0]]
            if given[0] == "avro":
                parser: ValueParser = _configured(key, AvroValueParser, schema_text(key, str(text)))
            elif given[0] == "json":
                parser = _configured(key, JsonSchemaValueParser, schema_text(key, str(text)))
            else:
                message = str(parts["protobuf.message"][1]) if "protobuf.message" in parts else None
                parser = _configured(key, ProtobufFileValueParser, descriptor_from_file(key, str(text), message))
            if topic in by_topic:
                raise ConfigException(f"Topic {topic!r} is given two {what} schemas ({prefix}*.topic)")
            by_topic[topic] = parser
        registry = SchemaRegistryClient(url, timeout_ms / 1000) if url else None
        if registry_topics is not None and url is None:
            raise ConfigException(
                "Configuration iceberg.key.schema.registry.topics needs iceberg.value.schema.registry.url"
            )
        return ValueSchemas(by_topic, registry, registry_ids, what, registry_topics)

    def parser_for(self, topic: str) -> ValueParser | RegistryValueParser | None:
        """The topic's parser: its own schema, else the registry's subject ``<topic>-value`` (``<topic>-key`` for
        keys of topics ``registry_topics`` matches), else None."""
        parser = self.by_topic.get(topic)
        if self.what == "key" and (self.registry_topics is None or not self.registry_topics.fullmatch(topic)):
            return parser
        if parser is None and self.registry is not None:
            parser = RegistryValueParser(self.registry, f"{topic}-{self.what}", (self.registry_ids or {}).get(topic))
            self.by_topic[topic] = parser  # type: ignore[assignment]
        return parser


def _parse_int(key: str, value: Any) -> int:
    parsed: int = PARSERS["int"](key, value)
    return parsed


def _configured(key: str, make: Callable[[Any], ValueParser], schema: Any) -> ValueParser:
    try:
        return make(schema)
    except UnsupportedSchema as e:
        raise ConfigException(f"Invalid value for configuration {key}: {e}") from e


def registry_column(parser: RegistryValueParser, topic: str) -> ValueColumn | None:
    """The column for the topic's next segment, its struct refreshed from the registry; None while the registry
    knows no schema of the subject. A registry that does not answer is a RemoteStorageException (Kafka retries)."""
    try:
        arrow_type = parser.column_type()
    except OSError as e:
        raise RemoteStorageException(
            f"topic {topic}: the schema registry {parser.client.url} did not answer for subject {parser.subject} "
            f"({e}); check iceberg.value.schema.registry.url; Kafka retries the copy"
        ) from e
    if arrow_type is None:
        log.warning("topic %s: the schema registry has no schema of subject %s; values stay raw", topic, parser.subject)
        return None

    def convert(raws: Sequence[bytes | None]) -> pa.Array:
        try:
            return parser.convert(arrow_type, raws)
        except OSError as e:
            raise RemoteStorageException(
                f"topic {topic}: the schema registry {parser.client.url} did not answer ({e}); check "
                "iceberg.value.schema.registry.url; Kafka retries the copy"
            ) from e

    return ValueColumn(arrow_type, convert)


def _column(schemas: ValueSchemas, topic: str) -> ValueColumn | None:
    parser = schemas.parser_for(topic)
    if parser is None:
        return None
    if isinstance(parser, RegistryValueParser):
        return registry_column(parser, topic)
    return ValueColumn(parser.arrow_type, parser.parse)


def value_column_factory(configs: Mapping[str, Any]) -> ValueColumnFactory:
    """The table writer's hook (``rsm.iceberg.value_hook``) for the ``iceberg.value.schema.*`` and
    ``iceberg.key.schema.*`` keys in ``configs``."""
    values = ValueSchemas.from_config(configs)
    keys = ValueSchemas.from_config(configs, "key")
    keys.registry = values.registry  # one client, one cache

    def factory(topic: str) -> ValueColumn | None:
        value, key = _column(values, topic), _column(keys, topic)
        if key is None:
            return value
        if value is None:
            return ValueColumn(None, None, key)
        return ValueColumn(value.arrow_type, value.convert, key)

    return factory


def parse_values(parser: ValueParser | RegistryValueParser | None, raws: Sequence[bytes | None]) -> pa.Array | None:
    """The ``value`` column for ``raws``, or None when the topic has no schema (or the registry none of it)."""
    if parser is None:
        return None
    if isinstance(parser, RegistryValueParser):
        parser.note_ids(raws)
        arrow_type = parser.column_type()
        return None if arrow_type is None else parser.convert(arrow_type, raws)
    return parser.parse(raws)
