"""The options of a ``kafka-tiered`` read, parsed once and validated before any listing starts.

Two kinds of keys arrive mixed in one map (Spark hands ``.option(...)`` values over lower-cased): the reader's
own (what to read) and the plugin's (where the objects are and how to decrypt them). Every key that is not a
reader option goes to the plugin, so the storage and encryption keys are exactly the broker's. ``config.file``
names a properties file readable on every executor: a broker's ``server.properties`` (only its
``rsm.config.*`` keys are taken, prefix stripped, as Kafka does) or a plugin-only file; options given
directly override the file. Secrets never leave this module in clear: ``repr`` and :func:`redact` mask them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsm.errors import RemoteStorageException

__all__ = ["EARLIEST", "LATEST", "ReadOptionsError", "TieredReadOptions", "plugin_config_from", "redact"]

#: Spark's Kafka source spells "from the first offset" as -2 and "to the end" as -1 in offset JSON.
EARLIEST = -2
LATEST = -1
BROKER_PREFIX = "rsm.config."
_SECRET = re.compile(r"secret|password|passphrase|private|token|credential|access\.key|sas|connection\.string|\.pem")
REDACTED = "*****(redacted)"

#: The reader's own option names (lower case; Spark lower-cases option keys).
READER_KEYS = frozenset(
    {
        "topic",
        "subscribe",
        "topicpattern",
        "subscribepattern",
        "partitions",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "isolationlevel",
        "includeheaders",
        "failoncorruption",
        "maxslicebytes",
        "maxbatchbytes",
        "rowsperbatch",
        "config.file",
        "path",
    }
)


_DISPLAY = {
    k.lower(): k
    for k in (
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "includeHeaders",
        "failOnCorruption",
        "maxSliceBytes",
        "maxBatchBytes",
        "rowsPerBatch",
    )
}


def _name(key: str) -> str:
    """The option as users spell it (Spark hands keys over lower-cased)."""
    return _DISPLAY.get(key, key)


class ReadOptionsError(RemoteStorageException):
    """An option of a ``kafka-tiered`` read is missing or malformed; the message names it and its expected form."""


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to print: values of keys that look like secrets (keys, passwords, tokens) are masked."""
    return {k: (REDACTED if _SECRET.search(k.lower()) else v) for k, v in config.items()}


