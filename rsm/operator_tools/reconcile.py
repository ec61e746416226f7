"""What the cluster knows against what the store holds: the reconciliation ``kts gc --bootstrap-server`` lists and
``--watch`` exports as metrics.

The cluster's record is its ``__remote_log_metadata`` topic (``rsm.kafka.remote_log_metadata``): for every segment
a broker started to copy, its states up to the last one, and the ids of the topics the cluster still has. Each
segment the record knows is tied to its objects in the store by its segment id (a Kafka Uuid, unique per copy
attempt) through the key layout (``parse_object_key``). From that:

- ``dead-topic-segment``: a segment of a topic id the record knows and the cluster no longer has (a topic
  deleted while the store refused deletes); ``dead-topic-iceberg-segment`` when its manifest says it is an
  Iceberg-mode segment, whose records are rows of the topic's table;
- ``deleted-segment``: a segment whose last state is DELETE_SEGMENT_FINISHED but whose objects are still there;
- ``dead-topic-latest-rows``: the rows of such a topic id in its latest-per-key table
  (``rsm.operator_tools.latest_rows``), with the evidence of a dead topic's segments but its age;
- ``unfinished-copy``: a segment whose last state is COPY_SEGMENT_STARTED, started longer ago than the grace
  period (a copy killed midway);
- lost: a segment whose last state is COPY_SEGMENT_FINISHED, of a live topic, whose manifest or ``.indexes`` (or
  ``.log``, unless it is an Iceberg-mode segment) the store lacks, and still so when the record is read again
  after the listing (retention may delete a segment between the first read and the listing). The cluster serves
  reads from it: data loss.

Each item carries the evidence ``rsm.deletion.rules`` asks of its kind: ``RECORD_COMPLETE`` when the record was
read whole, ``TOPIC_GONE_CONFIRMED`` for a dead topic's segment, ``STORE_AGE``. The first three are removed by
``delete_garbage`` on that evidence: the segment's objects move into the quarantine together (an Iceberg-mode
segment's rows go first, through the table writer, when ``iceberg.mode.delete.rows.enabled``), and only when every
object is older than the grace period. Objects of segments the record does not know are
never listed here (another cluster's, or newer than the read): they only count as unaccounted bytes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from backends.base import ObjectInfo, StorageBackendException
from rsm.core.object_keys import Suffix, parse_object_key, segment_keys
from rsm.deletion.rules import STORE_AGE, Evidence
from rsm.errors import RemoteStorageException
from rsm.formats.iceberg import iceberg_format
from rsm.kafka.remote_log_metadata import (
    PartitionDeleteRecord,
    RemoteLogMetadataRecord,
    SegmentRecord,
    SegmentSnapshotRecord,
    SegmentUpdateRecord,
)
from rsm.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rsm.operator_tools.garbage import GarbageItem
from rsm.operator_tools.latest_rows import DEAD_TOPIC_LATEST, find_latest_rows

if TYPE_CHECKING:
    from rsm.core.manager import RemoteStorageManager

DEAD_TOPIC_SEGMENT = "dead-topic-segment"
DEAD_TOPIC_ICEBERG = "dead-topic-iceberg-segment"
DELETED_SEGMENT = "deleted-segment"
UNFINISHED_COPY = "unfinished-copy"
CLUSTER_KINDS = (DEAD_TOPIC_SEGMENT, DEAD_TOPIC_ICEBERG, DEAD_TOPIC_LATEST, DELETED_SEGMENT, UNFINISHED_COPY)


@dataclass(frozen=True)
class TrackedSegment:
    """A segment as the record last described it: its metadata (custom metadata from the copy's finish), its last
    state and when the copy started (the event time of its first record)."""

    metadata: RemoteLogSegmentMetadata
    state: RemoteLogSegmentState
    started_ms: int


def segments_from_records(records: Iterable[RemoteLogMetadataRecord]) -> dict[str, TrackedSegment]:
    """The last state of every segment the records describe, by segment id. An update of a segment whose first
    record is gone (the topic's retention was changed from its default, infinite) is skipped: without its start
    offset the segment cannot be named."""
    out: dict[str, TrackedSegment] = {}
    for record in records:
        if isinstance(record, SegmentRecord):
            meta = record.metadata
            out[meta.remote_log_segment_id.id] = TrackedSegment(meta, meta.state, meta.event_timestamp_ms)
        elif isinstance(record, SegmentUpdateRecord):
            seen = out.get(record.segment_id.id)
            if seen is None:
                continue
            meta = seen.metadata
            if record.custom_metadata is not None:
                meta = replace(meta, custom_metadata=record.custom_metadata)
            out[record.segment_id.id] = TrackedSegment(replace(meta, state=record.state), record.state, seen.started_ms)
        elif isinstance(record, PartitionDeleteRecord | SegmentSnapshotRecord):
            continue  # a partition's delete says nothing of its segments' objects; snapshots live in files
    return out


@dataclass
class LostSegment:
    """A segment the cluster believes tiered whose objects the store lacks: ``missing`` names them."""

    segment: TrackedSegment
    missing: list[str]


@dataclass
class Reconciliation:
    """The cluster's record against the store: what may go (``items``, for ``delete_garbage``), what is lost, how
    many segments the record holds in each state, and the bytes in the store no live segment accounts for."""

    items: list[GarbageItem] = field(default_factory=list)
    lost: list[LostSegment] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    live_segment_ids: set[str] = field(default_factory=set)
    unaccounted_bytes: int = 0
    unknown_bytes: int = 0
    """Bytes of objects of the plugin's layout whose segment the record does not know (another cluster's, or
    newer than the read)."""

    deleted_meanwhile: int = 0
    """Segments the listing lacked whose state moved past COPY_SEGMENT_FINISHED in the record read after the
    listing: Kafka deleted them in between (retention), so they are not lost."""

    iceberg_rows_kept: bool = False
    """Whether removing an Iceberg-mode segment leaves its rows in the table (``iceberg.mode.delete.rows.enabled``
    is off)."""

    def bytes_by_kind(self) -> dict[str, int]:
        out = dict.fromkeys(CLUSTER_KINDS, 0)
        for item in self.items:
            out[item.kind] += item.size or 0
        return out


def reconcile(
    manager: RemoteStorageManager,
    segments: Mapping[str, TrackedSegment],
    live_topic_ids: Iterable[str],
    older_than_seconds: float,
    *,
    reread: Callable[[], Mapping[str, TrackedSegment]],
    complete: Evidence | None = None,
    gone: Mapping[str, Evidence] | None = None,
) -> Reconciliation:
    """List the store once and hold every segment of the plugin's layout against ``segments`` (the record) and
    ``live_topic_ids`` (the topics the cluster has, read after the record).

    Each item carries its evidence: ``complete`` (``RECORD_COMPLETE``, given only for a complete read of the
    record), ``gone[topic_id]`` (``TOPIC_GONE_CONFIRMED``) for a dead topic's segment, and ``STORE_AGE``. A segment
    the listing lacks is lost only if ``reread`` (the record read again, after the listing) still says its copy
    finished, and the store, asked again, still lacks its objects: a segment Kafka deleted in between is not."""
    if older_than_seconds < 0:
        raise ValueError(f"older_than_seconds must not be negative, got {older_than_seconds}")
    details = manager.backend_capabilities.details
    prefix = manager.config["key.prefix"]
    if details is None:
        raise RemoteStorageException(
            f"{manager.backend} cannot list objects with their dates, which reconciling with the cluster needs"
        )
    live = set(live_topic_ids)
    known_topics = {s.metadata.topic_id_partition.topic_id for s in segments.values()}
    now = time.time()
    stored: dict[str, dict[Suffix, ObjectInfo]] = {}
    try:
        for info in details.list_details(prefix):
            parsed = parse_object_key(info.key, prefix)
            if parsed is not None:
                stored.setdefault(parsed.segment_id, {})[parsed.suffix] = info
    except StorageBackendException as e:
        raise RemoteStorageException(f"cannot list {prefix!r} in {manager.backend}: {e}") from e
    result = Reconciliation(iceberg_rows_kept=not iceberg_format(manager).cfg.delete_rows)
    for seg in segments.values():
        result.states[seg.state.name] += 1
    for segment_id, objects in sorted(stored.items()):
        size = sum(o.size or 0 for o in objects.values())
        youngest = max(o.modified for o in objects.values())
        seg = segments.get(segment_id)
        if seg is None:
            result.unknown_bytes += size
            result.unaccounted_bytes += size
            continue
        topic_id = seg.metadata.topic_id_partition.topic_id
        if topic_id not in live and topic_id in known_topics:
            kind = DEAD_TOPIC_SEGMENT
            if (
                Suffix.LOG not in objects
                and Suffix.MANIFEST in objects
                and _stores_no_log(manager, objects[Suffix.MANIFEST].key)
            ):
                kind = DEAD_TOPIC_ICEBERG  # its records are rows of its topic's Iceberg table too
        elif seg.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            kind = DELETED_SEGMENT
        elif seg.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED and (
            now - seg.started_ms / 1000 > older_than_seconds
        ):
            kind = UNFINISHED_COPY
        else:
            if seg.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                result.live_segment_ids.add(segment_id)
            else:
                result.unaccounted_bytes += size  # a copy or a delete in progress
            continue
        result.unaccounted_bytes += size
        if now - youngest <= older_than_seconds:
            continue  # written within the grace period: not yet
        key = (objects.get(Suffix.MANIFEST) or objects.get(Suffix.LOG) or next(iter(objects.values()))).key
        evidence = [] if complete is None else [complete]
        if kind in (DEAD_TOPIC_SEGMENT, DEAD_TOPIC_ICEBERG) and topic_id in (gone or {}):
            evidence.append((gone or {})[topic_id])
        age = Evidence(STORE_AGE, f"{len(objects)} objects, the youngest {now - youngest:.0f} s old")
        item = GarbageItem(kind, key, now - youngest, size, segment=seg.metadata, evidence=(*evidence, age))
        result.items.append(item)
    dead = {
        s.metadata.topic_id_partition.topic_id: s.metadata.topic_id_partition.topic
        for s in segments.values()
        if s.metadata.topic_id_partition.topic_id not in live
    }
    result.items += find_latest_rows(manager, dead, complete, gone or {})
    candidates: list[str] = []
    for segment_id, seg in sorted(segments.items()):
        if seg.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            continue
        if seg.metadata.topic_id_partition.topic_id not in live:
            continue
        result.live_segment_ids.add(segment_id)
        if _missing(manager, seg, stored.get(segment_id, {})):
            candidates.append(segment_id)
    if candidates:
        again = reread()
        for segment_id in candidates:
            now_seg = again.get(segment_id)
            if now_seg is None or now_seg.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                result.deleted_meanwhile += 1  # Kafka deleted it (retention) between the two reads
                continue
            missing = _missing(manager, now_seg, {})  # the store asked again, after the second read
            if missing:
                result.lost.append(LostSegment(now_seg, missing))
    return result


def _missing(manager: RemoteStorageManager, seg: TrackedSegment, listed: Mapping[Suffix, ObjectInfo]) -> list[str]:
    """The keys of a finished segment that the store lacks. A segment whose custom metadata put it under another
    prefix is not in the listing: its own keys are asked for."""
    keys = segment_keys(manager.config["key.prefix"], seg.metadata)
    present = {s for s in listed}
    if not present:
        try:
            found = set(manager.backend.list(keys.prefix + keys.main_path + "."))
        except StorageBackendException as e:
            raise RemoteStorageException(f"cannot list the objects of {seg.metadata.describe()}: {e}") from e
        present = {s for s in Suffix if keys.key(s) in found}
    missing = [keys.key(s) for s in (Suffix.MANIFEST, Suffix.INDEXES) if s not in present]
    if Suffix.LOG not in present and not missing and not _stores_no_log(manager, keys.manifest):
        missing.append(keys.log)
    return missing


def _stores_no_log(manager: RemoteStorageManager, manifest_key: str) -> bool:
    from rsm.operator_tools.garbage import is_garbage_without_log

    return not is_garbage_without_log(manager, manifest_key)
