"""The lazy stream returned by ``fetch_log_segment``.

The broker opens a stream at a batch position, reads until it has ``max.partition.fetch.bytes`` and closes
it, so the stream must cost only what is read. It decodes chunks on the shared thread pool at most
``readahead`` chunks ahead of the reader, hands out the requested byte range only, and cancels what is
pending when closed. The chunk the reader waits for is decoded on its own thread when the pool has not started
it yet, so a new stream's first chunk does not queue behind other streams' read-ahead. Every chunk is verified
(GCM tag, else CRC-32C; zstd frame size) before a byte of it is returned.

Chunks are decoded into pooled ``ChunkBuffer`` objects; the stream owns each one from
the moment its load finishes until the reader has moved past it (or the stream is closed), then gives it back.
"""

from __future__ import annotations

import collections
import io
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import Any, NamedTuple, Protocol

from chunking.buffer_pool import ChunkBuffer
from chunking.chunk_index import Chunk
from rsm.errors import RemoteStorageException


class ChunkSupply(Protocol):
    """Where a stream's chunks come from, and whom it tells how far its reader got (``rsm.fetch.segment_reader``
    makes one per stream)."""

    def load(self, chunk: Chunk) -> ChunkBuffer:
        """The decoded chunk, in a buffer the stream then owns. Runs on the executor, several at once, or on the
        reader's own thread for the chunk it needs next when the executor has not started that one yet."""
        ...

    def lookup(self, chunk: Chunk) -> ChunkBuffer | None:
        """The chunk at once when it is already decoded (the memory tier), with a buffer the stream then owns, or
        None. Such a chunk never goes through ``load`` on the executor: a warm broker fetch costs no thread
        hand-off, which on a busy broker host is what a fetch's latency is made of."""
        ...

    def found(self, chunk: Chunk) -> None:
        """A chunk ``lookup`` answered: the supply orders its loads and must not wait for a chunk it never sees."""
        ...

    def reached(self, chunk_id: int) -> None:
        """The id of the furthest chunk the reader reached, once per chunk: when the reader moves on to a later
        chunk, and when the stream closes (prefetch starts from there). Not for the first chunk while it is
        being read: the stream's own read-ahead is still planning its loads then, and a prefetch started at
        once would race it with GETs of its own. A stream the shim keeps open across broker fetches is never
        closed between them, so closing alone would not do."""
        ...


class Piece(NamedTuple):
    """``length`` bytes at ``offset`` in ``buffer.memory``."""

    buffer: ChunkBuffer
    offset: int
    length: int

    @property
    def view(self) -> memoryview:
        return self.buffer.memory[self.offset : self.offset + self.length]


def _release_result(future: Future[ChunkBuffer]) -> None:
    """Done-callback for loads nobody will read any more (the stream was closed or failed)."""
    if not future.cancelled() and future.exception() is None:
        future.result().release()


