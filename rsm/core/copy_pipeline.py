"""The ``.log`` upload stream: original chunks in, transformed chunks out, in order, with bounded memory.

Chunks are read with ``pread`` and transformed on the shared pool; the uploading thread pulls the results
in order through ``readinto``. Each copy may always have one chunk in flight; more only with a token of the
``ReadAhead`` all copies share, so ten copies at once hold ten chunks plus the shared read-ahead, not ten windows.
Sizes and CRC-32C values are recorded as chunks complete, for the manifest.
"""

from __future__ import annotations

import collections
import io
import os
import threading
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


class ReadAhead:
    """Tokens for chunks transformed ahead of their upload, shared by all copies; taken without waiting, so a copy
    never blocks on another (it goes on with its one chunk of its own)."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self._free = tokens
        self._lock = threading.Lock()

    @property
    def taken(self) -> int:
        with self._lock:
            return self.tokens - self._free

    def try_take(self) -> bool:
        with self._lock:
            if self._free == 0:
                return False
            self._free -= 1
            return True

    def give(self, n: int = 1) -> None:
        with self._lock:
            self._free += n


class TransformedLogReader(io.RawIOBase):
    def __init__(
        self,
        path: os.PathLike[str] | str,
        file_size: int,
        chunk_size: int,
        transformer: ChunkTransformer,
        executor: Executor,
        window: int,
        read_ahead: ReadAhead | None = None,
    ) -> None:
        """At most ``window`` chunks in flight; with ``read_ahead``, all but the first of them need its token."""
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY)
        self._path = str(path)
        self._size = file_size
        self._chunk_size = chunk_size
        self._transformer = transformer
        self._executor = executor
        self._window = max(1, window)
        self._read_ahead = read_ahead
        self._tokens = 0  # tokens of read_ahead held for chunks in flight
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
            if self._pending and self._read_ahead is not None:
                if not self._read_ahead.try_take():
                    return
                self._tokens += 1
            self._pending.append(self._executor.submit(self._work, self._next))
            self._next += 1

    def _took_one(self) -> None:
        """A chunk left the window: every chunk in flight but the oldest holds a token, so one goes back."""
        extra = self._tokens - max(0, len(self._pending) - 1)
        if extra > 0 and self._read_ahead is not None:
            self._tokens -= extra
            self._read_ahead.give(extra)

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
            self._took_one()
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
            if self._tokens and self._read_ahead is not None:
                self._read_ahead.give(self._tokens)
                self._tokens = 0
            try:
                os.close(self._fd)
            except OSError:
                pass
        super().close()
