"""Garbage collection: find and remove the storage no segment accounts for.

Three kinds of garbage can outlive the copy that made it:

Iceberg tables' files (under ``key.prefix`` + ``iceberg/`` by default) are never garbage here: their catalog
owns them (an Iceberg-mode segment's own objects are its manifest and ``.indexes``).

- ``orphan-object``: a ``.log`` or ``.indexes`` object whose segment has no manifest. A copy writes its manifest
  last, so a copy that died (or whose cleanup failed) leaves these; a copy still running does too, which is why
  only objects older than the grace period are listed, and why deletion checks again that no manifest appeared.
- ``multipart-upload``: an S3 multipart upload never completed nor aborted; its parts are invisible and billed.
- ``uncommitted-blocks``: an Azure blob holding only staged blocks, never committed; likewise invisible and billed
  (until the service drops them after a week). GCS has no call that lists open resumable sessions, so none is
  listed there; an abandoned session holds no object and GCS drops it after a week.
- ``temp-file``: a filesystem backend's temp file of an upload whose process was killed.
- ``cache-entry``: chunks in this broker's disk chunk cache of a segment that is no longer tiered (deleted by
  another broker, or by retention while this one was down); they would otherwise wait for eviction.

``find_garbage`` only lists; ``delete_garbage`` removes what it is given. ``kts gc`` calls both (the command
shows the list and asks before deleting). A backend offers what it can through the optional protocols of
``backends.base`` (``ListsDetails``, ``PendingUploads``), as the manager found them when it wired the backend
(``manager.backend_capabilities``); a backend without ``list_details`` cannot date its objects, so orphan objects
are not listed for it (never deleted on a guess).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backends.base import PendingUpload, StorageBackendException
from rsm.core.object_keys import Suffix
from rsm.core.parallel import DEFAULT_CONCURRENCY, ordered_map
from rsm.errors import RemoteStorageException
from rsm.iceberg.config import ICEBERG_DIR

if TYPE_CHECKING:
    from rsm.core.manager import RemoteStorageManager

ORPHAN_OBJECT = "orphan-object"
MULTIPART_UPLOAD = "multipart-upload"
TEMP_FILE = "temp-file"
CACHE_ENTRY = "cache-entry"
_SEGMENT_SUFFIXES = tuple(f".{s.value}" for s in Suffix)


@dataclass(frozen=True)
class GarbageItem:
    """One piece of garbage. ``key`` is the object key (for uploads: the key the upload was for); ``upload`` is set
    for ``multipart-upload`` and ``temp-file`` items; ``size`` is None where the store does not say."""

    kind: str
    key: str
    age_seconds: float
    size: int | None = None
    upload: PendingUpload | None = None


@dataclass
class GarbageReport:
    """What ``delete_garbage`` did: the items removed, the bytes they held (where known), and the failures."""

    deleted: list[GarbageItem] = field(default_factory=list)
    skipped: list[tuple[GarbageItem, str]] = field(default_factory=list)
    failed: list[tuple[GarbageItem, str]] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(item.size or 0 for item in self.deleted)


def _main_path(key: str) -> tuple[str, str] | None:
    for suffix in _SEGMENT_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)], suffix
    return None


def find_garbage(
    manager: RemoteStorageManager,
    older_than_seconds: float,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_listed: Callable[[str], None] | None = None,
) -> list[GarbageItem]:
    """Everything under ``key.prefix`` older than ``older_than_seconds`` that no complete segment accounts for.
    ``on_listed`` is called with each listed object's key (progress: a store of 10,000 segments lists 30,000).

    The grace period must exceed the longest copy (the backend's upload timeout is a good floor): a copy in
    progress owns objects without a manifest and an open upload, and those must not be listed.
    """
    if older_than_seconds < 0:
        raise ValueError(f"older_than_seconds must not be negative, got {older_than_seconds}")
    backend = manager.backend
    capabilities = manager.backend_capabilities
    prefix = manager.config["key.prefix"]
    now = time.time()
    items: list[GarbageItem] = []
    try:
        if capabilities.details is not None:
            by_segment: dict[str, list[tuple[str, int, float]]] = {}
            for info in capabilities.details.list_details(prefix):
                if on_listed is not None:
                    on_listed(info.key)
                parsed = _main_path(info.key)
                if parsed is not None:
                    by_segment.setdefault(parsed[0], []).append((parsed[1], info.size, info.modified))
            for path, objects in sorted(by_segment.items()):
                if any(suffix == f".{Suffix.MANIFEST.value}" for suffix, _, _ in objects):
                    continue
                for suffix, size, modified in objects:
                    if now - modified > older_than_seconds:
                        items.append(GarbageItem(ORPHAN_OBJECT, path + suffix, now - modified, size))
        if capabilities.pending_uploads is not None:
            for upload in capabilities.pending_uploads.list_pending_uploads(prefix):
                if upload.key.startswith(prefix + ICEBERG_DIR):
                    continue  # an upload of an Iceberg table's FileIO, not ours
                if now - upload.started > older_than_seconds:
                    items.append(GarbageItem(upload.kind, upload.key, now - upload.started, upload.size, upload))
        items.extend(_stale_cache_entries(manager, concurrency))
    except StorageBackendException as e:
        raise RemoteStorageException(f"cannot list garbage under {prefix!r} in {backend}: {e}") from e
    return items


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
            stale.append(GarbageItem(CACHE_ENTRY, outcome.item, 0.0))
    return stale


def delete_garbage(
    manager: RemoteStorageManager,
    items: Iterable[GarbageItem],
    progress: Callable[[GarbageItem], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> GarbageReport:
    """Remove ``items`` (from ``find_garbage``), ``concurrency`` at a time; ``progress`` is called (in the caller's
    thread, in the items' order) after each item is handled.

    An orphan object whose manifest has appeared since it was listed (a slow copy completed) is skipped, not
    deleted. A failure on one item is recorded and the others still go.
    """
    report = GarbageReport()
    for outcome in ordered_map(lambda item: _remove(manager, item), items, concurrency, "kts-gc-delete"):
        item = outcome.item
        if isinstance(outcome.error, StorageBackendException):
            report.failed.append((item, str(outcome.error)))
        elif outcome.error is not None:
            raise outcome.error
        else:
            assert outcome.result is not None
            state, why = outcome.result
            if state == _DELETED:
                report.deleted.append(item)
            else:
                (report.skipped if state == _SKIPPED else report.failed).append((item, why))
        if progress is not None:
            progress(item)
    return report


_DELETED, _SKIPPED, _FAILED = "deleted", "skipped", "failed"


def _remove(manager: RemoteStorageManager, item: GarbageItem) -> tuple[str, str]:
    """Remove one item; returns what became of it (``_DELETED``, ``_SKIPPED`` or ``_FAILED``) and why."""
    backend = manager.backend
    if item.kind == CACHE_ENTRY:
        if manager.chunk_cache is not None and manager.chunk_cache.disk is not None:
            manager.chunk_cache.forget_segment(item.key)
        return _DELETED, ""
    if item.upload is not None:
        pending_uploads = manager.backend_capabilities.pending_uploads
        if pending_uploads is None:
            return _FAILED, f"{backend} cannot abort uploads"
        pending_uploads.abort_pending_upload(item.upload)
        return _DELETED, ""
    parsed = _main_path(item.key)
    manifest = None if parsed is None else parsed[0] + f".{Suffix.MANIFEST.value}"
    if manifest is not None and any(k == manifest for k in backend.list(manifest)):
        return _SKIPPED, "its segment's manifest exists now (the copy completed)"
    backend.delete(item.key)
    return _DELETED, ""
