"""Naming one tiered segment on the command line: an object key, ``topic/partition/offset`` or a segment id."""

from __future__ import annotations

import re

from rsm.core.catalog import MANIFEST_SUFFIX, TieredSegment, parse_manifest_key
from rsm.core.manager import RemoteStorageManager
from rsm.errors import RemoteResourceNotFoundException
from rsm.metadata import is_kafka_uuid

_TPO = re.compile(r"^(?P<topic>.+)/(?P<partition>\d+)/(?P<offset>\d+)$")
_OBJECT_SUFFIXES = (MANIFEST_SUFFIX, ".log", ".indexes")


def resolve_segment(manager: RemoteStorageManager, name: str) -> TieredSegment:
    prefix = manager.config["key.prefix"]
    for suffix in _OBJECT_SUFFIXES:
        if name.endswith(suffix):
            key = name[: -len(suffix)] + MANIFEST_SUFFIX
            seg = parse_manifest_key(key, prefix) or parse_manifest_key(prefix + key, prefix)
            if seg is not None:
                return seg
            raise RemoteResourceNotFoundException(
                f"{name} is not a segment object key under key.prefix {prefix!r} "
                f"(expected <topic>-<topicId>/<partition>/<20-digit offset>-<segmentId>{suffix})"
            )
    catalog = manager.catalog()
    m = _TPO.match(name)
    if m:
        topic, partition, offset = m["topic"], int(m["partition"]), int(m["offset"])
        candidates = [s for s in catalog.segments(topic, partition) if s.start_offset <= offset]
        for seg in reversed(candidates):  # the newest segment starting at or before the offset
            if manager.segment_metadata(seg).end_offset >= offset:
                return seg
        raise RemoteResourceNotFoundException(
            f"no tiered segment of {topic}-{partition} holds offset {offset}; "
            f"list them with: kts ls {topic}/{partition}"
        )
    if is_kafka_uuid(name):
        for seg in catalog.segments():
            if seg.segment_id == name:
                return seg
        raise RemoteResourceNotFoundException(f"no tiered segment has id {name}; list them with: kts ls")
    raise RemoteResourceNotFoundException(
        f"{name!r} names no segment: give an object key, topic/partition/offset or a segment id"
    )


def parse_scope(scope: str | None) -> tuple[str | None, int | None]:
    """``topic`` or ``topic/partition`` (None: everything)."""
    if not scope:
        return None, None
    topic, sep, partition = scope.rpartition("/")
    if sep and partition.isdigit():
        return topic, int(partition)
    return scope, None
