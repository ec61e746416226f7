"""The Python side of the JVM shim's sidecar transport: ``python -m rsm.jvm.sidecar --socket PATH``.

The broker's shim (``io.kts.shim.PythonRemoteStorageManager``) starts this process in ``configure()``, writes
the configuration map to its stdin and keeps stdin open. The sidecar:

* configures one ``RemoteStorageManager`` and prints ``READY`` (or ``IMPORT-ERROR``/``CONFIG-ERROR`` with the
  reason, which the shim turns into a configure-time error naming the interpreter);
* serves the framed protocol of ``SidecarTransport.java`` on a Unix socket, one thread per connection (the
  manager's I/O, zstd and AES release the GIL, so broker reader threads overlap);
* exits when stdin reaches EOF (the broker closed the shim or died, even by kill -9) or on a shutdown frame;
* ignores SIGTERM and SIGINT: systemd and Ctrl-C signal the broker's whole process group, and the broker's
  shutdown hook still needs the sidecar until it has called ``close()``.

Copy requests carry file paths (the sidecar reads the segment files itself) and the leader-epoch bytes
inline; fetches stream back piece by piece so the broker can stop reading at any point. A piece is either
inline (``i32 n`` and n bytes, sent straight from the decoded chunk with ``sendmsg``) or, when the shim mapped
the sidecar's shared-memory region (``rsm.jvm.shared_region``), a reference ``i32 -2, i64 offset, i32 length``
into it: the chunk was decoded there and the shim copies it out, then answers one ack byte so the buffer can
be reused. At most ``SHM_WINDOW`` references are unacknowledged per stream.

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
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from backends.base import readinto_some
from chunking.buffer_pool import ChunkBuffer
from rsm.errors import RemoteResourceNotFoundException
from rsm.fetch.stream import SegmentStream
from rsm.jvm import codec as wire
from rsm.jvm.shared_region import SharedRegion
from rsm.metadata import BROKER_INDEX_SET, IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.metrics.sidecar_health import SidecarHealth
from rsm.metrics.snapshot import manager_rows, to_lines

log = logging.getLogger("rsm.jvm.sidecar")

FIRST_CHUNK = 64 * 1024  # the broker usually reads ~1 MiB and closes: answer fast, then stream in big chunks
CHUNK = 1024 * 1024
_HDR = struct.Struct(">IB")
_I32 = struct.Struct(">i")
_END = _I32.pack(0)
_MID_STREAM_ERROR = _I32.pack(-1)
_SHARED_PIECE = struct.Struct(">iqi")  # -2, offset in the region, length
_CANCEL_FRAME = _HDR.pack(1, wire.OP_CANCEL_STREAM)
SHM_WINDOW = 2
NEXT_SEGMENT_POLL_S = 0.002  # how often a stream at its segment's end looks at the shim while the lookup runs

_GOING, _CANCELLED, _GONE = range(3)
"""What the shim said about a stream so far: nothing that stops it, a cancel, or it closed the connection."""


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
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


def _send_parts(sock: socket.socket, parts: Sequence[bytes | memoryview]) -> None:
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


def _index_bytes(
    fetch: Callable[[RemoteLogSegmentMetadata, IndexType], BinaryIO], meta: RemoteLogSegmentMetadata, kind: IndexType
) -> bytes:
    with fetch(meta, kind) as stream:
        return bytes(stream.read())


def _error_frame(exc: BaseException) -> bytes:
    status, type_name, message = wire.error_parts(exc)
    t = type_name.encode("utf-8", "replace")[:0xFFFF]
    m = message.encode("utf-8", "replace")
    return bytes([status]) + struct.pack(">H", len(t)) + t + _I32.pack(len(m)) + m


class _NextSegment(NamedTuple):
    """The partition's next segment, ready to be announced when a stream reaches the end of the one before."""

    meta: RemoteLogSegmentMetadata
    indexes: list[bytes]  # ``wire.index_entry`` items: the ones the broker fetches before its first read


