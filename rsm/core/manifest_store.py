"""Manifests: read once per segment copy and cached with the unwrapped data key, and what the read path and the
tools need from them.

``ManifestStore`` is the plugin's side of two seams of ``rsm.fetch``: ``SegmentSources`` (a segment's source,
built from its manifest) and ``PartitionListing`` (what is tiered in a partition, and a listed segment's
metadata). It also re-wraps a manifest's data key for key rotation, the one write of a manifest outside a copy.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from backends.base import ConditionalWrites, KeyNotFound, PreconditionFailed, StorageBackend, StorageBackendException
from chunking.transform import ChunkTransformer, crc32c
from encryption.aes import ChunkCipher, DataKeyAndAad
from encryption.errors import KeyRingError, KeyServiceError
from encryption.keyring import RsaKeyRing
from rsm.core.catalog import SegmentCatalog, TieredSegment
from rsm.core.config import RsmConfig
from rsm.core.manifest import MAX_MANIFEST_SIZE, EncryptionMetadata, SegmentManifest
from rsm.core.object_keys import SegmentKeys, mask, segment_keys
from rsm.errors import (
    ConfigException,
    CorruptDataException,
    KeyRingException,
    KeyServiceException,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    storage_failure,
)
from rsm.fetch.lru import TimedLru
from rsm.fetch.rate_limit import RateLimiter, throttled
from rsm.fetch.source import SegmentSource
from rsm.metadata import RemoteLogSegmentMetadata, TopicIdPartition

log = logging.getLogger(__name__)


@dataclass
class LoadedManifest:
    """A parsed manifest with what it takes to read its segment (the transformer holds the unwrapped key).

    ``cache_id`` names this copy of the segment in the caches: the manifest key plus the data key's AAD (or the
    manifest's CRC-32C without encryption), so a segment id copied again never meets old chunks."""

    key: str
    manifest: SegmentManifest
    transformer: ChunkTransformer
    cache_id: str


@dataclass(frozen=True)
class RewrapResult:
    """What key rotation found in one manifest: the key pair that wrapped its data key (None: the segment is
    unencrypted) and whether the manifest was (or, in a dry run, would be) rewritten under the active pair.
    ``gone``: the segment was deleted before or while it was re-wrapped, and stays deleted."""

    previous_key_id: str | None
    rewrapped: bool
    gone: bool = False
    previous_version: str | None = None
    """The key version of the key service that wrapped the data key (None: key files, or unencrypted)."""


# How often a re-wrap reads the manifest again after a concurrent change (someone else re-wrapped it) before it
# gives up on that manifest.
_REWRAP_ATTEMPTS = 3


