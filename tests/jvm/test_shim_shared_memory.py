"""The sidecar's shared-memory region: the region file itself, the sidecar's reference/inline protocol driven
from Python exactly as the shim speaks it, the sidecar process's file lifecycle, and the real JVM shim on
top (region on, off, and too small for the load)."""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jvm_testing as jt
import pytest
from helpers import TIP, damage_stored_index, wait_until

from rsm._version import __version__
from rsm.errors import RemoteStorageException
from rsm.jvm import codec as wire
from rsm.jvm.config import CONFIG_DEF as JVM_CONFIG_DEF
from rsm.jvm.seams import ManagerCapabilities
from rsm.jvm.shared_region import SHM_DIR, SharedRegion, SharedRegionBuffers, remove_stale
from rsm.jvm.sidecar import Sidecar
from rsm.metadata import BROKER_INDEX_SET, IndexType

DEFAULT_REGION_MIB = JVM_CONFIG_DEF.keys["jvm.sidecar.shared.memory.bytes"].default // (1024 * 1024)

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
BS = 65536


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def region_files(pid: int) -> list[Path]:
    return sorted(SHM_DIR.glob(f"kts-sidecar-{pid}-*.shm"))


# --- the region file -------------------------------------------------------------------------------------------


def test_create_makes_an_owner_only_file_of_whole_buffers(tmp_path: Path) -> None:
    region = SharedRegion.create(5 * BS + 1000, BS, directory=tmp_path)
    assert region is not None
    try:
        assert region.path.parent == tmp_path
        assert re.fullmatch(rf"kts-sidecar-{os.getpid()}-[0-9a-f]+\.shm", region.path.name)
        st = region.path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_size == region.size == 5 * BS
        pool = region.pool
        assert pool.buffer_size == BS and pool.region_buffers == pool.region_free == 5

        # what the sidecar decodes into a pool buffer is what a reader of the file sees at region_offset
        bufs = [pool.take(BS) for _ in range(3)]
        for i, b in enumerate(bufs):
            b.view[:] = bytes([0x41 + i]) * BS
        with open(region.path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as other:
            for i, b in enumerate(bufs):
                assert b.region_offset is not None
                assert other[b.region_offset : b.region_offset + BS] == bytes([0x41 + i]) * BS
        for b in bufs:
            b.release()
        assert pool.region_free == 5
    finally:
        region.unlink()
    assert not region.path.exists()
    region.unlink()  # the shim usually removed the name already: not an error


@pytest.mark.parametrize("total", [0, BS, 2 * BS - 1])
def test_create_is_disabled_below_two_buffers(tmp_path: Path, total: int) -> None:
    assert SharedRegion.create(total, BS, directory=tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_create_allocates_the_whole_region_up_front(tmp_path: Path) -> None:
    """Allocated at start, not page by page as fetches first write: a first write of each page would cost a
    fault on the broker's fetch path, and on a too-small /dev/shm a SIGBUS that kills the sidecar."""
    region = SharedRegion.create(4 * BS, BS, directory=tmp_path)
    assert region is not None
    try:
        assert region.path.stat().st_blocks * 512 >= region.size == 4 * BS
    finally:
        region.unlink()


class _Free:
    """os.statvfs of a filesystem with ``free`` bytes available."""

    def __init__(self, free: int) -> None:
        self.f_bavail, self.f_frsize = free // 4096, 4096


@pytest.mark.parametrize(("free", "buffers"), [(3 * BS + 4096, 3), (2 * BS, 2), (2 * BS - 4096, 0)])
def test_create_shrinks_the_region_to_the_free_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, free: int, buffers: int
) -> None:
    """A Docker container's /dev/shm is 64 MiB: a 128 MiB region is cut to what fits, with a warning that says
    what to change; below two chunks it is off."""
    monkeypatch.setattr("rsm.jvm.shared_region.os.statvfs", lambda _: _Free(free))
    region = SharedRegion.create(8 * BS, BS, directory=tmp_path)
    if buffers == 0:
        assert region is None and list(tmp_path.iterdir()) == []
        assert "shared memory disabled" in caplog.text and "--shm-size" in caplog.text
        return
    assert region is not None
    try:
        assert region.size == buffers * BS and region.pool.region_buffers == buffers
        assert f"shrunk to {buffers} chunks" in caplog.text and "jvm.sidecar.shared.memory.bytes" in caplog.text
    finally:
        region.unlink()


def test_create_is_disabled_when_the_space_cannot_be_allocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process took the space between the check and the allocation: off, and no file left behind."""

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("rsm.jvm.shared_region.os.posix_fallocate", full)
    assert SharedRegion.create(4 * BS, BS, directory=tmp_path) is None
    assert list(tmp_path.iterdir()) == []
    assert "shared memory disabled" in caplog.text and "No space left" in caplog.text


def test_create_is_disabled_without_the_directory(tmp_path: Path) -> None:
    assert SharedRegion.create(4 * BS, BS, directory=tmp_path / "missing") is None
    assert not (tmp_path / "missing").exists()


# --- the region goes in before configure() -----------------------------------------------------------------------


def test_the_region_is_made_when_the_read_path_asks_and_caps_the_memory_tier(tmp_path: Path, make_manager: Any) -> None:
    """The sidecar's region goes in through ``use_chunk_buffers`` before ``configure()``, which asks for buffers of
    its chunk size: the chunk cache decodes into the region, and its memory tier keeps at most half of it (it
    decodes ahead a quarter of its configured size, as when the tier was shrunk after the fact)."""
    shared = SharedRegionBuffers(8 * BS, tmp_path)
    m = make_manager(chunk_size=BS, fetch_chunk_cache_size=64 * BS, chunk_buffers=shared)
    assert shared.region is not None and shared.region.path.parent == tmp_path
    assert m.chunk_buffers is shared.region.pool and shared.region.pool.region_buffers == 8
    assert m.chunk_cache.memory.capacity == 4 * BS
    assert m.chunk_cache.decode_ahead_bytes == 16 * BS
    with pytest.raises(RemoteStorageException, match="before configure"):
        m.use_chunk_buffers(shared)
    shared.discard()
    assert shared.region is None and list(tmp_path.glob("kts-sidecar-*.shm")) == []


def test_without_a_region_the_manager_decodes_into_its_own_buffers(tmp_path: Path, make_manager: Any) -> None:
    """0 bytes (or a /dev/shm too small): no region, no cap on the memory tier."""
    shared = SharedRegionBuffers(0, tmp_path)
    m = make_manager(chunk_size=BS, fetch_chunk_cache_size=64 * BS, chunk_buffers=shared)
    assert shared.region is None and list(tmp_path.glob("kts-sidecar-*.shm")) == []
    assert m.chunk_buffers.region_buffers == 0 and m.chunk_cache.memory.capacity == 64 * BS


def test_the_transports_find_what_a_manager_offers_once(make_manager: Any) -> None:
    """``ManagerCapabilities.of``: the plugin's manager offers every optional call; a minimal one (KIP-405 only)
    none, and the transport then does without: ``fetch_index`` for the indexes sent ahead, no metrics."""
    full = ManagerCapabilities.of(make_manager())
    for name in ("indexes_ahead", "segments_ahead", "resumed_fetches", "metrics", "metrics_settings", "chunk_buffers"):
        assert getattr(full, name) is full.manager, name
    assert full.metrics_rows() and full.setting("metrics.prometheus.port") is None
    minimal = ManagerCapabilities.of(jt.InMemoryIndexManager())
    assert (minimal.indexes_ahead, minimal.segments_ahead, minimal.resumed_fetches) == (None, None, None)
    assert (minimal.metrics, minimal.metrics_settings, minimal.chunk_buffers) == (None, None, None)
    assert minimal.metrics_rows() == [] and minimal.setting("metrics.prometheus.port") is None
    with minimal.fetch_index_ahead(None, IndexType.OFFSET) as f:  # type: ignore[arg-type]
        assert f.read() == jt.InMemoryIndexManager.INDEX


def test_remove_stale_removes_only_files_of_dead_sidecars(tmp_path: Path) -> None:
    gone = dead_pid()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f"kts-sidecar-{gone}-0123abcd.shm"
        keep = [
            tmp_path / f"kts-sidecar-{os.getppid()}-00ff.shm",  # a live process
            tmp_path / f"kts-sidecar-{sleeper.pid}-abcdef.shm",  # a live child
            tmp_path / f"kts-sidecar-{os.getpid()}-1234.shm",  # ourselves
            tmp_path / f"kts-sidecar-{gone}-NOTHEX.shm",  # not a name the sidecar makes
            tmp_path / f"kts-sidecar-{gone}.shm",
            tmp_path / f"kts-sidecar-x{gone}-abc.shm",
            tmp_path / f"other-{gone}-abc.shm",
            tmp_path / f"kts-sidecar-{gone}-abc.shm.bak",
        ]
        for p in [stale, *keep]:
            p.write_bytes(b"x")
        assert remove_stale(tmp_path) == 1
        assert not stale.exists()
        assert all(p.exists() for p in keep), [p.name for p in keep if not p.exists()]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_create_clears_stale_files_first(tmp_path: Path) -> None:
    stale = tmp_path / f"kts-sidecar-{dead_pid()}-beef.shm"
    stale.write_bytes(b"\0" * 100)
    region = SharedRegion.create(2 * BS, BS, directory=tmp_path)
    assert region is not None
    try:
        assert not stale.exists()
        assert [p.name for p in tmp_path.iterdir()] == [region.path.name]
    finally:
        region.unlink()


# --- the sidecar protocol, with Python playing the shim ---------------------------------------------------------


class ShimClient:
    """The shim's side of one connection: requests, status, inline pieces and region references."""

    def __init__(self, sock: socket.socket, region_path: Path | None) -> None:
        self.sock = sock
        self.region: mmap.mmap | None = None
        if region_path is not None:
            with open(region_path, "rb") as f:
                self.region = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)

    def send(self, op: int, body: bytes = b"") -> None:
        self.sock.sendall(wire.REQUEST_HEADER.pack(len(body) + 1, op) + body)

    def recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            got = self.sock.recv(n - len(out))
            if not got:
                raise EOFError(f"sidecar closed the connection ({len(out)} of {n} bytes)")
            out += got
        return bytes(out)

    def i32(self) -> int:
        return struct.unpack(">i", self.recv(4))[0]

    def error(self) -> str:
        status = self.recv(1)[0]
        t = self.recv(struct.unpack(">H", self.recv(2))[0]).decode()
        m = self.recv(self.i32()).decode()
        return f"{status} {t}: {m}"

    def request_index(self, meta: Any, kind: str) -> None:
        blob = wire.encode_metadata(meta)
        self.send(wire.OP_FETCH_INDEX, wire.I32.pack(len(blob)) + blob + struct.pack(">H", len(kind)) + kind.encode())

    def fetch_index(self, meta: Any, kind: str) -> dict[str, bytes | str]:
        """An OP_FETCH_INDEX reply: type name -> the index's bytes, or the error frame of one the segment lacks."""
        self.request_index(meta, kind)
        status = self.recv(1)[0]
        assert status == 0, self.error()
        out: dict[str, bytes | str] = {}
        for _ in range(self.recv(1)[0]):
            name = self.recv(struct.unpack(">H", self.recv(2))[0]).decode()
            n = self.i32()
            out[name] = self.recv(n) if n >= 0 else self.error()
        return out

    def fetch(self, meta: Any, start: int, end: int | None) -> None:
        blob = wire.encode_metadata(meta)
        self.send(
            wire.OP_FETCH,
            wire.I32.pack(len(blob)) + blob + wire.I32.pack(start) + wire.I32.pack(-1 if end is None else end),
        )

    def read_stream(self, hold_acks: bool, mid_stream: bool = False) -> tuple[bytes, list[str], list[int], str | None]:
        """The body of a stream: the bytes, the kind of each piece ('ref'/'inline'), the referenced offsets and
        the error if it ended with one. With ``hold_acks`` every reference is acknowledged only at the end, so
        the sidecar cannot reuse those buffers while the stream goes on. ``mid_stream``: the status and some
        pieces were read already."""
        if not mid_stream:
            status = self.recv(1)[0]
            assert status == 0, self.error()
        data = bytearray()
        kinds: list[str] = []
        offsets: list[int] = []
        unacked = 0
        err = None
        while True:
            n = self.i32()
            if n > 0:
                data += self.recv(n)
                kinds.append("inline")
            elif n == -2:
                offset, length = struct.unpack(">qi", self.recv(12))
                assert self.region is not None, "a reference on a connection that did not map the region"
                assert offset >= 0 and offset + length <= len(self.region)
                data += self.region[offset : offset + length]
                kinds.append("ref")
                offsets.append(offset)
                if hold_acks:
                    unacked += 1
                else:
                    self.sock.sendall(b"\x01")
            elif n == 0:
                break
            else:
                assert n == -1, n
                err = self.error()
                break
        self.sock.sendall(b"\x01" * unacked)
        return bytes(data), kinds, offsets, err

    def ping(self) -> None:
        self.send(wire.OP_PING)
        assert self.recv(1) == b"\x00"

    def close(self) -> None:
        if self.region is not None:
            self.region.close()
        self.sock.close()


