"""The lazy stream returned by ``fetch_log_segment``.

The broker opens a stream at a batch position, reads until it has ``max.partition.fetch.bytes`` and closes
it, so the stream must cost only what is read. It decodes chunks on the shared thread pool at most
``readahead`` chunks ahead of the reader, hands out the requested byte range only, and cancels what is
pending when closed. Every chunk is verified (GCM tag, zstd frame size, CRC-32C) before a byte of it is
returned.
"""

from __future__ import annotations

import collections
import io
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from chunking.chunk_index import Chunk
from rsm.errors import RemoteStorageException

ChunkLoader = Callable[[Chunk], "bytes | memoryview"]


class SegmentStream(io.RawIOBase):
    """Bytes ``[start, end]`` of a segment, decoded chunk by chunk, read ahead in parallel."""

    def __init__(
        self,
        chunks: list[Chunk],
        start: int,
        end: int,
        loader: ChunkLoader,
        executor: Executor,
        readahead: int,
        describe: str,
    ) -> None:
        super().__init__()
        self._chunks = chunks
        self._next_to_schedule = 0
        self._pending: collections.deque[Future[bytes | memoryview]] = collections.deque()
        self._loader = loader
        self._executor = executor
        self._readahead = max(0, readahead)
        self._describe = describe
        self._start = start
        self._end = end
        self._current: memoryview | None = None
        self._current_pos = 0
        self._consumed_chunks = 0
        self._remaining = end - start + 1 if chunks else 0

    def readable(self) -> bool:
        return True

    def _schedule(self, in_flight: int) -> None:
        while self._next_to_schedule < len(self._chunks) and len(self._pending) < in_flight:
            chunk = self._chunks[self._next_to_schedule]
            self._pending.append(self._executor.submit(self._loader, chunk))
            self._next_to_schedule += 1

    def _advance(self) -> bool:
        if self._consumed_chunks >= len(self._chunks):
            return False
        self._schedule(self._readahead + 1)  # the chunk needed now, plus the read-ahead window
        future = self._pending.popleft()
        chunk = self._chunks[self._consumed_chunks]
        try:
            data = future.result()
        except RemoteStorageException:
            self._cancel_pending()
            raise
        except Exception as e:  # a backend or decode error: name the segment and the chunk
            self._cancel_pending()
            raise RemoteStorageException(
                f"failed to read chunk {chunk.id} of {self._describe}: {type(e).__name__}: {e}"
            ) from e
        self._consumed_chunks += 1
        self._schedule(self._readahead)
        view = memoryview(data)
        lo = self._start - chunk.original_position if chunk.original_position <= self._start else 0
        hi = min(chunk.original_size, self._end - chunk.original_position + 1)
        self._current = view[lo:hi]
        self._current_pos = 0
        return True

    def readinto(self, b: Any) -> int:
        """Fill ``b`` as far as the range allows (like a buffered file: short only at the end)."""
        if self.closed:
            raise ValueError("read from a closed segment stream")
        out = memoryview(b).cast("B")
        filled = 0
        while filled < len(out):
            if self._current is None or self._current_pos >= len(self._current):
                if self._remaining <= 0 or not self._advance():
                    break
                continue
            n = min(len(out) - filled, len(self._current) - self._current_pos)
            out[filled : filled + n] = self._current[self._current_pos : self._current_pos + n]
            self._current_pos += n
            self._remaining -= n
            filled += n
        return filled

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        buf = bytearray(size)
        n = self.readinto(buf)
        del buf[n:]
        return bytes(buf)

    def readall(self) -> bytes:
        parts = []
        while True:
            while self._current is None or self._current_pos >= len(self._current):
                if self._remaining <= 0 or not self._advance():
                    return b"".join(parts)
            assert self._current is not None
            piece = self._current[self._current_pos :]
            self._current_pos = len(self._current)
            self._remaining -= len(piece)
            parts.append(bytes(piece))

    def _cancel_pending(self) -> None:
        while self._pending:
            self._pending.popleft().cancel()

    def close(self) -> None:
        if not self.closed:
            self._cancel_pending()
            self._current = None
        super().close()
