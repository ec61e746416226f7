"""The options of a ``kafka-tiered`` read, parsed once and validated before any listing starts.

Two kinds of keys arrive mixed in one map: the reader's own (what to read) and the plugin's (where the objects
are and how to decrypt them). Every key that is not a reader option goes to the plugin, so the storage and
encryption keys are exactly the broker's. Keys are case-insensitive, as everywhere in Spark (PySpark hands the
options over with lower-cased keys): reader options are matched lower-cased, and plugin keys are given back
their declared spelling, key-pair ids included (restored from the ids listed in ``encryption.key.pairs``).
A key nothing reads fails the read when it is a near miss of a reader option (a mistyped bound would otherwise
read the wrong data) and is logged with the closest known key otherwise, as the plugin does. ``config.file``
names a properties file readable on every executor: a broker's ``server.properties`` (only its
``rsm.config.*`` keys are taken, prefix stripped, as Kafka does) or a plugin-only file; options given
directly override the file. Secrets never leave this module in clear: ``repr`` and :func:`redact` mask them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsm.core.config_providers import resolve_variables
from rsm.core.known_keys import closest_name, known_key_names, unknown_keys
from rsm.core.parallel import DEFAULT_CONCURRENCY
from rsm.errors import ConfigException
from rsm.spark.option_values import (
    EARLIEST,
    LATEST,
    ReadOptionsError,
    assign_option,
    bool_option,
    int_option,
    isolation_option,
    offsets_option,
    option_name,
)

__all__ = [
    "TieredReadOptions",
    "canonical_plugin_keys",
    "plugin_config_from",
    "redact",
]

BROKER_PREFIX = "rsm.config."
_SECRET = re.compile(
    r"secret|password|passphrase|private|token|credential|access\.key|sas|connection\.string|\.pem|catalog\.uri"
)
REDACTED = "*****(redacted)"

#: The reader's own option names, lower case: every lookup lower-cases the key first.
READER_KEYS = frozenset(
    {
        "topic",
        "subscribe",
        "assign",
        "topicpattern",
        "subscribepattern",
        "partitions",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "isolationlevel",
        "kafka.isolation.level",
        "includeheaders",
        "failoncorruption",
        "maxslicebytes",
        "maxbatchbytes",
        "rowsperbatch",
        "planningconcurrency",
        "icebergread",
        "config.file",
        "path",
    }
)


#: Options of Spark's Kafka source that mean nothing for a batch read of tiered data: accepted (so a job written
#: for that source runs unchanged) and logged as ignored. ``kafka.*`` consumer settings are ignored likewise.
KAFKA_SOURCE_IGNORED = frozenset(
    {
        "failondataloss",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "minpartitions",
        "maxrecordsperpartition",
        "groupidprefix",
        "kafkaconsumer.polltimeoutms",
        "fetchoffset.numretries",
        "fetchoffset.retryintervalms",
        "startingoffsetsbytimestampstrategy",
    }
)

#: Options of Spark's Kafka source that would change *what* is read but are not supported: refused, naming ours.
KAFKA_SOURCE_REFUSED = {
    "startingoffsetsbytimestamp": "give startingTimestamp (one timestamp for every partition) instead",
    "endingoffsetsbytimestamp": "give endingTimestamp (one timestamp for every partition) instead",
}

log = logging.getLogger(__name__)


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
    broker = any(k.startswith(BROKER_PREFIX) for k in props)
    try:  # Kafka's config providers (${file:...}, ${dir:...}, ${env:...}), resolved as the broker does
        props = resolve_variables(props, path, [k for k in props if k.startswith(BROKER_PREFIX) or not broker])
    except ConfigException as e:
        raise ReadOptionsError(f"config.file: {e}") from None
    if broker:
        return {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    return props


def _lowered(options: Mapping[str, Any]) -> dict[str, str]:
    """Keys lower-cased; one key given twice in different cases with different values is refused."""
    out: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key, value in options.items():
        low = str(key).lower()
        if low in out and out[low] != str(value):
            # the values tell which copy is stale, but not a secret's: error messages end up in driver logs
            shown = "" if _SECRET.search(low) else f" ({out[low]!r} and {str(value)!r})"
            raise ReadOptionsError(
                f"option {option_name(low)} is given twice, as {spelled[low]!r} and {key!r}, with different values"
                f"{shown}; option keys are case-insensitive, give it once"
            )
        out[low], spelled[low] = str(value), str(key)
    return out


def _id_templates() -> list[tuple[str, str]]:
    """``(before, after)`` around ``<id>`` of every declared key with a key-pair id in it."""
    return [tuple(n.split("<id>", 1)) for n in known_key_names() if "<id>" in n]  # type: ignore[misc]


def canonical_plugin_keys(config: Mapping[str, str], context: Mapping[str, str] | None = None) -> dict[str, str]:
    """Plugin keys in their declared spelling, whatever case they came in.

    The plugin reads its keys case-sensitively, as Kafka does, but Spark lower-cases option keys: a declared
    key is matched ignoring case, and a key-pair id inside ``encryption.key.pairs.<id>.*`` gets back the case it
    has in the ``encryption.key.pairs`` list (values keep their case). Keys the plugin does not declare (a custom
    backend's ``storage.*`` keys) pass unchanged. ``context`` is configuration merged under ``config`` (a
    ``config.file``): its backend class and key-pair ids count when ``config`` lacks them.
    """
    lowered = {k.lower(): v for k, v in (context or {}).items()} | {k.lower(): v for k, v in config.items()}
    backend = lowered.get("storage.backend.class") or "filesystem"
    declared = {n.lower(): n for n in known_key_names(backend) if "<id>" not in n}
    ids: dict[str, str | None] = {}
    for raw_id in [*lowered.get("encryption.key.pairs", "").split(","), lowered.get("encryption.key.pair.id", "")]:
        key_id = raw_id.strip()
        if key_id:
            previous = ids.setdefault(key_id.lower(), key_id)
            if previous is not None and previous != key_id:
                ids[key_id.lower()] = None  # two ids differ only in case: a lower-cased key cannot tell them apart
    templates = _id_templates()
    out: dict[str, str] = {}
    for key, value in config.items():
        low = key.lower()
        name = declared.get(low, key)
        if low not in declared:
            for before, after in templates:
                middle = low[len(before) : len(low) - len(after)]
                if low.startswith(before) and low.endswith(after) and middle and "." not in middle:
                    if middle not in ids:
                        break  # an id not on the key ring: left as given, the plugin reports it
                    key_id = ids[middle]
                    if key_id is None:
                        raise ReadOptionsError(
                            f"option {key!r} names a key pair whose id differs from another only in case; Spark "
                            "lower-cases option keys, so give these keys through config.file"
                        )
                    name = before + key_id + after
                    break
        if name in out and out[name] != value:
            raise ReadOptionsError(
                f"plugin key {name!r} is given twice in different cases with different values; give it once"
            )
        out[name] = value
    return out


def _plugin_options(options: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (from ``config.file``) overlaid with the options meant for the plugin, in its spelling, with
    Kafka-source leftovers and option keys nothing reads dropped (``base``'s own are left to the plugin).

    A key nothing reads fails when it is closest to one of the reader's own options (``startingOffset``,
    ``partition``), since ignoring it would silently read other data; otherwise it is logged once with the
    closest known key and dropped, so the plugin does not repeat the warning on every executor.
    """
    given: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in READER_KEYS:
            continue
        if low in KAFKA_SOURCE_REFUSED:
            raise ReadOptionsError(
                f"option {option_name(low)} of Spark's Kafka source is not supported by kafka-tiered: "
                f"{KAFKA_SOURCE_REFUSED[low]}"
            )
        if low in KAFKA_SOURCE_IGNORED or (low.startswith("kafka.") and low != "kafka.isolation.level"):
            log.warning("option %s of Spark's Kafka source means nothing for tiered data and is ignored", low)
            continue
        given[key] = str(value)  # as spelled: a custom backend's own keys are not ours to re-case
    overlay = canonical_plugin_keys(given, base)
    config = {**base, **overlay}
    unread = {u.key: u for u in unknown_keys(config) if u.key in overlay}
    if not unread:
        return config
    plugin_names = known_key_names(config.get("storage.backend.class") or "filesystem")
    for key, unknown in unread.items():
        closest = closest_name(key.lower(), sorted(READER_KEYS) + [n.lower() for n in plugin_names])
        if closest in READER_KEYS:
            raise ReadOptionsError(
                f"option {key!r} is not an option of kafka-tiered (nor a plugin key); "
                f"did you mean {option_name(closest)}?"
            )
        log.warning("option %r is ignored by kafka-tiered: %s", key, unknown.message())
        del config[key]
    return config