def region_of(buffers: int, directory: Path) -> SharedRegionBuffers:
    """What the sidecar hands its manager before ``configure()``: a region of ``buffers`` chunk buffers, made when
    the manager asks for buffers of its chunk size."""
    return SharedRegionBuffers(buffers * BS, directory)


class SidecarConnections:
    """A real ``Sidecar`` for ``manager``, whose chunks decode into the region ``shared`` made, and connections to
    it on socket pairs, each served on its own thread as by its socket server; ``close`` ends them all and removes
    the region's name."""

    def __init__(self, manager: Any, shared: SharedRegionBuffers) -> None:
        assert shared.region is not None and manager.chunk_buffers is shared.region.pool
        self.manager = manager
        self.region = shared.region
        self.sidecar = Sidecar(ManagerCapabilities.of(manager), self.region)
        self.threads: list[threading.Thread] = []
        self.clients: list[ShimClient] = []

    def rewire(self) -> None:
        """A new ``Sidecar`` for the manager, as a new sidecar process wires itself to it (after a test took a
        method off the manager's class)."""
        self.sidecar = Sidecar(ManagerCapabilities.of(self.manager), self.region)

    def connect(self, mapped: bool = True) -> ShimClient:
        """A connection like the shim's; ``mapped``: it tells the sidecar it mapped the region."""
        ours, theirs = socket.socketpair()
        ours.settimeout(10)  # a protocol slip must fail the test, not hang it
        t = threading.Thread(target=self.sidecar.handle_connection, args=(theirs,), daemon=True)
        t.start()
        self.threads.append(t)
        c = ShimClient(ours, self.region.path if mapped else None)
        if mapped:
            c.send(wire.OP_SHARED_MEMORY_MAPPED)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(OSError):
                c.close()
        for t in self.threads:
            t.join(10)
        self.region.unlink()