def _read_properties(path: str) -> dict[str, str]:
    import javaproperties

    try:
        with open(path, encoding="utf-8") as f:
            props: dict[str, str] = javaproperties.load(f)
    except OSError as e:
        raise ReadOptionsError(
            f"config.file {path!r} cannot be read ({e.strerror}); it must exist on the driver and on every executor"
        ) from None
    if any(k.startswith(BROKER_PREFIX) for k in props):
        return {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    return props


def plugin_config_from(options: Mapping[str, str]) -> dict[str, str]:
    """The plugin's configuration: ``config.file`` first, then every non-reader option on top."""
    lowered = {k.lower(): v for k, v in options.items()}
    config: dict[str, str] = {}
    if lowered.get("config.file"):
        config.update(_read_properties(lowered["config.file"]))
    config.update({k: str(v) for k, v in options.items() if k.lower() not in READER_KEYS})
    if "storage.backend.class" not in config:
        raise ReadOptionsError(
            "no storage is configured for the kafka-tiered read: give the plugin's storage options "
            "(storage.backend.class, ...) or config.file pointing at server.properties or a plugin properties file"
        )
    return config


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ReadOptionsError(f"option {_name(key)} must be true or false, got {raw!r}")
    return text == "true"


def _int(options: Mapping[str, str], key: str, default: int | None, minimum: int | None = None) -> int | None:
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ReadOptionsError(f"option {_name(key)} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ReadOptionsError(f"option {_name(key)} must be at least {minimum}, got {value}")
    return value


def _offsets(options: Mapping[str, str], key: str, default: int) -> tuple[int, dict[str, dict[int, int]]]:
    """``earliest``/``latest`` or Spark's per-partition JSON ``{"topic": {"0": 23, "1": -2}}``."""
    raw = options.get(key)
    if raw is None or raw.strip() in ("", "earliest" if default == EARLIEST else "latest"):
        return default, {}
    text = raw.strip()
    if text in ("earliest", "latest"):
        return (EARLIEST if text == "earliest" else LATEST), {}
    try:
        parsed = json.loads(text)
        per_topic = {
            str(topic): {int(p): int(o) for p, o in parts.items()}
            for topic, parts in parsed.items()  # type: ignore[union-attr]
        }
    except (ValueError, AttributeError, TypeError):
        raise ReadOptionsError(
            f'option {_name(key)} must be "earliest", "latest" or JSON like {{"orders": {{"0": 23, "1": -2}}}}, '
            f"got {raw!r}"
        ) from None
    return default, per_topic


@dataclass(frozen=True)
class TieredReadOptions:
    """What to read. ``plugin_config`` holds secrets and is excluded from ``repr``."""

    plugin_config: dict[str, str] = field(repr=False)
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    partitions: frozenset[int] | None = None
    default_start: int = EARLIEST
    default_end: int = LATEST
    starting_offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    ending_offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    read_committed: bool = False
    include_headers: bool = False
    fail_on_corruption: bool = True
    max_slice_bytes: int = 64 << 20
    max_batch_bytes: int = 64 << 20
    rows_per_batch: int = 8192

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> TieredReadOptions:
        o = {k.lower(): str(v) for k, v in options.items()}
        names = o.get("topic") or o.get("subscribe") or ""
        topics = tuple(t.strip() for t in names.split(",") if t.strip())
        pattern = o.get("topicpattern") or o.get("subscribepattern")
        if bool(topics) == bool(pattern):
            raise ReadOptionsError(
                "give exactly one of topic (a name or a comma list) and topicPattern (a regular expression)"
            )
        if pattern:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ReadOptionsError(f"topicPattern {pattern!r} is not a valid regular expression: {e}") from None
        partitions = None
        if o.get("partitions", "").strip():
            try:
                partitions = frozenset(int(p) for p in o["partitions"].split(",") if p.strip())
            except ValueError:
                raise ReadOptionsError(
                    f"partitions must be a comma list of integers, got {o['partitions']!r}"
                ) from None
        default_start, starting = _offsets(o, "startingoffsets", EARLIEST)
        default_end, ending = _offsets(o, "endingoffsets", LATEST)
        if default_start == LATEST:
            raise ReadOptionsError(
                "startingOffsets=latest would read nothing from tiered storage; use earliest or JSON"
            )
        isolation = o.get("isolationlevel", "read_uncommitted").strip().lower()
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ReadOptionsError(f"isolationLevel must be read_uncommitted or read_committed, got {isolation!r}")
        return cls(
            plugin_config=plugin_config_from(options),
            topics=topics,
            topic_pattern=pattern or None,
            partitions=partitions,
            default_start=default_start,
            default_end=default_end,
            starting_offsets=starting,
            ending_offsets=ending,
            starting_timestamp=_int(o, "startingtimestamp", None, 0),
            ending_timestamp=_int(o, "endingtimestamp", None, 0),
            read_committed=isolation == "read_committed",
            include_headers=_bool(o, "includeheaders", False),
            fail_on_corruption=_bool(o, "failoncorruption", True),
            max_slice_bytes=_int(o, "maxslicebytes", 64 << 20, 1) or 64 << 20,
            max_batch_bytes=_int(o, "maxbatchbytes", 64 << 20, 1024) or 64 << 20,
            rows_per_batch=_int(o, "rowsperbatch", 8192, 1) or 8192,
        )

    def matches_topic(self, topic: str) -> bool:
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def offset_range(self, topic: str, partition: int) -> tuple[int, int]:
        """``(first, last)`` inclusive offsets asked for; ``last`` is huge for ``latest``."""
        start = self.starting_offsets.get(topic, {}).get(partition, self.default_start)
        end = self.ending_offsets.get(topic, {}).get(partition, self.default_end)
        first = 0 if start == EARLIEST else start
        last = (1 << 63) - 1 if end == LATEST else end - 1
        return first, last

    def redacted_config(self) -> dict[str, str]:
        return redact(self.plugin_config)
