"""The files of the filesystem backend: keys as names below the root (long segments as nested pieces, uploads
under a temp name), the directory lock, a ranged reader, and a copy of an open file by hard link or in the kernel."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from backends.base import StorageBackendException

COPY_BUFFER = 1024 * 1024

# A key segment longer than a file name may be (255 bytes; Kafka allows 249-character topics, and the directory
# is '<topic>-<topicId>') is stored as nested directories: every piece but the last ends with CONTINUED.
CONTINUED = ".~cont"
_PIECE_BYTES = 200
# Uploads in progress are written to '<TEMP_PREFIX><name>.<random>' beside their target. The prefix lets
# ``list_stale_temp_files`` find what a killed process left behind, and keeps ``list`` from ever showing it.
TEMP_PREFIX = ".kts-partial."
# Why a hard link may be refused where a copy of the bytes still works: another filesystem mounted below the root,
# the file's link limit, a filesystem without hard links, or the source's name gone since it was opened.
_LINK_REFUSED = frozenset(
    {errno.EXDEV, errno.EMLINK, errno.EPERM, errno.EACCES, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOENT}
)
# Why the kernel's copy_file_range may be unavailable here (old kernels, some filesystems): then sendfile copies.
_COPY_RANGE_REFUSED = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


@contextlib.contextmanager
def locked_dir(directory: str) -> Iterator[None]:
    """An exclusive ``flock`` of ``directory`` (the lock of conditional replacement; see the module docstring)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    """Make the names created or removed in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_version(st: os.stat_result) -> str:
    """What conditional replacement compares: the file's inode, modification time and size."""
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def split_long(part: str) -> list[str]:
    """``part`` as one or more directory/file names of at most ``_PIECE_BYTES`` UTF-8 bytes each (plus marker)."""
    if len(part.encode()) <= _PIECE_BYTES:
        return [part]
    pieces: list[str] = []
    current = ""
    for ch in part:
        if len((current + ch).encode()) > _PIECE_BYTES:
            pieces.append(current + CONTINUED)
            current = ""
        current += ch
    pieces.append(current)
    return pieces


def join_pieces(names: list[str]) -> str:
    """The inverse of splitting: a key from the names on the path below the root."""
    out: list[str] = []
    pending = ""
    for name in names:
        if name.endswith(CONTINUED):
            pending += name[: -len(CONTINUED)]
        else:
            out.append(pending + name)
            pending = ""
    return "/".join(out)


def failure(operation: str, key: str, root: Path | None, e: OSError) -> StorageBackendException:
    return StorageBackendException(f"filesystem {operation} of key {key!r} under {root} failed: {e}")


class RangeReader(io.RawIOBase):
    """A file view limited to ``[start, start+length)`` that closes the file with itself; a failing read is a
    ``StorageBackendException`` naming ``key``."""

    def __init__(self, f: BinaryIO, length: int, key: str, root: Path | None) -> None:
        self._f = f
        self._left = length
        self._key = key
        self._root = root

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(b)
        if len(view) > self._left:
            view = view[: self._left]
        try:
            n = self._f.readinto(view)  # type: ignore[attr-defined]
        except OSError as e:
            raise failure("read", self._key, self._root, e) from e
        n = n or 0
        self._left -= n
        return n

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        if size is None or size < 0 or size > self._left:
            size = self._left
        try:
            data = self._f.read(size)
        except OSError as e:
            raise failure("read", self._key, self._root, e) from e
        self._left -= len(data)
        return data

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()


def link_open_file(fd: int, source: str, path: str) -> bool:
    """Hard-link ``source`` at ``path`` if it still is the file open as ``fd``; False when the filesystem
    refuses the link (see ``_LINK_REFUSED``) or the name now leads to another file (replaced since it was
    opened, or a symlink): then ``path`` is not left behind."""
    try:
        os.link(source, path, follow_symlinks=False)
    except OSError as e:
        if e.errno in _LINK_REFUSED:
            return False
        raise
    linked, opened = os.stat(path, follow_symlinks=False), os.fstat(fd)
    if (linked.st_dev, linked.st_ino) != (opened.st_dev, opened.st_ino):
        os.unlink(path)
        return False
    return True


def copy_open_file(fd: int, path: str, fsync: bool) -> None:
    """Copy the bytes of the file open as ``fd`` into a new file ``path`` inside the kernel (copy_file_range,
    which shares the blocks where the filesystem can; sendfile otherwise), synced when ``fsync``."""
    size = os.fstat(fd).st_size
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        copied = 0
        use_range = hasattr(os, "copy_file_range")
        while copied < size:
            want = min(size - copied, 1 << 30)
            if use_range:
                try:
                    n = os.copy_file_range(fd, out, want, copied, copied)
                except OSError as e:
                    if e.errno not in _COPY_RANGE_REFUSED:
                        raise
                    use_range = False
                    continue
            else:
                os.lseek(out, copied, os.SEEK_SET)
                n = os.sendfile(out, fd, copied, want)
            if n == 0:  # the source shrank under us: what it holds now is the copy
                break
            copied += n
        if fsync:
            os.fsync(out)
    finally:
        os.close(out)
