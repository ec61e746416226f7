"""The storage seam: what the RemoteStorageManager needs from an object store.

Every backend (filesystem, S3, GCS, Azure, or a user's own ``module:Class``) implements
``StorageBackend``. The manager never sees SDK types or SDK exceptions: a backend maps them to
``KeyNotFound``, ``InvalidRange`` or ``StorageBackendException`` so that the error handling above it is
the same for every store.

A backend may offer more, each an optional protocol of its own: ranged reads straight into a buffer
(``ReadsRangesInto``), request counters (``Instrumented``), listing with sizes and ages (``ListsDetails``),
unfinished uploads (``PendingUploads``), conditional replacement (``ConditionalWrites``), listing part of a
large key space (``RangeListable``) and copies inside the store (``CopiesObjects``).
``BackendCapabilities.of`` is the one place that asks which of them a backend implements, once, when the plugin
(or a catalog) wires the backend; nothing asks again per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable


class StorageBackendException(Exception):
    """A backend call failed; the message names the operation, the bucket/root and the key. ``retriable`` says the
    failure was transient (throttling, a 5xx, a timeout, a connection error) and the same call may succeed later,
    after the backend's own retries gave up."""

    retriable: bool = False

    def __init__(self, *args: object, retriable: bool = False) -> None:
        super().__init__(*args)
        self.retriable = retriable


class KeyNotFound(StorageBackendException):
    """The key does not exist in the store."""

    def __init__(self, key: str, where: str = "") -> None:
        self.key = key
        super().__init__(f"key {key!r} not found{(' in ' + where) if where else ''}")


class InvalidKey(StorageBackendException):
    """The store refuses the key itself (it could never hold an object under it): nothing exists to clean up."""


class PreconditionFailed(StorageBackendException):
    """A conditional write found the object changed or deleted since it was read: nothing was written."""

    def __init__(self, key: str, where: str = "", detail: str = "") -> None:
        self.key = key
        super().__init__(
            f"key {key!r}{(' in ' + where) if where else ''} changed or was deleted since it was read"
            f"{(': ' + detail) if detail else ''}; nothing was written"
        )


class InvalidRange(StorageBackendException):
    """A ranged read asked for bytes the object does not have."""

    def __init__(self, key: str, start: int, end: int | None, size: int | None = None) -> None:
        self.key = key
        self.start = start
        self.end = end
        self.size = size
        end_s = "end" if end is None else str(end)
        size_s = "" if size is None else f" (object size {size})"
        super().__init__(f"invalid range [{start}, {end_s}] for key {key!r}{size_s}")


@runtime_checkable
class StorageBackend(Protocol):
    """An object store addressed by string keys.

    Ranges are inclusive on both ends, as Kafka's fetch API and HTTP ``Range`` headers are. A range whose
    start is at or past the object's size raises ``InvalidRange``; an ``end`` past the last byte is
    clamped to the last byte (HTTP semantics), so callers can ask for "up to N bytes".
    """

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Receive the ``storage.``-prefixed keys with that prefix stripped (``root``, ``s3.bucket.name``...)."""
        ...

    def upload(self, key: str, data: BinaryIO) -> int:
        """Store everything ``data.read()`` yields under ``key`` and return the byte count.

        Must stream (never hold the whole object in memory), replace an existing object, and never leave a
        partial object visible under ``key`` when it fails.
        """
        ...

    def fetch(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        """Open a stream over bytes ``[start, end]`` of ``key`` (``end=None``: to the end of the object)."""
        ...

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""
        ...

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete several keys (one batched request where the store has one); missing keys are ignored."""
        ...

    def list(self, prefix: str) -> Iterator[str]:
        """Yield every key that starts with ``prefix``, in lexicographic order."""
        ...

    def close(self) -> None:
        """Release clients, pools and sockets."""
        ...


# Ranges up to this size are read into one preallocated buffer; larger ones grow with the bytes that arrive.
_PREALLOCATE_LIMIT = 8 * 1024 * 1024


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object with what garbage collection needs: its size and last-modified time (epoch seconds)."""

    key: str
    size: int
    modified: float


@dataclass(frozen=True)
class PendingUpload:
    """An upload that was started and never finished: an open S3 multipart upload (``kind`` "multipart-upload",
    ``upload_id`` its id), an Azure blob of uncommitted blocks (``kind`` "uncommitted-blocks", ``upload_id`` its
    ETag) or a filesystem temp file (``kind`` "temp-file", ``upload_id`` its path below the root). Nothing reads
    it; only its abort frees the storage it holds."""

    kind: str
    key: str
    upload_id: str
    started: float
    size: int | None = None


@dataclass(frozen=True)
class VersionedObject:
    """A small object read whole with the store's version of it: an S3 or Azure ETag, a GCS generation, the
    filesystem's inode, change time and size. Only the backend that gave it interprets ``version``."""

    data: bytes
    version: str


