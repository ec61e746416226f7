"""The quarantine's place for Iceberg tables' files: a :class:`~rsm.deletion.holding.HoldingStore` over a table's
FileIO, rooted at the warehouse.

Names are locations (``s3://bucket/p/iceberg/kafka/orders/data/x.parquet``). Only locations under the warehouse
are the store's own: the quarantine keeps a file at ``<warehouse>/kts-quarantine/<run>/<path relative to the
warehouse>``. A copy is server-side where the FileIO's filesystem can (pyarrow's ``copy_file``: S3 ``CopyObject``,
a local copy on disk; fsspec's ``copy``), otherwise streamed through this process.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

from rsm.deletion.quarantine import QUARANTINE_DIR
from rsm.errors import RemoteStorageException

_AZURE_SCHEMES = ("abfs", "abfss", "wasb", "wasbs")
_COPY_BUFFER = 8 << 20


def normal_location(uri: str) -> str:
    """A location as a comparable string: ``file:/x``, ``file:///x`` and ``/x`` are the same file, and so are
    Azure's ``abfs://container@account.dfs.core.windows.net/x`` (what tables reference) and
    ``abfs://container/x`` (what listing the container gives)."""
    u = urlparse(uri)
    if u.scheme in ("", "file"):
        return "file://" + os.path.normpath(u.path)
    netloc = u.netloc.split("@", 1)[0] if u.scheme in _AZURE_SCHEMES else u.netloc
    return f"{u.scheme}://{netloc}{u.path}"


def list_locations(io: Any, location: str) -> Iterator[tuple[str, int, float]]:
    """(URI, size, modified epoch seconds) of every file under ``location`` through the FileIO ``io`` (nothing
    when it does not exist)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    u = urlparse(location)
    scheme = u.scheme or "file"
    if isinstance(io, PyArrowFileIO):
        import pyarrow.fs as pafs

        _, netloc, path = io.parse_location(location)
        fs = io.fs_by_scheme(scheme, netloc)
        infos = fs.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
        for info in infos:
            if info.type == pafs.FileType.File:
                mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
                yield (f"file://{info.path}" if scheme == "file" else f"{scheme}://{info.path}"), info.size or 0, mtime
        return
    get_fs = getattr(io, "get_fs", None)
    if get_fs is None:
        raise RemoteStorageException(
            f"cannot list {location}: the FileIO {type(io).__name__} lists no files; orphan files are not removed"
        )
    fs = get_fs(scheme)
    root = location.split("://", 1)[-1].rstrip("/")
    for path, info in fs.find(root, detail=True).items():
        modified = info.get("last_modified") or info.get("mtime") or info.get("LastModified") or time.time()
        epoch = modified.timestamp() if isinstance(modified, datetime) else float(modified)
        yield f"{scheme}://{path}", int(info.get("size") or 0), epoch


class FileIOHolding:
    """A warehouse's files through an Iceberg FileIO, for the quarantine.

    ``warehouse`` is the warehouse's location (``file:///w``, ``s3://b/p/iceberg``); ``root`` (what the
    quarantine is given) is ``<warehouse>/kts-quarantine/``. Names are locations in the warehouse's own spelling;
    :meth:`relative` refuses any other."""

    def __init__(self, io: Any, warehouse: str) -> None:
        self.io = io
        self.warehouse = warehouse.rstrip("/") + "/"
        self._normal_warehouse = normal_location(warehouse).rstrip("/") + "/"

    @property
    def root(self) -> str:
        """Where the quarantine keeps what it holds: ``<warehouse>/kts-quarantine/``."""
        return self.warehouse + QUARANTINE_DIR

    def describe(self) -> str:
        return f"warehouse {self.warehouse}"

    def relative(self, name: str) -> str | None:
        """``name``'s path under the warehouse; None for a location outside it or in the quarantine (never the
        quarantine's to hold)."""
        normal = normal_location(name)
        if not normal.startswith(self._normal_warehouse):
            return None
        relative = normal[len(self._normal_warehouse) :]
        return None if not relative or relative.startswith(QUARANTINE_DIR) else relative

    def location(self, relative: str) -> str:
        """The location of ``relative`` (a path under the warehouse)."""
        return self.warehouse + relative.lstrip("/")

    def _fs(self, name: str) -> tuple[Any, str] | None:
        """(filesystem, path) through which ``name`` can be copied server-side, or None."""
        from pyiceberg.io.pyarrow import PyArrowFileIO

        scheme = urlparse(name).scheme or "file"
        if isinstance(self.io, PyArrowFileIO):
            _, netloc, path = self.io.parse_location(name)
            return self.io.fs_by_scheme(scheme, netloc), path
        get_fs = getattr(self.io, "get_fs", None)
        if get_fs is not None:
            return get_fs(scheme), name.split("://", 1)[-1]
        return None

    def copy(self, source: str, target: str) -> None:
        if not self.exists(source):
            raise FileNotFoundError(source)
        found, target_fs = self._fs(source), self._fs(target)
        if found is not None and target_fs is not None and found[0] is target_fs[0]:
            fs, path = found
            from pyiceberg.io.pyarrow import PyArrowFileIO

            if isinstance(self.io, PyArrowFileIO):
                if urlparse(target).scheme in ("", "file"):
                    os.makedirs(os.path.dirname(target_fs[1]), exist_ok=True)
                fs.copy_file(path, target_fs[1])
            else:
                fs.copy(path, target_fs[1])
            return
        with self.io.new_input(source).open() as src, self.io.new_output(target).create(overwrite=True) as dst:
            shutil.copyfileobj(src, dst, _COPY_BUFFER)

    def exists(self, name: str) -> bool:
        return bool(self.io.new_input(name).exists())

    def size(self, name: str) -> int | None:
        entry = self.io.new_input(name)
        if not entry.exists():
            return None
        return int(len(entry))

    def delete(self, name: str) -> None:
        try:
            self.io.delete(name)
        except FileNotFoundError:
            pass

    def put(self, name: str, data: bytes) -> None:
        with self.io.new_output(name).create(overwrite=True) as out:
            out.write(data)

    def get(self, name: str) -> bytes:
        with self.io.new_input(name).open() as f:
            return bytes(f.read())

    def list(self, prefix: str) -> Iterator[str]:
        """The locations of the files whose location starts with ``prefix`` (a folder's, ending in ``/``, lists
        that folder; another lists the folder ``prefix`` is in and keeps what matches), spelt as the warehouse is
        (Azure lists ``abfs://container/x`` for the warehouse's ``abfs://container@account.../x``)."""
        folder = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
        wanted = normal_location(prefix).rstrip("/") + ("/" if prefix.endswith("/") else "")
        for path, _size, _mtime in list_locations(self.io, folder):
            normal = normal_location(path)
            if normal.startswith(wanted) and normal.startswith(self._normal_warehouse):
                yield self.warehouse + normal[len(self._normal_warehouse) :]
