"""One contract for every storage backend, run against real servers.

The same cases run over the filesystem backend (the reference) and over S3 (SeaweedFS and moto), GCS
(fake-gcs-server) and Azure (Azurite) started by ``tests/support/emulators.py``. Part/chunk/block sizes are set
small (5 MiB for S3, which is its minimum; 1 MiB elsewhere) so multi-part paths are exercised in seconds.
Each test works under its own random key prefix, so tests share one bucket per server without cleanup.

Nothing is skipped: a server that cannot start fails its tests with the reason.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import io
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from emulators import FIXTURE_FOR, StoreServer, free_port
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from backends.azure import AzureBlobBackend
from backends.base import (
    BackendCapabilities,
    InvalidRange,
    KeyNotFound,
    StorageBackend,
    StorageBackendException,
    read_range,
)
from backends.filesystem import FileSystemBackend
from backends.gcs import GcsBackend
from backends.retry import ErrorKind, RetryPolicy, call_with_retry
from backends.s3 import S3Backend
from rsm.errors import ConfigException

MiB = 1024 * 1024
BACKENDS = ["filesystem", "s3-seaweedfs", "s3-moto", "gcs-fake", "azure-azurite"]
CLOUD = BACKENDS[1:]
S3_FLAVOURS = ["s3-seaweedfs", "s3-moto"]
CLASSES: dict[str, type[Any]] = {"s3": S3Backend, "gcs": GcsBackend, "azure": AzureBlobBackend}
PART_KEY = {
    "s3": "s3.multipart.upload.part.size",
    "gcs": "gcs.resumable.upload.chunk.size",
    "azure": "azure.upload.block.size",
}
PART_SIZE = {"s3": 5 * MiB, "gcs": 1 * MiB, "azure": 1 * MiB, "filesystem": 1 * MiB}
TEST_TUNING = {  # small pools and fast backoff keep the suite quick on 2 cores
    "s3": {"s3.multipart.upload.concurrency": "3", "s3.retry.backoff.ms": "20"},
    "gcs": {"gcs.retry.backoff.ms": "20"},
    "azure": {"azure.upload.concurrency": "3", "azure.retry.backoff.ms": "20"},
}


class SourceBroke(Exception):
    """Raised by a test source mid-stream; a backend must let it through and store nothing."""


class BreakingStream(io.RawIOBase):
    """Yields ``data`` but raises ``SourceBroke`` once ``fail_at`` bytes have been read."""

    def __init__(self, data: bytes, fail_at: int) -> None:
        self._data = data
        self._pos = 0
        self._fail_at = fail_at

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._pos >= self._fail_at:
            raise SourceBroke(f"source failed after {self._pos} bytes")
        n = min(len(b), self._fail_at - self._pos, len(self._data) - self._pos)
        b[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


class StallingStream(io.RawIOBase):
    """Serves ``fast`` bytes at once, then stalls ``stall_s`` seconds on every read."""

    def __init__(self, fast: int, total: int, stall_s: float) -> None:
        self._fast = fast
        self._total = total
        self._pos = 0
        self._stall = stall_s

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._pos >= self._total:
            return 0
        if self._pos >= self._fast:
            time.sleep(self._stall)
        n = min(len(b), self._total - self._pos)
        b[:n] = b"s" * n
        self._pos += n
        return n


@dataclass
class Harness:
    """A backend flavour under test: builds configured backends and names keys for one test."""

    name: str
    kind: str
    part_size: int
    server: StoreServer | None
    build: Callable[[dict[str, Any]], StorageBackend]
    prefix: str = field(default_factory=lambda: f"contract-{uuid.uuid4().hex[:12]}/")
    _made: list[StorageBackend] = field(default_factory=list)

    def make(self, **overrides: Any) -> Any:
        """A fresh backend; overrides use the stripped dotted key names, passed as a dict via ``conf``."""
        backend = self.build(dict(overrides.get("conf", {})))
        self._made.append(backend)
        return backend

    def key(self, name: str) -> str:
        return self.prefix + name

    def close(self) -> None:
        for backend in self._made:
            backend.close()


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    name = request.param
    if name == "filesystem":
        root = tmp_path / "fs-root"

        def build_fs(conf: dict[str, Any]) -> StorageBackend:
            backend = FileSystemBackend()
            backend.configure({"root": str(root), "fsync.enabled": "false", **conf})
            return backend

        h = Harness(name, "filesystem", PART_SIZE["filesystem"], None, build_fs)
    else:
        server: StoreServer = request.getfixturevalue(FIXTURE_FOR[name])
        kind = server.backend

        def build_cloud(conf: dict[str, Any]) -> StorageBackend:
            backend = CLASSES[kind]()
            backend.configure(server.config(**{PART_KEY[kind]: str(PART_SIZE[kind]), **TEST_TUNING[kind], **conf}))
            return backend

        h = Harness(name, kind, PART_SIZE[kind], server, build_cloud)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def backend(harness: Harness) -> Any:
    return harness.make()


def fetch_all(backend: StorageBackend, key: str, start: int = 0, end: int | None = None) -> bytes:
    with backend.fetch(key, start, end) as stream:
        parts = []
        while True:
            chunk = stream.read(256 * 1024)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic, position-dependent bytes (a shifted range shows up as a mismatch)."""
    block = bytes((i * 31 + seed) % 251 for i in range(251 * 16))
    reps = size // len(block) + 1
    return (block * reps)[:size]


# --- uploads --------------------------------------------------------------------------------------


def test_upload_small_objects(harness: Harness, backend: Any) -> None:
    for size in (1, 17, 4096, 100_000):
        data = payload(size, size)
        key = harness.key(f"small-{size}")
        assert backend.upload(key, io.BytesIO(data)) == size
        assert fetch_all(backend, key) == data


def test_upload_empty_object(harness: Harness, backend: Any) -> None:
    key = harness.key("empty")
    assert backend.upload(key, io.BytesIO(b"")) == 0
    assert fetch_all(backend, key) == b""
    assert list(backend.list(harness.prefix)) == [key]
    with pytest.raises(InvalidRange):
        backend.fetch(key, 0, 0)


def test_upload_large_multipart_object(harness: Harness, backend: Any) -> None:
    size = harness.part_size * 2 + harness.part_size // 2 + 3
    data = payload(size, 7)
    key = harness.key("large")
    assert backend.upload(key, io.BytesIO(data)) == size
    assert fetch_all(backend, key) == data
    boundary = harness.part_size
    assert read_range(backend, key, boundary - 5, boundary + 5) == data[boundary - 5 : boundary + 6]
    assert read_range(backend, key, 2 * boundary - 1, 2 * boundary) == data[2 * boundary - 1 : 2 * boundary + 1]