# --- optional capabilities ---------------------------------------------------------------------------------------


@runtime_checkable
class ConditionalWrites(Protocol):
    """Read-modify-write of one small object without losing a concurrent change: ``replace_if_unchanged`` writes
    only when the object is still the version ``fetch_versioned`` read (S3 If-Match, GCS ifGenerationMatch, Azure
    If-Match, a locked compare on the filesystem). An object deleted in between stays deleted."""

    def fetch_versioned(self, key: str, max_bytes: int) -> VersionedObject:
        """Up to ``max_bytes + 1`` bytes of ``key`` (so a caller sees it is too large) and its version;
        ``KeyNotFound`` when it does not exist."""
        ...

    def replace_if_unchanged(self, key: str, data: bytes, version: str) -> None:
        """Replace ``key`` with ``data`` if it still is ``version``; otherwise (changed, or deleted) raise
        ``PreconditionFailed`` and write nothing."""
        ...


@runtime_checkable
class ReadsRangesInto(Protocol):
    """A ranged read straight into the caller's buffer, without a stream (the filesystem does it with one
    ``preadv``). Without it, every chunk and index read streams from ``fetch``."""

    def read_range_into(self, key: str, start: int, end: int, out: memoryview) -> int:
        """Bytes ``[start, end]`` of ``key`` into ``out``; returns how many the object has in that range (fewer
        when it is shorter). ``KeyNotFound``, ``InvalidRange`` (start at or past the end) as for ``fetch``."""
        ...


@runtime_checkable
class Instrumentation(Protocol):
    """Request counters a backend keeps (``backends.instrumentation.BackendMetrics``)."""

    def add_listener(self, listener: Callable[[str, int, float | None], None]) -> None:
        """Call ``listener(counter, increment, latency seconds or None)`` for every increment from now on."""
        ...


@runtime_checkable
class Instrumented(Protocol):
    """A backend whose requests the plugin forwards to the client-metrics bean of its store (the cloud
    backends): ``STORE`` names the store (``S3``, ``GCS``, ``Azure``), ``instrumentation`` counts."""

    STORE: str
    instrumentation: Instrumentation


@runtime_checkable
class ListsDetails(Protocol):
    """Listing with each object's size and age, so garbage collection can date orphan objects (without it, it
    lists none: nothing is deleted on a guess)."""

    def list_details(self, prefix: str) -> Iterator[ObjectInfo]:
        """``list`` with sizes and modification times, same order."""
        ...


@runtime_checkable
class PendingUploads(Protocol):
    """Uploads that were started and never finished, which hold storage nothing reads (garbage collection)."""

    def list_pending_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        """The unfinished uploads of keys under ``prefix``."""
        ...

    def abort_pending_upload(self, upload: PendingUpload) -> None:
        """Free what one of them holds; one that finished or was aborted since is not an error."""
        ...


