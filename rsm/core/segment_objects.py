"""A segment's three objects in the store: ``copy`` writes them, ``delete`` removes them, each counted in the
plugin's metrics.

A copy writes, in this order: the body in the segment's format (``rsm.core.segment_format``: the classic format's
``.log`` of transformed chunks, or rows of an Iceberg table), ``.indexes`` (the five indexes, each encrypted on its
own), then ``.rsm-manifest``, the commit marker. If anything fails, the objects already written are deleted and
the error is raised, so a segment is either complete or absent. A delete removes the manifest first: once it is
gone, the segment no longer exists for readers, even if a later delete fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from backends.base import InvalidKey, StorageBackend, StorageBackendException
from chunking.transform import crc32c
from encryption.aes import ChunkCipher
from rsm.core.config import RsmConfig
from rsm.core.copy_pipeline import CopyCancelled
from rsm.core.custom_metadata import CustomMetadata
from rsm.core.manifest import (
    INDEX_UPLOAD_ORDER,
    IntegrityRecord,
    SegmentIndexEntry,
    SegmentManifest,
    metadata_to_json,
)
from rsm.core.manifest_store import ManifestStore
from rsm.core.object_keys import SegmentKeys
from rsm.core.segment_format import Formats, WrittenBody
from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException, storage_failure
from rsm.fetch.rate_limit import RateLimiter, throttled
from rsm.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.metrics.recorders import RsmRecorder

log = logging.getLogger(__name__)


class SegmentObjects:
    """Copies and deletes segments, each in the format ``formats`` chooses for it; ``upload_limiter`` paces the
    uploads of the indexes and the manifest."""

    def __init__(
        self,
        config: RsmConfig,
        backend: StorageBackend,
        manifests: ManifestStore,
        formats: Formats,
        upload_limiter: RateLimiter | None,
        recorder: RsmRecorder,
    ) -> None:
        self.config = config
        self.backend = backend
        self.manifests = manifests
        self.formats = formats
        self.upload_limiter = upload_limiter
        self.recorder = recorder

    # --- copy ------------------------------------------------------------------------------------------------------

    def copy(
        self, meta: RemoteLogSegmentMetadata, data: LogSegmentData, cancelled: Callable[[], bool] | None = None
    ) -> bytes | None:
        """Upload the segment and its indexes, then the manifest; returns the custom metadata bytes (or None).
        ``cancelled`` is asked before each object and during the ``.log`` upload: once true, the copy stops with
        ``CopyCancelled`` and removes what it uploaded."""

        def check(before: str) -> None:
            if cancelled is not None and cancelled():
                raise CopyCancelled(f"copy of {meta.describe()} cancelled before its {before}")

        keys = self.manifests.keys(meta)
        tip = meta.topic_id_partition
        try:
            self._check_inputs(meta, data)
        except RemoteStorageException:  # nothing uploaded yet, but a failed copy all the same (segment-copy-errors)
            self.recorder.segment_copy_failed(tip.topic, tip.partition)
            raise
        uploaded: list[str] = []
        started = time.monotonic()
        try:
            check(".log")
            body = self._write_body(meta, data, keys, uploaded, cancelled)
            check(".indexes")
            index_entries, index_crcs, indexes_size = self._upload_indexes(keys.indexes, data, body.cipher, uploaded)
            manifest = SegmentManifest(
                body.chunk_index,
                index_entries,
                body.compression,
                body.encryption,
                metadata_to_json(meta),
                IntegrityRecord(body.chunk_crcs, index_crcs),
                body.section,
            )
            manifest_bytes = manifest.to_json_bytes()
            check("manifest")
            uploaded.append(keys.manifest)
            self.backend.upload(keys.manifest, throttled(manifest_bytes, self.upload_limiter))
        except BaseException as e:
            self.recorder.segment_copy_failed(tip.topic, tip.partition)
            self._cleanup_failed_copy(keys, uploaded, meta)
            if isinstance(e, RemoteStorageException):
                raise
            if isinstance(e, (StorageBackendException, OSError, ValueError)):
                raise storage_failure(f"copy of {meta.describe()} failed: {type(e).__name__}: {e}", e) from e
            raise
        recorder = self.recorder
        log_size = body.log_size
        if log_size:
            recorder.object_uploaded(tip.topic, tip.partition, "log", log_size)
        recorder.object_uploaded(tip.topic, tip.partition, "indexes", indexes_size)
        recorder.object_uploaded(tip.topic, tip.partition, "rsm-manifest", len(manifest_bytes))
        recorder.segment_copied(tip.topic, tip.partition, time.monotonic() - started)
        log.info(
            "copied %s (%s): %d bytes in %d chunks -> %d stored bytes (compression=%s, encryption=%s)",
            meta.describe(),
            manifest.kind,
            body.chunk_index.original_file_size,
            body.chunk_index.chunk_count,
            log_size,
            body.compression,
            body.encryption is not None,
        )
        return self._custom_metadata(keys, log_size + indexes_size + len(manifest_bytes))

    def _write_body(
        self,
        meta: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        keys: SegmentKeys,
        uploaded: list[str],
        cancelled: Callable[[], bool] | None,
    ) -> WrittenBody:
        """The body, in the first format of the topic's that takes the segment (the classic one takes all)."""
        for fmt in self.formats.for_copy(meta.topic_id_partition.topic):
            body = fmt.write_body(meta, data, keys, uploaded, cancelled)
            if body is not None:
                return body
        raise RemoteStorageException(f"no format took {meta.describe()}")  # the classic format takes every one

    def _check_inputs(self, meta: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        required = [
            ("log segment", data.log_segment),
            ("offset index", data.offset_index),
            ("time index", data.time_index),
            ("producer snapshot", data.producer_snapshot_index),
        ]
        if data.transaction_index is not None:
            required.append(("transaction index", data.transaction_index))
        for what, path in required:
            if not path.is_file():
                raise RemoteStorageException(
                    f"cannot copy {meta.describe()}: its {what} {path} does not exist or is not a regular file"
                )

    def _upload_indexes(
        self, key: str, data: LogSegmentData, cipher: ChunkCipher | None, uploaded: list[str]
    ) -> tuple[dict[IndexType, SegmentIndexEntry | None], dict[IndexType, int], int]:
        sources: dict[IndexType, bytes | None] = {
            IndexType.OFFSET: data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index.read_bytes(),
            IndexType.LEADER_EPOCH: data.leader_epoch_index,
            IndexType.TRANSACTION: data.transaction_index.read_bytes() if data.transaction_index else None,
        }
        entries: dict[IndexType, SegmentIndexEntry | None] = {}
        crcs: dict[IndexType, int] = {}
        parts: list[bytes] = []
        position = 0
        for t in INDEX_UPLOAD_ORDER:
            raw = sources[t]
            if raw is None:
                entries[t] = None
                continue
            crcs[t] = crc32c(raw)
            stored = cipher.encrypt(raw) if (cipher is not None and raw) else raw
            entries[t] = SegmentIndexEntry(position, len(stored))
            parts.append(bytes(stored))
            position += len(stored)
        blob = b"".join(parts)
        uploaded.append(key)
        self.backend.upload(key, throttled(blob, self.upload_limiter))
        return entries, crcs, len(blob)

    def _custom_metadata(self, keys: SegmentKeys, remote_size: int) -> bytes | None:
        fields = set(self.config["custom.metadata.fields.include"])
        return CustomMetadata(
            remote_size=remote_size if "REMOTE_SIZE" in fields else None,
            object_prefix=keys.prefix if "OBJECT_PREFIX" in fields else None,
            object_key=keys.main_path if "OBJECT_KEY" in fields else None,
        ).encode()

    def _cleanup_failed_copy(self, keys: SegmentKeys, uploaded: list[str], meta: RemoteLogSegmentMetadata) -> None:
        if not uploaded:
            return
        try:
            self.backend.delete_many(keys.all())
        except InvalidKey as e:  # the store refused the key itself, so nothing can have been stored under it
            log.debug("nothing to clean up after the refused copy of %s: %s", meta.describe(), e)
        except Exception as e:  # the original error matters more; the broker's delete will retry this
            log.error(
                "could not delete the partial upload of %s (%s): %s",
                meta.describe(),
                ", ".join(self.manifests.show(k) for k in keys.all()),
                e,
            )

    # --- delete ----------------------------------------------------------------------------------------------------

    def delete(self, meta: RemoteLogSegmentMetadata) -> None:
        """Delete the segment's objects; deleting what is already gone succeeds (the broker retries deletes)."""
        tip = meta.topic_id_partition
        keys = self.manifests.keys(meta)
        started = time.monotonic()
        try:
            self.delete_body(meta)
            self.backend.delete(keys.manifest)
            self.backend.delete_many([keys.log, keys.indexes])
        except BaseException as e:
            self.recorder.segment_delete_failed(tip.topic, tip.partition)
            if isinstance(e, StorageBackendException):
                raise storage_failure(f"delete of {meta.describe()} failed: {e}", e) from e
            raise
        self.recorder.segment_deleted(tip.topic, tip.partition, meta.segment_size_in_bytes, time.monotonic() - started)

    def delete_body(self, meta: RemoteLogSegmentMetadata) -> None:
        """What the segment's format stored outside its objects goes first, while the manifest still says where
        (a failure leaves the manifest for the broker's retry). The manifest is read only where a format needs
        it; a segment whose manifest is gone has nothing left to find."""
        if not self.formats.deleting_needs_manifest():
            return
        try:
            manifest = self.manifests.manifest(meta)
        except RemoteResourceNotFoundException:
            return
        fmt = self.formats.of(manifest, f"manifest {self.manifests.show(self.manifests.keys(meta).manifest)}")
        fmt.delete_body(meta, manifest)
