"""Key rotation: re-wrap the data keys of stored segments under the active key pair.

Only manifests change: the segment data stays encrypted under its own data key, which is unwrapped with the
old key pair and wrapped again with the active one. A data key wrapped by the active pair under an older version of
its key service's key (a Transit key rotated) is re-wrapped under the latest version, so the old version can be
trimmed. Once every manifest is re-wrapped, the old private key (or key version) can be retired. Each manifest is
rewritten atomically by the backend, and only if it is still the manifest that was read (the backend's conditional
write): a segment that retention deletes during the rotation stays deleted and is counted as gone. An interrupted
run is simply run again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from backends.base import KeyNotFound
from encryption.errors import KeyPairError, KeyServiceError
from encryption.keyring import RsaKeyRing
from rsm.core.manager import RemoteStorageManager
from rsm.core.manifest import MAX_MANIFEST_SIZE, SegmentManifest
from rsm.core.object_keys import Suffix
from rsm.errors import KeyServiceException, RemoteStorageException

log = logging.getLogger(__name__)

MANIFEST_SUFFIX = "." + Suffix.MANIFEST.value


def wrapped_label(key_id: str, version: str | None) -> str:
    """How reports name what wrapped a data key: the pair id, and the key service's version (``vault1 v1``)."""
    return key_id if version is None else f"{key_id} v{version}"


@dataclass
class RotationReport:
    rewrapped: dict[str, int] = field(default_factory=dict)  # old key id (and version: "vault1 v1") -> count
    already_current: int = 0
    unencrypted: int = 0
    gone: list[str] = field(default_factory=list)  # manifests deleted before or during their re-wrap: left deleted
    failed: dict[str, str] = field(default_factory=dict)  # manifest key -> error

    @property
    def total(self) -> int:
        return (
            sum(self.rewrapped.values()) + self.already_current + self.unencrypted + len(self.gone) + len(self.failed)
        )


def rewrap_all(
    manager: RemoteStorageManager,
    prefix: str | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    workers: int = 1,
) -> RotationReport:
    """Re-wrap every encrypted segment under ``prefix`` (default: the configured ``key.prefix``).

    The active pair's public key is fetched again first, so a key version rotated in the key service since the
    plugin started is the one data keys are re-wrapped under. ``workers`` manifests are handled at once (each is a
    small GET, an RSA unwrap/wrap and a PUT, so threads overlap the round trips). Resumable by construction:
    manifests already on the active pair (and its latest key version) are skipped.
    """
    ring = manager.key_ring
    if ring is None:
        raise RemoteStorageException("key rotation needs encryption.enabled=true and the key ring configured")
    try:
        ring.refresh_active()  # the key service's latest version: data keys under older ones are re-wrapped
    except (KeyServiceError, KeyPairError) as e:
        raise KeyServiceException(
            f"cannot rotate: the active key pair's public key cannot be read ({e}); nothing was re-wrapped"
        ) from None
    search = manager.config["key.prefix"] if prefix is None else prefix
    manifests = [k for k in manager.backend.list(search) if k.endswith(MANIFEST_SUFFIX)]
    report = RotationReport()
    lock = threading.Lock()  # the report's counters are shared by the worker threads

    def one(key: str) -> None:
        try:
            result = manager.rewrap_data_key(key, dry_run=dry_run)
        except Exception as e:  # keep going: one bad manifest must not stop the rotation of the others
            log.error("re-wrap of %s failed: %s", key, e)
            with lock:
                report.failed[key] = f"{type(e).__name__}: {e}"
            return
        with lock:
            if result.gone:
                report.gone.append(key)
            elif result.previous_key_id is None:
                report.unencrypted += 1
            elif not result.rewrapped:
                report.already_current += 1
            else:
                label = wrapped_label(result.previous_key_id, result.previous_version)
                report.rewrapped[label] = report.rewrapped.get(label, 0) + 1

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kts-rotate") as pool:
        futures = {pool.submit(one, key): key for key in manifests}
        for i, future in enumerate(as_completed(futures), 1):
            future.result()
            if progress is not None:
                progress(i, len(manifests), futures[future])
    return report


def key_usage(manager: RemoteStorageManager, prefix: str | None = None, workers: int = 8) -> dict[str, int]:
    """How many manifests under ``prefix`` (default: ``key.prefix``) each key pair and key version wraps, by
    ``wrapped_label`` ("vault1 v1"; "unencrypted" for segments without encryption). Reads only."""
    search = manager.config["key.prefix"] if prefix is None else prefix
    manifests = [k for k in manager.backend.list(search) if k.endswith(MANIFEST_SUFFIX)]
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def one(key: str) -> None:
        try:
            with manager.backend.fetch(key) as f:
                manifest = SegmentManifest.from_json_bytes(f.read(MAX_MANIFEST_SIZE + 1), f"manifest {key}")
        except KeyNotFound:
            return  # deleted since it was listed
        if manifest.encryption is None:
            label = "unencrypted"
        else:
            label = wrapped_label(*RsaKeyRing.wrapped_under(manifest.encryption.data_key))
        with lock:
            counts[label] = counts.get(label, 0) + 1

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kts-key-usage") as pool:
        for future in [pool.submit(one, key) for key in manifests]:
            future.result()
    return counts
