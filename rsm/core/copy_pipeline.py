"""The ``.log`` upload stream: original chunks in, transformed chunks out, in order, with bounded memory.

Chunks are read with ``pread`` and transformed on the shared pool; the uploading thread pulls the results
in order through ``readinto``. At most ``window`` chunks are in flight, so a 1 GiB segment costs a few chunks
of memory, not the segment. Sizes and CRC-32C values are recorded as chunks complete, for the manifest.
"""

from __future__ import annotations

import collections
import io
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from chunking.transform import ChunkTransformer, crc32c
from rsm.errors import RemoteStorageException


class SegmentChangedError(RemoteStorageException):
    """The segment file is shorter than when the copy started (truncated or replaced while being read)."""


class CopyCancelled(RemoteStorageException):
    """The copy was cancelled (its caller gave up on it); what it had uploaded is removed."""


class CancellableReader(io.RawIOBase):
    """``raw`` that raises ``CopyCancelled`` from the read after ``cancelled()`` turns true: an upload in progress
    stops within one buffer."""

    def __init__(self, raw: Any, cancelled: Callable[[], bool], what: str) -> None:
        super().__init__()
        self._raw = raw
        self._cancelled = cancelled
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._cancelled():
            raise CopyCancelled(f"copy of {self._what} cancelled while its .log was uploading")
        return int(self._raw.readinto(b))


class TransformedLogReader(io.RawIOBase):
    def __init__(
        self,
        path: os.PathLike[str] | str,
        file_size: int,
        chunk_size: int,
        transformer: ChunkTransformer,
        executor: Executor,
        window: int,
    ) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY)
        self._path = str(path)
        self._size = file_size
        self._chunk_size = chunk_size
        self._transformer = transformer
        self._executor = executor
        self._window = max(1, window)
        # An empty segment has no chunk to transform; its index still lists one empty chunk (Aiven's layout).
        self._count = -(-file_size // chunk_size)
        self._next = 0
        self._pending: collections.deque[Future[tuple[int, bytes | memoryview]]] = collections.deque()
        self._current: memoryview | None = None
        self._pos = 0
        self.transformed_sizes: list[int] = []
        self.chunk_crcs: list[int] = []

    def readable(self) -> bool:
        return True

    def _work(self, chunk_id: int) -> tuple[int, bytes | memoryview]:
        offset = chunk_id * self._chunk_size
        length = max(0, min(self._chunk_size, self._size - offset))
        data = os.pread(self._fd, length, offset) if length else b""
        if len(data) != length:
            raise SegmentChangedError(
                f"segment file {self._path} ended at byte {offset + len(data)} while reading "
                f"chunk {chunk_id}; it was {self._size} bytes when the copy started"
            )
        return crc32c(data), self._transformer.transform(data)

    def _fill(self) -> None:
        while self._next < self._count and len(self._pending) < self._window:
            self._pending.append(self._executor.submit(self._work, self._next))
            self._next += 1

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        while self._current is None or self._pos >= len(self._current):
            self._fill()
            if not self._pending:
                if self._count == 0 and not self.transformed_sizes:
                    self.transformed_sizes.append(0)
                    self.chunk_crcs.append(0)
                return 0
            crc, data = self._pending.popleft().result()
            self._fill()
            self.chunk_crcs.append(crc)
            self.transformed_sizes.append(len(data))
            self._current = memoryview(data)
            self._pos = 0
            if len(self._current) == 0:
                continue
        n = min(len(out), len(self._current) - self._pos)
        out[:n] = self._current[self._pos : self._pos + n]
        self._pos += n
        return n

    @property
    def complete(self) -> bool:
        return (
            len(self.transformed_sizes) == max(1, self._count)
            and not self._pending
            and (self._current is None or self._pos >= len(self._current))
        )

    def close(self) -> None:
        if not self.closed:
            while self._pending:
                self._pending.popleft().cancel()
            try:
                os.close(self._fd)
            except OSError:
                pass
        super().close()
