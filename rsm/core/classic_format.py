"""The classic format (Aiven's): the segment file in ``chunk.size`` chunks, each compressed and/or encrypted on
its own, concatenated into the ``.log`` object; a fetch reads the chunks that cover its range."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from backends.base import StorageBackend
from chunking.chunk_index import ChunkIndex
from chunking.transform import ChunkTransformer
from encryption.aes import OVERHEAD, ChunkCipher, DataKeyAndAad
from encryption.errors import KeyServiceError
from encryption.keyring import RsaKeyRing
from rsm.core.compression_heuristic import should_compress
from rsm.core.config import RsmConfig
from rsm.core.copy_pipeline import CancellableReader, ReadAhead, TransformedLogReader
from rsm.core.manifest import EncryptionMetadata, SegmentManifest
from rsm.core.manifest_store import ManifestStore
from rsm.core.object_keys import SegmentKeys
from rsm.core.segment_format import WrittenBody
from rsm.errors import KeyRingException, KeyServiceException, RemoteStorageException
from rsm.fetch.rate_limit import RateLimiter, ThrottledReader
from rsm.fetch.segment_reader import SegmentReader
from rsm.fetch.source import SegmentSource
from rsm.metadata import LogSegmentData, RemoteLogSegmentMetadata

if TYPE_CHECKING:
    import pyarrow as pa

    from rsm.metrics.sources import HasStats


class ClassicFormat:
    """``SegmentFormat`` of chunks in ``.log``; takes every segment. ``transform`` runs a copy's chunk
    transforms; ``upload_limiter`` paces the upload."""

    kind = "classic"
    stores_log = True
    deletes_need_manifest = False

    def __init__(
        self,
        config: RsmConfig,
        backend: StorageBackend,
        key_ring: RsaKeyRing | None,
        manifests: ManifestStore,
        transform: Executor,
        upload_limiter: RateLimiter | None,
        reader: SegmentReader,
    ) -> None:
        self.config = config
        self.backend = backend
        self.key_ring = key_ring
        self.manifests = manifests
        self.transform = transform
        self.upload_limiter = upload_limiter
        self.reader = reader
        # Chunks transformed ahead of their upload, shared by the copies: enough to keep the pool busy.
        self.read_ahead = ReadAhead(2 * config.thread_pool_size + 1)

    def takes(self, topic: str) -> bool:
        return True

    def write_body(
        self,
        meta: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        keys: SegmentKeys,
        uploaded: list[str],
        cancelled: Callable[[], bool] | None,
    ) -> WrittenBody:
        config = self.config
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
        log_size, chunk_index, chunk_crcs = self._upload_log(
            keys.log, data.log_segment, transformer, uploaded, cancelled, meta
        )
        return WrittenBody(chunk_index, chunk_crcs, compression, encryption, cipher, log_size)

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
        reader = TransformedLogReader(path, file_size, chunk_size, transformer, self.transform, window, self.read_ahead)
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

    def open_fetch(
        self,
        meta: RemoteLogSegmentMetadata,
        manifest: SegmentManifest,
        source: SegmentSource,
        start: int,
        end: int | None,
    ) -> BinaryIO:
        return self.reader.open(meta, start, end, source)  # type: ignore[return-value]

    def open_rows(
        self,
        meta: RemoteLogSegmentMetadata,
        manifest: SegmentManifest,
        start: int,
        end: int | None,
        columns: Sequence[str],
        kafka_fields: Sequence[str] | None,
    ) -> Iterator[pa.Table]:
        raise RemoteStorageException(
            f"{meta.describe()} is a classic segment, not rows of an Iceberg table: read it with fetch_log_segment"
        )

    def delete_body(self, meta: RemoteLogSegmentMetadata, manifest: SegmentManifest | None) -> None:
        """Nothing before the manifest: the ``.log`` goes with the ``.indexes``, after it."""

    def metric_sources(self) -> Mapping[str, Callable[[], HasStats | None]]:
        return {}

    def close(self) -> None:
        """The read path's pools and caches are the manager's to close."""
