"""The storage seam: what the RemoteStorageManager needs from an object store.

Every backend (filesystem, S3, GCS, Azure, or a user's own ``module:Class``) implements
``StorageBackend``. The manager never sees SDK types or SDK exceptions: a backend maps them to
``KeyNotFound``, ``InvalidRange`` or ``StorageBackendException`` so that the error handling above it is
the same for every store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable


class StorageBackendException(Exception):
    """A backend call failed; the message names the operation, the bucket/root and the key."""


class KeyNotFound(StorageBackendException):
    """The key does not exist in the store."""

    def __init__(self, key: str, where: str = "") -> None:
        self.key = key
        super().__init__(f"key {key!r} not found{(' in ' + where) if where else ''}")


class InvalidKey(StorageBackendException):
    """The store refuses the key itself (it could never hold an object under it): nothing exists to clean up."""


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


class GarbageCapable(Protocol):
    """Optional backend methods garbage collection uses where a backend has them (checked with ``getattr``):
    ``list_details`` for object ages, ``list_pending_uploads``/``abort_pending_upload`` for unfinished uploads."""

    def list_details(self, prefix: str) -> Iterator[ObjectInfo]: ...

    def list_pending_uploads(self, prefix: str) -> Iterator[PendingUpload]: ...

    def abort_pending_upload(self, upload: PendingUpload) -> None: ...


class RangeListable(Protocol):
    """Optional backend methods for listing part of a large key space (checked with ``getattr``): catalogs of
    tens of thousands of segments list one partition's range instead of everything under a prefix."""

    def list_after(self, prefix: str, start_after: str) -> Iterator[str]:
        """Keys under ``prefix`` that sort after ``start_after`` (byte order), in order, page by page."""
        ...

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Each distinct ``prefix + name + "/"`` that keys under ``prefix`` start with (the "directories" right
        under it), without listing the keys below them."""
        ...


def read_range(backend: StorageBackend, key: str, start: int, end: int) -> bytearray:
    """Fetch ``[start, end]`` of ``key`` fully; a short answer means the object is shorter than the manifest says.

    The range comes from a manifest, which may lie: above ``_PREALLOCATE_LIMIT`` the buffer grows only as bytes
    actually arrive, so memory is bounded by the object's real size, never by the size a manifest claims.
    """
    expected = end - start + 1
    if expected <= _PREALLOCATE_LIMIT:
        out = bytearray(expected)
        read_range_into(backend, key, start, end, memoryview(out))
        return out
    grown = bytearray()
    with backend.fetch(key, start, end) as stream:
        while len(grown) < expected:
            piece = stream.read(min(_PREALLOCATE_LIMIT, expected - len(grown)))
            if not piece:
                break
            grown += piece
    if len(grown) != expected:
        raise InvalidRange(key, start, end, start + len(grown))
    return grown


def read_range_into(backend: StorageBackend, key: str, start: int, end: int, out: memoryview) -> None:
    """Fill ``out`` (exactly ``end - start + 1`` bytes) with that range of ``key``.

    A backend may offer ``read_range_into(key, start, end, out) -> int`` itself (the filesystem does it with one
    ``preadv``); otherwise the range is streamed from ``fetch`` into ``out``. Either way a short object raises
    ``InvalidRange``.
    """
    expected = end - start + 1
    if len(out) != expected:
        raise ValueError(f"buffer of {len(out)} bytes for a range of {expected}")
    direct = getattr(backend, "read_range_into", None)
    if direct is not None:
        got = direct(key, start, end, out)
    else:
        with backend.fetch(key, start, end) as stream:
            got = _readinto_fully(stream, out)
    if got != expected:
        raise InvalidRange(key, start, end, start + got)


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
