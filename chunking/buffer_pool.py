"""Reusable memory that fetched chunks are decoded into.

A fetch decodes every chunk (read, decrypt, decompress) straight into one of these buffers instead of a fresh
``bytes`` object, for two reasons:

* a 4 MiB allocation per chunk costs page faults and an ``mmap``/``munmap`` pair in the allocator, which at
  several GB/s is a visible share of the fetch time;
* transports that hand the memory to another reader without copying it (a JVM direct ``ByteBuffer`` in the
  in-process shim, a shared-memory slot of the sidecar) need memory that lives as long as they say, not as
  long as a garbage collector in another runtime decides. A pooled buffer is wrapped once and reused.

A buffer is reference counted: whoever takes it from the pool holds one reference, the chunk cache's memory tier
holds another while it keeps the decoded chunk (so a warm read hands out the same memory, no copy), and it
goes back to the pool when the last holder calls :meth:`ChunkBuffer.release`; views into it are invalid after
that. A buffer is written only while its first holder has it alone, before it is shared. Pools never grow past
``max_idle`` idle buffers, so memory follows the number of chunks actually in flight or cached.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

_REFS_LOCK = threading.Lock()


class ChunkBuffer:
    """A writable region holding one decoded chunk in ``memory[:size]``.

    ``handles`` is where a transport keeps its own wrapping of this memory (for example a JVM ByteBuffer),
    created on first use and reused for as long as the buffer lives. ``region_offset`` is set for buffers that
    live in the pool's shared region (where another process can read them), None for heap buffers.
    """

    __slots__ = ("memory", "size", "handles", "region_offset", "_pool", "_in_use", "_refs")

    def __init__(self, memory: memoryview, pool: ChunkBufferPool | None, region_offset: int | None = None) -> None:
        self.memory = memory
        self.size = 0
        self.handles: dict[str, Any] = {}
        self.region_offset = region_offset
        self._pool = pool
        self._in_use = True
        self._refs = 1

    @property
    def capacity(self) -> int:
        return len(self.memory)

    @property
    def view(self) -> memoryview:
        return self.memory[: self.size]

    def retain(self) -> None:
        """One more holder (the caller must already hold a reference, or hold the lock of whoever does)."""
        with _REFS_LOCK:
            self._refs += 1

    def release(self) -> None:
        """Drop one reference; the last one gives the memory back, and nothing may read or write it afterwards.
        A release after the last is ignored (a pooled buffer listed twice would get two owners)."""
        with _REFS_LOCK:
            if not self._in_use:
                return
            self._refs -= 1
            if self._refs > 0:
                return
            self._in_use = False
        if self._pool is not None:
            self._pool.give_back(self)

    @property
    def shared(self) -> bool:
        return self._refs > 1


class ChunkBufferPool:
    """Buffers of ``buffer_size`` bytes; larger requests get an unpooled buffer of their own.

    With a ``region`` (a shared-memory mapping, for instance), buffers are carved out of it first, each with
    its ``region_offset`` so a reader in another process can find it; when all of them are taken, ordinary heap
    buffers fill in, so a busy moment degrades to copies instead of failing.
    """

    def __init__(self, buffer_size: int, max_idle: int = 32, region: memoryview | None = None) -> None:
        if buffer_size <= 0:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        self.buffer_size = buffer_size
        self.max_idle = max_idle
        self._idle: collections.deque[ChunkBuffer] = collections.deque()
        self._region_free: collections.deque[ChunkBuffer] = collections.deque()
        self._lock = threading.Lock()
        self.allocated = 0
        self.region_buffers = 0
        if region is not None:
            for offset in range(0, len(region) - buffer_size + 1, buffer_size):
                buf = ChunkBuffer(region[offset : offset + buffer_size], self, offset)
                buf._in_use = False
                self._region_free.appendleft(buf)
                self.region_buffers += 1

    def take(self, size: int) -> ChunkBuffer:
        """A buffer with room for ``size`` bytes and ``size`` already set as its length."""
        if size > self.buffer_size:
            buf = ChunkBuffer(memoryview(bytearray(size)), None)
        else:
            try:
                buf = self._region_free.pop()
            except IndexError:
                try:
                    buf = self._idle.pop()
                except IndexError:
                    buf = self._allocate()
        buf.size = size
        buf._in_use = True
        buf._refs = 1
        return buf

    def _allocate(self) -> ChunkBuffer:
        with self._lock:
            self.allocated += 1
        return ChunkBuffer(memoryview(bytearray(self.buffer_size)), self)

    def give_back(self, buf: ChunkBuffer) -> None:
        buf.size = 0
        if buf.region_offset is not None:
            self._region_free.append(buf)
        elif len(self._idle) < self.max_idle:
            self._idle.append(buf)

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def region_free(self) -> int:
        return len(self._region_free)

    def close(self) -> None:
        """Drop the idle heap buffers (buffers still out are simply not returned)."""
        self._idle.clear()