def test_part_size_boundaries(harness: Harness, backend: Any) -> None:
    part = harness.part_size
    for size in (part - 1, part, part + 1):
        data = payload(size, size % 97)
        key = harness.key(f"boundary-{size}")
        assert backend.upload(key, io.BytesIO(data)) == size
        got = fetch_all(backend, key)
        assert len(got) == size and got == data, f"size {size}"
        assert read_range(backend, key, size - 1, size - 1) == data[-1:]


def test_upload_from_non_seekable_short_reads(harness: Harness, backend: Any) -> None:
    """A pipe-like source that returns few bytes per read (and no readinto) is still stored whole."""
    size = harness.part_size + 1234
    data = payload(size, 3)

    class Trickle:
        def __init__(self) -> None:
            self.pos = 0

        def read(self, n: int = -1) -> bytes:
            n = min(n if n >= 0 else size, 70_001, size - self.pos)
            out = data[self.pos : self.pos + n]
            self.pos += n
            return out

    key = harness.key("trickle")
    assert backend.upload(key, Trickle()) == size  # type: ignore[arg-type]
    assert fetch_all(backend, key) == data


def test_key_with_special_characters(harness: Harness, backend: Any) -> None:
    key = harness.key("topic-0/Ünïcode name+%20&=?#.log")
    backend.upload(key, io.BytesIO(b"special"))
    assert fetch_all(backend, key) == b"special"
    assert list(backend.list(harness.prefix)) == [key]
    backend.delete(key)
    assert list(backend.list(harness.prefix)) == []


# --- reads ----------------------------------------------------------------------------------------


def test_ranged_reads(harness: Harness, backend: Any) -> None:
    size = 10_000
    data = payload(size, 5)
    key = harness.key("ranges")
    backend.upload(key, io.BytesIO(data))
    assert fetch_all(backend, key, 0, 0) == data[:1]  # first byte
    assert fetch_all(backend, key, 1234, 1234) == data[1234:1235]  # single byte
    assert fetch_all(backend, key, size - 1, size - 1) == data[-1:]  # last byte
    assert fetch_all(backend, key, 100, 199) == data[100:200]
    assert fetch_all(backend, key, 0, size - 1) == data
    assert fetch_all(backend, key, 9_000) == data[9_000:]  # open end
    assert fetch_all(backend, key, 9_990, 50_000) == data[9_990:]  # end past EOF clamped
    assert read_range(backend, key, 500, 1499) == data[500:1500]
    for start, end in ((size, None), (size, size + 10), (size + 5, size + 10), (-1, 10), (10, 9)):
        with pytest.raises(InvalidRange):
            fetch_all(backend, key, start, end)
    with pytest.raises(InvalidRange):  # the manifest promised more than the object has
        read_range(backend, key, size - 10, size + 10)


def test_fetch_stream_interface(harness: Harness, backend: Any) -> None:
    data = payload(300_000, 9)
    key = harness.key("stream")
    backend.upload(key, io.BytesIO(data))
    with backend.fetch(key) as stream:
        head = stream.read(10)
        buf = bytearray(1000)
        n = stream.readinto(buf)
        rest = stream.read()
    assert head + bytes(buf[:n]) + rest == data
    stream = backend.fetch(key, 10, 20)
    assert stream.read(5) == data[10:15]
    stream.close()  # closing a half-read stream releases it
    stream.close()
    with pytest.raises(ValueError):
        stream.read(1)


def test_missing_key(harness: Harness, backend: Any) -> None:
    key = harness.key("does/not/exist")
    with pytest.raises(KeyNotFound) as info:
        backend.fetch(key)
    assert info.value.key == key
    with pytest.raises(KeyNotFound):
        backend.fetch(key, 5, 10)


# --- overwrite, delete, list --------------------------------------------------------------------


def test_overwrite(harness: Harness, backend: Any) -> None:
    key = harness.key("overwrite")
    backend.upload(key, io.BytesIO(payload(harness.part_size + 10, 1)))
    backend.upload(key, io.BytesIO(b"second version"))
    assert fetch_all(backend, key) == b"second version"
    assert list(backend.list(harness.prefix)) == [key]


def test_delete_is_idempotent(harness: Harness, backend: Any) -> None:
    key = harness.key("delete-me")
    backend.upload(key, io.BytesIO(b"x"))
    backend.delete(key)
    with pytest.raises(KeyNotFound):
        backend.fetch(key)
    backend.delete(key)
    backend.delete(harness.key("never-existed"))
    assert list(backend.list(harness.prefix)) == []


def test_delete_many(harness: Harness, backend: Any) -> None:
    keys = [harness.key(f"many/{i:03d}") for i in range(12)]
    for k in keys:
        backend.upload(k, io.BytesIO(k.encode()))
    keep = harness.key("many/keep")
    backend.upload(keep, io.BytesIO(b"keep"))
    backend.delete_many(keys + [harness.key("many/missing"), keys[0]])
    assert list(backend.list(harness.prefix)) == [keep]
    backend.delete_many([])
    backend.delete_many(iter([keep]))
    assert list(backend.list(harness.prefix)) == []


def test_list_by_prefix(harness: Harness, backend: Any) -> None:
    names = ["b/d", "a/x", "b/c", "ba", "b/e/f", "c"]
    for name in names:
        backend.upload(harness.key(name), io.BytesIO(name.encode()))
    assert list(backend.list(harness.prefix)) == sorted(harness.key(n) for n in names)
    assert list(backend.list(harness.key("b"))) == [harness.key(n) for n in ("b/c", "b/d", "b/e/f", "ba")]
    assert list(backend.list(harness.key("b/"))) == [harness.key(n) for n in ("b/c", "b/d", "b/e/f")]
    assert list(backend.list(harness.key("zzz"))) == []


# --- copies inside the store (backends.base.CopiesObjects) ------------------------------------------


def copying(harness: Harness) -> Any:
    """A backend whose S3 copies go multipart above one 5 MiB part (S3's smallest), so the part-by-part copy is
    exercised with objects of a few MiB; the other stores copy any size in one call."""
    backend = harness.make()
    if harness.kind == "s3":
        backend.copy_single_limit = 5 * MiB
        backend.copy_part_size = 5 * MiB
    return backend


