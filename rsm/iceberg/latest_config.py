"""Which topics also keep a latest-per-key table, and how: the ``iceberg.mode.table.<id>.latest.*`` keys.

Plain Python (no pyiceberg): ``IcebergConfig`` parses these keys wherever the plugin's configuration is read.

A topic's latest table is ``<namespace of its log table>.<log table name>_latest`` unless
``iceberg.mode.table.<id>.latest.name`` names another. It holds one row per (Kafka partition, key): the record
of the highest offset tiered so far, or no row once that record is a tombstone (or a Debezium delete).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backends.configdef import ConfigException
from rsm.errors import RemoteStorageException
from rsm.iceberg.topic_tables import TABLE_PREFIX, TopicTable

LATEST_SUFFIXES = (".latest.enabled", ".latest.name", ".latest.key", ".latest.format", ".latest.buckets")
FORMATS = ("record", "debezium")
KAFKA_KEY = "kafka.key"
DEFAULT_BUCKETS = 16
LATEST_SUFFIX = "_latest"
_NAME = re.compile(r"[A-Za-z0-9_]+")
_FIELD = re.compile(r"value(\.[A-Za-z_][A-Za-z0-9_]*)+")


class NotKeyable(RemoteStorageException):
    """A latest-per-key table's key names a field the topic's records do not have where it must."""


@dataclass(frozen=True)
class LatestTable:
    """The latest-per-key table of one topic: where it is, what identifies a key, how values are read."""

    topic: str
    namespace: str
    name: str
    #: ``("kafka.key",)``: the record's key bytes; else dotted paths into the parsed value (``value.id``).
    key: tuple[str, ...] = (KAFKA_KEY,)
    #: ``record``: the row holds the record (key, value, headers); ``debezium``: the columns of ``after``.
    format: str = "record"
    #: Hash buckets of the key: the table's partitions, so a commit rewrites at most this many files.
    buckets: int = DEFAULT_BUCKETS

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def by_kafka_key(self) -> bool:
        return self.key == (KAFKA_KEY,)


def key_bytes(values: Sequence[Any]) -> bytes | None:
    """The key of the chosen value fields: their values as a JSON array; None when one is null (not keyable)."""
    if any(v is None for v in values):
        return None
    return json.dumps(list(values), default=str, separators=(",", ":")).encode()


def _bool(key: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "false"):
        return t == "true"
    raise ConfigException(f"Invalid value {text!r} for configuration {key}: expected true or false")


def parse_key(key: str, text: str) -> tuple[str, ...]:
    """``kafka.key`` or comma-separated ``value.<field>[.<field>...]`` paths of the parsed value."""
    parts = tuple(p.strip() for p in text.split(","))
    if parts == (KAFKA_KEY,):
        return parts
    for p in parts:
        if not _FIELD.fullmatch(p):
            raise ConfigException(
                f"Invalid value {text!r} for configuration {key}: {p!r} is neither kafka.key nor a field of the "
                "parsed value (value.<field>, e.g. 'value.customer_id, value.region')"
            )
    if len(set(parts)) != len(parts):
        raise ConfigException(f"Invalid value {text!r} for configuration {key}: a field is named twice")
    return parts


def latest_tables(raw: Mapping[str, Any], tables: Mapping[str, TopicTable], namespace: str) -> dict[str, LatestTable]:
    """The topics with ``iceberg.mode.table.<id>.latest.enabled=true``, by topic (``tables``: the topics' log
    tables as ``topic_tables`` parsed them)."""
    ids: dict[str, dict[str, str]] = {}
    for k, v in raw.items():
        if not k.startswith(TABLE_PREFIX):
            continue
        rest = k[len(TABLE_PREFIX) :]
        for suffix in LATEST_SUFFIXES:
            if rest.endswith(suffix) and len(rest) > len(suffix):
                ids.setdefault(rest[: -len(suffix)], {})[suffix[len(".latest.") :]] = str(v)
                break
    out: dict[str, LatestTable] = {}
    for ident, keys in ids.items():
        prefix = f"{TABLE_PREFIX}{ident}.latest"
        if not _bool(f"{prefix}.enabled", keys.get("enabled", "false")):
            continue
        topic = str(raw.get(f"{TABLE_PREFIX}{ident}.topic") or ident)
        log_ns, log_name = (
            tables[topic].identifier if topic in tables else (namespace, re.sub(r"[^A-Za-z0-9_]", "_", topic))
        )
        ns, name = log_ns, log_name + LATEST_SUFFIX
        if keys.get("name"):
            parts = keys["name"].strip().split(".")
            if len(parts) == 1:
                parts = [log_ns, parts[0]]
            if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
                raise ConfigException(
                    f"Invalid value {keys['name']!r} for configuration {prefix}.name: expected <name> or "
                    "<namespace>.<name>, each of letters, digits and '_'"
                )
            ns, name = parts
        if (ns, name) == (log_ns, log_name):
            raise ConfigException(
                f"Invalid value {keys.get('name')!r} for configuration {prefix}.name: it names the topic's log "
                "table; name a table of its own"
            )
        fmt = keys.get("format", "record").strip().lower()
        if fmt not in FORMATS:
            raise ConfigException(
                f"Invalid value {keys['format']!r} for configuration {prefix}.format: expected one of "
                f"{', '.join(FORMATS)}"
            )
        key = parse_key(f"{prefix}.key", keys.get("key", KAFKA_KEY))
        try:
            buckets = int(keys.get("buckets", str(DEFAULT_BUCKETS)))
        except ValueError:
            buckets = 0
        if not 1 <= buckets <= 4096:
            raise ConfigException(
                f"Invalid value {keys.get('buckets')!r} for configuration {prefix}.buckets: expected an integer "
                "from 1 to 4096"
            )
        if topic in out:
            raise ConfigException(f"Invalid configuration {prefix}.enabled: topic {topic!r} is configured twice")
        out[topic] = LatestTable(topic, ns, name, key, fmt, buckets)
    return out
