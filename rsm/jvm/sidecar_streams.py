"""A fetch's stream on a sidecar connection: the manager's segment stream, piece by piece, to the shim.

A piece is either inline (``i32 n`` and n bytes, sent straight from the decoded chunk with ``sendmsg``) or, when
the shim mapped the sidecar's shared-memory region (``rsm.jvm.shared_region``), a reference ``i32 -2, i64 offset,
i32 length`` into it: the chunk was decoded there and the shim copies it out, then answers one ack byte so the
buffer can be reused. At most ``SHM_WINDOW`` references are unacknowledged per stream.

The broker closes a stream after about 1 MiB, long before its end. On a shared-memory stream the shim then
sends a cancel frame (``OP_CANCEL_STREAM``) in place of the next acknowledgement: the sidecar stops, gives back
the buffers it had referenced, ends the stream with the usual end frame and waits for the next request on the
same connection. The shim reads up to that end frame before reusing the connection, so a broker fetch costs
no connection set-up and no new thread here, which on a busy broker host is most of a warm fetch's latency.

Better still, a broker catching up reads a segment front to back, about 1 MiB per fetch, and its next fetch
starts where the last one stopped (a little before: at the offset index entry of the batch it cut off). So
the shim does not cancel a stream the broker closed inside a shared-memory piece: it keeps it, and when the
next fetch of that segment starts inside the same piece, it goes on reading it: no request, no reply, no
Python at all on the fetch's path. It tells the sidecar with a ``STREAM_RESUMED`` notice (the position) sent
like an acknowledgement, so the fetch metrics still count every broker fetch. Kept streams are cancelled
when idle too long, when too many are kept, and on a copy or delete of their segment (``Settings.java``).

And a stream that reaches its segment's end goes on into the partition's next segment (``SegmentsAhead``).
The frames are in ``rsm.jvm.codec``; docs/architecture.md has the table.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import struct
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, NamedTuple

from backends.base import readinto_some
from chunking.buffer_pool import ChunkBuffer
from rsm.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.fetch.stream import SegmentStream
from rsm.jvm import codec as wire
from rsm.jvm.seams import ManagerCapabilities
from rsm.metadata import BROKER_INDEX_SET, IndexType, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

FIRST_CHUNK = 64 * 1024  # the broker usually reads ~1 MiB and closes: answer fast, then stream in big chunks
CHUNK = 1024 * 1024
SHM_WINDOW = 2
NEXT_SEGMENT_POLL_S = 0.002  # how often a stream at its segment's end looks at the shim while the lookup runs

_I32 = wire.I32
_END = _I32.pack(wire.STREAM_END)
_MID_STREAM_ERROR = _I32.pack(wire.STREAM_ERROR)
_SHARED_PIECE = struct.Struct(">iqi")  # PIECE_SHARED, offset in the region, length
_CANCEL_FRAME = wire.REQUEST_HEADER.pack(1, wire.OP_CANCEL_STREAM)

_GOING, _CANCELLED, _GONE = range(3)
"""What the shim said about a stream so far: nothing that stops it, a cancel, or it closed the connection."""


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """n bytes, or None on a clean EOF before the first byte (the shim closed an idle connection)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return None
            raise ConnectionResetError(f"connection closed mid-frame ({got} of {n} bytes)")
        got += k
    return bytes(buf)


def send_parts(sock: socket.socket, parts: Sequence[bytes | memoryview]) -> None:
    """sendmsg without a concatenation copy, finishing partial sends."""
    pending = [memoryview(p).cast("B") for p in parts if len(p)]
    while pending:
        sent = sock.sendmsg(pending)
        while sent and pending:
            if sent >= len(pending[0]):
                sent -= len(pending[0])
                pending.pop(0)
            else:
                pending[0] = pending[0][sent:]
                sent = 0


def index_bytes(
    fetch: Callable[[RemoteLogSegmentMetadata, IndexType], BinaryIO], meta: RemoteLogSegmentMetadata, kind: IndexType
) -> bytes:
    with fetch(meta, kind) as stream:
        return bytes(stream.read())


def log_failure(what: str, e: Exception) -> None:
    """A request failed: the manager's own errors at debug level (the shim reports them to the broker), anything
    else, likely a bug, as an error with its traceback."""
    if isinstance(e, RemoteStorageException):
        log.debug("%s failed: %s: %s", what, type(e).__name__, e)
    else:
        log.error("%s failed unexpectedly", what, exc_info=e)