COPY_SIZES = st.one_of(st.integers(0, 300_000), st.integers(5 * MiB - 2, 11 * MiB + 7))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=COPY_SIZES)
@example(size=0)
@example(size=2 * 5 * MiB + 3)  # three parts of an S3 multipart copy
def test_copy_gives_the_same_bytes(harness: Harness, size: int) -> None:
    backend = copying(harness)
    assert BackendCapabilities.of(backend).copies is backend
    data = payload(size, size % 89)
    source, target = harness.key(f"copy-{size}/source"), harness.key(f"copied/{size}/target")
    backend.upload(source, io.BytesIO(data))
    backend.copy_object(source, target)
    assert fetch_all(backend, target) == data
    assert fetch_all(backend, source) == data
    if harness.kind == "s3":
        pending = backend.client.list_multipart_uploads(Bucket=backend.bucket, Prefix=harness.prefix)
        assert pending.get("Uploads", []) == []
        parts = backend.metrics().get("upload-part-copy-requests", 0)
        assert parts == (0 if size <= 5 * MiB else -(-size // (5 * MiB)))


def test_copy_of_a_missing_source_is_key_not_found(harness: Harness) -> None:
    backend = copying(harness)
    source, target = harness.key("gone/source"), harness.key("gone/target")
    with pytest.raises(KeyNotFound) as info:
        backend.copy_object(source, target)
    assert info.value.key == source
    backend.upload(target, io.BytesIO(b"kept"))  # a failed copy leaves an existing target as it was
    with pytest.raises(KeyNotFound):
        backend.copy_object(source, target)
    assert fetch_all(backend, target) == b"kept"
    assert list(backend.list(harness.prefix)) == [target]


def test_copy_overwrites_the_target_and_leaves_the_source(harness: Harness) -> None:
    backend = copying(harness)
    source, target = harness.key("over/source"), harness.key("over/target")
    data = payload(50_000, 3)
    backend.upload(source, io.BytesIO(data))
    backend.upload(target, io.BytesIO(payload(harness.part_size + 11, 4)))
    backend.copy_object(source, target)
    assert fetch_all(backend, target) == data
    assert fetch_all(backend, source) == data
    assert list(backend.list(harness.prefix)) == [source, target]
    backend.copy_object(source, source)  # onto itself: nothing changes
    assert fetch_all(backend, source) == data
    with pytest.raises(KeyNotFound):
        backend.copy_object(harness.key("over/none"), harness.key("over/none"))


def test_a_write_after_a_copy_changes_one_key_only(harness: Harness) -> None:
    """The copy is an object of its own: writing, replacing or deleting either key leaves the other as it was
    (on the filesystem the copy is a hard link, and every write renames a new file into place)."""
    backend = copying(harness)
    source, target = harness.key("apart/source"), harness.key("apart/target")
    first = payload(20_000, 1)
    backend.upload(source, io.BytesIO(first))
    backend.copy_object(source, target)
    backend.upload(source, io.BytesIO(b"source rewritten"))
    assert fetch_all(backend, target) == first
    backend.upload(target, io.BytesIO(b"target rewritten"))
    assert fetch_all(backend, source) == b"source rewritten"
    backend.copy_object(target, source)
    seen = backend.fetch_versioned(source, 100)
    backend.replace_if_unchanged(source, b"source replaced", seen.version)
    assert fetch_all(backend, target) == b"target rewritten"
    backend.delete(target)
    assert fetch_all(backend, source) == b"source replaced"


@pytest.mark.parametrize("flavour", S3_FLAVOURS)
def test_s3_multipart_copy_failing_midway_leaves_nothing(flavour: str, request: pytest.FixtureRequest) -> None:
    """The source is deleted after the first part was copied: the copy raises KeyNotFound for the source, and
    neither a target nor an open multipart upload is left."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    backend = S3Backend()
    backend.configure(server.config(**{**TEST_TUNING["s3"], "s3.multipart.upload.concurrency": "1"}))
    backend.copy_single_limit = backend.copy_part_size = 5 * MiB
    prefix = f"copy-break-{uuid.uuid4().hex[:8]}/"
    source, target = prefix + "source", prefix + "target"
    backend.upload(source, io.BytesIO(payload(3 * 5 * MiB + 1, 5)))
    real = backend.client.upload_part_copy
    calls = {"n": 0}

    def delete_source_after_the_first_part(**kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            backend.delete(source)
        return real(**kwargs)

    backend.client.upload_part_copy = delete_source_after_the_first_part
    try:
        with pytest.raises(KeyNotFound) as info:
            backend.copy_object(source, target)
        assert info.value.key == source and calls["n"] >= 2
        with pytest.raises(KeyNotFound):
            backend.fetch(target)
        assert backend.client.list_multipart_uploads(Bucket=backend.bucket, Prefix=prefix).get("Uploads", []) == []
        assert list(backend.list(prefix)) == []
    finally:
        backend.close()


def test_s3_multipart_copy_never_mixes_two_versions(request: pytest.FixtureRequest) -> None:
    """The source is replaced after the first part was copied: every part copies only the version that was sized
    (CopySourceIfMatch), so the copy fails and leaves nothing. SeaweedFS checks the condition; moto ignores it on
    UploadPartCopy, so this runs on SeaweedFS only. The replacing upload runs on the backend's only pool thread,
    so its parts are 16 MiB: it is one PutObject, never parts queued behind that thread."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR["s3-seaweedfs"])
    backend = S3Backend()
    backend.configure(
        server.config(
            **{
                **TEST_TUNING["s3"],
                "s3.multipart.upload.concurrency": "1",
                "s3.multipart.upload.part.size": str(16 * MiB),
            }
        )
    )
    backend.copy_single_limit = backend.copy_part_size = 5 * MiB
    prefix = f"copy-mix-{uuid.uuid4().hex[:8]}/"
    source, target = prefix + "source", prefix + "target"
    backend.upload(source, io.BytesIO(payload(2 * 5 * MiB + 1, 1)))
    real = backend.client.upload_part_copy
    calls = {"n": 0}

    def replace_source_after_the_first_part(**kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            backend.upload(source, io.BytesIO(payload(2 * 5 * MiB + 1, 2)))
        return real(**kwargs)

    backend.client.upload_part_copy = replace_source_after_the_first_part
    try:
        with pytest.raises(StorageBackendException, match="source was replaced during the copy") as info:
            backend.copy_object(source, target)
        assert not isinstance(info.value, KeyNotFound)
        with pytest.raises(KeyNotFound):
            backend.fetch(target)
        assert backend.client.list_multipart_uploads(Bucket=backend.bucket, Prefix=prefix).get("Uploads", []) == []
    finally:
        backend.close()


@pytest.mark.parametrize("flavour", S3_FLAVOURS)
def test_s3_multipart_copy_past_the_deadline_is_aborted(flavour: str, request: pytest.FixtureRequest) -> None:
    """A part that answers after s3.upload.timeout.ms (1 s, the least allowed) fails the copy: the part still
    running is waited for, then the multipart upload is aborted. The 10 s bound leaves 7 s over the 1 s deadline
    and the 2 s part for the abort on a loaded machine."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    backend = S3Backend()
    backend.configure(
        server.config(
            **{
                **TEST_TUNING["s3"],
                "s3.multipart.upload.concurrency": "1",
                "s3.upload.timeout.ms": "1000",
                "s3.multipart.upload.part.size": str(16 * MiB),  # the source goes up in one PutObject
            }
        )
    )
    backend.copy_single_limit = backend.copy_part_size = 5 * MiB
    prefix = f"copy-slow-{uuid.uuid4().hex[:8]}/"
    source, target = prefix + "source", prefix + "target"
    backend.upload(source, io.BytesIO(payload(2 * 5 * MiB + 1, 7)))
    real = backend.client.upload_part_copy

    def slow_part(**kwargs: Any) -> Any:
        time.sleep(2)
        return real(**kwargs)

    backend.client.upload_part_copy = slow_part
    started = time.monotonic()
    try:
        with pytest.raises(StorageBackendException, match="deadline") as info:
            backend.copy_object(source, target)
        assert time.monotonic() - started < 10
        assert info.value.retriable
        with pytest.raises(KeyNotFound):
            backend.fetch(target)
        assert backend.client.list_multipart_uploads(Bucket=backend.bucket, Prefix=prefix).get("Uploads", []) == []
        assert list(backend.list(prefix)) == [source]
    finally:
        backend.close()


def test_filesystem_copy_links_or_copies_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy on one filesystem is a hard link (no byte moves); where the link is refused, the kernel copies
    the bytes into a file of its own. Either way no temp file stays behind."""
    b = FileSystemBackend()
    b.configure({"root": str(tmp_path / "store"), "fsync.enabled": "true"})
    data = payload(3 * MiB + 5, 2)
    b.upload("t/source", io.BytesIO(data))
    b.copy_object("t/source", "q/run/t/linked")
    root = tmp_path / "store"
    assert (root / "q/run/t/linked").stat().st_ino == (root / "t/source").stat().st_ino

    monkeypatch.setattr("backends.filesystem.link_open_file", lambda fd, source, path: False)
    b.copy_object("t/source", "q/run/t/copied")
    assert (root / "q/run/t/copied").stat().st_ino != (root / "t/source").stat().st_ino
    assert fetch_all(b, "q/run/t/copied") == data
    assert list(b.list_pending_uploads("")) == []
    assert list(b.list("")) == ["q/run/t/copied", "q/run/t/linked", "t/source"]

    import errno
    import os

    real_copy = os.copy_file_range
    calls = {"n": 0}

    def disk_full_after_one_call(*args: Any) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_copy(args[0], args[1], min(args[2], MiB), *args[3:])

    b.upload("q/run/t/copied", io.BytesIO(b"previous"))
    monkeypatch.setattr(os, "copy_file_range", disk_full_after_one_call)
    with pytest.raises(StorageBackendException, match="No space left") as info:
        b.copy_object("t/source", "q/run/t/copied")  # a failed copy keeps the previous target whole
    assert "'t/source'" in str(info.value) and "'q/run/t/copied'" in str(info.value) and calls["n"] == 2
    assert fetch_all(b, "q/run/t/copied") == b"previous"
    assert list(b.list_pending_uploads("")) == []


def test_gcs_copy_follows_the_rewrite_token(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """GCS may answer a rewrite "not done" with a token to call again with (large or cross-location copies);
    fake-gcs-server always finishes in one call, so its first answer is turned into such an answer here. The
    backend calls again with the token until GCS says done."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR["gcs-fake"])
    backend = GcsBackend()
    backend.configure(server.config(**TEST_TUNING["gcs"]))
    prefix = f"rewrite-{uuid.uuid4().hex[:8]}/"
    data = payload(700_000, 9)
    backend.upload(prefix + "source", io.BytesIO(data))
    real = backend.session.post
    tokens: list[str | None] = []

    class NotDoneYet:
        status_code = 200

        def json(self) -> dict[str, Any]:
            return {"kind": "storage#rewriteResponse", "done": False, "rewriteToken": "token-1"}

    def post(url: str, *args: Any, **kwargs: Any) -> Any:
        if "/rewriteTo/" not in url:
            return real(url, *args, **kwargs)
        params = kwargs.pop("params", None) or {}
        tokens.append(params.get("rewriteToken"))
        answer = real(url, *args, **kwargs)
        return NotDoneYet() if len(tokens) == 1 else answer

    monkeypatch.setattr(backend.session, "post", post)
    try:
        backend.copy_object(prefix + "source", prefix + "target")
        assert tokens == [None, "token-1"]
        assert fetch_all(backend, prefix + "target") == data
        assert backend.metrics()["object-rewrite-requests"] == 2
    finally:
        backend.close()


def _azure_copy_status(monkeypatch: pytest.MonkeyPatch, statuses: list[str]) -> None:
    """The Copy Blob answer and the next polls report ``statuses`` in turn (then the service's own): Azurite
    finishes every copy before it answers, while Azure may still be copying ("pending") or may fail."""
    from azure.storage.blob import BlobClient

    real_start, real_properties = BlobClient.start_copy_from_url, BlobClient.get_blob_properties
    told = list(statuses)

    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = dict(real_start(self, *args, **kwargs))
        if told:
            answer["copy_status"] = told.pop(0)
        return answer

    def properties(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = real_properties(self, *args, **kwargs)
        if told:
            answer.copy.status = told.pop(0)
            answer.copy.status_description = "injected"
        return answer

    monkeypatch.setattr(BlobClient, "start_copy_from_url", start)
    monkeypatch.setattr(BlobClient, "get_blob_properties", properties)


@pytest.mark.parametrize(
    ("statuses", "ends"),
    [(["pending", "pending"], "success"), (["pending", "failed"], "failed"), (["aborted"], "aborted")],
)
def test_azure_copy_polls_until_it_ends(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, statuses: list[str], ends: str
) -> None:
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR["azure-azurite"])
    backend = AzureBlobBackend()
    backend.configure(server.config(**TEST_TUNING["azure"]))
    prefix = f"poll-{uuid.uuid4().hex[:8]}/"
    data = payload(300_000, 6)
    backend.upload(prefix + "source", io.BytesIO(data))
    _azure_copy_status(monkeypatch, statuses)
    try:
        if ends == "success":
            backend.copy_object(prefix + "source", prefix + "target")
            assert fetch_all(backend, prefix + "target") == data
            assert backend.metrics()["blob-properties-requests"] == 2
        else:
            with pytest.raises(StorageBackendException, match=f"ended '{ends}'") as info:
                backend.copy_object(prefix + "source", prefix + "target")
            assert not isinstance(info.value, KeyNotFound) and "nothing is left under the target" in str(info.value)
            assert list(backend.list(prefix)) == [prefix + "source"]
        assert fetch_all(backend, prefix + "source") == data
    finally:
        backend.close()


def test_azure_copy_past_the_deadline_is_aborted(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy still pending when azure.upload.timeout.ms (1 s here, the least allowed) has passed is aborted and
    its target deleted. The 10 s bound leaves 9 s for the abort, the delete and the polls on a loaded machine."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR["azure-azurite"])
    backend = AzureBlobBackend()
    backend.configure(server.config(**TEST_TUNING["azure"], **{"azure.upload.timeout.ms": "1000"}))
    prefix = f"stuck-{uuid.uuid4().hex[:8]}/"
    backend.upload(prefix + "source", io.BytesIO(b"stuck"))
    _azure_copy_status(monkeypatch, ["pending"] * 1000)
    started = time.monotonic()
    try:
        with pytest.raises(StorageBackendException, match="deadline"):
            backend.copy_object(prefix + "source", prefix + "target")
        assert time.monotonic() - started < 10
        assert list(backend.list(prefix)) == [prefix + "source"]
    finally:
        backend.close()


# --- concurrency and failures ---------------------------------------------------------------------


def test_concurrent_uploads(harness: Harness, backend: Any) -> None:
    sizes = [10, harness.part_size + 100, 50_000, harness.part_size * 2 + 1, 0, 3]
    datas = [payload(s, i) for i, s in enumerate(sizes)]
    shared = harness.key("shared")
    versions = [payload(20_000, 50 + i) for i in range(4)]

    def job(i: int) -> None:
        backend.upload(harness.key(f"conc-{i}"), io.BytesIO(datas[i]))
        backend.upload(shared, io.BytesIO(versions[i % len(versions)]))

    with concurrent.futures.ThreadPoolExecutor(len(sizes)) as pool:
        for f in [pool.submit(job, i) for i in range(len(sizes))]:
            f.result()
    for i, data in enumerate(datas):
        assert fetch_all(backend, harness.key(f"conc-{i}")) == data
    assert fetch_all(backend, shared) in versions  # one whole version won, never a mix


@pytest.mark.parametrize("where", ["first-part", "mid-multipart"])
def test_failed_upload_leaves_no_object(harness: Harness, backend: Any, where: str) -> None:
    part = harness.part_size
    size = part * 3 + 11
    fail_at = part // 2 if where == "first-part" else 2 * part + 5
    data = payload(size, 4)
    key = harness.key("broken")
    with pytest.raises(SourceBroke):
        backend.upload(key, BreakingStream(data, fail_at))  # type: ignore[arg-type]
    with pytest.raises(KeyNotFound):
        backend.fetch(key)
    assert list(backend.list(harness.prefix)) == []

    # A failed overwrite keeps the previous object intact.
    backend.upload(key, io.BytesIO(b"old version"))
    with pytest.raises(SourceBroke):
        backend.upload(key, BreakingStream(data, fail_at))  # type: ignore[arg-type]
    assert fetch_all(backend, key) == b"old version"
    if harness.kind == "s3":
        pending = backend.client.list_multipart_uploads(Bucket=backend.bucket, Prefix=harness.prefix)
        assert pending.get("Uploads", []) == [], "failed multipart uploads must be aborted"


# --- cloud-only behaviour -------------------------------------------------------------------------


@pytest.fixture(params=CLOUD)
def cloud(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """The harness restricted to the cloud backends (metrics, retries, deadlines, credentials)."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[request.param])
    kind = server.backend

    def build(conf: dict[str, Any]) -> StorageBackend:
        b = CLASSES[kind]()
        b.configure(server.config(**{PART_KEY[kind]: str(PART_SIZE[kind]), **TEST_TUNING[kind], **conf}))
        return b

    h = Harness(request.param, kind, PART_SIZE[kind], server, build)
    try:
        yield h
    finally:
        h.close()


def test_metrics_count_requests_and_bytes(cloud: Harness) -> None:
    backend = cloud.make()
    data = payload(cloud.part_size + 1, 2)
    backend.upload(cloud.key("m"), io.BytesIO(data))
    assert fetch_all(backend, cloud.key("m"), 0, 99) == data[:100]
    with pytest.raises(KeyNotFound):
        backend.fetch(cloud.key("missing"))
    m = backend.metrics()
    assert m["bytes-uploaded"] == len(data)
    assert m["bytes-downloaded"] == 100
    assert sum(v for k, v in m.items() if k.endswith("-requests")) >= 4
    assert all(m[f"errors-{kind}"] == 0 for kind in ("throttling", "server", "configured-timeout", "io", "other"))


def test_connection_errors_are_retried_then_reported(cloud: Harness) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    endpoint_key = {"s3": "s3.endpoint.url", "gcs": "gcs.endpoint.url", "azure": "azure.endpoint.url"}[cloud.kind]
    prefix = cloud.kind
    backend = cloud.make(
        conf={
            endpoint_key: dead + ("/devstoreaccount1" if cloud.kind == "azure" else ""),
            f"{prefix}.retry.max.attempts": "3",
            f"{prefix}.retry.backoff.ms": "5",
            f"{prefix}.api.call.attempt.timeout": "2000",
        }
    )
    started = time.monotonic()
    with pytest.raises(StorageBackendException) as info:
        backend.fetch("some/key")
    assert not isinstance(info.value, KeyNotFound)
    message = str(info.value)
    assert "some/key" in message and cloud.server is not None and cloud.server.bucket in message
    assert "get" in message  # the operation
    assert backend.metrics()["errors-io"] + backend.metrics()["errors-configured-timeout"] == 3
    # A refused connection fails at once: three attempts 5 ms apart, measured 0.06 to 0.1 s at load 20. 10 s also
    # covers three attempts cut at their 2 s attempt timeout; the SDKs' default retries with their default
    # backoff would take longer, and attempts past the limit fail the count above.
    assert time.monotonic() - started < 10


def test_lost_response_mid_upload_is_retried(cloud: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second part/chunk/block reaches the real server but its answer is "lost" (the client raises a
    connection error after the request completed): the retry must settle it without corrupting the object."""
    backend = cloud.make()
    calls = {"n": 0}

    def lose_second_answer(real: Callable[..., Any], is_data: Callable[..., bool], error: Exception) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            answer = real(*args, **kwargs)
            if is_data(*args, **kwargs):
                calls["n"] += 1
                if calls["n"] == 2:
                    raise error
            return answer

        return wrapper

    if cloud.kind == "s3":
        from botocore.exceptions import ConnectionClosedError

        monkeypatch.setattr(
            backend.client,
            "upload_part",
            lose_second_answer(
                backend.client.upload_part, lambda **kw: True, ConnectionClosedError(endpoint_url=cloud.server.endpoint)
            ),
        )
    elif cloud.kind == "gcs":
        import requests

        def is_chunk(url: str, *args: Any, **kwargs: Any) -> bool:
            return not kwargs.get("headers", {}).get("Content-Range", "").startswith("bytes */")

        monkeypatch.setattr(
            backend.session,
            "put",
            lose_second_answer(backend.session.put, is_chunk, requests.ConnectionError("response lost")),
        )
    else:
        from azure.core.exceptions import ServiceResponseError
        from azure.storage.blob import BlobClient

        monkeypatch.setattr(
            BlobClient,
            "stage_block",
            lose_second_answer(BlobClient.stage_block, lambda *a, **kw: True, ServiceResponseError("response lost")),
        )

    data = payload(cloud.part_size * 3 + 5, 6)
    key = cloud.key("flaky")
    if cloud.name == "gcs-fake":
        # Recovery asks the session what it holds (PUT, Content-Range: bytes */*), as GCS specifies and as
        # google-resumable-media's recover() does. fake-gcs-server instead finalizes the session at that point,
        # committing a truncated object. Real GCS cannot be reached here, so on this emulator the contract is:
        # the upload fails loudly and no truncated object is left under the key.
        with pytest.raises(StorageBackendException, match="finalized the session"):
            backend.upload(key, io.BytesIO(data))
        with pytest.raises(KeyNotFound):
            backend.fetch(key)
        return
    assert backend.upload(key, io.BytesIO(data)) == len(data)
    assert calls["n"] >= 3
    assert fetch_all(backend, key) == data
    assert backend.metrics()["errors-io"] == 1


def test_upload_deadline_aborts_a_stalled_upload(cloud: Harness) -> None:
    backend = cloud.make(conf={f"{cloud.kind}.upload.timeout.ms": "1000"})
    key = cloud.key("stalled")
    started = time.monotonic()
    with pytest.raises(StorageBackendException, match="deadline"):
        backend.upload(key, StallingStream(cloud.part_size + 1, cloud.part_size * 3, 1.2))  # type: ignore[arg-type]
    # The 1 s deadline, then the read that stalls past it and the abort: measured 2.5 to 3.1 s at load 20, against
    # 8 s. An upload that ignored the deadline would not raise "deadline" at all.
    assert time.monotonic() - started < 8
    with pytest.raises(KeyNotFound):
        backend.fetch(key)


def test_missing_bucket_is_not_key_not_found(cloud: Harness) -> None:
    bucket_key = {"s3": "s3.bucket.name", "gcs": "gcs.bucket.name", "azure": "azure.container.name"}[cloud.kind]
    backend = cloud.make(conf={bucket_key: "no-such-bucket-kts"})
    with pytest.raises(StorageBackendException) as info:
        backend.upload("k/1", io.BytesIO(b"x"))
    assert not isinstance(info.value, KeyNotFound)
    assert "no-such-bucket-kts" in str(info.value) and "k/1" in str(info.value)


@pytest.mark.parametrize("flavour", [*S3_FLAVOURS, "azure-azurite"])  # GCS: see the next test
def test_a_read_in_a_missing_bucket_says_the_bucket_is_missing(flavour: str, request: pytest.FixtureRequest) -> None:
    """One rule (backends.cloud) for a missing bucket or container, fed by each store's own error code: a key
    read there is a configuration error naming the bucket, never a missing key."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    bucket_key = {"s3": "s3.bucket.name", "azure": "azure.container.name"}[server.backend]
    backend = CLASSES[server.backend]()
    backend.configure(server.config(**{**TEST_TUNING[server.backend], bucket_key: "no-such-bucket-kts"}))
    try:
        with pytest.raises(StorageBackendException) as info:
            fetch_all(backend, "k/1")
    finally:
        backend.close()
    assert not isinstance(info.value, KeyNotFound)
    assert "'no-such-bucket-kts'" in str(info.value) and "does not exist" in str(info.value)
    assert "k/1" in str(info.value)


def test_gcs_names_a_missing_bucket_from_the_answer() -> None:
    """GCS's JSON API gives a missing bucket and a missing object the same status and reason (fake-gcs-server
    answers both "Not Found", so this is the API's own wording): the backend tells them apart once, where an
    answer becomes an error, and the shared rule does the rest."""
    from backends.gcs_client import BUCKET_NOT_FOUND, GcsHttpError

    backend = GcsBackend()
    backend.bucket = "gone"
    bucket = GcsHttpError(404, "The specified bucket does not exist.")
    assert bucket.code == BUCKET_NOT_FOUND
    assert backend._classify(bucket) is ErrorKind.OTHER
    error = backend._map_error("get", "k/1", bucket)
    assert not isinstance(error, KeyNotFound) and "GCS bucket 'gone' does not exist" in str(error)
    assert isinstance(backend._map_error("get", "k/1", GcsHttpError(404, "No such object: gone/k/1")), KeyNotFound)


def test_filesystem_failures_are_backend_exceptions(tmp_path: Path) -> None:
    """A failing file operation leaves the filesystem backend as a StorageBackendException naming the key (the
    contract of backends.base), with the OSError as its cause; a failing read of the caller's source does not."""
    b = FileSystemBackend()
    b.configure({"root": str(tmp_path / "store"), "fsync.enabled": "false"})
    b.upload("a/b", io.BytesIO(b"x"))
    failures = [
        lambda: b.upload("a/b/c", io.BytesIO(b"y")),  # a/b is a file: no directory can be made there
        lambda: b.upload("a", io.BytesIO(b"z")),  # a is a directory: no file can replace it
        lambda: b.delete("a"),  # nor can it be unlinked as an object
    ]
    for failing in failures:
        with pytest.raises(StorageBackendException) as info:
            failing()
        assert not isinstance(info.value, KeyNotFound) and isinstance(info.value.__cause__, OSError)
        assert "filesystem" in str(info.value) and str(tmp_path / "store") in str(info.value)

    class BrokenSource(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            raise OSError("the source broke")

    with pytest.raises(OSError, match="the source broke") as source:
        b.upload("a/d", BrokenSource())
    assert not isinstance(source.value, StorageBackendException)
    assert list(b.list("")) == ["a/b"] and list(b.list_pending_uploads("")) == []


@pytest.mark.parametrize("flavour", S3_FLAVOURS)
def test_s3_delete_many_batches_of_1000(flavour: str, request: pytest.FixtureRequest) -> None:
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    backend = S3Backend()
    backend.configure(server.config())
    prefix = f"batch-{uuid.uuid4().hex[:8]}/"
    keys = [f"{prefix}{i:04d}" for i in range(1001)]
    present = [keys[0], keys[999], keys[1000]]
    for k in present:
        backend.upload(k, io.BytesIO(b"x"))
    backend.delete_many(keys)
    assert list(backend.list(prefix)) == []
    assert backend.metrics()["delete-objects-requests"] == 2
    backend.close()


@pytest.mark.parametrize("flavour", S3_FLAVOURS)
def test_s3_checksums_and_credentials_file(flavour: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = {server.configs['aws.access.key.id']}\n"
        f"aws_secret_access_key = {server.configs['aws.secret.access.key']}\n"
    )
    conf = {k: v for k, v in server.config().items() if not k.startswith("aws.")}
    conf.update(
        {
            "aws.credentials.file": str(creds),
            "aws.checksum.check.enabled": "true",
            "s3.legacy.md5.plugin.enabled": "true",
            "s3.multipart.upload.part.size": str(5 * MiB),
        }
    )
    backend = S3Backend()
    backend.configure(conf)
    data = payload(5 * MiB + 77, 8)
    key = f"checksum-{uuid.uuid4().hex[:8]}"
    assert backend.upload(key, io.BytesIO(data)) == len(data)
    assert fetch_all(backend, key) == data
    backend.delete(key)
    backend.close()


def test_azure_connection_string_and_sas(request: pytest.FixtureRequest) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    from emulators import AZURITE_ACCOUNT, AZURITE_KEY, azurite_connection_string

    server: StoreServer = request.getfixturevalue(FIXTURE_FOR["azure-azurite"])
    by_string = AzureBlobBackend()
    by_string.configure(
        {"azure.container.name": server.bucket, "azure.connection.string": azurite_connection_string(server.endpoint)}
    )
    key = f"sas-{uuid.uuid4().hex[:8]}"
    by_string.upload(key, io.BytesIO(b"via connection string"))

    sas = generate_container_sas(
        AZURITE_ACCOUNT,
        server.bucket,
        account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
    )
    by_sas = AzureBlobBackend()
    by_sas.configure(
        {"azure.container.name": server.bucket, "azure.endpoint.url": server.endpoint, "azure.sas.token": sas}
    )
    assert fetch_all(by_sas, key) == b"via connection string"
    by_sas.copy_object(key, key + "-sas-copy")  # the source URL carries the SAS (a key signs for its own account)
    by_string.copy_object(key + "-sas-copy", key + "-string-copy")
    assert fetch_all(by_sas, key + "-string-copy") == b"via connection string"
    by_sas.delete_many([key, key + "-missing", key + "-sas-copy", key + "-string-copy"])
    assert list(by_string.list(key)) == []
    by_string.close()
    by_sas.close()


# --- configuration errors (no server needed) ------------------------------------------------------

S3_BASE = {"s3.bucket.name": "b", "s3.endpoint.url": "http://127.0.0.1:1", "s3.region": "us-east-1"}
GCS_BASE = {"gcs.bucket.name": "b", "gcs.endpoint.url": "http://127.0.0.1:1", "gcs.credentials.default": "false"}
AZ_BASE = {"azure.container.name": "c", "azure.account.name": "acct", "azure.account.key": "a2V5"}

CONFIG_ERRORS: list[tuple[str, type[Any], dict[str, Any], list[str]]] = [
    ("s3-missing-bucket", S3Backend, {"s3.region": "us-east-1"}, ["storage.s3.bucket.name"]),
    (
        "s3-part-too-small",
        S3Backend,
        {**S3_BASE, "s3.multipart.upload.part.size": "1048576"},
        ["storage.s3.multipart.upload.part.size", "5242880"],
    ),
    (
        "s3-bad-storage-class",
        S3Backend,
        {**S3_BASE, "s3.storage.class": "COLD"},
        ["storage.s3.storage.class", "STANDARD_IA"],
    ),
    (
        "s3-bad-boolean",
        S3Backend,
        {**S3_BASE, "s3.path.style.access.enabled": "yes"},
        ["storage.s3.path.style.access.enabled", "true or false"],
    ),
    ("s3-key-without-secret", S3Backend, {**S3_BASE, "aws.access.key.id": "AKIA"}, ["storage.aws.secret.access.key"]),
    (
        "s3-keys-and-file",
        S3Backend,
        {**S3_BASE, "aws.access.key.id": "a", "aws.secret.access.key": "s", "aws.credentials.file": "/nonexistent"},
        ["storage.aws.access.key.id", "storage.aws.credentials.file"],
    ),
    (
        "s3-missing-credentials-file",
        S3Backend,
        {**S3_BASE, "aws.credentials.file": "/nonexistent/creds"},
        ["storage.aws.credentials.file"],
    ),
    (
        "s3-bad-concurrency",
        S3Backend,
        {**S3_BASE, "s3.multipart.upload.concurrency": "0"},
        ["storage.s3.multipart.upload.concurrency"],
    ),
    ("gcs-missing-bucket", GcsBackend, {"gcs.credentials.default": "false"}, ["storage.gcs.bucket.name"]),
    (
        "gcs-chunk-not-aligned",
        GcsBackend,
        {**GCS_BASE, "gcs.resumable.upload.chunk.size": "1000000"},
        ["storage.gcs.resumable.upload.chunk.size", "262144"],
    ),
    (
        "gcs-credentials-exclusive",
        GcsBackend,
        {**GCS_BASE, "gcs.credentials.default": "true", "gcs.credentials.json": "{}"},
        ["storage.gcs.credentials.default", "storage.gcs.credentials.json"],
    ),
    (
        "gcs-bad-json",
        GcsBackend,
        {"gcs.bucket.name": "b", "gcs.credentials.json": "{not json"},
        ["storage.gcs.credentials.json"],
    ),
    (
        "gcs-bad-timeout",
        GcsBackend,
        {**GCS_BASE, "gcs.api.call.attempt.timeout": "soon"},
        ["storage.gcs.api.call.attempt.timeout", "integer"],
    ),
    (
        "azure-missing-container",
        AzureBlobBackend,
        {"azure.account.name": "a", "azure.account.key": "a2V5"},
        ["storage.azure.container.name"],
    ),
    (
        "azure-connection-string-exclusive",
        AzureBlobBackend,
        {**AZ_BASE, "azure.connection.string": "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=a2V5"},
        ["storage.azure.connection.string", "storage.azure.account.name"],
    ),
    (
        "azure-key-and-sas",
        AzureBlobBackend,
        {**AZ_BASE, "azure.sas.token": "sv=1"},
        ["storage.azure.account.key", "storage.azure.sas.token"],
    ),
    ("azure-no-account", AzureBlobBackend, {"azure.container.name": "c"}, ["storage.azure.account.name"]),
    (
        "azure-block-too-small",
        AzureBlobBackend,
        {**AZ_BASE, "azure.upload.block.size": "1024"},
        ["storage.azure.upload.block.size", "102400"],
    ),
    ("filesystem-missing-root", FileSystemBackend, {}, ["storage.root"]),
]


@pytest.mark.parametrize(("cls", "conf", "expected"), [c[1:] for c in CONFIG_ERRORS], ids=[c[0] for c in CONFIG_ERRORS])
def test_config_errors(cls: type[Any], conf: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(ConfigException) as info:
        cls().configure(conf)
    for text in expected:
        assert text in str(info.value), f"{text!r} not in {info.value}"


def test_config_defs_document_every_key() -> None:
    from backends import azure, gcs, s3

    for module, group in ((s3, "s3"), (gcs, "gcs"), (azure, "azure")):
        for key in module.CONFIG_DEF.keys.values():
            assert key.doc.strip() and key.group == group, key.name
            assert not key.name.startswith("storage."), key.name
    assert s3.CONFIG_DEF.keys["s3.multipart.upload.part.size"].default == 8388608


# --- retry policy (pure) --------------------------------------------------------------------------


def test_retry_recovers_from_transient_errors_and_counts_them() -> None:
    from backends.instrumentation import BackendMetrics

    metrics = BackendMetrics("test")
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionResetError("reset")
        return "ok"

    sleeps: list[float] = []
    result = call_with_retry(
        flaky,
        operation="get-object",
        policy=RetryPolicy(max_attempts=3, backoff_s=0.01),
        classify=lambda e: ErrorKind.IO,
        metrics=metrics,
        sleep=sleeps.append,
    )
    assert result == "ok" and calls["n"] == 3 and len(sleeps) == 2
    snap = metrics.snapshot()
    assert snap["get-object-requests"] == 3 and snap["errors-io"] == 2

    seen: list[tuple[str, int]] = []
    metrics.add_listener(lambda name, n, _latency: seen.append((name, n)))
    with pytest.raises(PermissionError):
        call_with_retry(
            lambda: (_ for _ in ()).throw(PermissionError("denied")),
            operation="put-object",
            policy=RetryPolicy(max_attempts=5),
            classify=lambda e: ErrorKind.OTHER,
            metrics=metrics,
            sleep=sleeps.append,
        )
    assert ("put-object-requests", 1) in seen and ("errors-other", 1) in seen
    assert len(sleeps) == 2  # not retried


@given(size=st.integers(1, 5 * 1024**4), part=st.integers(1, 6 * 1024**3))
def test_s3_copy_ranges_cover_the_object_in_parts_s3_accepts(size: int, part: int) -> None:
    """Whatever the object size (up to S3's 5 TiB) and the part size asked for, a multipart copy's ranges cover
    the object once, in order, in at most 10,000 parts of 5 MiB to 5 GiB (the last one may be shorter)."""
    from backends.s3_config import MIN_PART_SIZE

    backend = S3Backend()
    backend.copy_part_size = part
    ranges = backend._copy_ranges(size)
    assert ranges[0][0] == 0 and ranges[-1][1] == size - 1
    assert all(a_last + 1 == b_first for (_, a_last), (b_first, _) in zip(ranges, ranges[1:], strict=False))
    assert len(ranges) <= 10_000
    assert all(MIN_PART_SIZE <= last - first + 1 <= 5 * 1024**3 for first, last in ranges[:-1])
    assert 1 <= ranges[-1][1] - ranges[-1][0] + 1 <= 5 * 1024**3


def test_streaming_upload_holds_bounded_memory() -> None:
    """iter_blocks never holds more than one block: the source is read lazily, block by block."""
    from backends.streaming import iter_blocks

    reads: list[int] = []
    lock = threading.Lock()

    class Counting(io.RawIOBase):
        pos = 0

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            n = min(len(b), 10_000 - self.pos)
            with lock:
                reads.append(self.pos)
            b[:n] = b"z" * n
            self.pos += n
            return n

    src = Counting()
    gen = iter_blocks(src, 4096)  # type: ignore[arg-type]
    block, last = next(gen)
    assert len(block) == 4096 and not last and src.pos == 4097  # one block plus a one-byte look-ahead
    sizes = [len(block)] + [len(b) for b, _ in gen]
    assert sizes == [4096, 4096, 1808]


BUFFER_KEY = {
    "s3": "s3.upload.buffer.memory.bytes",
    "gcs": "gcs.upload.buffer.memory.bytes",
    "azure": "azure.upload.buffer.memory.bytes",
}


@pytest.mark.parametrize("flavour", ["s3-seaweedfs", "gcs-fake", "azure-azurite"])
def test_concurrent_uploads_hold_at_most_the_buffer_budget(flavour: str, request: pytest.FixtureRequest) -> None:
    """Ten uploads of 4.5 parts each at once, with a budget of three parts: the bytes read from the sources and
    not yet acknowledged by the store never exceed the budget (plus the one-byte look-ahead of each upload), and
    every object arrives whole."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    kind = server.backend
    part = PART_SIZE[kind]
    budget = 3 * part
    backend = CLASSES[kind]()
    backend.configure(server.config(**{PART_KEY[kind]: str(part), BUFFER_KEY[kind]: str(budget), **TEST_TUNING[kind]}))
    lock = threading.Lock()
    state = {"read": 0, "sent": 0, "peak": 0}
    acknowledge = backend.instrumentation.bytes_uploaded

    def sent(n: int) -> None:
        with lock:
            state["sent"] += n
        acknowledge(n)

    backend.instrumentation.bytes_uploaded = sent

    class Source(io.RawIOBase):
        """The bytes of ``data``, counting what every source has handed out."""

        def __init__(self, data: bytes) -> None:
            super().__init__()
            self._data = memoryview(data)
            self._pos = 0

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            n = min(len(b), len(self._data) - self._pos, 1024 * 1024)
            b[:n] = self._data[self._pos : self._pos + n]
            self._pos += n
            with lock:
                state["read"] += n
                state["peak"] = max(state["peak"], state["read"] - state["sent"])
            return n

    prefix = f"buffers-{uuid.uuid4().hex[:8]}/"
    size = 4 * part + part // 2
    bodies = {f"{prefix}{i}": payload(size, i) for i in range(10)}
    try:
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            done = [pool.submit(backend.upload, key, Source(data)) for key, data in bodies.items()]
            assert [f.result() for f in done] == [size] * 10
        assert state["read"] == state["sent"] == 10 * size
        assert state["peak"] <= budget + 10, f"{state['peak']} bytes held at once, over the budget of {budget}"
        assert state["peak"] > part  # the uploads did overlap, so the bound was tested
        for key, data in bodies.items():
            assert fetch_all(backend, key) == data
    finally:
        backend.close()


@pytest.mark.parametrize("kind", ["s3", "gcs", "azure"])
def test_a_buffer_budget_below_one_part_is_refused(kind: str) -> None:
    """The budget must hold one part; the error names the key and what to set."""
    conf = {
        "s3": {"s3.bucket.name": "b", "s3.region": "eu-west-1"},
        "gcs": {"gcs.bucket.name": "b", "gcs.credentials.default": "false", "gcs.endpoint.url": "http://127.0.0.1:1"},
        "azure": {"azure.container.name": "c", "azure.connection.string": "UseDevelopmentStorage=true"},
    }[kind]
    backend = CLASSES[kind]()
    with pytest.raises(ConfigException, match=rf"storage\.{BUFFER_KEY[kind]}.*raise it to at least 8388608"):
        backend.configure({**conf, PART_KEY[kind]: str(8 * MiB), BUFFER_KEY[kind]: str(4 * MiB)})
