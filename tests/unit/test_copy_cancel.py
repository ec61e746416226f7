"""A copy the shim gave up on is cancelled in the sidecar, and nothing of it stays: not an orphan object, not an
open upload, not a complete segment the broker thinks failed.

A real ``Sidecar`` serves a real manager on socket pairs, as the shim's connections. The copy is held at each
point of its path (before it started, during the ``.log`` upload, after its data before the manifest, after the
manifest); the shim's side then drops the copy's connection and sends ``OP_CANCEL_COPY``, and the cancel's
answer comes only once the segment's objects are gone.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from helpers import TIP

from backends.filesystem import FileSystemBackend
from rsm import RemoteStorageManager
from rsm.jvm import codec as wire
from rsm.jvm.copy_cancel import CopyCancels
from rsm.jvm.seams import ManagerCapabilities
from rsm.jvm.sidecar import Sidecar
from rsm.operator_tools.garbage import find_garbage


class HeldBackend(FileSystemBackend):
    """The filesystem backend, held where a test says: ``hold`` is (key suffix, "start" | "end") of an upload."""

    hold: tuple[str, str] | None = None
    reached = threading.Event()
    go = threading.Event()

    def upload(self, key: str, data: BinaryIO) -> int:
        where = HeldBackend.hold
        if where is not None and key.endswith(where[0]) and where[1] == "start":
            first = data.read(1)  # an upload under way: part of the object has been read
            HeldBackend.reached.set()
            assert HeldBackend.go.wait(30)
            rest = _Prepended(first, data)
            return super().upload(key, rest)  # type: ignore[arg-type]
        n = super().upload(key, data)
        if where is not None and key.endswith(where[0]) and where[1] == "end":
            HeldBackend.reached.set()
            assert HeldBackend.go.wait(30)
        return n


class _Prepended:
    def __init__(self, first: bytes, rest: BinaryIO) -> None:
        self.first = first
        self.rest = rest

    def read(self, n: int = -1) -> bytes:
        if self.first:
            out, self.first = self.first, b""
            return out
        return self.rest.read(n)


def _frame(op: int, body: bytes) -> bytes:
    return wire.REQUEST_HEADER.pack(len(body) + 1, op) + body


def _str16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def _copy_request(meta: Any, data: Any) -> bytes:
    blob = wire.encode_metadata(meta)
    body = wire.I32.pack(len(blob)) + blob
    for path in (
        data.log_segment,
        data.offset_index,
        data.time_index,
        data.transaction_index,
        data.producer_snapshot_index,
    ):
        body += _str16(str(path) if path is not None else "")
    body += wire.I32.pack(len(data.leader_epoch_index)) + bytes(data.leader_epoch_index)
    return _frame(wire.OP_COPY, body)


def _cancel_request(meta: Any, wait_ms: int) -> bytes:
    blob = wire.encode_metadata(meta)
    return _frame(wire.OP_CANCEL_COPY, wire.I32.pack(len(blob)) + blob + wire.I32.pack(wait_ms))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RemoteStorageManager, Sidecar, Any]]:
    m = RemoteStorageManager()
    m.configure(
        {
            "chunk.size": "65536",
            "storage.backend.class": "test_copy_cancel:HeldBackend",
            "storage.root": str(tmp_path / "store"),
            "storage.fsync.enabled": "false",
        }
    )
    sidecar = Sidecar(ManagerCapabilities.of(m))
    threads: list[threading.Thread] = []

    def connect() -> socket.socket:
        ours, theirs = socket.socketpair()
        ours.settimeout(30)
        t = threading.Thread(target=sidecar.handle_connection, args=(theirs,), daemon=True)
        t.start()
        threads.append(t)
        return ours

    HeldBackend.hold = None
    HeldBackend.reached.clear()
    HeldBackend.go.clear()
    try:
        yield m, sidecar, connect
    finally:
        HeldBackend.go.set()
        HeldBackend.hold = None
        for t in threads:
            t.join(10)
        m.close()


def _nothing_left(m: RemoteStorageManager) -> None:
    assert list(m.backend.list("")) == [], "objects of the cancelled copy remain"
    assert find_garbage(m, 0) == []
    assert m.catalog().segments() == []


def _status(sock: socket.socket) -> int:
    got = sock.recv(1)
    assert got, "the sidecar closed the connection without an answer"
    return got[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hold", [(".log", "start"), (".log", "end"), (".indexes", "end"), (".rsm-manifest", "end")])
def test_a_cancelled_copy_leaves_nothing(served: Any, segment_factory: Any, hold: tuple[str, str]) -> None:
    """(.log, start): during the data upload; (.log, end) and (.indexes, end): after data, before the manifest;
    (.rsm-manifest, end): the copy is complete when the cancel comes."""
    m, _sidecar, connect = served
    seg = segment_factory(target_bytes=3_000_000, seed=11)
    meta = seg.to_metadata(TIP)
    HeldBackend.hold = hold
    copier = connect()
    copier.sendall(_copy_request(meta, seg.to_log_segment_data()))
    assert HeldBackend.reached.wait(30), "the copy never reached the point it is held at"
    copier.close()  # the shim gave up on the call: the broker hears that the copy failed
    canceller = connect()
    canceller.sendall(_cancel_request(meta, 20_000))
    # The cancel waits for the copy, held here until the sidecar has marked it cancelled.
    assert wait_for(lambda: _cancels_of(_sidecar).is_cancelled(meta.remote_log_segment_id.id))
    HeldBackend.go.set()
    assert _status(canceller) == wire.STATUS_OK
    _nothing_left(m)


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    from helpers import wait_until

    return wait_until(predicate, timeout)


def _cancels_of(sidecar: Sidecar) -> CopyCancels:
    return sidecar.copies


@pytest.mark.timeout(60)
def test_a_copy_cancelled_before_it_arrives_is_refused(served: Any, segment_factory: Any) -> None:
    m, _sidecar, connect = served
    seg = segment_factory(target_bytes=3_000_000, seed=11)
    meta = seg.to_metadata(TIP)
    canceller = connect()
    canceller.sendall(_cancel_request(meta, 1000))
    assert _status(canceller) == wire.STATUS_OK
    copier = connect()
    copier.sendall(_copy_request(meta, seg.to_log_segment_data()))
    assert _status(copier) == wire.STATUS_ERROR
    _nothing_left(m)


@pytest.mark.timeout(60)
def test_a_copy_that_does_not_stop_in_time_is_removed_when_it_ends(served: Any, segment_factory: Any) -> None:
    """The cancel answers with an error when the copy is stuck past its wait; the copy's objects still go when it
    ends, whatever it did meanwhile."""
    m, _sidecar, connect = served
    seg = segment_factory(target_bytes=3_000_000, seed=11)
    meta = seg.to_metadata(TIP)
    HeldBackend.hold = (".rsm-manifest", "end")
    copier = connect()
    copier.sendall(_copy_request(meta, seg.to_log_segment_data()))
    assert HeldBackend.reached.wait(30)
    canceller = connect()
    canceller.sendall(_cancel_request(meta, 200))
    assert _status(canceller) == wire.STATUS_ERROR
    assert any(k.endswith(".rsm-manifest") for k in m.backend.list(""))  # complete, for now
    HeldBackend.go.set()
    assert _status(copier) == wire.STATUS_OK  # the copy's own answer, which the shim no longer reads
    assert wait_for(lambda: list(m.backend.list("")) == [])
    _nothing_left(m)


def test_other_segments_copy_as_usual(served: Any, segment_factory: Any) -> None:
    m, _sidecar, connect = served
    seg = segment_factory(target_bytes=3_000_000, seed=11)
    cancelled, kept = seg.to_metadata(TIP), seg.to_metadata(TIP)
    c = connect()
    c.sendall(_cancel_request(cancelled, 1000))
    assert _status(c) == wire.STATUS_OK
    c.sendall(_copy_request(kept, seg.to_log_segment_data()))
    assert _status(c) == wire.STATUS_OK
    with contextlib.closing(c):
        assert [s.segment_id for s in m.catalog().segments()] == [kept.remote_log_segment_id.id]
