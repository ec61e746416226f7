"""A segment's three objects in the store: ``copy`` writes them, ``delete`` removes them, each counted in the
plugin's metrics.

A copy writes, in this order: ``.log`` (transformed chunks), ``.indexes`` (the five indexes, each encrypted on its
own), then ``.rsm-manifest``, the commit marker. If anything fails, the objects already written are deleted and
the error is raised, so a segment is either complete or absent. A delete removes the manifest first: once it is
gone, the segment no longer exists for readers, even if a later delete fails.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

import crc32c as _crc32c

from backends.base import InvalidKey, StorageBackend, StorageBackendException
from chunking.chunk_index import ChunkIndex
from chunking.transform import ChunkTransformer, crc32c
from encryption.aes import OVERHEAD, ChunkCipher, DataKeyAndAad
from encryption.errors import KeyServiceError
from encryption.keyring import RsaKeyRing
from rsm.core.compression_heuristic import should_compress
from rsm.core.config import RsmConfig
from rsm.core.copy_pipeline import CancellableReader, CopyCancelled, TransformedLogReader
from rsm.core.custom_metadata import CustomMetadata
from rsm.core.iceberg_link import IcebergLink
from rsm.core.manifest import (
    INDEX_UPLOAD_ORDER,
    EncryptionMetadata,
    IntegrityRecord,
    SegmentIndexEntry,
    SegmentManifest,
    metadata_to_json,
)
from rsm.core.manifest_store import ManifestStore
from rsm.core.object_keys import SegmentKeys
from rsm.errors import (
    KeyRingException,
    KeyServiceException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    storage_failure,
)
from rsm.fetch.rate_limit import RateLimiter, ThrottledReader, throttled
from rsm.iceberg.section import IcebergSection
from rsm.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.metrics.recorders import RsmRecorder

log = logging.getLogger(__name__)


def section_crc(data: LogSegmentData) -> int:
    """CRC-32C of the original segment file (an Iceberg segment's integrity record keeps it)."""
    crc = 0
    with open(data.log_segment, "rb") as f:
        while piece := f.read(1 << 20):
            crc = _crc32c.crc32c(piece, crc)
    return crc


class SegmentObjects:
    """Copies and deletes segments. ``transform`` runs a copy's chunk transforms; ``upload_limiter`` paces every
    upload (``upload.rate.limit.bytes.per.second``)."""

    def __init__(
        self,
        config: RsmConfig,
        backend: StorageBackend,
        key_ring: RsaKeyRing | None,
        manifests: ManifestStore,
        transform: Executor,
        upload_limiter: RateLimiter | None,
        recorder: RsmRecorder,
        iceberg: IcebergLink | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.key_ring = key_ring
        self.manifests = manifests
        self.transform = transform
        self.upload_limiter = upload_limiter
        self.recorder = recorder
        self.iceberg = iceberg

    # --- copy ------------------------------------------------------------------------------------------------------

    def copy(
        self, meta: RemoteLogSegmentMetadata, data: LogSegmentData, cancelled: Callable[[], bool] | None = None
    ) -> bytes | None:
        """Upload the segment and its indexes, then the manifest; returns the custom metadata bytes (or None).
        ``cancelled`` is asked before each object and during the ``.log`` upload: once true, the copy stops with
        ``CopyCancelled`` and removes what it uploaded."""
        config = self.config

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
            compression = config["compression.enabled"]
            if compression and config["compression.heuristic.enabled"]:
                compression = should_compress(data.log_segment, data.offset_index)
            encryption: EncryptionMetadata | None = None
            cipher: ChunkCipher | None = None
            if config["encryption.enabled"]:
                assert self.key_ring is not None
                dk = DataKeyAndAad.generate()
                try:
                    encryption = EncryptionMetadata(self.key_ring.wrap(dk.data_key), dk.aad)
                except KeyServiceError as e:  # only the first copy asks the service (for its public key)
                    if not e.retriable:
                        raise KeyRingException(f"copy of {meta.describe()} failed: {e}") from None
                    raise KeyServiceException(f"copy of {meta.describe()} failed: {e}") from None
                cipher = ChunkCipher(dk)
            transformer = ChunkTransformer(compression, config["compression.level"], cipher)

            check(".log")
            section = self._write_rows(meta, data, lambda: check("commit of its rows"))
            if section is None:
                log_size, chunk_index, chunk_crcs = self._upload_log(
                    keys.log, data.log_segment, transformer, uploaded, cancelled, meta
                )
            else:
                compression = False
                log_size, chunk_index, chunk_crcs = 0, self._rows_index(section), [section_crc(data)]
            check(".indexes")
            index_entries, index_crcs, indexes_size = self._upload_indexes(keys.indexes, data, cipher, uploaded)
            manifest = SegmentManifest(
                chunk_index,
                index_entries,
                compression,
                encryption,
                metadata_to_json(meta),
                IntegrityRecord(chunk_crcs, index_crcs),
                section,
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
        if log_size:
            recorder.object_uploaded(tip.topic, tip.partition, "log", log_size)
        recorder.object_uploaded(tip.topic, tip.partition, "indexes", indexes_size)
        recorder.object_uploaded(tip.topic, tip.partition, "rsm-manifest", len(manifest_bytes))
        recorder.segment_copied(tip.topic, tip.partition, time.monotonic() - started)
        log.info(
            "copied %s: %d bytes in %d chunks -> %d stored bytes (compression=%s, encryption=%s)",
            meta.describe(),
            chunk_index.original_file_size,
            chunk_index.chunk_count,
            log_size,
            compression,
            encryption is not None,
        )
        return self._custom_metadata(keys, log_size + indexes_size + len(manifest_bytes))

    def _write_rows(
        self, meta: RemoteLogSegmentMetadata, data: LogSegmentData, before_commit: Callable[[], None]
    ) -> IcebergSection | None:
        """For a topic in Iceberg mode, the segment's rows committed to its table; None: tier it classic (the
        topic is not in Iceberg mode, or the segment holds what a table cannot give back exactly).
        ``before_commit`` raises ``CopyCancelled`` once the copy is cancelled: its rows are then never committed."""
        if self.iceberg is None or not self.iceberg.wants(meta.topic_id_partition.topic):
            return None
        mode = self.iceberg.mode()
        from rsm.iceberg.rows import NotRepresentable

        try:
            return mode.write_segment(meta, data.log_segment, data.transaction_index, before_commit)
        except NotRepresentable as e:
            log.warning("%s is tiered in the classic format, not in Iceberg mode: %s", meta.describe(), e)
            return None

    @staticmethod
    def _rows_index(section: IcebergSection) -> ChunkIndex:
        """An Iceberg segment's chunk index: the original segment as one chunk (it gives the segment's size)."""
        size = section.segment_size
        return ChunkIndex(size, size, [size], size)

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

    def _upload_log(
        self,
        key: str,
        path: Path,
        transformer: ChunkTransformer,
        uploaded: list[str],
        cancelled: Callable[[], bool] | None,
        meta: RemoteLogSegmentMetadata,
    ) -> tuple[int, ChunkIndex, list[int]]:
        chunk_size = self.config["chunk.size"]
        file_size = path.stat().st_size
        window = 2 * self.config.thread_pool_size + 1
        reader = TransformedLogReader(path, file_size, chunk_size, transformer, self.transform, window)
        counting = ThrottledReader(reader, self.upload_limiter)
        source: io.RawIOBase = counting
        if cancelled is not None:
            source = CancellableReader(counting, cancelled, meta.describe())
        try:
            uploaded.append(key)
            written = self.backend.upload(key, io.BufferedReader(source, buffer_size=1024 * 1024))  # type: ignore[arg-type]
            if not reader.complete:
                raise RemoteStorageException(
                    f"backend stopped reading {self.manifests.show(key)} after {counting.count} "
                    f"bytes, before the end of the segment"
                )
        finally:
            reader.close()
        total = sum(reader.transformed_sizes)
        if written != total:
            raise RemoteStorageException(
                f"backend reported {written} bytes written for {self.manifests.show(key)}, the transformed segment "
                f"has {total}"
            )
        nominal = chunk_size + (OVERHEAD if transformer.cipher is not None else 0)
        index = ChunkIndex(chunk_size, file_size, reader.transformed_sizes, nominal)
        return total, index, reader.chunk_crcs

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
            self.delete_rows(meta)
            self.backend.delete(keys.manifest)
            self.backend.delete_many([keys.log, keys.indexes])
        except BaseException as e:
            self.recorder.segment_delete_failed(tip.topic, tip.partition)
            if isinstance(e, StorageBackendException):
                raise storage_failure(f"delete of {meta.describe()} failed: {e}", e) from e
            raise
        self.recorder.segment_deleted(tip.topic, tip.partition, meta.segment_size_in_bytes, time.monotonic() - started)

    def delete_rows(self, meta: RemoteLogSegmentMetadata) -> None:
        """With ``iceberg.mode.delete.rows.enabled``, an Iceberg segment's rows go before its manifest (a failure
        leaves the manifest, so the broker's retry knows the rows to delete)."""
        if self.iceberg is None or not self.iceberg.cfg.delete_rows:
            return
        try:
            manifest = self.manifests.manifest(meta)
        except RemoteResourceNotFoundException:
            return
        if manifest.iceberg is not None:
            self.iceberg.mode().delete_rows(meta, manifest.iceberg)
