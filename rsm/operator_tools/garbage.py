"""Garbage collection: find and remove the storage no segment accounts for.

Only what is provably the plugin's is ever listed: an object or an unfinished upload whose key parses as the
plugin's object layout (``rsm.core.object_keys.parse_object_key``). Another application's objects under the same
``key.prefix`` (Aiven's default prefix is empty: the whole bucket) are left alone whatever their names end with.

These kinds of garbage can outlive the copy that made it:

Iceberg tables' files (under ``key.prefix`` + ``iceberg/`` by default) are garbage only as ``iceberg-orphan``
(an Iceberg-mode segment's own objects are its manifest and ``.indexes``).

- ``orphan-object``: a ``.log`` or ``.indexes`` object whose segment has no manifest. A copy writes its manifest
  last, so a copy that died (or whose cleanup failed) leaves these; a copy still running does too, which is why
  only objects older than the grace period are listed, and why deletion checks again that no manifest appeared.
- ``multipart-upload``: an S3 multipart upload never completed nor aborted; its parts are invisible and billed.
- ``uncommitted-blocks``: an Azure blob holding only staged blocks, never committed; likewise invisible and billed
  (until the service drops them after a week). GCS has no call that lists open resumable sessions, so none is
  listed there; an abandoned session holds no object and GCS drops it after a week.
- ``manifest-without-data``: a manifest whose ``.log`` or ``.indexes`` is gone. A copy writes the manifest last
  and a delete removes it first, so it answers for a segment that cannot be read; removing it (and whatever data
  object is left) is safe. An Iceberg-mode segment has no ``.log`` by design: a manifest beside its ``.indexes``
  only is read, and kept when it says so.
- ``temp-file``: a filesystem backend's temp file of an upload whose process was killed.
- ``iceberg-orphan``: a file under the location of one of the plugin's Iceberg tables (property ``kafka.topic``,
  inside the plugin's warehouse) that no snapshot of its table references, neither in the current metadata file
  nor in one still in its metadata log: the data, manifest and metadata files of a copy killed before its
  commit's swap, or a file of an expired snapshot. Listed only once unreferenced for the table's own orphan grace
  (not ``--older-than``), counted from the first recorded look that saw it so; removal checks again against the
  tables as they are then and moves the file into the warehouse's quarantine.
- ``cache-entry``: chunks in this broker's disk chunk cache of a segment that is no longer tiered (deleted by
  another broker, or by retention while this one was down); they would otherwise wait for eviction.

``find_garbage`` only lists, and attaches to each item the evidence it observed (``rsm.deletion.rules``);
``delete_garbage`` (``rsm.operator_tools.garbage_removal``) removes what it is given once ``authorize`` allows it
on that evidence: what can be undone into the store's quarantine (``<key.prefix>kts-quarantine/<run>/``,
``rsm.deletion.quarantine``), the rest (unfinished uploads, cache entries) for good. ``kts gc`` calls both (a dry
run unless ``--delete``). A backend offers what it can through the optional protocols of
``backends.base`` (``ListsDetails``, ``PendingUploads``), as the manager found them when it wired the backend
(``manager.backend_capabilities``); a backend without ``list_details`` cannot date its objects, so orphan objects
are not listed for it (never deleted on a guess).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.base import KeyNotFound, ObjectInfo, PendingUpload, StorageBackendException
from backends.configdef import ConfigException
from backends.registry import AIVEN_CLASS_NAMES, SHORT_NAMES
from rsm.core.manifest import MAX_MANIFEST_SIZE, SegmentManifest
from rsm.core.object_keys import Suffix, parse_object_key
from rsm.core.parallel import DEFAULT_CONCURRENCY, ordered_map
from rsm.deletion.holding import Held
from rsm.deletion.rules import (
    SEGMENT_GONE,
    STORE_AGE,
    UPLOAD_DEADLINE,
    Evidence,
)
from rsm.errors import CorruptDataException, RemoteStorageException
from rsm.formats.iceberg import iceberg_format
from rsm.iceberg.config_keys import ICEBERG_DIR
from rsm.metadata import RemoteLogSegmentMetadata

if TYPE_CHECKING:
    from rsm.core.manager import RemoteStorageManager

ORPHAN_OBJECT = "orphan-object"
MULTIPART_UPLOAD = "multipart-upload"
TEMP_FILE = "temp-file"
CACHE_ENTRY = "cache-entry"
MANIFEST_WITHOUT_DATA = "manifest-without-data"
ICEBERG_ORPHAN = "iceberg-orphan"
_DATA_SUFFIXES = (Suffix.LOG, Suffix.INDEXES)


@dataclass(frozen=True)
class GarbageItem:
    """One piece of garbage. ``key`` is the object key (for uploads: the key the upload was for); ``upload`` is set
    for ``multipart-upload`` and ``temp-file`` items; ``size`` is None where the store does not say."""

    kind: str
    key: str
    age_seconds: float
    size: int | None = None
    upload: PendingUpload | None = None
    segment: RemoteLogSegmentMetadata | None = None
    """Set for the kinds of ``rsm.operator_tools.reconcile``: the segment the cluster's record ties the objects to;
    all of its objects are moved into the quarantine together."""
    evidence: tuple[Evidence, ...] = ()
    """The signals observed for the item (``rsm.deletion.rules``); its removal is authorised on them."""
    dead_topic: tuple[str, str] | None = None
    """Set for ``dead-topic-latest-rows``: the (topic id, topic name) whose rows of the latest table ``key``
    names go."""
    rows: int | None = None
    """How many table rows the item holds, where it is rows rather than objects."""


@dataclass
class GarbageReport:
    """What ``delete_garbage`` did: the items removed (moved into the quarantine, or deleted where their kind cannot
    be undone), the bytes they held (where known), the items kept and why, and the failures. ``held`` lists the
    objects the quarantine now holds, all of run ``run``."""

    run: str = ""
    deleted: list[GarbageItem] = field(default_factory=list)
    skipped: list[tuple[GarbageItem, str]] = field(default_factory=list)
    failed: list[tuple[GarbageItem, str]] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(item.size or 0 for item in self.deleted)


def where(manager: RemoteStorageManager) -> str:
    """The store and prefix garbage collection works in, for the operator: ``S3Backend(bucket='b'), key.prefix
    'p/'``."""
    return f"{manager.backend!r}, key.prefix {manager.config['key.prefix']!r}"


def find_garbage(
    manager: RemoteStorageManager,
    older_than_seconds: float,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_listed: Callable[[str], None] | None = None,
    upload_deadline_s: float | None = None,
    record: bool = False,
) -> list[GarbageItem]:
    """Everything under ``key.prefix`` older than ``older_than_seconds`` that no complete segment accounts for.
    ``on_listed`` is called with each listed object's key (progress: a store of 10,000 segments lists 30,000).
    Each item carries the evidence observed for it; an unfinished upload gets ``upload-deadline`` only when it is
    older than ``upload_deadline_s`` (default: ``upload_deadline_seconds`` of the manager's configuration).
    Iceberg tables' orphan files wait their tables' own grace instead, counted from when a recorded pass first
    saw them unreferenced; ``record`` (for a caller that then deletes) records this look in the tables' ledgers.

    Only keys that parse as the plugin's object layout (``parse_object_key``) are considered: another
    application's objects and uploads under the same prefix are never listed, whatever their names end with.

    The grace period must exceed the longest copy (the backend's upload timeout is a good floor): a copy in
    progress owns objects without a manifest and an open upload, and those must not be listed.
    """
    if older_than_seconds < 0:
        raise ValueError(f"older_than_seconds must not be negative, got {older_than_seconds}")
    backend = manager.backend
    capabilities = manager.backend_capabilities
    prefix = manager.config["key.prefix"]
    if upload_deadline_s is None:
        upload_deadline_s = upload_deadline_seconds(manager.config.raw)
    now = time.time()
    items: list[GarbageItem] = []

    def dated(kind: str, info: ObjectInfo) -> GarbageItem:
        age = now - info.modified
        return GarbageItem(kind, info.key, age, info.size, evidence=(_aged(age, older_than_seconds),))

    try:
        if capabilities.details is not None:
            by_segment: dict[str, dict[Suffix, ObjectInfo]] = {}
            for info in capabilities.details.list_details(prefix):
                if on_listed is not None:
                    on_listed(info.key)
                parsed = parse_object_key(info.key, prefix)
                if parsed is not None:
                    by_segment.setdefault(parsed.main_path, {})[parsed.suffix] = info
            without_log: list[ObjectInfo] = []
            for _path, objects in sorted(by_segment.items()):
                manifest = objects.get(Suffix.MANIFEST)
                if manifest is None:
                    for info in objects.values():
                        if now - info.modified > older_than_seconds:
                            items.append(dated(ORPHAN_OBJECT, info))
                elif len(objects) < len(_DATA_SUFFIXES) + 1 and all(
                    now - o.modified > older_than_seconds for o in objects.values()
                ):
                    # A copy writes its manifest last and a delete removes it first: a manifest without its
                    # data was left by something else (a rewrite racing a delete), and answers for nothing. The
                    # item is dated by its youngest object: all of them go with it.
                    youngest = max(objects.values(), key=lambda o: o.modified)
                    dated_by = ObjectInfo(manifest.key, manifest.size, youngest.modified)
                    if set(objects) == {Suffix.MANIFEST, Suffix.INDEXES}:
                        without_log.append(dated_by)  # an Iceberg-mode segment's, unless its manifest says not
                    else:
                        items.append(dated(MANIFEST_WITHOUT_DATA, dated_by))
            for outcome in ordered_map(lambda m: is_garbage_without_log(manager, m.key), without_log, concurrency):
                if isinstance(outcome.error, StorageBackendException):
                    raise outcome.error
                if outcome.error is not None:
                    raise RemoteStorageException(f"cannot read manifest {outcome.item.key}: {outcome.error}")
                if outcome.result:
                    items.append(dated(MANIFEST_WITHOUT_DATA, outcome.item))
        if capabilities.pending_uploads is not None:
            for upload in capabilities.pending_uploads.list_pending_uploads(prefix):
                if parse_object_key(upload.key, prefix) is None:
                    continue  # not an upload of the plugin's layout: someone else's
                if upload.key.startswith(prefix + ICEBERG_DIR):
                    continue  # an upload of an Iceberg table's FileIO, not ours
                age = now - upload.started
                if age > older_than_seconds:
                    evidence = [_aged(age, older_than_seconds)]
                    if upload_deadline_s is not None and age > upload_deadline_s:
                        bound = f"{_hours(age)} old; uploads end within {_hours(upload_deadline_s)}"
                        evidence.append(Evidence(UPLOAD_DEADLINE, bound))
                    found = GarbageItem(upload.kind, upload.key, age, upload.size, upload, evidence=tuple(evidence))
                    items.append(found)
        items.extend(_stale_cache_entries(manager, concurrency))
        items.extend(_iceberg_orphans(manager, record))
    except StorageBackendException as e:
        raise RemoteStorageException(f"cannot list garbage under {prefix!r} in {backend}: {e}") from e
    return items


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def _aged(age: float, grace: float) -> Evidence:
    return Evidence(STORE_AGE, f"dated {_hours(age)} old by the store, grace {_hours(grace)}")


# The key of each of our backends that bounds how long one upload may run (the filesystem has no deadline of its own:
# its temp files count as abandoned after ``storage.stale.upload.age.ms``, which the operator keeps above any upload).
_UPLOAD_DEADLINE_KEYS = {
    "filesystem": "stale.upload.age.ms",
    "s3": "s3.upload.timeout.ms",
    "gcs": "gcs.upload.timeout.ms",
    "azure": "azure.upload.timeout.ms",
}


def upload_deadline_seconds(configs: Mapping[str, Any]) -> float | None:
    """The longest one upload of the plugin may run in the store ``configs`` name (the backend's upload timeout),
    in seconds; None for a backend of another's making, whose uploads then never count as abandoned."""
    name = str(configs.get("storage.backend.class") or "filesystem").strip()
    short = AIVEN_CLASS_NAMES.get(name, name)
    if short not in SHORT_NAMES:
        short = next((s for s, spec in SHORT_NAMES.items() if spec == name), "")
    key = _UPLOAD_DEADLINE_KEYS.get(short)
    if key is None:
        return None
    value = configs.get("storage." + key)
    if value is None:
        module_name = SHORT_NAMES[short].partition(":")[0]
        try:
            value = importlib.import_module(module_name).CONFIG_DEF.keys[key].default
        except ImportError:
            return None
    try:
        return int(value) / 1000
    except (TypeError, ValueError):
        raise ConfigException(f"Invalid value {value!r} for configuration storage.{key}: expected milliseconds")


def iceberg_catalog(manager: RemoteStorageManager) -> tuple[Any, str] | None:
    """The plugin's Iceberg catalog and warehouse when Iceberg mode is on and its namespace exists (nothing is
    created), else None."""
    link = iceberg_format(manager)
    if not link.cfg.enabled:
        return None
    from rsm.iceberg.maintenance.namespace import open_existing_catalog

    mode = link.mode()
    catalog = open_existing_catalog(link.cfg, mode.properties)
    return None if catalog is None else (catalog, mode.properties.get("warehouse", ""))


def _iceberg_orphans(manager: RemoteStorageManager, record: bool) -> list[GarbageItem]:
    """The Iceberg tables' orphan files past the tables' own grace (``iceberg.mode.maintenance.orphan.grace.ms``,
    at least a day for data files), never gc's ``--older-than``: a Spark job or a compaction may write for hours
    before its commit. ``record``: update the tables' ledgers of unreferenced files (``kts gc --delete`` only)."""
    opened = iceberg_catalog(manager)
    if opened is None:
        return []
    from rsm.iceberg.maintenance.namespace import all_orphans

    catalog, warehouse = opened
    cfg = iceberg_format(manager).cfg
    found = all_orphans(catalog, cfg.namespace, cfg.maintenance.orphan_grace_s, warehouse, record=record)
    return [GarbageItem(ICEBERG_ORPHAN, o.path, o.age_s, o.size, evidence=o.evidence) for o in found]


def is_garbage_without_log(manager: RemoteStorageManager, manifest_key: str) -> bool:
    """Whether a manifest beside its ``.indexes`` but no ``.log`` answers for nothing: True unless its format
    stores no ``.log`` (an Iceberg-mode segment's rows are in its table) or it is gone meanwhile; an unreadable
    one, or one of a format this plugin does not read, answers for nothing."""
    try:
        with manager.backend.fetch(manifest_key) as f:
            raw = f.read(MAX_MANIFEST_SIZE + 1)
    except KeyNotFound:
        return False
    try:
        kind = SegmentManifest.from_json_bytes(raw, f"manifest {manifest_key}").kind
    except CorruptDataException:
        return True
    fmt = manager.formats.named(kind)
    return fmt is None or fmt.stores_log


def _stale_cache_entries(manager: RemoteStorageManager, concurrency: int) -> list[GarbageItem]:
    """Cached segments whose manifest is gone: one listing per cached segment, ``concurrency`` at a time."""
    cache = manager.chunk_cache
    if cache is None or cache.disk is None:
        return []
    backend = manager.backend
    stale: list[GarbageItem] = []
    for outcome in ordered_map(
        lambda manifest: any(k == manifest for k in backend.list(manifest)),
        sorted(cache.disk.segment_keys()),
        concurrency,
        "kts-gc-cache",
    ):
        if outcome.error is not None:
            raise outcome.error
        if not outcome.result:
            gone = Evidence(SEGMENT_GONE, f"no {outcome.item} in the store")
            stale.append(GarbageItem(CACHE_ENTRY, outcome.item, 0.0, evidence=(gone,)))
    return stale