@runtime_checkable
class RangeListable(Protocol):
    """Listing part of a large key space: catalogs of tens of thousands of segments list one partition's range,
    or the directories of the key layout, instead of every key under a prefix."""

    def list_after(self, prefix: str, start_after: str) -> Iterator[str]:
        """Keys under ``prefix`` that sort after ``start_after`` (byte order), in order, page by page."""
        ...

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Each distinct ``prefix + name + "/"`` that keys under ``prefix`` start with (the "directories" right
        under it), without listing the keys below them."""
        ...


@runtime_checkable
class CopiesObjects(Protocol):
    """Copies made by the store itself (S3 CopyObject, GCS rewrite, Azure Copy Blob, a hard link on the
    filesystem): the quarantine moves an object aside by copying it and deleting the original."""

    def copy_object(self, source_key: str, target_key: str) -> None:
        """Copy ``source_key`` to ``target_key`` inside the store without moving the bytes through this
        process; ``KeyNotFound`` when the source is gone. The target is overwritten if it exists."""
        ...


@dataclass(frozen=True)
class BackendCapabilities:
    """Which optional protocols a backend implements: each field is the backend itself, or None."""

    ranged_reads: ReadsRangesInto | None = None
    instrumentation: Instrumented | None = None
    details: ListsDetails | None = None
    pending_uploads: PendingUploads | None = None
    range_listing: RangeListable | None = None
    conditional_writes: ConditionalWrites | None = None
    copies: CopiesObjects | None = None

    @classmethod
    def of(cls, backend: StorageBackend) -> BackendCapabilities:
        """The one place that asks what ``backend`` offers; the plugin calls it once, when it wires the backend."""
        instrumented = isinstance(backend, Instrumented) and isinstance(backend.instrumentation, Instrumentation)
        return cls(
            backend if isinstance(backend, ReadsRangesInto) else None,
            backend if instrumented else None,  # type: ignore[arg-type]
            backend if isinstance(backend, ListsDetails) else None,
            backend if isinstance(backend, PendingUploads) else None,
            backend if isinstance(backend, RangeListable) else None,
            backend if isinstance(backend, ConditionalWrites) else None,
            backend if isinstance(backend, CopiesObjects) else None,
        )


class RangeReader:
    """Whole byte ranges of one backend's objects, through its ``read_range_into`` when it has one (known when
    the reader is made), else through ``fetch``. A short answer raises ``InvalidRange``: the range comes from a
    manifest, so the object is shorter than its manifest says."""

    def __init__(self, backend: StorageBackend, capabilities: BackendCapabilities | None = None) -> None:
        self.backend = backend
        self._direct = (capabilities or BackendCapabilities.of(backend)).ranged_reads

    def read(self, key: str, start: int, end: int) -> bytearray:
        """Bytes ``[start, end]`` of ``key``. The manifest may lie about the range: above ``_PREALLOCATE_LIMIT``
        the buffer grows only as bytes arrive, so memory is bounded by the object's real size."""
        expected = end - start + 1
        if expected <= _PREALLOCATE_LIMIT:
            out = bytearray(expected)
            self.read_into(key, start, end, memoryview(out))
            return out
        grown = bytearray()
        with self.backend.fetch(key, start, end) as stream:
            while len(grown) < expected:
                piece = stream.read(min(_PREALLOCATE_LIMIT, expected - len(grown)))
                if not piece:
                    break
                grown += piece
        if len(grown) != expected:
            raise InvalidRange(key, start, end, start + len(grown))
        return grown

    def read_into(self, key: str, start: int, end: int, out: memoryview) -> None:
        """Fill ``out`` (exactly ``end - start + 1`` bytes) with that range of ``key``."""
        expected = end - start + 1
        if len(out) != expected:
            raise ValueError(f"buffer of {len(out)} bytes for a range of {expected}")
        if self._direct is not None:
            got = self._direct.read_range_into(key, start, end, out)
        else:
            with self.backend.fetch(key, start, end) as stream:
                got = _readinto_fully(stream, out)
        if got != expected:
            raise InvalidRange(key, start, end, start + got)


def read_range(backend: StorageBackend, key: str, start: int, end: int) -> bytearray:
    """One ranged read, for tools and tests (the plugin's read path keeps a ``RangeReader``)."""
    return RangeReader(backend).read(key, start, end)


def read_range_into(backend: StorageBackend, key: str, start: int, end: int, out: memoryview) -> None:
    """One ranged read into ``out``, for tools and tests (the plugin's read path keeps a ``RangeReader``)."""
    RangeReader(backend).read_into(key, start, end, out)


def readinto_some(stream: Any, out: memoryview) -> int:
    """One read into ``out`` (0 at the end): ``readinto`` where the stream has it, else ``read`` and a copy."""
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        return readinto(out) or 0
    data = stream.read(len(out)) or b""
    out[: len(data)] = data
    return len(data)


def _readinto_fully(stream: BinaryIO, out: memoryview) -> int:
    got = 0
    while got < len(out):
        n = readinto_some(stream, out[got:])
        if n == 0:
            break
        got += n
    return got


def read_exactly(stream: BinaryIO, n: int) -> bytes:
    """Read up to ``n`` bytes, looping over short reads (sockets and SDK bodies return partial reads)."""
    first = stream.read(n)
    if first is None:
        first = b""
    if len(first) == n or not first:
        return bytes(first)
    parts = [first]
    got = len(first)
    while got < n:
        more = stream.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