@pytest.fixture
def served(segment_factory: Any, make_manager: Any, tmp_path: Path) -> Iterator[Any]:
    """A real manager with one copied segment (64 KiB chunks) whose chunks decode into a region of two buffers,
    served by a real ``Sidecar`` on socket pairs; ``connect(mapped)`` opens a connection like the shim."""
    seg = segment_factory(target_bytes=700_000, seed=4)
    shared = region_of(2, tmp_path)
    m = make_manager(
        chunk_size=BS,
        compression_enabled=True,
        fetch_readahead_chunks=4,
        transform_thread_pool_size=2,
        fetch_chunk_cache_size=0,  # the transport's ref/inline protocol over exactly two buffers, no cache holding one
        fetch_chunk_cache_prefetch_max_size=0,
        chunk_buffers=shared,
    )
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    connections = SidecarConnections(m, shared)

    class Served:
        pass

    s = Served()
    s.manager, s.meta, s.original, s.pool, s.connect, s.threads, s.rewire = (
        m,
        meta,
        seg.log.read_bytes(),
        connections.region.pool,
        connections.connect,
        connections.threads,
        connections.rewire,
    )
    assert len(s.original) > 8 * BS
    yield s
    connections.close()


def test_references_while_the_region_lasts_then_inline(served: Any) -> None:
    c = served.connect()
    c.fetch(served.meta, 0, None)
    data, kinds, offsets, err = c.read_stream(hold_acks=True)
    assert err is None
    assert data == served.original
    # two region buffers, neither acknowledged before the end: exactly two references, every other chunk inline
    assert kinds.count("ref") == 2 and sorted(offsets) == [0, BS]
    assert kinds.count("inline") == len(kinds) - 2 >= 6
    c.ping()  # answered after the acknowledgements were read
    assert served.pool.region_free == 2


