"""Key rotation: re-wrap the data keys of stored segments under the active key pair.

Only manifests change: the segment data stays encrypted under its own data key, which is unwrapped with the
old key pair and wrapped again with the active one. Once every manifest is re-wrapped, the old private key
can be retired. Each manifest is rewritten atomically by the backend, and only if it is still the manifest that
was read (the backend's conditional write): a segment that retention deletes during the rotation stays deleted
and is counted as gone. An interrupted run is simply run again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from rsm.core.manager import RemoteStorageManager
from rsm.core.object_keys import Suffix
from rsm.errors import RemoteStorageException

log = logging.getLogger(__name__)

MANIFEST_SUFFIX = "." + Suffix.MANIFEST.value


@dataclass
class RotationReport:
    rewrapped: dict[str, int] = field(default_factory=dict)  # old key id -> count
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

    ``workers`` manifests are handled at once (each is a small GET, an RSA unwrap/wrap and a PUT, so threads
    overlap the round trips). Resumable by construction: manifests already on the active pair are skipped.
    """
    ring = manager.key_ring
    if ring is None:
        raise RemoteStorageException("key rotation needs encryption.enabled=true and the key ring configured")
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
                report.rewrapped[result.previous_key_id] = report.rewrapped.get(result.previous_key_id, 0) + 1

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kts-rotate") as pool:
        futures = {pool.submit(one, key): key for key in manifests}
        for i, future in enumerate(as_completed(futures), 1):
            future.result()
            if progress is not None:
                progress(i, len(manifests), futures[future])
    return report