class SegmentStream(io.RawIOBase):
    """Bytes ``[start, end]`` of a segment, decoded chunk by chunk, read ahead in parallel."""

    def __init__(
        self,
        chunks: Sequence[Chunk],
        start: int,
        end: int,
        supply: ChunkSupply,
        executor: Executor,
        readahead: int,
        describe: str,
    ) -> None:
        """``chunks`` cover bytes ``[start, end]``; ``supply`` gives them, loads running on ``executor`` at most
        ``readahead`` chunks ahead of the reader; ``describe`` names the segment in errors."""
        super().__init__()
        self._supply = supply
        self._reported = -1  # the last chunk id given to ``supply.reached``
        self._chunks = chunks
        self._next_to_schedule = 0
        # Each scheduled chunk: its load in flight, or the buffer ``lookup`` found (no future needed).
        self._pending: collections.deque[tuple[Chunk, Future[ChunkBuffer] | ChunkBuffer]] = collections.deque()
        self._executor = executor
        self._readahead = max(0, readahead)
        self._describe = describe
        self._start = start
        self._end = end
        self._current_buffer: ChunkBuffer | None = None  # the chunk being read; bytes [_pos, _end) are left
        self._pos = 0
        self._end_in_buffer = 0
        self._consumed_chunks = 0
        self._remaining = end - start + 1 if chunks else 0
        self._failure: RemoteStorageException | None = None

    def readable(self) -> bool:
        return True

    def _schedule(self, in_flight: int) -> None:
        while self._next_to_schedule < len(self._chunks) and len(self._pending) < in_flight:
            chunk = self._chunks[self._next_to_schedule]
            found = self._supply.lookup(chunk)
            if found is None:
                self._pending.append((chunk, self._executor.submit(self._supply.load, chunk)))
            else:
                self._pending.append((chunk, found))
                self._supply.found(chunk)
            self._next_to_schedule += 1

    def _advance(self) -> bool:
        if self._failure is not None:  # the read-ahead is gone: going on would pair chunks with wrong positions
            raise RemoteStorageException(
                f"{self._describe}: this stream already failed ({self._failure}); open a new one to retry"
            ) from self._failure
        if self._remaining <= 0 or self._consumed_chunks >= len(self._chunks):
            self._drop_current()  # at the end: the last buffer goes back now, not at close()
            return False
        self._schedule(self._readahead + 1)  # the chunk needed now, plus the read-ahead window
        _, scheduled = self._pending.popleft()
        chunk = self._chunks[self._consumed_chunks]
        try:
            data = self._take(chunk, scheduled)
        except RemoteStorageException as e:
            self._fail(e)
            raise
        except Exception as e:  # a backend or decode error: name the segment and the chunk
            failure = RemoteStorageException(
                f"failed to read chunk {chunk.id} of {self._describe}: {type(e).__name__}: {e}"
            )
            self._fail(failure)
            raise failure from e
        self._consumed_chunks += 1
        self._schedule(self._readahead)
        if self._consumed_chunks > 1:
            self._report_progress()
        self._drop_current()
        lo = self._start - chunk.original_position if chunk.original_position <= self._start else 0
        hi = min(chunk.original_size, self._end - chunk.original_position + 1)
        self._current_buffer = data
        self._pos = lo
        self._end_in_buffer = hi
        return True

    def _take(self, chunk: Chunk, scheduled: Future[ChunkBuffer] | ChunkBuffer) -> ChunkBuffer:
        """The chunk the reader needs now. A load still queued on the executor is taken back and run on the
        reader's thread: otherwise the reader waits behind every read-ahead load queued before it, of all streams,
        which on a busy broker is most of a cold fetch's latency."""
        if isinstance(scheduled, ChunkBuffer):
            return scheduled
        if scheduled.cancel():
            return self._supply.load(chunk)
        return scheduled.result()

    def _fail(self, failure: RemoteStorageException) -> None:
        self._failure = failure
        self._cancel_pending()
        self._drop_current()

    def _drop_current(self) -> None:
        if self._current_buffer is not None:
            self._current_buffer.release()
            self._current_buffer = None

    def readinto(self, b: Any) -> int:
        """Fill ``b`` as far as the range allows (like a buffered file: short only at the end)."""
        if self.closed:
            raise ValueError("read from a closed segment stream")
        out = memoryview(b).cast("B")
        filled = 0
        while filled < len(out):
            piece = self.next_piece(len(out) - filled)
            if piece is None:
                break
            out[filled : filled + piece.length] = piece.view
            filled += piece.length
        return filled

    def next_piece(self, limit: int = -1) -> Piece | None:
        """The next piece of the range without copying it: where it lies in a decoded chunk's buffer, at most
        ``limit`` bytes (all that is left of the current chunk when negative); ``None`` at the end.

        Transports that hand memory to another reader (a JVM direct buffer, a shared-memory slot, ``sendmsg``)
        use this to skip the copy ``readinto`` makes. The piece is valid only until the next read or ``close``:
        then its buffer may be reused for another chunk.
        """
        if self.closed:
            raise ValueError("read from a closed segment stream")
        while self._current_buffer is None or self._pos >= self._end_in_buffer:
            if not self._advance():
                return None
        n = self._end_in_buffer - self._pos
        if 0 <= limit < n:
            n = limit
        piece = Piece(self._current_buffer, self._pos, n)
        self._pos += n
        self._remaining -= n
        return piece

    def take_piece(self) -> Piece | None:
        """Like :meth:`next_piece` for the rest of the current chunk, but the caller becomes the buffer's owner
        and must ``piece.buffer.release()`` it: for transports that keep several pieces in flight (the sidecar's
        shared-memory window) while the stream goes on."""
        piece = self.next_piece()  # no limit: the whole rest of the chunk
        if piece is not None:
            self._current_buffer = None  # ownership passed on: not released here
        return piece

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        buf = bytearray(size)
        n = self.readinto(buf)
        del buf[n:]
        return bytes(buf)

    def readall(self) -> bytes:
        parts = []
        while (piece := self.next_piece()) is not None:
            parts.append(bytes(piece.view))
        return b"".join(parts)

    def _cancel_pending(self) -> None:
        while self._pending:
            _, scheduled = self._pending.popleft()
            if isinstance(scheduled, ChunkBuffer):
                scheduled.release()
            elif not scheduled.cancel():  # running or done: its buffer comes back when it finishes
                scheduled.add_done_callback(_release_result)

    def close(self) -> None:
        if not self.closed:
            self._cancel_pending()
            self._drop_current()
            self._report_progress()
        super().close()

    def _report_progress(self) -> None:
        if self._consumed_chunks == 0:
            return
        reached = self._chunks[self._consumed_chunks - 1].id
        if reached > self._reported:
            self._reported = reached
            self._supply.reached(reached)
