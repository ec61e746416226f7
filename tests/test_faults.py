"""Copies and catch-up reads through a real fault-injecting proxy in front of a real S3 server (moto).

At 1%, 10% and 30% of requests the proxy answers 503 SlowDown, resets uploads and downloads mid-body, stalls
past the attempt timeout, or truncates bodies (with and without a rewritten Content-Length). Expected: no wrong
byte ever; a copy either succeeds or fails with ``RemoteStorageException`` and leaves no manifest; at 10% at
least 99% of fetches succeed (body reads are retried); no thread or fd leaks; no multipart upload stays open
after garbage collection. Each run appends a row to the reliability table (``RELIABILITY_TABLE``, see
docs/reliability.md).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any

import pytest
from conftest import TIP
from emulators import StoreServer, s3_moto_server  # noqa: F401,F811 - fixtures are found by name
from faultproxy import FaultPlan, FaultProxy
from reliability_table import record_row

from backends.s3 import S3Backend
from rsm import CorruptDataException, RemoteStorageException, RemoteStorageManager
from rsm.core.garbage import MULTIPART_UPLOAD, delete_garbage, find_garbage
from rsm.core.object_keys import segment_keys

COPIES = 4
FETCHES = 30


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def direct_listing(server: StoreServer, prefix: str) -> list[Any]:
    """Open multipart uploads, asked of the server directly (not through the proxy)."""
    b = S3Backend()
    b.configure(server.config())
    try:
        return list(b.list_pending_uploads(prefix))
    finally:
        b.close()


def _manager(server: StoreServer, endpoint: str, prefix: str) -> RemoteStorageManager:
    configs = {
        "chunk.size": "65536",
        "key.prefix": prefix,
        "compression.enabled": "true",
        "storage.backend.class": "s3",
        "fetch.readahead.chunks": "2",
        # a GET per chunk, nothing cached: every read crosses the faulty proxy (coalescing and the cache would
        # turn a catch-up into a handful of requests, and 1% of a handful is nothing)
        "fetch.coalesce.max.bytes": "1",
        "fetch.chunk.cache.size": "0",
        "fetch.chunk.cache.prefetch.max.size": "0",
        **{f"storage.{k}": v for k, v in server.config(**{"s3.endpoint.url": endpoint}).items()},
        "storage.s3.api.call.attempt.timeout": "400",
        "storage.s3.retry.max.attempts": "6",
        "storage.s3.retry.backoff.ms": "10",
        "storage.s3.retry.backoff.max.ms": "100",
        "storage.s3.multipart.upload.part.size": str(5 * 1024 * 1024),
    }
    m = RemoteStorageManager()
    m.configure(configs)
    return m


@pytest.mark.timeout(240)
@pytest.mark.parametrize("rate", [0.01, 0.10, 0.30])
def test_copies_and_fetches_under_faults(
    rate: float,
    s3_moto_server: StoreServer,  # noqa: F811
    segment_factory: Any,
) -> None:
    seg = segment_factory(target_bytes=6 * 1024 * 1024, seed=5, value_style="random")
    original = seg.log.read_bytes()
    prefix = f"faults-{int(rate * 100)}/"
    threads_before, fds_before = threading.active_count(), _fds()
    proxy = FaultProxy(int(s3_moto_server.endpoint.rsplit(":", 1)[1]), FaultPlan(rate, stall_s=0.8))
    direct = S3Backend()
    direct.configure(s3_moto_server.config())
    copied: list[Any] = []
    copy_failures = fetch_failures = wrong_bytes = verified = 0
    started = time.monotonic()
    try:
        m = _manager(s3_moto_server, proxy.url, prefix)
        try:
            for i in range(COPIES):
                meta = seg.to_metadata(TIP, f"faultcopy{i:02d}{int(rate * 100):03d}aaaaaaaa"[:22])
                try:
                    m.copy_log_segment_data(meta, seg.to_log_segment_data())
                    copied.append(meta)
                except RemoteStorageException:
                    copy_failures += 1
                    assert not list(direct.list(segment_keys(prefix, meta).manifest)), "failed copy left a manifest"
            assert copied, "no copy succeeded at all"
            for i in range(FETCHES):
                meta = copied[i % len(copied)]
                start = (i * 977_531) % (len(original) - 1)
                try:
                    with m.fetch_log_segment(meta, start) as f:
                        got = f.read()
                except RemoteStorageException:
                    fetch_failures += 1
                    continue
                want = original[start:]
                if got != want:
                    wrong_bytes += sum(a != b for a, b in zip(got, want, strict=False)) + abs(len(got) - len(want))
                verified += len(got)
        finally:
            m.close()
    finally:
        proxy.stop()
        direct.close()
    open_before_gc = len(list(direct_listing(s3_moto_server, prefix)))
    gc = _manager(s3_moto_server, s3_moto_server.endpoint, prefix)
    try:
        report = delete_garbage(gc, [i for i in find_garbage(gc, 0) if i.kind == MULTIPART_UPLOAD])
        assert report.failed == []
    finally:
        gc.close()
    assert list(direct_listing(s3_moto_server, prefix)) == [], "a multipart upload is still open after gc"
    assert wrong_bytes == 0
    fetch_success = (FETCHES - fetch_failures) / FETCHES
    if rate <= 0.10:
        assert fetch_success >= 0.99, (fetch_failures, proxy.plan.injected)
    assert sum(proxy.plan.injected.values()) > 0, "the proxy injected nothing: the test proves nothing"
    time.sleep(0.2)
    assert threading.active_count() <= threads_before, "threads leaked"
    assert _fds() <= fds_before + 2, f"fds leaked: {fds_before} -> {_fds()}"
    record_row(
        {
            "scenario": f"S3 via fault proxy, {rate:.0%} of requests",
            "faults": dict(proxy.plan.injected),
            "operations": f"{COPIES} copies ({COPIES - copy_failures} ok), "
            f"{FETCHES} fetches ({FETCHES - fetch_failures} ok)",
            "outcome": f"0 wrong bytes; no manifest from a failed copy; no thread/fd leak; {open_before_gc} "
            "multipart uploads open before gc, 0 after",
            "bytes_verified": verified,
            "wrong_bytes": wrong_bytes,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "seconds": round(time.monotonic() - started, 1),
        }
    )


def test_proxy_really_breaks_an_unretried_client(s3_moto_server: StoreServer) -> None:  # noqa: F811
    """The proxy's faults are real: a client without retries fails on them (so the test above can fail)."""
    proxy = FaultProxy(int(s3_moto_server.endpoint.rsplit(":", 1)[1]), FaultPlan(1.0, faults=("slowdown",)))
    b = S3Backend()
    b.configure(s3_moto_server.config(**{"s3.endpoint.url": proxy.url, "s3.retry.max.attempts": "1"}))
    try:
        with pytest.raises(Exception, match="SlowDown|503|throttling"):
            b.upload("x", __import__("io").BytesIO(b"abc"))
    finally:
        b.close()
        proxy.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("truncated_reads", [1, None], ids=["once-in-transit", "every-read"])
