"""A local-directory backend: the embedded default and the reference for the backend contract.

Writes go to a temporary file beside the target, are fsync'ed, then renamed into place, so a reader sees
either the old object or the whole new one and a crash never leaves a partial object under the real key.
A failing file operation leaves as a ``StorageBackendException`` naming the operation, the key and the root
(a missing object as ``KeyNotFound``), never as a raw ``OSError``: the backend contract of ``backends.base``.
Keys are resolved under ``storage.root`` and may not escape it: no ``..``, no absolute keys, and no symlinks
anywhere below the root (reads open one component at a time with O_NOFOLLOW, writes check the resolved
directory), so a link swapped in later cannot redirect a read or a write either.

Conditional replacement (``replace_if_unchanged``) compares the file's inode, modification time and size with
what ``fetch_versioned`` saw, under an exclusive ``flock`` of the object's directory, and renames the new file
into place before releasing it; ``upload`` and ``delete`` take the same lock for their rename and unlink. So
between processes using this backend on one local filesystem, a replacement never overwrites a newer object
nor brings back a deleted one (every write renames a new file into place: a rewrite always changes the inode).
``flock`` is advisory, and on network filesystems its reach is the server's: there the guarantee is not given.

A copy inside the store (``copy_object``) is a hard link renamed into place: since no write ever changes a file in
place, the two keys stay independent objects that share their bytes until one is written again.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from backends.base import (
    InvalidKey,
    InvalidRange,
    KeyNotFound,
    ObjectInfo,
    PendingUpload,
    PreconditionFailed,
    StorageBackendException,
    VersionedObject,
)
from backends.configdef import ConfigException
from backends.filesystem_config import CONFIG_DEF
from backends.filesystem_files import (
    CONTINUED,
    COPY_BUFFER,
    TEMP_PREFIX,
    RangeReader,
    copy_open_file,
    failure,
    file_version,
    fsync_dir,
    join_pieces,
    link_open_file,
    locked_dir,
    split_long,
)


class FileSystemBackend:
    """Objects are files under ``root``; the key's ``/`` separators become directories."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root: Path | None = Path(root).resolve() if root is not None else None
        self._root_str = str(self.root)
        self.fsync = True
        self.fsync_interval = 32 * 1024 * 1024
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)

    def configure(self, configs: Mapping[str, Any]) -> None:
        values = CONFIG_DEF.parse(configs)
        if values["root"] is None and self.root is None:
            raise ConfigException(
                "Missing required configuration 'storage.root' for the filesystem backend: "
                "set it to the directory that should hold the tiered objects"
            )
        if values["root"] is not None:
            self.root = Path(values["root"]).resolve()
            self._root_str = str(self.root)
        assert self.root is not None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ConfigException(
                f"Invalid value {values['root']!r} for configuration storage.root: it (or one of its parents) is a "
                f"file, not a directory; point it at a directory for the tiered objects"
            ) from None
        except OSError as e:
            raise ConfigException(
                f"Invalid value {values['root']!r} for configuration storage.root: cannot create the directory "
                f"({e.strerror})"
            ) from None
        self.fsync = values["fsync.enabled"]
        self.fsync_interval = values["fsync.interval.bytes"]
        self.sweep_temp_files(values["stale.upload.age.ms"] / 1000)

    @contextlib.contextmanager
    def _failing(self, operation: str, key: str) -> Iterator[None]:
        """An ``OSError`` of the file operations inside leaves as this backend's ``StorageBackendException``."""
        try:
            yield
        except OSError as e:
            raise failure(operation, key, self.root, e) from e

    def _parts(self, key: str) -> list[str]:
        if self.root is None:
            raise StorageBackendException("filesystem backend used before configure(): storage.root is unset")
        if not key or key.startswith("/") or "\\" in key or "\x00" in key:
            raise InvalidKey(f"invalid object key {key!r}: keys are relative '/'-separated paths")
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise InvalidKey(f"invalid object key {key!r}: empty, '.' or '..' path segments")
        if any(p.endswith(CONTINUED) or p.startswith(TEMP_PREFIX) for p in parts):
            raise InvalidKey(
                f"invalid object key {key!r}: a path segment ends with {CONTINUED!r} or starts with {TEMP_PREFIX!r}, "
                "which the filesystem backend reserves"
            )
        return [piece for part in parts for piece in split_long(part)]

    def _path(self, key: str) -> str:
        """The file of ``key`` for uploads and deletes. Its directory must be reached without any symlink (the
        root itself is fully resolved at configure time, so the lexical and the real path must agree); the
        file itself is replaced or unlinked, never followed."""
        path = os.path.join(self._root_str, *self._parts(key))
        directory = os.path.dirname(path)
        real = os.path.realpath(directory)
        if real != directory:
            where = (
                "outside the storage root" if not (real + os.sep).startswith(self._root_str + os.sep) else "elsewhere"
            )
            raise StorageBackendException(
                f"object key {key!r} passes through a symlink under the storage root {self.root} (it leads {where}: "
                f"{real}); objects and their directories must be real files and directories"
            )
        return path

    def _open_fd(self, key: str) -> int:
        """Open ``key`` for reading one component at a time below the root, never following a symlink: no
        link can lead a read out of the root, even one swapped in after an earlier read (and it is cheaper
        than resolving the absolute path, which costs one lstat per component of every ancestor)."""
        parts = self._parts(key)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        opened: list[int] = []
        try:
            try:
                dir_fd = os.open(self._root_str, flags | os.O_DIRECTORY)
                opened.append(dir_fd)
                for name in parts[:-1]:
                    dir_fd = os.open(name, flags | os.O_DIRECTORY, dir_fd=dir_fd)
                    opened.append(dir_fd)
                return os.open(parts[-1], flags, dir_fd=dir_fd)
            except OSError as e:
                self._refuse_symlink(key, parts, opened)
                if isinstance(e, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
                    raise KeyNotFound(key, f"filesystem root {self.root}") from None
                raise
        finally:
            for fd in opened:
                os.close(fd)

    def _refuse_symlink(self, key: str, parts: list[str], opened: list[int]) -> None:
        """After a failed open: when the component that failed is a symlink, say so instead of 'not found'."""
        name = parts[len(opened) - 1] if opened else None
        if name is None:
            return
        try:
            st = os.stat(name, dir_fd=opened[-1], follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise StorageBackendException(
                f"object key {key!r} passes through the symlink {name!r} under the storage root {self.root}; "
                "objects and their directories must be real files and directories"
            )

    def upload(self, key: str, data: BinaryIO) -> int:
        path = self._path(key)
        directory = os.path.dirname(path)
        with self._failing("upload", key):
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.path.basename(path)}.", dir=directory)
        try:
            with os.fdopen(fd, "wb", buffering=0) as out:
                total = self._write_all(out, data, key)
            with self._failing("upload", key), locked_dir(directory):
                os.replace(tmp, path)
                if self.fsync:
                    fsync_dir(directory)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return total

    def _write_all(self, out: BinaryIO, data: BinaryIO, key: str) -> int:
        """Everything ``data`` yields, written to ``out`` (synced as it goes). Only the writes are this
        backend's operations: a read of ``data`` that fails is the caller's error and leaves unchanged."""
        total = since_sync = 0
        view = memoryview(bytearray(COPY_BUFFER))
        readinto = getattr(data, "readinto", None)
        while True:
            if readinto is not None:
                n = readinto(view)
                if not n:
                    break
                chunk: Any = view[:n]
            else:
                chunk = data.read(COPY_BUFFER)
                if not chunk:
                    break
                n = len(chunk)
            with self._failing("upload", key):
                mv = memoryview(chunk)
                while mv:
                    written = out.write(mv)
                    mv = mv[written:]
                total += n
                since_sync += n
                if self.fsync and since_sync >= self.fsync_interval:
                    os.fdatasync(out.fileno())
                    since_sync = 0
        with self._failing("upload", key):
            if self.fsync:
                os.fsync(out.fileno())
        return total

    def fetch(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        with self._failing("fetch", key):
            f = os.fdopen(self._open_fd(key), "rb", buffering=0)
            try:
                size = os.fstat(f.fileno()).st_size
                if start < 0 or (end is not None and end < start):
                    raise InvalidRange(key, start, end, size)
                if start >= size and not (start == 0 and end is None):
                    raise InvalidRange(key, start, end, size)
                last = size - 1 if end is None else min(end, size - 1)
                if start:
                    f.seek(start)
                reader = RangeReader(f, last - start + 1, key, self.root)
                return io.BufferedReader(reader, buffer_size=COPY_BUFFER)  # type: ignore[return-value]
            except BaseException:
                f.close()
                raise

    def read_range_into(self, key: str, start: int, end: int, out: memoryview) -> int:
        """Bytes ``[start, end]`` into ``out`` with ``preadv``: no stream objects, no intermediate copy (the
        manager's chunk and index reads). Returns how many bytes the object had in that range."""
        with self._failing("read", key):
            fd = self._open_fd(key)
            try:
                size = os.fstat(fd).st_size
                if start < 0 or end < start or start >= size:
                    raise InvalidRange(key, start, end, size)
                want = min(end, size - 1) - start + 1
                got = 0
                while got < want:
                    n = os.preadv(fd, [out[got:want]], start + got)
                    if n <= 0:  # the file shrank under us
                        break
                    got += n
                return got
            finally:
                os.close(fd)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            with locked_dir(os.path.dirname(path)):
                os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise failure("delete", key, self.root, e) from e
        self._prune_empty_dirs(Path(path).parent)

    # --- conditional replacement (backends.base.ConditionalWrites) -----------------------------------------
    def fetch_versioned(self, key: str, max_bytes: int) -> VersionedObject:
        with self._failing("fetch", key), os.fdopen(self._open_fd(key), "rb", buffering=0) as f:
            version = file_version(os.fstat(f.fileno()))
            return VersionedObject(f.read(max_bytes + 1), version)

    def replace_if_unchanged(self, key: str, data: bytes, version: str) -> None:
        path = self._path(key)
        directory = os.path.dirname(path)
        try:
            with self._failing("upload", key), locked_dir(directory):
                try:
                    current = file_version(os.stat(path, follow_symlinks=False))
                except FileNotFoundError:
                    raise PreconditionFailed(key, f"filesystem root {self.root}", "deleted") from None
                if current != version:
                    raise PreconditionFailed(key, f"filesystem root {self.root}", "rewritten")
                fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.path.basename(path)}.", dir=directory)
                try:
                    with os.fdopen(fd, "wb", buffering=0) as out:
                        self._write_all(out, io.BytesIO(data), key)
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
                    raise
                if self.fsync:
                    fsync_dir(directory)
        except StorageBackendException as e:
            if isinstance(e.__cause__, FileNotFoundError):  # the directory went with the last object in it
                raise PreconditionFailed(key, f"filesystem root {self.root}", "deleted") from None
            raise

    # --- copies inside the store (backends.base.CopiesObjects) --------------------------------------------
    def copy_object(self, source_key: str, target_key: str) -> None:
        """A hard link to the source's file, made under a temp name beside the target and renamed over it: no
        byte moves, and a reader sees the old target or the whole copy. Every write of this backend renames a
        new file into place and never rewrites one, so a later write to either key leaves the other as it was.
        Where the filesystem refuses the link, the kernel copies the bytes into the temp file instead."""
        path = self._path(target_key)
        directory = os.path.dirname(path)
        operation = f"copy (to {target_key!r})"
        with self._failing(operation, source_key):
            source = self._open_fd(source_key)
        try:
            with self._failing(operation, source_key):
                os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, f"{TEMP_PREFIX}{os.path.basename(path)}.{secrets.token_hex(8)}")
            try:
                with self._failing(operation, source_key):
                    if not link_open_file(source, self._path(source_key), tmp):
                        copy_open_file(source, tmp, self.fsync)
                    with locked_dir(directory):
                        os.replace(tmp, path)
                        if self.fsync:
                            fsync_dir(directory)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        finally:
            os.close(source)

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def _prune_empty_dirs(self, directory: Path) -> None:
        assert self.root is not None
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def list(self, prefix: str) -> Iterator[str]:
        assert self.root is not None
        found: list[str] = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            rel_dir = os.path.relpath(dirpath, self.root)
            dir_names = [] if rel_dir == "." else rel_dir.split(os.sep)
            for name in filenames:
                if name.startswith(TEMP_PREFIX) or (name.startswith(".") and name.endswith(".tmp")):
                    continue
                key = join_pieces([*dir_names, name])
                if key.startswith(prefix):
                    found.append(key)
        yield from sorted(found)

    def list_after(self, prefix: str, start_after: str) -> Iterator[str]:
        """Keys under ``prefix`` sorting after ``start_after`` (the object stores' StartAfter)."""
        return (key for key in self.list(prefix) if key > start_after)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Each distinct ``prefix + name + "/"`` that keys under ``prefix`` start with."""
        seen: set[str] = set()
        for key in self.list(prefix):
            name, slash, _rest = key[len(prefix) :].partition("/")
            if slash and name not in seen:
                seen.add(name)
                yield f"{prefix}{name}/"

    def list_details(self, prefix: str) -> Iterator[ObjectInfo]:
        """``list`` with each object's size and modification time (for garbage collection)."""
        assert self.root is not None
        for key in self.list(prefix):
            try:
                st = os.stat(self._path(key), follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise failure("list", key, self.root, e) from e
            yield ObjectInfo(key, st.st_size, st.st_mtime)

    def list_pending_uploads(self, prefix: str = "") -> Iterator[PendingUpload]:
        """Temp files of uploads that never finished (a killed process leaves them); ``prefix`` filters by the
        key they were meant for."""
        assert self.root is not None
        for dirpath, _dirnames, filenames in os.walk(self.root):
            rel_dir = os.path.relpath(dirpath, self.root)
            dir_names = [] if rel_dir == "." else rel_dir.split(os.sep)
            for name in filenames:
                if not name.startswith(TEMP_PREFIX):
                    continue
                target = name[len(TEMP_PREFIX) :].rsplit(".", 1)[0]
                key = join_pieces([*dir_names, target])
                if not key.startswith(prefix):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name), follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise failure("list", key, self.root, e) from e
                yield PendingUpload("temp-file", key, os.path.join(*dir_names, name), st.st_mtime, st.st_size)

    def abort_pending_upload(self, upload: PendingUpload) -> None:
        """Delete a temp file found by ``list_pending_uploads`` (only such a file: the name is checked)."""
        assert self.root is not None
        parts = upload.upload_id.split(os.sep)
        if not parts[-1].startswith(TEMP_PREFIX) or any(p in ("", ".", "..") for p in parts):
            raise InvalidKey(f"{upload.upload_id!r} is not a temp file of this backend")
        path = os.path.join(self._root_str, *parts)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise failure("abort", upload.key, self.root, e) from e
        self._prune_empty_dirs(Path(path).parent)

    def sweep_temp_files(self, older_than_seconds: float) -> int:
        """Delete temp files older than ``older_than_seconds`` (no live upload runs that long); returns bytes freed."""
        freed = 0
        cutoff = time.time() - older_than_seconds
        for upload in list(self.list_pending_uploads("")):
            if upload.started < cutoff:
                self.abort_pending_upload(upload)
                freed += upload.size or 0
        return freed

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"FileSystemBackend(root={self.root})"
