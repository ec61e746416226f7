"""Which table a topic's rows go to and how that table is partitioned: the ``iceberg.mode.table.<id>.*`` keys.

Plain Python (no pyiceberg): ``IcebergConfig`` parses these keys wherever the plugin's configuration is read.

A topic's table is ``<iceberg.mode.namespace>.<name>``, where the name is the topic's with every character other
than a letter, a digit or ``_`` replaced by ``_`` (``payments.eu-west`` -> ``payments_eu_west``): a dot would
split the name into namespaces, and a hyphen needs quoting in SQL. ``iceberg.mode.table.<id>.name`` names
another table. Two topics that map to one table are refused by the writer (each table records its topic).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backends.configdef import ConfigException

TABLE_PREFIX = "iceberg.mode.table."
TIME_TRANSFORMS = ("hour", "day", "month")
"""Transforms of ``kafka.timestamp`` a partition spec may hold (at most one)."""
DEFAULT_PARTITION_BY = "day"
_TERM = re.compile(r"(?P<t>identity|bucket|truncate)(?:\[(?P<n>\d+)\])?\((?P<f>[A-Za-z_][A-Za-z0-9_.]*)\)")
_NAME = re.compile(r"[A-Za-z0-9_]+")
_LATEST_KEY = re.compile(r".\.latest\.(enabled|name|key|format|buckets)$")


def default_table_name(topic: str) -> str:
    """The topic's table name unless one is configured: each character other than ``[A-Za-z0-9_]`` becomes
    ``_`` (Kafka topic names hold letters, digits, ``.``, ``_`` and ``-``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic)


@dataclass(frozen=True)
class PartitionTerm:
    """One field of a partition spec: ``transform`` of the column ``source`` (``param``: buckets or width)."""

    transform: str
    source: str
    param: int | None = None

    @property
    def field_name(self) -> str:
        """The partition field's name: ``day``, ``hour``, ``month`` as the plugin always named its time field,
        else Iceberg's usual ``<column>``, ``<column>_bucket_<n>``, ``<column>_trunc_<w>`` (dots as ``_``)."""
        if self.transform in TIME_TRANSFORMS:
            return self.transform
        column = self.source.replace(".", "_")
        if self.transform == "bucket":
            return f"{column}_bucket_{self.param}"
        if self.transform == "truncate":
            return f"{column}_trunc_{self.param}"
        return column

    def __str__(self) -> str:
        if self.transform in TIME_TRANSFORMS:
            return self.transform
        param = f"[{self.param}]" if self.param is not None else ""
        return f"{self.transform}{param}({self.source})"


def parse_partition_by(key: str, text: str) -> tuple[PartitionTerm, ...]:
    """``hour``, ``day`` or ``month`` (of ``kafka.timestamp``) and any of ``identity(<column>)``,
    ``bucket[<n>](<column>)``, ``truncate[<w>](<column>)``, comma-separated; ``none``: unpartitioned."""
    text = text.strip()
    if text.lower() == "none":
        return ()
    terms: list[PartitionTerm] = []
    for part in (p.strip() for p in text.split(",")):
        if part in TIME_TRANSFORMS:
            terms.append(PartitionTerm(part, "kafka.timestamp"))
            continue
        m = _TERM.fullmatch(part)
        if m is None:
            raise ConfigException(
                f"Invalid value {text!r} for configuration {key}: {part!r} is none of hour, day, month, "
                "identity(<column>), bucket[<n>](<column>), truncate[<width>](<column>) (e.g. 'day, "
                "bucket[16](value.customer_id)'), nor 'none'"
            )
        transform, n = m["t"], m["n"]
        if (transform == "identity") != (n is None) or (n is not None and int(n) < 1):
            what = "takes no [n]" if transform == "identity" else "needs a positive [n]"
            raise ConfigException(f"Invalid value {text!r} for configuration {key}: {transform} {what}")
        terms.append(PartitionTerm(transform, m["f"], int(n) if n is not None else None))
    if sum(t.transform in TIME_TRANSFORMS for t in terms) > 1:
        raise ConfigException(f"Invalid value {text!r} for configuration {key}: name at most one of hour, day, month")
    names = [t.field_name for t in terms]
    if len(set(names)) != len(names):
        raise ConfigException(f"Invalid value {text!r} for configuration {key}: a partition field is named twice")
    return tuple(terms)


@dataclass(frozen=True)
class TopicTable:
    """The table of one topic: namespace, name, and the partition spec configured (None: not configured)."""

    topic: str
    namespace: str
    name: str
    partition_by: tuple[PartitionTerm, ...] | None = None
    #: Whether the name was configured (a table the plugin made under the topic's own name before the mapping
    #: existed is found again only when it was not).
    named: bool = False

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def _table_name(key: str, text: str, namespace: str) -> tuple[str, str]:
    parts = text.strip().split(".")
    if len(parts) == 1:
        parts = [namespace, parts[0]]
    if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
        raise ConfigException(
            f"Invalid value {text!r} for configuration {key}: expected <name> or <namespace>.<name>, each of "
            "letters, digits and '_'"
        )
    return parts[0], parts[1]


def topic_tables(raw: Mapping[str, Any], namespace: str) -> dict[str, TopicTable]:
    """The topics with ``iceberg.mode.table.<id>.*`` keys, by topic name."""
    ids: dict[str, dict[str, str]] = {}
    for k, v in raw.items():
        if not k.startswith(TABLE_PREFIX):
            continue
        rest = k[len(TABLE_PREFIX) :]
        if _LATEST_KEY.search(rest):
            continue  # a key of the latest-per-key table (rsm.iceberg.latest_config)
        for suffix in (".topic", ".name", ".partition.by"):
            if rest.endswith(suffix) and len(rest) > len(suffix):
                ids.setdefault(rest[: -len(suffix)], {})[suffix[1:]] = str(v)
                break
    out: dict[str, TopicTable] = {}
    for ident, keys in ids.items():
        topic = keys.get("topic") or ident
        key = f"{TABLE_PREFIX}{ident}"
        if topic in out:
            raise ConfigException(f"Invalid configuration {key}.topic: topic {topic!r} is configured twice")
        ns, name = (
            _table_name(f"{key}.name", keys["name"], namespace)
            if keys.get("name")
            else (namespace, default_table_name(topic))
        )
        spec = parse_partition_by(f"{key}.partition.by", keys["partition.by"]) if "partition.by" in keys else None
        out[topic] = TopicTable(topic, ns, name, spec, named=bool(keys.get("name")))
    return out


def table_of(tables: Mapping[str, TopicTable], topic: str, namespace: str) -> TopicTable:
    """The topic's table: as configured, else ``<namespace>.<default_table_name(topic)>``."""
    return tables.get(topic) or TopicTable(topic, namespace, default_table_name(topic))
