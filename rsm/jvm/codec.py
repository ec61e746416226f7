"""The wire between the Java shim and Python (mirror of ``jvm-shim/src/io/kts/shim/Wire.java``): every op code
and frame kind of the sidecar protocol, and the byte layouts both transports share.

Both transports carry Kafka's metadata as the same small big-endian record, so there is one decoder. Decoded
metadata is cached by its bytes: the broker asks about the same few segments over and over (every fetch of a
hot segment carries identical metadata), and building the dataclasses costs more than the lookup.

The protocol's constants below are all of them, each with the same name and value in ``Wire.java``; the table
in docs/architecture.md lays them out (a test holds the three together).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

from rsm.metadata import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

METADATA_VERSION = 1

# --- the sidecar protocol ------------------------------------------------------------------------------------------
# Requests, shim -> sidecar: u32 length (of op and payload), u8 op, payload. Replies start with a status.
OP_COPY = 1  # reply: status, i32 n and n bytes of custom metadata (n = -1: none)
OP_FETCH = 2  # reply: status, then stream frames
OP_FETCH_INDEX = 3  # reply: status, u8 n, n index entries (``index_entry``), the one asked for first
OP_DELETE = 4  # reply: status
OP_PING = 5  # reply: status
OP_SHUTDOWN = 6  # reply: status; then the sidecar stops
OP_SHARED_MEMORY_MAPPED = 7  # no reply; sent once per connection whose shim mapped the shared-memory region
OP_METRICS = 8  # reply: status, i32 n, n bytes of rsm.metrics.snapshot.to_lines
OP_CANCEL_STREAM = 9  # no reply; sent instead of an acknowledgement: stop the stream, then end it as usual
# Sent by the shim when it gives up on a copy (timeout, broken connection), with the copy's metadata blob. Reply:
# status, once the copy stopped and every object of its segment is removed (an error status: they may not be).
OP_CANCEL_COPY = 10

# Reply status. Anything but OK is followed by u16 + the Python type name and i32 + the message (``error_frame``).
STATUS_OK = 0
STATUS_NOT_FOUND = 1  # the shim raises RemoteResourceNotFoundException
STATUS_ERROR = 2  # the shim raises RemoteStorageException
STATUS_RETRIABLE = 3  # the shim raises RetriableRemoteStorageException where the broker has it, else as STATUS_ERROR

# Stream frames, sidecar -> shim, after a fetch's OK status: an i32 n saying what follows (n > 0: an inline piece
# of n bytes).
STREAM_END = 0  # the stream is over
STREAM_ERROR = -1  # an error (status, type, message) follows and ends the stream
PIECE_SHARED = -2  # i64 offset and i32 length of a piece in the shared-memory region follow
# In place of STREAM_END of an open-ended fetch that reached its segment's end: i32 n and n bytes follow
# (``next_segment_frame``), then the partition's next segment's pieces from position 0.
STREAM_NEXT_SEGMENT = -3

# What the shim sends back on a shared-memory stream, between the sidecar's frames (no reply to any of them), and
# OP_CANCEL_STREAM as a whole request:
PIECE_ACK = 1  # the oldest outstanding piece was copied out: its buffer may be reused
STREAM_RESUMED = 2  # + i32 position: a new broker fetch of the same segment goes on reading this stream

INDEX_AHEAD_MAX_BYTES = 1024 * 1024
"""An index not asked for travels along only up to this size: the shim holds it on the heap until asked."""

REQUEST_HEADER = struct.Struct(">IB")
"""u32 length, u8 op: the head of every request."""
I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_FIXED = struct.Struct(">qqqiqiBB")  # start, end, max ts, broker id, event ts, size, state, txn-idx-empty
_EPOCH = struct.Struct(">iq")


class WireError(ValueError):
    """The bytes from the shim do not follow the layout (version skew between jar and package, or a bug)."""


class Reader:
    """A cursor over one frame; every read checks bounds so a bad frame fails with WireError, not garbage."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise WireError(f"frame too short: wanted {n} bytes at {self.pos} of {len(self.buf)}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def i32(self) -> int:
        return I32.unpack(self.take(4))[0]

    def str16(self) -> str:
        n = _U16.unpack(self.take(2))[0]
        return bytes(self.take(n)).decode("utf-8")

    def blob(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else bytes(self.take(n))


def decode_metadata(raw: bytes) -> RemoteLogSegmentMetadata:
    """``RemoteLogSegmentMetadata`` from ``Wire.encodeMetadata`` bytes (cached; the result is immutable)."""
    return _decode_metadata(bytes(raw))


@lru_cache(maxsize=4096)
def _decode_metadata(raw: bytes) -> RemoteLogSegmentMetadata:
    r = Reader(raw)
    version = r.u8()
    if version != METADATA_VERSION:
        raise WireError(
            f"metadata layout version {version} is not supported (expected {METADATA_VERSION}); "
            f"the shim jar and the Python package are from different releases"
        )
    topic_id = r.str16()
    topic = r.str16()
    partition = r.i32()
    segment_id = r.str16()
    start, end, max_ts, broker, event_ts, size, state, txn_empty = _FIXED.unpack(r.take(_FIXED.size))
    custom = r.blob()
    epochs = {}
    for _ in range(r.i32()):
        epoch, offset = _EPOCH.unpack(r.take(_EPOCH.size))
        epochs[epoch] = offset
    tip = TopicIdPartition(topic_id=topic_id, topic=topic, partition=partition)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=tip, id=segment_id),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=max_ts,
        broker_id=broker,
        event_timestamp_ms=event_ts,
        segment_size_in_bytes=size,
        segment_leader_epochs=epochs,
        custom_metadata=custom,
        state=RemoteLogSegmentState(state),
        txn_idx_empty=bool(txn_empty),
    )