class _NextSegment(NamedTuple):
    """The partition's next segment, ready to be announced when a stream reaches the end of the one before."""

    meta: RemoteLogSegmentMetadata
    indexes: list[bytes]  # ``wire.index_entry`` items: the ones the broker fetches before its first read


class SidecarStreams:
    """Serves the fetch streams of one sidecar, and the indexes sent along with the one asked for."""

    def __init__(self, capabilities: ManagerCapabilities) -> None:
        self.capabilities = capabilities
        # Looks up the next segment of each open-ended stream while it is being read (listing, manifest and
        # indexes are usually cached by then): one thread, so that a slow store delays only these lookups.
        self._next_segments = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar-next-segment")

    def indexes_along(self, meta: RemoteLogSegmentMetadata, kinds: Sequence[IndexType]) -> list[bytes]:
        """Index entries sent before the broker asks for them. One the segment does not have travels as its
        not-found error; one that fails otherwise, or is too big to be worth holding, is left out, so that the
        broker's own request for it meets the error (and counts it once)."""
        parts = []
        for kind in kinds:
            try:
                data = index_bytes(self.capabilities.fetch_index_ahead, meta, kind)
            except RemoteResourceNotFoundException as e:
                parts.append(wire.index_entry(kind, None) + wire.error_frame(e))
                continue
            except Exception as e:
                log_failure("fetch_index", e)
                continue
            if len(data) <= wire.INDEX_AHEAD_MAX_BYTES:
                parts.append(wire.index_entry(kind, data))
        return parts

    def resume_counter(self, meta: RemoteLogSegmentMetadata) -> Callable[[int], None] | None:
        """What counts a broker fetch that went on with a kept stream of ``meta`` (None: the manager does not)."""
        resumed = self.capabilities.resumed_fetches
        return (lambda position: resumed.record_resumed_fetch(meta, position)) if resumed is not None else None

    def _look_up_next_segment(self, meta: RemoteLogSegmentMetadata) -> Future[_NextSegment | None] | None:
        """Starts finding the segment after ``meta`` and its broker indexes, for when the stream reaches its end;
        None for a manager that does not go on into the next segment (``SegmentsAhead``)."""
        ahead = self.capabilities.segments_ahead
        if ahead is None:
            return None

        def look_up() -> _NextSegment | None:
            following = ahead.following_segment(meta)
            if following is None:
                return None
            return _NextSegment(following, self.indexes_along(following, BROKER_INDEX_SET))

        try:
            return self._next_segments.submit(look_up)
        except RuntimeError:  # shutting down
            return None

    def _open_next_segment(
        self, looked_up: Future[_NextSegment | None] | None
    ) -> tuple[_NextSegment, SegmentStream] | None:
        """The next segment's stream from position 0, when the lookup has finished and found one; else None and
        the stream ends as usual. Never waits: the broker may be waiting for this stream's end."""
        if looked_up is None or not looked_up.done():  # only the stream's own end cancels it, after this
            return None
        if (failure := looked_up.exception()) is not None:
            log.debug("no stream into the next segment: %s: %s", type(failure).__name__, failure)
            return None
        following = looked_up.result()
        if following is None:
            return None
        try:
            assert self.capabilities.segments_ahead is not None  # a lookup was started: the manager goes on
            stream = self.capabilities.segments_ahead.fetch_log_segment_ahead(following.meta, 0)
        except Exception as e:  # the broker's own fetch of that segment meets the failure, and counts it
            log.debug("no stream into %s: %s", following.meta.describe(), e)
            return None
        if not isinstance(stream, SegmentStream):
            stream.close()
            return None
        return following, stream

    def serve(
        self,
        sock: socket.socket,
        view: memoryview,
        open_stream: Any,
        what: str,
        shared: bool = False,
        on_resume: Callable[[int], None] | None = None,
        open_ended: RemoteLogSegmentMetadata | None = None,
    ) -> None:
        """Status, then chunks. The first chunk is read before answering, so a missing segment is an error status.
        ``open_ended``: the segment of a fetch to its end, which may go on into the next segment."""
        try:
            stream = open_stream()
        except Exception as e:
            log_failure(what, e)
            sock.sendall(wire.error_frame(e))
            return
        if isinstance(stream, SegmentStream):
            try:
                self._pieces(sock, stream, what, shared, on_resume, open_ended)
            finally:
                with contextlib.suppress(Exception):
                    stream.close()
            return
        try:
            try:
                n = readinto_some(stream, view[:FIRST_CHUNK])
            except Exception as e:
                log_failure(what, e)
                sock.sendall(wire.error_frame(e))
                return
            head: bytes = b"\x00"
            while n > 0:
                send_parts(sock, (head + _I32.pack(n), view[:n]))
                head = b""
                try:
                    n = readinto_some(stream, view)
                except Exception as e:
                    log_failure(what, e)
                    sock.sendall(_MID_STREAM_ERROR + wire.error_frame(e))
                    return
            sock.sendall(head + _END)
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    def _pieces(
        self,
        sock: socket.socket,
        stream: SegmentStream,
        what: str,
        shared: bool,
        on_resume: Callable[[int], None] | None = None,
        open_ended: RemoteLogSegmentMetadata | None = None,
    ) -> None:
        """A segment stream without copies in Python: region pieces by reference, the others from the chunk
        buffer itself. A region buffer is given back only when the shim acknowledged it, cancelled the stream
        or closed the connection (the shim reads on the thread that closes, so after a cancel or a close it
        reads no more). ``on_resume`` learns the position of each broker fetch that went on with this stream.

        A shared-memory stream of ``open_ended``, a fetch to the segment's end, goes on into the partition's next
        segment when it reaches the end: a next-segment frame (its id and the indexes the broker fetches first)
        stands in for the end frame, and that segment's pieces follow from position 0. The shim keeps the stream
        for the broker's first fetch there, which then costs no round trip, and neither do its index fetches."""
        outstanding: collections.deque[ChunkBuffer] = collections.deque()
        head = b"\x00"
        state = _GOING
        ended = False  # an error frame was sent: it ends the stream by itself
        # Started once the stream's first piece is out, so that it never competes with what the broker waits for.
        next_segment: Future[_NextSegment | None] | None = None
        follows = open_ended if shared else None  # the segment whose next one is still to be looked up
        try:
            while True:
                if outstanding:  # acknowledgements so far, or a cancel; waits only when the window is full
                    state = self._replies(sock, outstanding, len(outstanding) > SHM_WINDOW, on_resume)
                elif shared:  # every reference acknowledged (the next pieces may be inline): a notice or a cancel
                    state = self._cancel_if_sent(sock, on_resume)
                if state != _GOING:
                    break
                try:
                    piece = stream.take_piece()
                except Exception as e:
                    log_failure(what, e)
                    sock.sendall((_MID_STREAM_ERROR if not head else b"") + wire.error_frame(e))
                    ended = True
                    break
                if piece is None:
                    # The shim reads the frame after the last piece only once it has acknowledged every piece:
                    # until then, waiting for the next segment's lookup delays nobody.
                    while next_segment is not None and not next_segment.done() and state == _GOING:
                        state = self._replies(sock, outstanding, False, on_resume)
                        if not outstanding:
                            break
                        futures.wait([next_segment], NEXT_SEGMENT_POLL_S)
                    if state != _GOING:
                        break
                    opened = self._open_next_segment(next_segment)
                    if opened is None:
                        break
                    following, following_stream = opened
                    sock.sendall(
                        head + wire.next_segment_frame(following.meta.remote_log_segment_id.id, following.indexes)
                    )
                    head = b""
                    stream.close()  # every piece of it was taken: the references are in ``outstanding``
                    stream, on_resume = following_stream, self.resume_counter(following.meta)
                    next_segment, follows = None, following.meta
                    continue
                buf = piece.buffer
                if shared and buf.region_offset is not None:
                    outstanding.append(buf)
                    sock.sendall(head + _SHARED_PIECE.pack(-2, buf.region_offset + piece.offset, piece.length))
                else:
                    try:
                        send_parts(sock, (head + _I32.pack(piece.length), piece.view))
                    finally:
                        buf.release()
                head = b""
                if follows is not None:
                    next_segment, follows = self._look_up_next_segment(follows), None
            if state == _GONE:
                return
            if not ended:
                sock.sendall(head + _END)
            while outstanding and state == _GOING:  # every reference is acknowledged before the end is read
                state = self._replies(sock, outstanding, True, on_resume)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            state = _GONE
            raise
        finally:
            stream.close()  # the caller closes the first one again, harmlessly
            if next_segment is not None:
                next_segment.cancel()
            if state != _GOING:
                while outstanding:
                    outstanding.popleft().release()
            elif outstanding:  # an unexpected failure: the shim may still read them, so they are not reused
                log.error("%s: %d shared-memory buffer(s) withheld after an unexpected error", what, len(outstanding))

    @classmethod
    def _replies(
        cls,
        sock: socket.socket,
        outstanding: collections.deque[ChunkBuffer],
        wait: bool,
        on_resume: Callable[[int], None] | None = None,
    ) -> int:
        """Take in what the shim sent since the last look: acknowledgements (each gives back the oldest
        outstanding buffer), resume notices, and possibly a cancel. Blocks only while ``wait`` and the window
        is still full.

        Never reads more bytes than there are outstanding pieces: the shim sends one acknowledgement per piece
        and, after the last one, may already send its next request, which belongs to the request loop. A
        resume notice or a cancel comes only while a piece is outstanding, and their bytes are read exactly."""
        while outstanding:
            data = cls._shim_bytes(sock, len(outstanding), wait)
            if isinstance(data, int):
                return data
            i = 0
            while i < len(data):
                byte = data[i]
                if byte == wire.PIECE_ACK and outstanding:
                    outstanding.popleft().release()
                    i += 1
                    continue
                if byte == wire.STREAM_RESUMED:
                    notice, i = cls._frame_from(sock, data, i, 1 + _I32.size)
                    cls._resumed(on_resume, _I32.unpack_from(notice, 1)[0])
                    continue
                if byte == _CANCEL_FRAME[0] and cls._frame_from(sock, data, i, len(_CANCEL_FRAME))[0] == _CANCEL_FRAME:
                    return _CANCELLED  # nothing follows a cancel: the shim waits for the stream's end
                raise wire.WireError(
                    f"expected an acknowledgement, a resume notice or a cancel from the shim, got {data[i:]!r}"
                )
            wait = wait and len(outstanding) > SHM_WINDOW
        return _GOING

    @classmethod
    def _cancel_if_sent(cls, sock: socket.socket, on_resume: Callable[[int], None] | None = None) -> int:
        """Whether the shim cancelled the stream while no reference was outstanding (without this, a stream going
        on inline would run to its end for a shim that stopped reading it). A resume notice can come here too:
        the shim resumes a stream it kept at a next-segment frame before that segment's first piece is sent."""
        while True:
            data = cls._shim_bytes(sock, 1, False)
            if isinstance(data, int):
                return data
            if data[0] == wire.STREAM_RESUMED:
                notice, _ = cls._frame_from(sock, data, 0, 1 + _I32.size)
                cls._resumed(on_resume, _I32.unpack_from(notice, 1)[0])
                continue
            frame, _ = cls._frame_from(sock, data, 0, len(_CANCEL_FRAME))
            if frame == _CANCEL_FRAME:
                return _CANCELLED
            raise wire.WireError(
                f"expected nothing, a resume notice or a cancel from the shim between pieces, got {frame!r}"
            )

    @staticmethod
    def _shim_bytes(sock: socket.socket, n: int, wait: bool) -> bytes | int:
        """Up to ``n`` bytes the shim sent, or, when there are none, what that says of the stream: ``_GOING``
        (nothing yet, and not waiting for it) or ``_GONE`` (the shim closed the connection)."""
        try:
            data = sock.recv(n) if wait else sock.recv(n, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return _GOING
        except (ConnectionResetError, ConnectionAbortedError):
            return _GONE
        return data if data else _GONE

    @staticmethod
    def _frame_from(sock: socket.socket, data: bytes, i: int, size: int) -> tuple[bytes, int]:
        """The ``size``-byte frame starting at ``data[i]``, reading what did not arrive yet; and where the bytes
        after it start in ``data``."""
        frame = data[i : i + size]
        if len(frame) < size:
            more = recv_exact(sock, size - len(frame))
            if more is None:
                raise ConnectionResetError("the shim closed the connection mid-frame")
            frame += more
        return frame, i + size

    @staticmethod
    def _resumed(on_resume: Callable[[int], None] | None, position: int) -> None:
        if on_resume is None:
            return
        try:
            on_resume(position)
        except Exception:  # metrics only: never worth breaking the broker's stream
            log.exception("recording a resumed fetch at position %d failed", position)