class Sidecar:
    """Owns the manager and answers requests; one instance per process."""

    def __init__(self, manager: Any, region: SharedRegion | None = None, health: SidecarHealth | None = None) -> None:
        self.manager = manager
        self.region = region
        self.health = health or SidecarHealth()
        self.stop = threading.Event()
        # Looks up the next segment of each open-ended stream while it is being read (listing, manifest and
        # indexes are usually cached by then): one thread, so that a slow store delays only these lookups.
        self._next_segments = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar-next-segment")

    # -- requests ---------------------------------------------------------------------------------------------

    def handle_connection(self, sock: socket.socket) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        shared = False  # does the shim on this connection read our region?
        try:
            while not self.stop.is_set():
                hdr = _recv_exact(sock, _HDR.size)
                if hdr is None:
                    return
                length, op = _HDR.unpack(hdr)
                body = _recv_exact(sock, length - 1) if length > 1 else b""
                if body is None:
                    return
                if op == wire.OP_SHARED_MEMORY_MAPPED:
                    shared = self.region is not None
                    continue
                if op == wire.OP_CANCEL_STREAM:
                    continue  # the stream it was meant for had already ended: nothing to stop
                self.dispatch(sock, op, body, view, shared)
                self.health.replied()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            return  # the shim closed a stream early or the broker went away: nothing to answer
        except wire.WireError as e:
            log.error("protocol error from the shim, dropping the connection: %s", e)

    def dispatch(self, sock: socket.socket, op: int, body: bytes, view: memoryview, shared: bool = False) -> None:
        r = wire.Reader(body)
        if op == wire.OP_FETCH:
            meta = wire.decode_metadata(r.blob() or b"")
            start, end = r.i32(), r.i32()
            self._stream(
                sock,
                view,
                lambda: self.manager.fetch_log_segment(meta, start, None if end < 0 else end),
                "fetch",
                shared,
                self._resume_counter(meta),
                meta if end < 0 else None,
            )
        elif op == wire.OP_FETCH_INDEX:
            meta = wire.decode_metadata(r.blob() or b"")
            self._indexes(sock, meta, wire.index_type(r.str16()))
        elif op == wire.OP_COPY:
            meta = wire.decode_metadata(r.blob() or b"")
            seg, off, tim, txn, snap = r.str16(), r.str16(), r.str16(), r.str16(), r.str16()
            epochs = r.blob() or b""
            data = LogSegmentData(
                log_segment=Path(seg),
                offset_index=Path(off),
                time_index=Path(tim),
                transaction_index=Path(txn) if txn else None,
                producer_snapshot_index=Path(snap),
                leader_epoch_index=epochs,
            )
            try:
                custom = self.manager.copy_log_segment_data(meta, data)
            except Exception as e:
                self._log_failure("copy", e)
                sock.sendall(_error_frame(e))
                return
            blob = _I32.pack(-1) if custom is None else _I32.pack(len(custom)) + bytes(custom)
            sock.sendall(b"\x00" + blob)
        elif op == wire.OP_DELETE:
            meta = wire.decode_metadata(r.blob() or b"")
            try:
                self.manager.delete_log_segment_data(meta)
            except Exception as e:
                self._log_failure("delete", e)
                sock.sendall(_error_frame(e))
                return
            sock.sendall(b"\x00")
        elif op == wire.OP_METRICS:
            try:
                lines = to_lines(manager_rows(self.manager))
            except Exception as e:
                self._log_failure("metrics", e)
                sock.sendall(_error_frame(e))
                return
            sock.sendall(b"\x00" + _I32.pack(len(lines)) + lines)
        elif op == wire.OP_PING:
            sock.sendall(b"\x00")
        elif op == wire.OP_SHUTDOWN:
            sock.sendall(b"\x00")
            self.stop.set()
        else:
            raise wire.WireError(f"unknown op {op}")

    def _indexes(self, sock: socket.socket, meta: RemoteLogSegmentMetadata, asked: IndexType) -> None:
        """The index asked for and, when it is one of the three the broker's remote index cache fetches one after
        the other for every new segment, the other two (see ``BROKER_INDEX_SET``): the shim holds those for
        the broker's next two calls, which then cost no round trip. An index the segment does not have travels
        as its not-found error; any other failure of an index not asked for leaves it out, so that the broker's
        own request for it meets the error."""
        try:
            parts = [wire.index_entry(asked, _index_bytes(self.manager.fetch_index, meta, asked))]
        except Exception as e:
            self._log_failure("fetch_index", e)
            sock.sendall(_error_frame(e))
            return
        if asked in BROKER_INDEX_SET:
            parts += self._indexes_along(meta, [kind for kind in BROKER_INDEX_SET if kind is not asked])
        _send_parts(sock, [bytes([wire.STATUS_OK, len(parts)]), *parts])

    def _indexes_along(self, meta: RemoteLogSegmentMetadata, kinds: Sequence[IndexType]) -> list[bytes]:
        """Index entries sent before the broker asks for them. One the segment does not have travels as its
        not-found error; one that fails otherwise, or is too big to be worth holding, is left out, so that the
        broker's own request for it meets the error (and counts it once)."""
        # A user's manager class (python.manager.class) may not have fetch_index_ahead.
        ahead = getattr(self.manager, "fetch_index_ahead", self.manager.fetch_index)
        parts = []
        for kind in kinds:
            try:
                data = _index_bytes(ahead, meta, kind)
            except RemoteResourceNotFoundException as e:
                parts.append(wire.index_entry(kind, None) + _error_frame(e))
                continue
            except Exception as e:
                self._log_failure("fetch_index", e)
                continue
            if len(data) <= wire.INDEX_AHEAD_MAX_BYTES:
                parts.append(wire.index_entry(kind, data))
        return parts

    def _resume_counter(self, meta: RemoteLogSegmentMetadata) -> Callable[[int], None] | None:
        """What counts a broker fetch that went on with a kept stream of ``meta`` (a custom manager may lack it)."""
        record = getattr(self.manager, "record_resumed_fetch", None)
        return (lambda position: record(meta, position)) if record is not None else None

    def _look_up_next_segment(self, meta: RemoteLogSegmentMetadata) -> Future[_NextSegment | None] | None:
        """Starts finding the segment after ``meta`` and its broker indexes, for when the stream reaches its end;
        None for a manager class without ``following_segment`` and ``fetch_log_segment_ahead``."""
        if not hasattr(self.manager, "following_segment") or not hasattr(self.manager, "fetch_log_segment_ahead"):
            return None

        def look_up() -> _NextSegment | None:
            following = self.manager.following_segment(meta)
            if following is None:
                return None
            return _NextSegment(following, self._indexes_along(following, BROKER_INDEX_SET))

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
            stream = self.manager.fetch_log_segment_ahead(following.meta, 0)
        except Exception as e:  # the broker's own fetch of that segment meets the failure, and counts it
            log.debug("no stream into %s: %s", following.meta.describe(), e)
            return None
        if not isinstance(stream, SegmentStream):
            stream.close()
            return None
        return following, stream

    @staticmethod
    def _log_failure(what: str, e: Exception) -> None:
        from rsm.errors import RemoteStorageException

        if isinstance(e, RemoteStorageException):
            log.debug("%s failed: %s: %s", what, type(e).__name__, e)
        else:  # not one of the manager's own errors: likely a bug, keep the traceback
            log.error("%s failed unexpectedly", what, exc_info=e)

    def _stream(
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
            self._log_failure(what, e)
            sock.sendall(_error_frame(e))
            return
        if isinstance(stream, SegmentStream):
            try:
                self._stream_pieces(sock, stream, what, shared, on_resume, open_ended)
            finally:
                with contextlib.suppress(Exception):
                    stream.close()
            return
        try:
            try:
                n = readinto_some(stream, view[:FIRST_CHUNK])
            except Exception as e:
                self._log_failure(what, e)
                sock.sendall(_error_frame(e))
                return
            head: bytes = b"\x00"
            while n > 0:
                _send_parts(sock, (head + _I32.pack(n), view[:n]))
                head = b""
                try:
                    n = readinto_some(stream, view)
                except Exception as e:
                    self._log_failure(what, e)
                    sock.sendall(_MID_STREAM_ERROR + _error_frame(e))
                    return
            sock.sendall(head + _END)
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    def _stream_pieces(
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
                    self._log_failure(what, e)
                    sock.sendall((_MID_STREAM_ERROR if not head else b"") + _error_frame(e))
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
                    stream, on_resume = following_stream, self._resume_counter(following.meta)
                    next_segment, follows = None, following.meta
                    continue
                buf = piece.buffer
                if shared and buf.region_offset is not None:
                    outstanding.append(buf)
                    sock.sendall(head + _SHARED_PIECE.pack(-2, buf.region_offset + piece.offset, piece.length))
                else:
                    try:
                        _send_parts(sock, (head + _I32.pack(piece.length), piece.view))
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
            more = _recv_exact(sock, size - len(frame))
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


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    sidecar: Sidecar

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.sidecar.handle_connection(request)


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError("stdin closed before the configuration was complete")
        data += chunk
    return data


def read_config(stream: BinaryIO) -> dict[str, str]:
    """The map ``Wire.encodeConfig`` wrote: i32 count, then (i32 len, key, i32 len, value) pairs."""
    (count,) = _I32.unpack(_read_exact(stream, 4))
    parts = [_I32.pack(count)]
    for _ in range(count * 2):
        (n,) = _I32.unpack(_read_exact(stream, 4))
        parts.append(_I32.pack(n) + _read_exact(stream, max(n, 0)))
    return wire.decode_config(b"".join(parts))


def _watch_stdin(stream: BinaryIO, stop: threading.Event) -> None:
    """The shim keeps our stdin open for its lifetime: EOF means close() was called or the broker died."""
    try:
        while stream.read(65536):
            pass
    except OSError:
        pass
    log.info("stdin closed by the broker: shutting down")
    stop.set()


def _say(line: str) -> None:
    """Handshake lines for the shim on stdout (everything else goes to stderr)."""
    sys.stdout.write(line.replace("\n", " | ") + "\n")
    sys.stdout.flush()


def _shared_region(manager: Any, total: int) -> SharedRegion | None:
    """The region fetched chunks are decoded into, for managers that take a chunk buffer pool."""
    pool = getattr(manager, "chunk_buffers", None)
    if not total or pool is None:
        return None
    region = SharedRegion.create(total, pool.buffer_size)
    if region is not None:
        manager.chunk_buffers = region.pool
        cache = getattr(manager, "chunk_cache", None)
        if cache is not None:
            # The memory tier keeps decoded chunks in the buffers they were decoded into; leave at least half of
            # the region to fetches in flight, or they would fall back to copies over the socket.
            cache.memory.capacity = min(cache.memory.capacity, total // 2)
        log.info(
            "shared memory: %d buffers of %d bytes in %s (the shim maps it and removes the name)",
            region.pool.region_buffers,
            pool.buffer_size,
            region.path,
        )
    return region


def _start_prometheus(manager: Any, health: SidecarHealth) -> Any:
    """The optional Prometheus endpoint (``metrics.prometheus.port`` on ``metrics.prometheus.host``): the
    manager's metrics and the sidecar's own row; its address is logged."""
    settings = getattr(manager, "metrics_settings", None) or {}
    port = settings.get("metrics.prometheus.port")
    if port is None:
        return None
    host = settings.get("metrics.prometheus.host") or "127.0.0.1"
    from rsm.metrics.prometheus import serve

    try:
        server, _thread = serve(lambda: manager_rows(manager) + health.rows(), int(port), host)
    except OSError as e:  # a taken port must not stop tiering: say so loudly and go on without the endpoint
        log.error("metrics.prometheus.port=%s: cannot listen on %s:%s: %s", port, host, port, e)
        return None
    log.info("Prometheus metrics on http://%s:%d/metrics", host, server.server_port)
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rsm.jvm.sidecar", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    parser.add_argument("--parent-pid", type=int, default=0, help="pid of the broker (for log lines)")
    parser.add_argument("--starts", type=int, default=1, help="sidecars the shim started so far, this one included")
    parser.add_argument("--restart-failures", type=int, default=0, help="restarts of the shim that failed so far")
    args = parser.parse_args(argv)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    try:
        config = read_config(stdin)
    except (EOFError, wire.WireError) as e:
        _say(f"CONFIG-ERROR cannot read the configuration from stdin: {e}")
        return 4

    from rsm.jvm.config import CONFIG_DEF

    level = str(config.get("python.log.level", "INFO")).upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = CONFIG_DEF.parse(config)
    except ValueError as e:
        _say(f"CONFIG-ERROR {type(e).__name__}: {e}")
        return 4
    spec = settings["python.manager.class"]
    try:
        cls = wire.load_manager_class(spec)
    except BaseException as e:
        _say(
            f"IMPORT-ERROR {sys.executable} (Python {sys.version.split()[0]}) could not import the manager "
            f"{spec}: {type(e).__name__}: {e}"
        )
        return 3
    manager = cls()
    try:
        manager.configure(config)
    except Exception as e:
        _say(f"CONFIG-ERROR {type(e).__name__}: {e}")
        return 4

    region = _shared_region(manager, settings["jvm.sidecar.shared.memory.bytes"])
    health = SidecarHealth(max(1, args.starts), max(0, args.restart_failures))
    prometheus = _start_prometheus(manager, health)
    sidecar = Sidecar(manager, region, health)
    path = args.socket
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    old_umask = os.umask(0o077)  # only the broker's user may talk to the sidecar
    try:
        server = _Server(path, socketserver.BaseRequestHandler, bind_and_activate=True)
    finally:
        os.umask(old_umask)
    server.sidecar = sidecar
    threading.Thread(target=_watch_stdin, args=(stdin, sidecar.stop), name="stdin-watch", daemon=True).start()
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="accept", daemon=True)
    serving.start()
    log.info(
        "sidecar ready: pid %d (broker pid %d), Python %s, manager %s, socket %s",
        os.getpid(),
        args.parent_pid,
        sys.version.split()[0],
        spec,
        path,
    )
    _say(f"READY {os.getpid()}" + (f" shm={region.path}" if region is not None else ""))
    sidecar.stop.wait()

    server.shutdown()
    server.server_close()
    if prometheus is not None:
        prometheus.shutdown()
        prometheus.server_close()
    if region is not None:
        region.unlink()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    closer = threading.Thread(target=manager.close, name="manager-close", daemon=True)
    closer.start()
    closer.join(30)
    log.info("sidecar stopped")
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)  # connection threads may still be blocked in the manager; they must not delay the exit


if __name__ == "__main__":
    sys.exit(main())