def plugin_config_from(options: Mapping[str, str]) -> dict[str, str]:
    """The plugin's configuration: ``config.file`` first, then every non-reader option on top."""
    lowered = _lowered(options)
    config: dict[str, str] = {}
    if lowered.get("config.file"):
        config.update(canonical_plugin_keys(_read_properties(lowered["config.file"])))
    config = _plugin_options(options, config)
    if "storage.backend.class" not in config:
        raise ReadOptionsError(
            "no storage is configured for the kafka-tiered read: give the plugin's storage options "
            "(storage.backend.class, ...) or config.file pointing at server.properties or a plugin properties file"
        )
    return config


@dataclass(frozen=True)
class TieredReadOptions:
    """What to read. ``plugin_config`` holds secrets and is excluded from ``repr``."""

    plugin_config: dict[str, str] = field(repr=False)
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    partitions: frozenset[int] | None = None
    assigned: dict[str, frozenset[int]] | None = None  # Spark's ``assign``: these partitions of each topic only
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
    planning_concurrency: int = DEFAULT_CONCURRENCY
    #: Iceberg-mode segments read as their table's rows (True) or as batches rebuilt from them (``batches``).
    iceberg_rows: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> TieredReadOptions:
        o = _lowered(options)
        plugin_config = plugin_config_from(options)  # first: an option nothing reads is reported before any other check
        names = o.get("topic") or o.get("subscribe") or ""
        topics = tuple(t.strip() for t in names.split(",") if t.strip())
        pattern = o.get("topicpattern") or o.get("subscribepattern")
        assigned = assign_option(o["assign"]) if o.get("assign", "").strip() else None
        if sum((bool(topics), bool(pattern), assigned is not None)) != 1:
            raise ReadOptionsError(
                "give exactly one of topic (a name or a comma list; subscribe in Spark's Kafka source), "
                'topicPattern (a regular expression; subscribePattern) and assign (JSON like {"orders": [0, 1]})'
            )
        if assigned is not None:
            topics = tuple(assigned)
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
        default_start, starting = offsets_option(o, "startingoffsets", EARLIEST)
        default_end, ending = offsets_option(o, "endingoffsets", LATEST)
        if default_start == LATEST:
            raise ReadOptionsError(
                "startingOffsets=latest would read nothing from tiered storage; use earliest or JSON"
            )
        isolation = isolation_option(o)
        return cls(
            plugin_config=plugin_config,
            topics=topics,
            topic_pattern=pattern or None,
            partitions=partitions,
            assigned=assigned,
            default_start=default_start,
            default_end=default_end,
            starting_offsets=starting,
            ending_offsets=ending,
            starting_timestamp=int_option(o, "startingtimestamp", None, 0),
            ending_timestamp=int_option(o, "endingtimestamp", None, 0),
            read_committed=isolation == "read_committed",
            include_headers=bool_option(o, "includeheaders", False),
            fail_on_corruption=bool_option(o, "failoncorruption", True),
            max_slice_bytes=int_option(o, "maxslicebytes", 64 << 20, 1) or 64 << 20,
            max_batch_bytes=int_option(o, "maxbatchbytes", 64 << 20, 1024) or 64 << 20,
            rows_per_batch=int_option(o, "rowsperbatch", 8192, 1) or 8192,
            planning_concurrency=int_option(o, "planningconcurrency", DEFAULT_CONCURRENCY, 1) or DEFAULT_CONCURRENCY,
            iceberg_rows=_iceberg_read(o),
        )

    def wants_partition(self, topic: str, partition: int) -> bool:
        """Whether ``partitions`` and ``assign`` let ``topic``'s ``partition`` in."""
        if self.partitions is not None and partition not in self.partitions:
            return False
        return self.assigned is None or partition in self.assigned.get(topic, frozenset())

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


def _iceberg_read(o: Mapping[str, str]) -> bool:
    """``icebergRead``: ``rows`` (default) reads an Iceberg-mode segment's rows; ``batches`` rebuilds its batches."""
    value = o.get("icebergread", "rows").strip().lower()
    if value not in ("rows", "batches"):
        raise ReadOptionsError(
            f"icebergRead must be rows (read Iceberg-mode segments as their table's rows, the default) or batches "
            f"(rebuild their Kafka batches and decode them, as a broker fetch does), got {o['icebergread']!r}"
        )
    return value == "rows"
