"""What a command works on: a scope (everything, a topic, or ``topic/partition``) or one segment (an object key,
``topic/partition/offset`` or a segment id).

A malformed scope or segment name is a usage error (exit 2). A well-formed one that matches nothing is an error
too (exit 1) that says what does exist, because a scrub, a listing or a rotation of nothing must never look like
a success: ``kts verify nosuch`` (a typo) reporting "0 damaged objects" would be read as a pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import click

from rsm.cli.settings import store_label
from rsm.core.catalog import MANIFEST_SUFFIX, TieredSegment, parse_manifest_key
from rsm.core.manager import RemoteStorageManager
from rsm.metadata import is_kafka_uuid

# Kafka's rule for topic names (Topic.validate): ASCII letters, digits, '.', '_' and '-', at most 249 of them.
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_OBJECT_SUFFIXES = (MANIFEST_SUFFIX, ".log", ".indexes")


class NothingMatched(click.ClickException):
    """A well-formed scope or segment name that names nothing tiered (exit 1, like a failed check)."""

    exit_code = 1


@dataclass(frozen=True)
class Scope:
    """Everything (no topic), a topic, or one partition of it."""

    topic: str | None = None
    partition: int | None = None


def _topic(name: str, text: str, param: str) -> str:
    if not _TOPIC.match(name) or name in (".", ".."):
        raise click.BadParameter(
            f"{text!r}: {name!r} is not a Kafka topic name (letters, digits, '.', '_' and '-', at most 249)",
            param_hint=param,
        )
    return name


def _number(part: str, what: str, text: str, param: str) -> int:
    if not part.isascii() or not part.isdigit():
        raise click.BadParameter(f"{text!r}: the {what} {part!r} is not a number", param_hint=param)
    return int(part)


def parse_scope(text: str | None) -> Scope:
    """``TOPIC`` or ``TOPIC/PARTITION``; None or empty: everything. Anything else is a usage error."""
    if not text:
        return Scope()
    parts = text.split("/")
    if len(parts) > 2:
        raise click.BadParameter(
            f"{text!r} is not TOPIC or TOPIC/PARTITION (one segment is named with `kts inspect` or `kts cat`)",
            param_hint="SCOPE",
        )
    topic = _topic(parts[0], text, "SCOPE")
    return Scope(topic, _number(parts[1], "partition", text, "SCOPE") if len(parts) == 2 else None)


def _where(manager: RemoteStorageManager) -> str:
    return f"under key.prefix {manager.config['key.prefix']!r} in {store_label(manager.config)}"


def _nothing(manager: RemoteStorageManager, scope: Scope) -> NothingMatched:
    """The error for a scope that matched nothing, naming what exists instead (one more listing, on this path
    only)."""
    catalog = manager.catalog()
    if scope.topic is None:
        return NothingMatched(
            f"no tiered segments {_where(manager)}; check key.prefix and storage.* (the broker's rsm.config.* "
            f"values), or nothing has been tiered yet"
        )
    if scope.partition is not None:
        partitions = sorted({s.partition for s in catalog.segments(scope.topic)})
        if partitions:
            return NothingMatched(
                f"partition {scope.partition} of topic {scope.topic!r} has nothing tiered {_where(manager)}; "
                f"its partitions with tiered segments: {', '.join(map(str, partitions))}"
            )
    topics = list(catalog.topics())
    existing = ", ".join(topics) if topics else "none"
    return NothingMatched(
        f"topic {scope.topic!r} has no tiered segments {_where(manager)}; topics with tiered segments: {existing}"
    )


def select_segments(manager: RemoteStorageManager, scope: Scope) -> list[TieredSegment]:
    """The segments in scope, in order; never empty (``NothingMatched`` says what exists instead)."""
    found = manager.catalog().segments(scope.topic, scope.partition)
    if not found:
        raise _nothing(manager, scope)
    return found


def iter_selected(manager: RemoteStorageManager, scope: Scope) -> Iterator[TieredSegment]:
    """``select_segments``, lazily: a caller reads the first segments' manifests while later listing pages still
    arrive (``SegmentCatalog.iter_segments``). Raises ``NothingMatched`` at the end if nothing was in scope."""
    empty = True
    for seg in manager.catalog().iter_segments(scope.topic, scope.partition):
        empty = False
        yield seg
    if empty:
        raise _nothing(manager, scope)


def resolve_segment(manager: RemoteStorageManager, name: str) -> TieredSegment:
    """One segment by object key, ``topic/partition/offset`` or segment id. Reads manifests (for the offsets of
    ``topic/partition/offset``) without unwrapping a data key."""
    catalog = manager.catalog()
    prefix = manager.config["key.prefix"]
    for suffix in _OBJECT_SUFFIXES:
        if name.endswith(suffix):
            key = name[: -len(suffix)] + MANIFEST_SUFFIX
            seg = parse_manifest_key(key, prefix) or parse_manifest_key(prefix + key, prefix)
            if seg is None:
                raise click.BadParameter(
                    f"{name!r} is not a segment object key under key.prefix {prefix!r} "
                    f"(expected <topic>-<topicId>/<partition>/<20-digit offset>-<segmentId>{suffix})",
                    param_hint="SEGMENT",
                )
            if seg not in catalog.partition_segments(seg.topic_id_partition):
                raise NothingMatched(f"no tiered segment has the manifest {seg.keys.manifest} {_where(manager)}")
            return seg
    if is_kafka_uuid(name):
        for seg in catalog.segments():
            if seg.segment_id == name:
                return seg
        raise NothingMatched(f"no tiered segment has id {name} {_where(manager)}; list them with: kts ls")
    parts = name.split("/")
    if len(parts) != 3:
        raise click.BadParameter(
            f"{name!r} names no segment: give an object key, TOPIC/PARTITION/OFFSET or a segment id",
            param_hint="SEGMENT",
        )
    scope = Scope(_topic(parts[0], name, "SEGMENT"), _number(parts[1], "partition", name, "SEGMENT"))
    offset = _number(parts[2], "offset", name, "SEGMENT")
    candidates = [s for s in select_segments(manager, scope) if s.start_offset <= offset]
    for seg in reversed(candidates):  # the newest segment starting at or before the offset
        if catalog.metadata(seg)[1].end_offset >= offset:
            return seg
    raise NothingMatched(
        f"no tiered segment of {scope.topic}-{scope.partition} holds offset {offset}; "
        f"list them with: kts ls {scope.topic}/{scope.partition}"
    )