def test_prompt_acknowledgements_and_ranges(served: Any) -> None:
    c = served.connect()
    for start, end in [(0, None), (BS - 3, 3 * BS + 2), (5 * BS + 1, 5 * BS + 1), (len(served.original) - 10, None)]:
        c.fetch(served.meta, start, end)
        data, kinds, _, err = c.read_stream(hold_acks=False)
        assert err is None
        assert data == served.original[start : len(served.original) if end is None else end + 1], (start, end)
        assert "ref" in kinds
    c.ping()
    assert served.pool.region_free == 2


def _index_or_error(manager: Any, meta: Any, kind: Any) -> bytes | str:
    from rsm.errors import RemoteResourceNotFoundException

    try:
        with manager.fetch_index(meta, kind) as f:
            return bytes(f.read())
    except RemoteResourceNotFoundException as e:
        return f"{wire.STATUS_NOT_FOUND} RemoteResourceNotFoundException: {e}"


@pytest.mark.parametrize("asked", ["OFFSET", "TIMESTAMP", "LEADER_EPOCH"])
def test_index_fetch_brings_the_brokers_other_two(served: Any, asked: str) -> None:
    """Asked for one of the three indexes Kafka's remote index cache fetches together, the sidecar answers with
    all three, the one asked for first; an index the segment lacks travels as its not-found error. Any other
    index comes alone. The reply is no stream: the connection serves the next request right after."""
    from rsm import IndexType

    c = served.connect()
    got = c.fetch_index(served.meta, asked)
    expected_order = [asked] + [k.name for k in BROKER_INDEX_SET if k.name != asked]
    assert list(got) == (expected_order if asked != "LEADER_EPOCH" else [asked])
    for name, value in got.items():
        assert value == _index_or_error(served.manager, served.meta, IndexType[name]), name
    if asked == "OFFSET":  # the fixture's segment is not transactional: its absence is said, not left out
        assert str(got["TRANSACTION"]).startswith(f"{wire.STATUS_NOT_FOUND} RemoteResourceNotFoundException")
        assert "has no TRANSACTION index" in str(got["TRANSACTION"])
    c.ping()
    assert served.pool.region_free == 2


def test_index_fetch_that_fails_is_one_error(served: Any) -> None:
    """The index asked for is absent (TRANSACTION of a non-transactional segment) or its segment is gone: the
    reply is the error alone, as before the other two came along."""
    from dataclasses import replace

    from rsm.metadata import RemoteLogSegmentId

    c = served.connect()
    gone = replace(served.meta, remote_log_segment_id=RemoteLogSegmentId(served.meta.topic_id_partition, "A" * 22))
    for meta, kind, says in [(served.meta, "TRANSACTION", "has no TRANSACTION index"), (gone, "OFFSET", "not in")]:
        c.request_index(meta, kind)
        error = c.error()
        assert error.startswith(f"{wire.STATUS_NOT_FOUND} RemoteResourceNotFoundException") and says in error, error
    c.ping()


def test_a_corrupt_index_sent_along_is_left_out_and_counted_once(served: Any, tmp_path: Path) -> None:
    """The time index is damaged in the store. Asked for the offset index, the sidecar leaves the time index
    out of its reply (so the shim holds nothing for it) and counts no error: the broker's own request for it
    gets the integrity error, and that one is counted."""
    from rsm import IndexType

    damage_stored_index(tmp_path / "store", served.manager, served.meta, IndexType.TIMESTAMP)

    def errors() -> float:
        return served.manager.metrics()[RSM_BEAN]["segment-fetch-errors-total"]

    c = served.connect()
    got = c.fetch_index(served.meta, "OFFSET")
    assert list(got) == ["OFFSET", "TRANSACTION"]
    assert got["OFFSET"] == _index_or_error(served.manager, served.meta, IndexType.OFFSET)
    assert errors() == 0
    c.request_index(served.meta, "TIMESTAMP")
    error = c.error()
    assert error.startswith(f"{wire.STATUS_ERROR} CorruptDataException") and "CRC-32C mismatch" in error, error
    assert errors() == 1
    c.ping()


def test_connection_without_the_mapping_gets_inline_pieces_only(served: Any) -> None:
    c = served.connect(mapped=False)
    c.fetch(served.meta, 0, None)
    data, kinds, _, err = c.read_stream(hold_acks=False)
    assert err is None and data == served.original and set(kinds) == {"inline"}
    c.ping()
    assert served.pool.region_free == 2