def test_manifest_truncated_with_matching_length(
    truncated_reads: int | None,
    s3_moto_server: StoreServer,  # noqa: F811
    segment_factory: Any,
) -> None:
    """A manifest body cut in half with Content-Length rewritten to match is a complete, short object at the HTTP
    level. Damaged once in transit, a second read recovers it and the fetch is exact; damaged on every read (as a
    stored corrupt manifest would be), the fetch fails with CorruptDataException naming the manifest."""
    seg = segment_factory(target_bytes=300_000, seed=7)
    prefix = f"manifest-cut-{truncated_reads}/"
    meta = seg.to_metadata(TIP, "manifestcutAAAAAAAAAAA")
    writer = _manager(s3_moto_server, s3_moto_server.endpoint, prefix)
    try:
        writer.copy_log_segment_data(meta, seg.to_log_segment_data())
    finally:
        writer.close()
    plan = FaultPlan(1.0, faults=("truncate-length",), only_paths_containing=b".rsm-manifest", limit=truncated_reads)
    proxy = FaultProxy(int(s3_moto_server.endpoint.rsplit(":", 1)[1]), plan)
    m = _manager(s3_moto_server, proxy.url, prefix)
    try:
        if truncated_reads is None:
            with pytest.raises(CorruptDataException, match=r"manifest .*\.rsm-manifest is not valid JSON"):
                m.fetch_log_segment(meta, 0)
            assert plan.injected["truncate-length"] == 2, "the manifest should be read exactly twice"
        else:
            with m.fetch_log_segment(meta, 0) as f:
                assert f.read() == seg.log.read_bytes()
            assert plan.injected["truncate-length"] == 1
    finally:
        m.close()
        proxy.stop()
        gc = _manager(s3_moto_server, s3_moto_server.endpoint, prefix)
        try:
            gc.delete_log_segment_data(meta)
        finally:
            gc.close()