def encode_metadata(meta: RemoteLogSegmentMetadata) -> bytes:
    """The Java layout, built in Python: used by tests and the benchmark to call the transports directly."""
    tip = meta.topic_id_partition

    def s16(s: str) -> bytes:
        b = s.encode("utf-8")
        return _U16.pack(len(b)) + b

    custom = meta.custom_metadata
    parts = [
        bytes([METADATA_VERSION]),
        s16(tip.topic_id),
        s16(tip.topic),
        I32.pack(tip.partition),
        s16(meta.remote_log_segment_id.id),
        _FIXED.pack(
            meta.start_offset,
            meta.end_offset,
            meta.max_timestamp_ms,
            meta.broker_id,
            meta.event_timestamp_ms,
            meta.segment_size_in_bytes,
            int(meta.state),
            1 if meta.txn_idx_empty else 0,
        ),
        I32.pack(-1) if custom is None else I32.pack(len(custom)) + custom,
        I32.pack(len(meta.segment_leader_epochs)),
    ]
    parts += [_EPOCH.pack(e, o) for e, o in sorted(meta.segment_leader_epochs.items())]
    return b"".join(parts)


def index_entry(kind: IndexType, data: bytes | None) -> bytes:
    """One index of an OP_FETCH_INDEX reply: u16 + type name, then i32 n and n bytes, or i32 -1 and an error
    frame (the segment has no such index)."""
    name = kind.name.encode("ascii")
    head = _U16.pack(len(name)) + name
    return head + I32.pack(-1) if data is None else head + I32.pack(len(data)) + data


def next_segment_frame(segment_id: str, entries: Sequence[bytes]) -> bytes:
    """The ``STREAM_NEXT_SEGMENT`` frame: u16 + the next segment's id (the broker's RemoteLogSegmentId), u8 n and
    n ``index_entry`` items, all behind one length so a shim that is only draining the stream can skip it."""
    sid = segment_id.encode("utf-8")
    body = b"".join([_U16.pack(len(sid)), sid, bytes([len(entries)]), *entries])
    return I32.pack(STREAM_NEXT_SEGMENT) + I32.pack(len(body)) + body


def decode_config(raw: bytes) -> dict[str, str]:
    """The configuration map the shim writes to the sidecar's stdin (``Wire.encodeConfig``)."""
    r = Reader(raw)
    out = {}
    for _ in range(r.i32()):
        k = r.blob()
        v = r.blob()
        if k is None or v is None:
            raise WireError("null key or value in the configuration map")
        out[k.decode("utf-8")] = v.decode("utf-8")
    return out


_INDEX_TYPES_BY_ASCII = {t.name.encode("ascii"): t for t in IndexType}


def index_type(name: str | bytes) -> IndexType:
    """Kafka's IndexType by name; the in-process bridge passes the ASCII bytes (no String conversion)."""
    kind = _INDEX_TYPES_BY_ASCII.get(name if isinstance(name, bytes) else name.encode("utf-8", "replace"))
    if kind is None:
        raise WireError(f"unknown index type {name!r}")
    return kind


def error_frame(exc: BaseException) -> bytes:
    """A reply's status and the failure: u8 status, u16 + the Python type name, i32 + the message."""
    status, type_name, message = error_parts(exc)
    t = type_name.encode("utf-8", "replace")[:0xFFFF]
    m = message.encode("utf-8", "replace")
    return bytes([status]) + _U16.pack(len(t)) + t + I32.pack(len(m)) + m


def error_parts(exc: BaseException) -> tuple[int, str, str]:
    """(status, Python type name, message) for an exception raised by the manager."""
    from rsm.errors import RemoteResourceNotFoundException, RetriableRemoteStorageException

    if isinstance(exc, RemoteResourceNotFoundException):
        status = STATUS_NOT_FOUND
    elif isinstance(exc, RetriableRemoteStorageException):
        status = STATUS_RETRIABLE
    else:
        status = STATUS_ERROR
    return status, type(exc).__name__, str(exc)


def load_manager_class(spec: str) -> type:
    """``module:Class`` -> the class; the default names the package's own manager."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"python.manager.class must be module:Class, got {spec!r}")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"python.manager.class {spec!r} is not a class")
    return obj