@pytest.mark.parametrize("at_end", [False, True], ids=["mid-stream", "before-acknowledging"])
def test_shim_going_away_gives_the_region_back(served: Any, at_end: bool) -> None:
    """The shim closes the connection holding both region buffers unacknowledged: in the middle of the stream
    (the sidecar's next send fails) or after the end (the sidecar is waiting for the acknowledgements)."""
    c = served.connect()
    c.fetch(served.meta, 0, None)
    assert c.recv(1) == b"\x00"
    refs = 0
    while True:
        n = c.i32()
        if n == 0:
            break
        if n == -2:
            c.recv(12)
            refs += 1
            if refs == 2 and not at_end:
                break
        else:
            assert n > 0
            c.recv(n)
    assert refs == 2 and served.pool.region_free == 0
    c.close()
    served.threads[-1].join(10)
    assert not served.threads[-1].is_alive()
    served.manager.close()  # waits for read-ahead loads that were still running
    assert served.pool.region_free == 2


def test_corrupt_chunk_mid_stream_errors_after_the_references_and_leaks_nothing(served: Any) -> None:
    from rsm.core.object_keys import segment_keys

    path = Path(served.manager.backend.root) / segment_keys(served.manager.config["key.prefix"], served.meta).log
    stored = bytearray(path.read_bytes())
    stored[len(stored) * 2 // 3] ^= 0x55
    path.write_bytes(stored)
    c = served.connect()
    c.fetch(served.meta, 0, None)
    data, kinds, _, err = c.read_stream(hold_acks=True)
    assert err is not None and "CorruptDataException" in err, err
    assert kinds.count("ref") == 2
    assert served.original.startswith(data) and len(data) < len(served.original)
    c.ping()  # the connection stays usable after a framed error
    served.manager.close()
    assert served.pool.region_free == 2


CANCEL = wire.REQUEST_HEADER.pack(1, wire.OP_CANCEL_STREAM)
RSM_BEAN = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"


@pytest.mark.parametrize("ack_first", [False, True], ids=["instead-of-the-ack", "after-an-ack"])
def test_cancel_stops_the_stream_and_keeps_the_connection(served: Any, ack_first: bool) -> None:
    """What the shim does when the broker closes a stream early: a cancel in place of the next acknowledgement;
    the sidecar stops, ends the stream, gives the region back and serves the next request on the connection."""
    c = served.connect()
    c.fetch(served.meta, 0, None)
    assert c.recv(1) == b"\x00"
    assert c.i32() == -2
    _, first = struct.unpack(">qi", c.recv(12))
    c.sock.sendall((b"\x01" if ack_first else b"") + CANCEL)
    seen = first
    while (n := c.i32()) != 0:  # what the sidecar sent before it read the cancel, then the end frame
        assert n == -2 or n > 0, n
        seen += struct.unpack(">qi", c.recv(12))[1] if n == -2 else len(c.recv(n))
    assert seen < len(served.original), "the stream went on to its end"
    c.ping()
    # A read-ahead load still running when the stream stopped gives its buffer back when it finishes.
    assert wait_until(lambda: served.pool.region_free == 2), served.pool.region_free
    c.fetch(served.meta, 0, None)
    data, _, _, err = c.read_stream(hold_acks=False)
    assert err is None and data == served.original


def test_cancel_is_heard_while_the_stream_goes_on_inline(served: Any) -> None:
    """The region taken, so every piece travels inline and the sidecar waits for no acknowledgement: the cancel
    must still stop the stream, not let it run to the end for a shim that stopped reading it. (An acknowledged
    region buffer would go back to the pool, where a read-ahead load could take it for a later piece.)"""
    held = [served.pool.take(BS), served.pool.take(BS)]  # both region buffers
    try:
        c = served.connect()
        c.fetch(served.meta, 0, None)
        assert c.recv(1) == b"\x00"
        first = c.i32()
        assert first > 0, first  # inline from the first piece
        seen = len(c.recv(first))
        c.sock.sendall(CANCEL)
        while (n := c.i32()) != 0:
            assert n > 0, n  # inline pieces only, up to the end frame
            seen += len(c.recv(n))
        assert seen < len(served.original), "the stream went on to its end"
        c.ping()
    finally:
        for buffer in held:
            buffer.release()
    # a read-ahead load that was running gives its buffer back when it ends
    assert wait_until(lambda: served.pool.region_free == 2, timeout=5)


def test_cancel_after_the_end_was_sent_gives_the_references_back(served: Any) -> None:
    """The broker closed after the last piece but before reading the end frame: the cancel arrives while the
    sidecar waits for that piece's acknowledgement."""
    c = served.connect()
    c.fetch(served.meta, 0, BS - 1)
    assert c.recv(1) == b"\x00" and c.i32() == -2
    c.recv(12)
    assert c.i32() == 0
    assert served.pool.region_free == 1
    c.sock.sendall(CANCEL)
    c.ping()
    assert served.pool.region_free == 2


def test_a_cancel_without_a_stream_is_ignored(served: Any) -> None:
    c = served.connect()
    c.sock.sendall(CANCEL)
    c.ping()


def test_the_last_acknowledgement_and_the_next_request_in_one_send(served: Any) -> None:
    """The sidecar reads acknowledgements one per outstanding piece, never into the request that follows."""
    c = served.connect()
    c.fetch(served.meta, 0, BS - 1)
    assert c.recv(1) == b"\x00" and c.i32() == -2
    c.recv(12)
    assert c.i32() == 0
    c.sock.sendall(b"\x01" + wire.REQUEST_HEADER.pack(1, wire.OP_PING))
    assert c.recv(1) == b"\x00"
    assert served.pool.region_free == 2


def _fetch_counts(manager: Any) -> tuple[float, float, float]:
    """Requested bytes, fetches, and the fetches that went on with a kept stream."""
    m = manager.metrics()[RSM_BEAN]
    return m["segment-fetch-requested-bytes-total"], m["segment-fetch-total"], m["segment-fetch-resumed-total"]


def test_a_kept_stream_goes_on_after_resume_notices(served: Any) -> None:
    """What the shim does when the broker's next fetch starts inside the piece its last fetch stopped in: it
    reads on, and tells the sidecar with a notice between its acknowledgements (sent here split across
    sends, as a socket may deliver it). The stream goes on unchanged, and each notice counts as a fetch of the
    rest of the segment, and as a resumed one."""
    c = served.connect()
    size = len(served.original)
    before = _fetch_counts(served.manager)
    c.fetch(served.meta, 0, None)
    assert c.recv(1) == b"\x00" and c.i32() == -2
    offset, length = struct.unpack(">qi", c.recv(12))
    data = bytearray(c.region[offset : offset + length])
    notices = [1000, BS]  # back inside the piece, then exactly at its end
    c.sock.sendall(bytes([wire.STREAM_RESUMED]) + wire.I32.pack(notices[0])[:2])
    time.sleep(0.05)  # the sidecar holds half a notice: it must wait for the rest, not misread it
    c.sock.sendall(wire.I32.pack(notices[0])[2:] + bytes([wire.STREAM_RESUMED]) + wire.I32.pack(notices[1]) + b"\x01")
    rest, _, _, err = c.read_stream(hold_acks=False, mid_stream=True)
    assert err is None and bytes(data) + rest == served.original
    c.ping()
    assert served.pool.region_free == 2
    after = _fetch_counts(served.manager)
    assert after[0] - before[0] == size + sum(size - n for n in notices)
    assert (after[1] - before[1], after[2] - before[2]) == (1 + len(notices), len(notices))


def test_a_resume_notice_for_a_manager_without_the_hook_is_harmless(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's manager class (python.manager.class) need not have ``record_resumed_fetch``."""
    monkeypatch.delattr(type(served.manager), "record_resumed_fetch")
    served.rewire()  # the sidecar finds what its manager offers when it is wired to it
    c = served.connect()
    c.fetch(served.meta, 0, None)
    assert c.recv(1) == b"\x00" and c.i32() == -2
    offset, length = struct.unpack(">qi", c.recv(12))
    first = bytes(c.region[offset : offset + length])
    c.sock.sendall(bytes([wire.STREAM_RESUMED]) + wire.I32.pack(5) + b"\x01")
    rest, _, _, err = c.read_stream(hold_acks=False, mid_stream=True)
    assert err is None and first + rest == served.original


# --- a stream that goes on into the partition's next segment ----------------------------------------------------


@pytest.fixture
def partition(segment_factory: Any, make_manager: Any, tmp_path: Path) -> Iterator[Any]:
    """Two contiguous segments of one partition (64 KiB chunks, zstd), copied by a real manager whose chunks
    decode into a region of eight buffers, served by a real ``Sidecar``; ``connect()`` opens a mapped connection."""
    first = segment_factory(target_bytes=300_000, seed=5)
    second = segment_factory(target_bytes=300_000, seed=6, base_offset=first.end_offset + 1)
    shared = region_of(8, tmp_path)
    m = make_manager(
        chunk_size=BS,
        compression_enabled=True,
        fetch_chunk_cache_size=0,
        fetch_chunk_cache_prefetch_max_size=0,
        chunk_buffers=shared,
    )
    metas = [seg.to_metadata(TIP) for seg in (first, second)]
    for seg, meta in zip((first, second), metas, strict=True):
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
    connections = SidecarConnections(m, shared)

    class Partition:
        pass

    p = Partition()
    p.manager, p.metas, p.segments, p.connect, p.rewire = (
        m,
        metas,
        (first, second),
        connections.connect,
        connections.rewire,
    )
    p.pool = connections.region.pool
    yield p
    connections.close()


def _read_segment(c: ShimClient) -> tuple[bytes, int, bytes | None]:
    """One segment's bytes from a stream, acknowledging each reference only once the frame after it has arrived
    (the sidecar's window allows it), so the sidecar meets the segment's end with a reference outstanding; then
    the frame that ended it (0, or -3) and, for -3, the next-segment frame's body."""
    data = bytearray()
    unacked = 0
    while True:
        n = c.i32()
        c.sock.sendall(b"\x01" * unacked)
        unacked = 0
        if n == -2:
            offset, length = struct.unpack(">qi", c.recv(12))
            assert c.region is not None
            data += c.region[offset : offset + length]
            unacked = 1
        elif n > 0:
            data += c.recv(n)
        elif n == wire.STREAM_NEXT_SEGMENT:
            return bytes(data), n, c.recv(c.i32())
        else:
            assert n == 0, n
            return bytes(data), n, None


def _next_segment_frame(body: bytes) -> tuple[str, dict[str, bytes | str]]:
    r = wire.Reader(body)
    segment = r.str16()
    indexes: dict[str, bytes | str] = {}
    for _ in range(r.u8()):
        name = r.str16()
        n = r.i32()
        if n >= 0:
            indexes[name] = bytes(r.take(n))
        else:
            status, t = r.u8(), r.str16()
            indexes[name] = f"{status} {t}: {bytes(r.take(r.i32())).decode()}"
    assert r.pos == len(body)
    return segment, indexes


def test_a_stream_at_its_segments_end_goes_on_into_the_next_segment(partition: Any) -> None:
    """An open-ended fetch read to the end of segment A: in place of the end frame, a next-segment frame names
    segment B (the id the broker has for it) and brings the indexes the broker fetches first, each equal to B's
    own file; B's bytes follow from position 0, then the end (B is the partition's last). Only the fetch that
    was asked for counts, until the shim says it resumed B's stream."""
    first, second = partition.segments
    c = partition.connect()
    before = _fetch_counts(partition.manager)
    c.fetch(partition.metas[0], 0, None)
    assert c.recv(1) == b"\x00"
    a, frame, body = _read_segment(c)
    assert a == first.log.read_bytes()
    assert frame == wire.STREAM_NEXT_SEGMENT and body is not None
    segment, indexes = _next_segment_frame(body)
    assert segment == partition.metas[1].remote_log_segment_id.id
    assert indexes["OFFSET"] == second.offset_index.read_bytes()
    assert indexes["TIMESTAMP"] == second.time_index.read_bytes()
    assert set(indexes) == {kind.name for kind in BROKER_INDEX_SET}
    after_a = _fetch_counts(partition.manager)
    assert after_a[1] - before[1] == 1  # B's stream is not a fetch until the broker asks for it
    c.sock.sendall(bytes([wire.STREAM_RESUMED]) + wire.I32.pack(0))
    b, frame, _ = _read_segment(c)
    assert b == second.log.read_bytes() and frame == 0
    c.ping()  # the connection serves the next request
    after = _fetch_counts(partition.manager)
    assert (after[1] - before[1], after[2] - before[2]) == (2, 1)
    assert after[0] - before[0] == len(a) + len(b)
    assert partition.pool.region_free == 8


def test_a_cancel_after_the_next_segment_frame_gives_everything_back(partition: Any) -> None:
    """The shim drops a stream it kept at a next-segment frame (idle, or too many kept): the sidecar stops B's
    stream, ends it, releases every buffer it referenced, and the connection serves the next request."""
    c = partition.connect()
    c.fetch(partition.metas[0], 0, None)
    assert c.recv(1) == b"\x00"
    _, frame, _ = _read_segment(c)
    assert frame == wire.STREAM_NEXT_SEGMENT
    c.sock.sendall(wire.REQUEST_HEADER.pack(1, wire.OP_CANCEL_STREAM))
    while (n := c.i32()) != 0:  # what B sent before the cancel, then the end
        assert n == -2, n
        c.recv(12)
    c.ping()
    assert wait_until(lambda: partition.pool.region_free == 8)


def test_no_next_segment_for_a_bounded_fetch_or_the_last_segment(partition: Any) -> None:
    """A fetch with an end position, and an open-ended fetch of the partition's last segment, end as before."""
    first, second = partition.segments
    c = partition.connect()
    c.fetch(partition.metas[0], 0, len(first.log.read_bytes()) - 1)
    assert c.recv(1) == b"\x00"
    data, frame, _ = _read_segment(c)
    assert (data, frame) == (first.log.read_bytes(), 0)
    c.fetch(partition.metas[1], 100, None)
    assert c.recv(1) == b"\x00"
    data, frame, _ = _read_segment(c)
    assert (data, frame) == (second.log.read_bytes()[100:], 0)


def test_a_manager_without_the_next_segment_hooks_ends_streams_as_before(
    partition: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's manager class (python.manager.class) need not have ``following_segment``."""
    monkeypatch.delattr(type(partition.manager), "following_segment")
    partition.rewire()  # the sidecar finds what its manager offers when it is wired to it
    c = partition.connect()
    c.fetch(partition.metas[0], 0, None)
    assert c.recv(1) == b"\x00"
    data, frame, _ = _read_segment(c)
    assert (data, frame) == (partition.segments[0].log.read_bytes(), 0)


# --- the sidecar process and its file --------------------------------------------------------------------------


@contextlib.contextmanager
def sidecar_process(tmp_path: Path, name: str, **extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    cfg = jt.base_config(tmp_path / "store", **{"chunk.size": str(BS), **extra})
    env = dict(os.environ, PYTHONPATH=str(jt.REPO))
    p = subprocess.Popen(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / f"{name}.sock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(jt.sidecar_config_payload(cfg))
        p.stdin.flush()
        line = p.stdout.readline().decode()
        assert line.startswith(f"READY {p.pid}"), line
        yield p, line.strip()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for f in region_files(p.pid):  # never leave test debris on /dev/shm
            f.unlink()


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="needs /dev/shm")
def test_sidecar_announces_its_region_and_removes_it_on_a_clean_exit(tmp_path: Path) -> None:
    with sidecar_process(tmp_path, "a", **{"jvm.sidecar.shared.memory.bytes": str(3 * BS)}) as (p, ready):
        path = Path(ready.split("shm=", 1)[1])
        assert path.parent == SHM_DIR and region_files(p.pid) == [path]  # no shim here to remove the name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_size == 3 * BS
        assert p.stdin is not None
        p.stdin.close()
        assert p.wait(15) == 0
        assert region_files(p.pid) == []
    with sidecar_process(tmp_path, "b", **{"jvm.sidecar.shared.memory.bytes": "0"}) as (p, ready):
        assert ready == f"READY {p.pid} version={__version__}" and region_files(p.pid) == []
    with sidecar_process(tmp_path, "c") as (p, ready):  # on by default
        assert f" shm={SHM_DIR}/kts-sidecar-{p.pid}-" in ready


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="needs /dev/shm")
def test_next_sidecar_removes_the_file_of_one_killed_before_the_shim_mapped_it(tmp_path: Path) -> None:
    small = {"jvm.sidecar.shared.memory.bytes": str(2 * BS)}
    with sidecar_process(tmp_path, "a", **small) as (first, _):
        left = region_files(first.pid)
        assert len(left) == 1
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert left[0].exists()  # kill -9: nobody removed it
        with sidecar_process(tmp_path, "b", **small) as (second, _):
            assert not left[0].exists()
            assert len(region_files(second.pid)) == 1


# --- the real JVM shim ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("java") is None:
        pytest.skip("needs a JDK")
    jt.ensure_built()
    d = tmp_path_factory.mktemp("shm-segs")
    return jt.write_spec(d / "spec.tsv", jt.make_test_segments(d))


def harness(
    mode: str, *positional: str, config: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    cmd = ["java", "-cp", jt.test_classpath(), jt.HARNESS_CLASS, mode, jt.SHIM_CLASS, *positional, "--"]
    cmd += [f"{k}={v}" for k, v in config.items()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def sidecar_pids(stderr: str) -> set[int]:
    return {int(p) for p in re.findall(r"Python sidecar started: pid (\d+)", stderr)}


@needs_java
def test_jvm_lifecycle_socket_only(spec: Path, tmp_path: Path) -> None:
    cfg = jt.base_config(tmp_path / "store", **{"chunk.size": str(BS), "jvm.sidecar.shared.memory.bytes": "0"})
    r = harness("lifecycle", str(spec), "16", "24", config=cfg)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.startswith("OK lifecycle segments=4 threads=16"), r.stdout
    assert "shared memory off" in r.stderr
    assert "shared memory:" not in r.stderr  # the sidecar made no region
    for pid in sidecar_pids(r.stderr):
        assert region_files(pid) == []


@needs_java
def test_jvm_lifecycle_with_a_region_of_two_buffers_falls_back_inline(spec: Path, tmp_path: Path) -> None:
    """16 threads over 2 region buffers: most pieces have to go inline while others are references."""
    cfg = jt.base_config(tmp_path / "store", **{"chunk.size": str(BS), "jvm.sidecar.shared.memory.bytes": str(2 * BS)})
    r = harness("lifecycle", str(spec), "16", "24", config=cfg)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.startswith("OK lifecycle segments=4 threads=16"), r.stdout
    assert f"shared memory: 2 buffers of {BS} bytes in {SHM_DIR}/kts-sidecar-" in r.stderr
    assert "cannot map" not in r.stderr and "withheld" not in r.stderr
    pids = sidecar_pids(r.stderr)
    assert len(pids) == 1
    assert region_files(pids.pop()) == []


@needs_java
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_jvm_maps_the_region_removes_its_name_and_leaves_nothing_after_kill_and_close(
    spec: Path, tmp_path: Path
) -> None:
    cfg = jt.base_config(tmp_path / "store", **{"jvm.sidecar.restart.backoff.ms": "200"})  # default region
    cmd = ["java", "-cp", jt.test_classpath(), jt.HARNESS_CLASS, "supervise", jt.SHIM_CLASS, str(spec), "--"]
    cmd += [f"{k}={v}" for k, v in cfg.items()]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdin is not None
        line = p.stdout.readline()
        assert line.startswith("FETCHING "), line
        pid1 = int(line.split()[1])
        # configured and mid-fetch: the name is gone, both processes still map the (deleted) file
        assert region_files(pid1) == []
        needle = f"{SHM_DIR}/kts-sidecar-{pid1}-"
        for who in (pid1, p.pid):
            maps = [x for x in Path(f"/proc/{who}/maps").read_text().splitlines() if needle in x]
            assert maps and all(x.endswith("(deleted)") for x in maps), (who, maps)
        os.kill(pid1, signal.SIGKILL)
        p.stdin.write("go\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out + err[-4000:]
    assert "RECOVERED" in out and out.splitlines()[-1] == "CLOSED", out
    pids = sidecar_pids(err)
    assert pid1 in pids and len(pids) == 2, pids
    assert f"shared memory {DEFAULT_REGION_MIB} MiB" in err  # on by default
    for pid in pids:
        assert region_files(pid) == [], pid


@needs_java
def test_jvm_configure_and_close_leave_no_region_file(tmp_path: Path) -> None:
    jt.ensure_built()
    r = harness("configure", config=jt.base_config(tmp_path / "store"), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(r.stdout.split()[1])
    assert r.stdout.splitlines()[-1] == "CLOSED"
    assert f"Python sidecar started: pid {pid}" in r.stderr and f"shared memory {DEFAULT_REGION_MIB} MiB" in r.stderr
    assert region_files(pid) == []
