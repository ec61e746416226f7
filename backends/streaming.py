"""Stream plumbing shared by the cloud backends: block-wise reading of uploads and wrapped download bodies.

Uploads arrive as an arbitrary ``BinaryIO`` (a file, a pipe, a transform pipeline) whose size is unknown up
front. ``iter_blocks`` cuts it into part/chunk/block-sized pieces while holding only one piece at a time,
and says which piece is the last one (with a one-byte look-ahead rather than a second buffered block), so
the backend can choose a single request for small objects and a multi-request upload otherwise.

Downloads hand the caller an SDK body; ``ResponseStream`` gives it one interface (``read(n)``,
``readinto``, ``close``, context manager) and turns mid-stream SDK/socket errors into
``StorageBackendException`` so nothing above the backend sees SDK exception types.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from backends.base import StorageBackendException
from backends.buffers import UploadBuffers
from backends.instrumentation import BackendMetrics
from backends.retry import Deadline, ErrorKind, RetryPolicy

_READ_PIECE = 8 * 1024 * 1024


def _read_block(data: BinaryIO, size: int, carry: bytes) -> bytes:
    """``carry`` plus up to ``size - len(carry)`` more bytes; short only at the end of the source.

    Reads in pieces of at most 8 MiB instead of pre-allocating ``size``: the part size (25 MiB by default)
    is an upper bound, and most uploads (manifests, indexes, small segments) are far smaller. A block that
    arrives in one read is returned without a copy.
    """
    parts = [carry] if carry else []
    got = len(carry)
    while got < size:
        piece = data.read(min(size - got, _READ_PIECE))
        if not piece:
            break
        parts.append(bytes(piece) if not isinstance(piece, bytes) else piece)
        got += len(piece)
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def iter_blocks(
    data: BinaryIO,
    block_size: int,
    buffers: UploadBuffers | None = None,
    deadline: Deadline | None = None,
    what: str = "upload",
) -> Iterator[tuple[bytes, bool]]:
    """Yield ``(block, is_last)`` pieces of ``data``; every block but the last is exactly ``block_size``.

    An empty source yields one empty last block, so callers always have something to commit. With ``buffers``,
    a block's bytes are reserved before it is read and stay reserved once yielded: the caller releases
    ``len(block)`` when the block has been sent (or dropped).
    """
    peekable = callable(getattr(data, "peek", None))
    carry = b""
    while True:
        block = b""  # the block yielded last is the caller's now: hold no reference to it while reading the next
        if buffers is not None:
            buffers.reserve(block_size, deadline, what)
        try:
            block = _read_block(data, block_size, carry)
        except BaseException:
            if buffers is not None:
                buffers.release(block_size)
            raise
        if buffers is not None:
            buffers.release(block_size - len(block))
        if len(block) < block_size:
            yield block, True
            return
        try:
            # A buffered source shows its next byte without handing it out; another gives it up, and it starts
            # the next block (which then costs one copy to join).
            ahead = data.peek(1) if peekable else data.read(1)
        except BaseException:
            if buffers is not None:
                buffers.release(len(block))
            raise
        if not ahead:
            yield block, True
            return
        yield block, False
        carry = b"" if peekable else bytes(ahead)


def blocks_after(head: list[bytes], rest: Iterator[tuple[bytes, bool]]) -> Iterator[bytes]:
    """The block in ``head`` (taken out of it, so only the consumer holds it) and then the blocks of ``rest``."""
    yield head.pop()
    for block, _ in rest:
        yield block


class BodyReadError(StorageBackendException):
    """Reading a download body failed part-way (reset, timeout, truncation); ``retriable`` says whether a new
    GET of the rest may succeed."""

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


def check_answer_length(what: str, length: Any, content_range: str | None, stored_size: Any = None) -> None:
    """Refuse an answer whose Content-Length disagrees with what the store says it is sending: the span of its
    Content-Range (a ranged GET), or the object's stored size (a whole-object GET, where the store says it).

    A proxy that cuts a body and rewrites Content-Length to match leaves a well-formed short answer that no
    socket error reveals; handing it out would serve a short range (or fail the caller's parse). The failure is a
    retriable ``BodyReadError``, so the GET is made again. ``what`` names the operation and key for the message.
    """
    if length is None or not str(length).isdigit():
        return
    expected: int | None = None
    if content_range and content_range.startswith("bytes "):
        first, _, last = content_range[len("bytes ") :].split("/", 1)[0].partition("-")
        if first.isdigit() and last.isdigit():
            expected = int(last) - int(first) + 1
    elif stored_size is not None and str(stored_size).isdigit():
        expected = int(stored_size)
    if expected is not None and expected != int(length):
        source = f"Content-Range {content_range!r}" if content_range else f"the stored size {stored_size}"
        raise BodyReadError(f"{what}: Content-Length {length} disagrees with {source} (truncated in transit)", True)


class _DownloadStream(io.RawIOBase):
    """What both download streams share: a readable stream whose ``read(n)`` does the work, with ``readinto``
    and ``readall`` built on it (subclasses implement ``read`` and ``close``)."""

    def readable(self) -> bool:
        return True

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("read from a closed stream")

    def readall(self) -> bytes:
        parts = []
        while True:
            chunk = self.read(1024 * 1024)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)


class ResponseStream(_DownloadStream):
    """A readable, closeable view over an SDK download body.

    ``read_fn(n)`` returns up to ``n`` bytes (``n < 0``: everything left), ``close_fn`` releases the
    connection, ``map_error`` turns an SDK exception into a ``StorageBackendException``. ``length`` (the
    body's Content-Length, when known) lets a read that asks for at least the rest use the SDK's read-all
    path, which skips urllib3's per-amount buffering (a measurable copy on multi-MiB bodies).
    """

    def __init__(
        self,
        read_fn: Callable[[int], bytes],
        close_fn: Callable[[], None],
        map_error: Callable[[BaseException], StorageBackendException],
        metrics: BackendMetrics | None = None,
        length: int | None = None,
    ) -> None:
        super().__init__()
        self._read_fn = read_fn
        self._close_fn = close_fn
        self._map_error = map_error
        self._metrics = metrics
        self._left = length

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        n = -1 if size is None else size
        if self._left is not None and n >= self._left:
            n = -1
        try:
            data = self._read_fn(n)
        except StorageBackendException:
            raise
        except Exception as e:  # noqa: BLE001 - SDK/socket errors must not leak past the backend
            raise self._map_error(e) from e
        if data is None:
            data = b""
        if not data and n != 0 and self._left:
            # The connection ended before Content-Length was reached: a truncated body, never a short object.
            raise BodyReadError(f"download body ended {self._left} bytes before its Content-Length", True)
        if self._left is not None:
            self._left = max(self._left - len(data), 0)
        if self._metrics is not None:
            self._metrics.bytes_downloaded(len(data))
        return bytes(data) if not isinstance(data, bytes) else data

    def close(self) -> None:
        if not self.closed:
            try:
                self._close_fn()
            except Exception:  # noqa: BLE001 - closing a broken connection is best effort
                pass
        super().close()


class ResumingStream(_DownloadStream):
    """A download that survives a failed body read: it opens a new GET of the bytes not yet delivered, under the
    backend's retry policy (attempts, backoff, call timeout), so a reset or truncation mid-body costs a retry,
    not the caller's whole fetch. Bytes already handed out are never re-read, so nothing is served twice."""

    def __init__(
        self,
        first: BinaryIO,
        reopen: Callable[[int], BinaryIO],
        start: int,
        policy: RetryPolicy,
        metrics: BackendMetrics,
    ) -> None:
        super().__init__()
        self._stream = first
        self._reopen = reopen
        self._position = start
        self._policy = policy
        self._metrics = metrics
        self._deadline = Deadline(policy.call_timeout_s)

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        failures = 0
        while True:
            try:
                data = self._stream.read(size)
            except BodyReadError as e:
                failures += 1
                if not e.retriable or failures >= self._policy.max_attempts:
                    e.add_note(f"gave up after {failures} body read attempt(s)")
                    raise
                pause = self._policy.pause(failures, ErrorKind.IO)
                remaining = self._deadline.remaining()
                if remaining is not None and remaining <= pause:
                    e.add_note("gave up: call timeout reached while resuming the body")
                    raise
                time.sleep(pause)
                self._stream.close()
                self._metrics.error("io")
                self._stream = self._reopen(self._position)
                continue
            data = data or b""
            self._position += len(data)
            return data

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()
