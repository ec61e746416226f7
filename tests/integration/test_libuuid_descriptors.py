"""The Azure backend never asks libuuid for a time-based UUID on the broker's paths.

The Azure SDK names every request with ``uuid.uuid1()`` unless the caller gives an id. Where Debian's
uuid-runtime is installed (podman brings it) and no uuidd daemon answers, libuuid then opens
/var/lib/libuuid/clock.txt once in each thread that asks and never closes it when the thread ends, so every
short-lived thread that ever sent a request leaves a descriptor behind: on a broker, one per sidecar connection
thread or per thread pool the SDK makes for a blob batch, until the process runs out. The backend sends ids of
its own (random), and deletes a segment's few objects without a batch (backends/azure.py).

The first test holds on any host (it watches ``uuid.uuid1`` itself); the second counts the real descriptors on
a host where libuuid keeps its clock file (this repository's machines, with podman).
"""

from __future__ import annotations

import io
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from emulators import StoreServer
from helpers import TIP

from backends.azure import BATCH_DELETE_MIN, AzureBlobBackend
from backends.azure_config import MIN_BLOCK_SIZE
from rsm import RemoteStorageManager

LIBUUID_CLOCK = "/var/lib/libuuid/clock.txt"


@pytest.fixture
def time_based_uuids(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that called ``uuid.uuid1`` from now on (the SDK looks it up on the module)."""
    callers: list[str] = []
    real = uuid.uuid1

    def spy(*args: Any, **kwargs: Any) -> uuid.UUID:
        callers.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(uuid, "uuid1", spy)
    return callers


@pytest.fixture
def azurite(request: pytest.FixtureRequest) -> StoreServer:
    return request.getfixturevalue("azure_azurite_server")


@pytest.fixture
def backend(azurite: StoreServer) -> Iterator[AzureBlobBackend]:
    b = AzureBlobBackend()
    # Blocks of the minimum size, two in flight: a 3-block upload is staged on the backend's own pool threads.
    b.configure(azurite.config(**{"azure.upload.block.size": str(MIN_BLOCK_SIZE), "azure.upload.concurrency": "2"}))
    try:
        yield b
    finally:
        b.close()


def _every_request_kind(b: AzureBlobBackend, prefix: str) -> None:
    """Each kind of request the plugin sends for a segment: put, staged blocks and their commit, ranged and whole
    GETs, listings, single deletes and the delete of a segment's objects."""
    b.upload(f"{prefix}/small", io.BytesIO(b"x" * 100))
    big = os.urandom(3 * MIN_BLOCK_SIZE)
    b.upload(f"{prefix}/big", io.BytesIO(big))
    with b.fetch(f"{prefix}/big", 10, 99) as f:
        assert f.read() == big[10:100]
    with b.fetch(f"{prefix}/small") as f:
        assert f.read() == b"x" * 100
    assert sorted(b.list(f"{prefix}/")) == [f"{prefix}/big", f"{prefix}/small"]
    assert list(b.list_pending_uploads(f"{prefix}/")) == []
    b.upload(f"{prefix}/third", io.BytesIO(b"z"))
    b.delete_many([f"{prefix}/small", f"{prefix}/big", f"{prefix}/third"])  # a segment's three objects
    b.delete(f"{prefix}/gone-already")
    assert list(b.list(f"{prefix}/")) == []


def test_no_request_asks_for_a_time_based_uuid(
    backend: AzureBlobBackend,
    azurite: StoreServer,
    time_based_uuids: list[str],
    segment_factory: Callable[..., Any],
) -> None:
    _every_request_kind(backend, "no-uuid1")
    assert time_based_uuids == []

    # The plugin's own paths: a copy (staged upload on the backend's pool), fetches (chunk GETs on the manager's
    # pools), a delete.
    seg = segment_factory(target_bytes=600 * 1024, seed=3)
    server_config = {f"storage.{k}": v for k, v in azurite.config().items()}
    m = RemoteStorageManager()
    m.configure(
        {
            "storage.backend.class": "azure",
            "key.prefix": "no-uuid1-rsm/",
            "chunk.size": str(64 * 1024),
            "storage.azure.upload.block.size": str(MIN_BLOCK_SIZE),
            **server_config,
        }
    )
    try:
        meta = seg.to_metadata(TIP, "nouuid1segmentaaaaaaaa")
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        with m.fetch_log_segment(meta, 1000) as f:
            assert f.read() == seg.log.read_bytes()[1000:]
        m.delete_log_segment_data(meta)
    finally:
        m.close()
    assert time_based_uuids == []

    # What is left: a bulk delete (kts gc) goes in blob batches, where the SDK names the batch and its parts
    # with time-based UUIDs on a thread pool of its own. The threshold keeps that off the per-segment path.
    keys = [f"no-uuid1-bulk/{i}" for i in range(BATCH_DELETE_MIN)]
    for k in keys:
        backend.upload(k, io.BytesIO(b"y"))
    backend.delete_many(keys)
    assert time_based_uuids, "a blob batch no longer asks for time-based UUIDs: BATCH_DELETE_MIN can go"


def _clock_descriptors() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == LIBUUID_CLOCK
        except OSError:  # the listing's own fd, closed by now
            pass
    return n


@pytest.mark.skipif(
    not os.path.isdir(os.path.dirname(LIBUUID_CLOCK)), reason="libuuid keeps no clock file here (no uuid-runtime)"
)
def test_short_lived_threads_leave_no_libuuid_descriptor(backend: AzureBlobBackend) -> None:
    """Requests from threads that end, as a sidecar's connection threads do: no descriptor stays behind."""
    # Proof that this host leaks them at all: a thread that makes a time-based UUID leaves one open.
    before = _clock_descriptors()
    probe = threading.Thread(target=uuid.uuid1)
    probe.start()
    probe.join()
    assert _clock_descriptors() == before + 1, "libuuid did not keep its clock file open: the check proves nothing"

    before = _clock_descriptors()
    failures: list[BaseException] = []

    def run(prefix: str) -> None:
        try:
            _every_request_kind(backend, prefix)
        except BaseException as e:  # reported below, on the test's thread
            failures.append(e)

    for i in range(4):
        t = threading.Thread(target=run, args=(f"threads-{i}",))
        t.start()
        t.join()
    assert failures == []
    assert _clock_descriptors() == before