class ManifestStore:
    """Owns the manifest cache (``fetch.manifest.cache.*``); reads ``key.prefix`` and ``key.prefix.mask`` from
    ``config``. ``upload_limiter`` paces manifest rewrites like every upload. ``conditional`` is the backend's
    ``ConditionalWrites`` (key rotation rewrites a manifest only if it is still the one it read)."""

    def __init__(
        self,
        config: RsmConfig,
        backend: StorageBackend,
        key_ring: RsaKeyRing | None,
        upload_limiter: RateLimiter | None = None,
        conditional: ConditionalWrites | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.conditional = conditional
        self.key_ring = key_ring
        self.cache: TimedLru[str, LoadedManifest] = TimedLru(
            "segment-manifest", config["fetch.manifest.cache.size"], config["fetch.manifest.cache.retention.ms"] / 1000
        )
        self.get_timeout_s = config["fetch.manifest.cache.get.timeout.ms"] / 1000
        self.upload_limiter = upload_limiter

    def keys(self, meta: RemoteLogSegmentMetadata) -> SegmentKeys:
        return segment_keys(self.config["key.prefix"], meta)

    def show(self, key: str) -> str:
        return mask(key, self.config["key.prefix"], self.config["key.prefix.mask"])

    # --- the read path's seams ---------------------------------------------------------------------------------

    def manifest(self, meta: RemoteLogSegmentMetadata) -> SegmentManifest:
        return self._load(self.keys(meta), meta).manifest

    def source(self, meta: RemoteLogSegmentMetadata) -> SegmentSource:
        return self.opened(meta)[0]

    def opened(self, meta: RemoteLogSegmentMetadata) -> tuple[SegmentSource, SegmentManifest]:
        """The segment's source and its manifest, from one lookup (counted once by the manifest cache)."""
        keys = self.keys(meta)
        loaded = self._load(keys, meta)
        manifest = loaded.manifest
        integrity = manifest.integrity
        return SegmentSource(
            meta,
            loaded.key,
            loaded.cache_id,
            keys.log,
            self.show(keys.log),
            manifest.chunk_index,
            loaded.transformer,
            integrity.chunk_crcs if integrity is not None else None,
            keys.indexes,
            self.show(keys.indexes),
            manifest.segment_indexes,
            integrity.index_crcs if integrity is not None else None,
            manifest.section is None,
        ), manifest

    def catalog(self) -> SegmentCatalog:
        """The tiered segments under ``key.prefix``."""
        return SegmentCatalog(self.backend, self.config["key.prefix"], self.show)

    def partition_segments(self, tip: TopicIdPartition) -> list[TieredSegment]:
        return self.catalog().partition_segments(tip)

    def segment_metadata(self, segment: TieredSegment) -> RemoteLogSegmentMetadata:
        """The broker's metadata of a listed segment, from its manifest."""
        manifest = self.manifest(segment.metadata_stub())
        return manifest.recorded_metadata(f"manifest {self.show(segment.keys.manifest)}")

    def forget(self, manifest_key: str) -> None:
        """The segment was copied (maybe again), re-wrapped or deleted: its cached manifest is stale."""
        self.cache.invalidate(manifest_key)

    # --- loading -------------------------------------------------------------------------------------------------

    def _load(self, keys: SegmentKeys, meta: RemoteLogSegmentMetadata) -> LoadedManifest:
        return self.cache.get_or_load(
            keys.manifest, lambda: self._read(keys, meta), self.get_timeout_s, f"manifest {self.show(keys.manifest)}"
        )

    def _fetch(self, keys: SegmentKeys, meta: RemoteLogSegmentMetadata) -> bytes:
        try:
            with self.backend.fetch(keys.manifest) as f:
                return f.read(MAX_MANIFEST_SIZE + 1)
        except KeyNotFound:
            raise RemoteResourceNotFoundException(
                f"{meta.describe()} is not in remote storage: manifest {self.show(keys.manifest)} not found"
            ) from None
        except StorageBackendException as e:
            raise storage_failure(
                f"cannot read the manifest {self.show(keys.manifest)} of {meta.describe()}: {e}", e
            ) from e

    def _read(self, keys: SegmentKeys, meta: RemoteLogSegmentMetadata) -> LoadedManifest:
        what = f"manifest {self.show(keys.manifest)}"
        raw = self._fetch(keys, meta)
        try:
            manifest = SegmentManifest.from_json_bytes(raw, what)
        except CorruptDataException as first:
            # A manifest is read whole, without a range: a body cut short in transit whose Content-Length was
            # rewritten to match (a proxy, a middlebox) looks like a complete short object at the HTTP level, and
            # only parsing tells. One more read separates that from a stored object that is really corrupt.
            again = self._fetch(keys, meta)
            if again == raw:
                raise
            manifest = SegmentManifest.from_json_bytes(again, what)
            log.warning("%s was damaged in transit on the first read (%s); a second read parsed", what, first)
            raw = again
        tag = manifest.encryption.aad.hex() if manifest.encryption is not None else f"{crc32c(raw):08x}"
        return LoadedManifest(keys.manifest, manifest, self._transformer_for(manifest, meta), f"{keys.manifest}@{tag}")

    def _transformer_for(self, manifest: SegmentManifest, meta: RemoteLogSegmentMetadata) -> ChunkTransformer:
        cipher = None
        if manifest.encryption is not None:
            if self.key_ring is None:
                raise KeyRingException(
                    f"{meta.describe()} is encrypted with key pair "
                    f"{manifest.encryption.key_pair_id!r}, but encryption is not configured: set "
                    f"encryption.enabled, encryption.key.pairs and that pair's private key"
                )
            try:
                data_key = self.key_ring.unwrap(manifest.encryption.data_key)
                cipher = ChunkCipher(DataKeyAndAad(data_key, manifest.encryption.aad))
            except KeyServiceError as e:
                if e.retriable:
                    raise KeyServiceException(f"cannot read {meta.describe()} now: {e}") from None
                raise KeyRingException(f"cannot read {meta.describe()}: {e}") from None
            except KeyRingError as e:
                raise KeyRingException(f"cannot read {meta.describe()}: {e}") from None
            except ValueError as e:  # a key of the wrong length: anyone with the public key can wrap one
                raise KeyRingException(
                    f"cannot read {meta.describe()}: the data key in its manifest unwraps to an invalid AES key "
                    f"({e}); the manifest was not written by this plugin or was tampered with"
                ) from None
        return ChunkTransformer(manifest.compression, 3, cipher)

    # --- key rotation --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _rewrap_errors(self, manifest_key: str) -> Iterator[None]:
        """The key ring's errors during a re-wrap as the plugin's: retriable ones as ``KeyServiceException``."""
        try:
            yield
        except KeyServiceError as e:
            if e.retriable:
                raise KeyServiceException(f"cannot re-wrap {self.show(manifest_key)} now: {e}") from None
            raise KeyRingException(f"cannot re-wrap {self.show(manifest_key)}: {e}") from None
        except KeyRingError as e:
            raise KeyRingException(f"cannot re-wrap {self.show(manifest_key)}: {e}") from None

    def rewrap(self, manifest_key: str, dry_run: bool = False) -> RewrapResult:
        """Re-wrap one segment's data key under the active key pair by rewriting only its manifest (the segment's
        data is untouched); a data key wrapped by the active pair under an older version of its service's key is
        re-wrapped under the pinned version. With ``dry_run`` the manifest is only inspected.

        The rewrite is conditional on the manifest being unchanged since it was read (``ConditionalWrites``): a
        segment deleted in between (retention) stays deleted and is reported ``gone``; a manifest changed in
        between is read again."""
        if self.key_ring is None:
            raise ConfigException("key rotation needs encryption.enabled=true and the key ring configured")
        what = f"manifest {self.show(manifest_key)}"
        for _ in range(_REWRAP_ATTEMPTS):
            try:
                if self.conditional is not None:
                    read = self.conditional.fetch_versioned(manifest_key, MAX_MANIFEST_SIZE)
                    raw, version = read.data, read.version
                else:
                    with self.backend.fetch(manifest_key) as f:
                        raw, version = f.read(MAX_MANIFEST_SIZE + 1), ""
            except KeyNotFound:
                return RewrapResult(None, False, gone=True)
            manifest = SegmentManifest.from_json_bytes(raw, what)
            if manifest.encryption is None:
                return RewrapResult(None, False)
            old_id = manifest.encryption.key_pair_id
            with self._rewrap_errors(manifest_key):
                old_version = self.key_ring.wrapped_under(manifest.encryption.data_key)[1]
                current = self.key_ring.is_current(manifest.encryption.data_key)
            if current:
                return RewrapResult(old_id, False, previous_version=old_version)
            if dry_run:
                return RewrapResult(old_id, True, previous_version=old_version)
            if self.conditional is None:
                raise RemoteStorageException(
                    f"cannot re-wrap {what}: {self.backend} cannot replace an object only if it is unchanged, so a "
                    f"segment deleted meanwhile could come back; key rotation needs a backend with ConditionalWrites"
                )
            with self._rewrap_errors(manifest_key):
                data_key = self.key_ring.unwrap(manifest.encryption.data_key)
            manifest.encryption = EncryptionMetadata(self.key_ring.wrap(data_key), manifest.encryption.aad)
            body = throttled(manifest.to_json_bytes(), self.upload_limiter).read()
            try:
                self.conditional.replace_if_unchanged(manifest_key, body, version)
            except PreconditionFailed:
                self.forget(manifest_key)
                continue  # deleted or rewritten meanwhile: the next read tells which
            self.forget(manifest_key)
            return RewrapResult(old_id, True, previous_version=old_version)
        raise RemoteStorageException(
            f"cannot re-wrap {what}: it changed on every one of {_REWRAP_ATTEMPTS} attempts; run the rotation again"
        )
