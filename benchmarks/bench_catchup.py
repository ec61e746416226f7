"""Catch-up read the way a broker reads a lagging partition, through the chunk cache: a stream opened at each
position, ``--step`` bytes read (max.partition.fetch.bytes, 1 MiB by default), closed, reopened at the next
position. Cold (empty cache), warm (same process), and after a restart (a new process on the same disk cache).
Figures are ratios to limits measured in the same run:

- the same manager's single full-stream read of the segment (cold cache), and
- the raw detransform limit: zstd + AES-GCM decode of the same chunks with the same threads.

Also: warm latency of a 1 MiB fetch (p50/p99, in-process), and the upload rate limit (4 concurrent copies
against ``--rate-mb``). GETs on ``.log`` objects are counted by the backend on the filesystem and by the
server (moto's request recorder) on S3.

    python benchmarks/bench_catchup.py [--size-mb 256] [--chunk-size 1048576] [--backend filesystem|s3|both]

Targets (issue 9): cold GETs <= ceil(stored / coalesce) + 1; warm and after-restart GETs = 0; cold catch-up
>= 0.8x the full-stream read; warm 1 MiB p50 < 1 ms, p99 < 5 ms; rate limit within +-5%.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from bench_config import bench_metadata as _meta  # noqa: E402 - benchmarks/ is sys.path[0]
from bench_config import encryption_config  # noqa: E402
from bench_config import large_segment_data as _segment_data  # noqa: E402

COALESCE = 16 * 1024 * 1024


def _configs(work: Path, storage: dict[str, str], chunk: int, cache: str, **extra: str) -> dict[str, str]:
    return {
        "chunk.size": str(chunk),
        **storage,
        **encryption_config(work),
        "fetch.chunk.cache.class": "disk",
        "fetch.chunk.cache.path": str(work / cache),
        "fetch.chunk.cache.size": str(2 * 1024**3),
        "fetch.coalesce.max.bytes": str(COALESCE),
        "fetch.chunk.cache.prefetch.max.size": "0",
        **extra,
    }


class _FsGetCounter:
    """Counts reads of .log objects on the filesystem backend: both ways a range is read (``read_range_into``
    for ranges up to 8 MiB, a ``fetch`` stream above)."""

    def __init__(self, backend: Any) -> None:
        self.count = 0
        for name in ("read_range_into", "fetch"):
            setattr(backend, name, self._counting(getattr(backend, name)))

    def _counting(self, real: Any) -> Any:
        def counted(key: str, *args: Any) -> Any:
            if key.endswith(".log"):
                self.count += 1
            return real(key, *args)

        return counted


class _MotoGetCounter:
    """Counts GETs of .log objects as moto's server recorded them."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._post("reset-recording")
        self._post("start-recording")

    def _post(self, action: str) -> None:
        req = urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{action}", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=30).close()

    @property
    def count(self) -> int:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/recorder/download-recording", timeout=60) as r:
            entries = [json.loads(line) for line in r.read().decode().splitlines() if line]
        return sum(1 for e in entries if e["method"] == "GET" and ".log" in e["url"])

    def stop(self) -> None:
        self._post("stop-recording")


def _broker_read(m: Any, meta: Any, size: int, step: int) -> None:
    pos = 0
    buf = bytearray(step)
    while pos < size:
        with m.fetch_log_segment(meta, pos) as f:
            n = f.readinto(buf)
        assert n > 0
        pos += n


def _full_read(m: Any, meta: Any, size: int) -> None:
    buf = bytearray(1024 * 1024)
    total = 0
    with m.fetch_log_segment(meta, 0) as f:
        while n := f.readinto(buf):
            total += n
    assert total == size


def phase_restart(work: Path, storage: dict[str, str], chunk: int, step: int, endpoint: str | None) -> dict[str, Any]:
    """A new process on the disk cache the parent filled: every chunk must come from disk."""
    from rsm import RemoteStorageManager

    size = (work / "segment" / "00000000000000000000.log").stat().st_size
    meta = _meta(size)
    with RemoteStorageManager() as m:
        m.configure(_configs(work, storage, chunk, "cache"))
        counter: Any = _MotoGetCounter(endpoint) if endpoint else _FsGetCounter(m.backend)
        m.fetch_manifest(meta)
        t0 = time.perf_counter()
        _broker_read(m, meta, size, step)
        dt = time.perf_counter() - t0
        gets = counter.count
    return {"mbs": size / dt / 1e6, "gets": gets}


def _raw_limit(m: Any, meta: Any, threads: int) -> float:
    """zstd + AES-GCM decode of the segment's stored chunks, already in memory, with the plugin's threads."""
    import zstandard
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from backends.base import read_range

    src = m.manifests.source(meta)  # the segment's chunk index and its data key, as the read path has them
    index = src.index
    blob = read_range(m.backend, src.log_key, 0, index.transformed_file_size - 1)
    cipher = src.transformer.cipher
    aead: AESGCM = cipher._aead  # noqa: SLF001 - the same data key, outside the plugin
    aad = cipher._aad  # noqa: SLF001
    chunks = [bytes(blob[c.transformed_position : c.transformed_end]) for c in index.chunks()]
    local = threading.local()

    def decode(stored: bytes) -> int:
        d = getattr(local, "d", None) or zstandard.ZstdDecompressor()
        local.d = d
        return len(d.decompress(aead.decrypt(stored[:12], stored[12:], aad)))

    with ThreadPoolExecutor(threads) as pool:
        t0 = time.perf_counter()
        total = sum(pool.map(decode, chunks))
        dt = time.perf_counter() - t0
    assert total == index.original_file_size
    return total / dt / 1e6


def _warm_latency(m: Any, meta: Any, size: int, samples: int = 400) -> tuple[float, float]:
    import random

    rng = random.Random(1)
    buf = bytearray(1024 * 1024)
    times = []
    for _ in range(samples):
        pos = rng.randrange(0, max(1, size - len(buf)))
        t0 = time.perf_counter()
        with m.fetch_log_segment(meta, pos) as f:
            f.readinto(buf)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def _rate_limit(work: Path, storage: dict[str, str], chunk: int, rate: int) -> dict[str, float]:
    from rsm import RemoteStorageManager

    data = _segment_data(work)
    size = data.log_segment.stat().st_size
    samples: list[tuple[float, float]] = []
    with RemoteStorageManager() as m:
        m.configure(_configs(work, storage, chunk, "cache-rl", **{"upload.rate.limit.bytes.per.second": str(rate)}))
        limiter = m.upload_rate_limiter
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.monotonic(), limiter.stats()["rate-limited-bytes-total"]))
                time.sleep(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        ids = ["A" * 21 + c for c in "QgAw"]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: m.copy_log_segment_data(_meta(size, i), data), ids))
        dt = time.perf_counter() - t0
        stop.set()
        sampler.join()
        total = limiter.stats()["rate-limited-bytes-total"]
    # the worst 10 s window (or the whole run when shorter), skipping the start-up burst
    window = min(10.0, samples[-1][0] - samples[0][0] - 0.5)
    worst = 0.0
    for i, (t_a, b_a) in enumerate(samples):
        for t_b, b_b in samples[i + 1 :]:
            if t_b - t_a >= window:
                worst = max(worst, abs((b_b - b_a) / (t_b - t_a) - rate) / rate)
                break
    return {"mbs": total / dt / 1e6, "ratio": total / dt / rate, "worst_window_error": worst, "window_s": window}


@contextmanager
def _storage(kind: str, work: Path) -> Iterator[tuple[dict[str, str], str | None]]:
    if kind == "filesystem":
        yield {"storage.backend.class": "filesystem", "storage.root": str(work / "store")}, None
        return
    import emulators

    with emulators.running("s3-moto", work / "moto") as server:
        yield (
            {"storage.backend.class": server.backend, **{f"storage.{k}": str(v) for k, v in server.config().items()}},
            server.endpoint,
        )


def _spread(values: list[float]) -> str:
    return f"{min(values):.0f}-{max(values):.0f} MB/s"


def run_backend(kind: str, work: Path, args: argparse.Namespace, threads: int) -> None:
    from rsm import RemoteStorageManager

    data = _segment_data(work)
    size = data.log_segment.stat().st_size
    meta = _meta(size)
    with _storage(kind, work) as (storage, endpoint):
        with RemoteStorageManager() as m:
            m.configure(_configs(work, storage, args.chunk_size, "cache-copy"))
            m.copy_log_segment_data(meta, data)
            stored = m.fetch_manifest(meta).chunk_index.transformed_file_size
            raw = _raw_limit(m, meta, threads)
        # One pass of each is at the mercy of this VM's noise (10-30% between runs): alternate them, each on a
        # fresh cache, and compare medians. The last cold pass's cache serves the warm and restart phases.
        fulls, colds = [], []
        for rep in range(args.reps):
            with RemoteStorageManager() as m:
                m.configure(_configs(work, storage, args.chunk_size, f"cache-full-{rep}"))
                m.fetch_manifest(meta)
                t0 = time.perf_counter()
                _full_read(m, meta, size)
                fulls.append(size / (time.perf_counter() - t0) / 1e6)
            last = rep == args.reps - 1
            m = RemoteStorageManager()
            m.configure(_configs(work, storage, args.chunk_size, "cache" if last else f"cache-cold-{rep}"))
            counter: Any = _MotoGetCounter(endpoint) if endpoint else _FsGetCounter(m.backend)
            m.fetch_manifest(meta)
            t0 = time.perf_counter()
            _broker_read(m, meta, size, args.step)
            colds.append(size / (time.perf_counter() - t0) / 1e6)
            cold_gets = counter.count
            if not last:
                if endpoint:
                    counter.stop()
                m.close()
        full, cold = statistics.median(fulls), statistics.median(colds)
        with m:
            t0 = time.perf_counter()
            _broker_read(m, meta, size, args.step)
            warm = size / (time.perf_counter() - t0) / 1e6
            warm_gets = counter.count - cold_gets
            disk_p50, disk_p99 = _warm_latency(m, meta, size)  # memory tier 64 MiB: mostly disk-tier hits
        with RemoteStorageManager() as m:
            # the memory tier sized for the segment: what a hot partition's reads cost
            hot = {"fetch.chunk.cache.class": "memory", "fetch.chunk.cache.size": str(2 * size)}
            m.configure(_configs(work, storage, args.chunk_size, "cache-hot", **hot))
            _full_read(m, meta, size)
            assert m.chunk_cache.wait_idle()
            p50, p99 = _warm_latency(m, meta, size)
        if endpoint:
            counter.stop()
        cmd = [
            sys.executable,
            __file__,
            "--phase",
            "restart",
            "--work",
            str(work),
            "--chunk-size",
            str(args.chunk_size),
        ]
        cmd += ["--step", str(args.step), "--storage", json.dumps(storage), "--endpoint", endpoint or ""]
        res = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
        restart = json.loads(res.stdout.strip().splitlines()[-1])
        # the limiter is the same for every backend: measured where the store is far faster than the limit
        rl = (
            _rate_limit(work, storage, args.chunk_size, args.rate_mb * 1_000_000)
            if args.rate_mb and not endpoint
            else None
        )
    bound = math.ceil(stored / COALESCE) + 1
    print(
        f"\n[{kind}] {size / 1e6:.0f} MB segment ({stored / 1e6:.0f} MB stored), {args.chunk_size} B chunks, "
        f"reads of {args.step} B per stream, coalescing {COALESCE >> 20} MiB"
    )
    print(
        f"  limits: raw detransform {raw:.0f} MB/s; full-stream read (cold) {full:.0f} MB/s "
        f"(median of {args.reps}: {_spread(fulls)})"
    )
    print(
        f"  cold catch-up    {cold:7.0f} MB/s  {cold / full:.2f}x full stream  {cold / raw:.2f}x raw   "
        f"GETs {cold_gets} (target <= {bound}); median of {args.reps}: {_spread(colds)}, pass by pass "
        + " ".join(f"{c / f:.2f}x" for c, f in zip(colds, fulls, strict=True))
    )
    print(
        f"  warm catch-up    {warm:7.0f} MB/s  {warm / full:.2f}x full stream  {warm / raw:.2f}x raw   "
        f"GETs {warm_gets} (target 0)"
    )
    print(
        f"  after restart    {restart['mbs']:7.0f} MB/s  {restart['mbs'] / full:.2f}x full stream  "
        f"{restart['mbs'] / raw:.2f}x raw   GETs {restart['gets']} (target 0)"
    )
    print(f"  warm 1 MiB fetch from the memory tier p50 {p50:.2f} ms, p99 {p99:.2f} ms (targets < 1 ms, < 5 ms)")
    print(f"  warm 1 MiB fetch from the disk tier (decode included) p50 {disk_p50:.2f} ms, p99 {disk_p99:.2f} ms")
    if rl is not None:
        print(
            f"  upload rate limit {args.rate_mb} MB/s, 4 concurrent copies: {rl['mbs']:.1f} MB/s = "
            f"{rl['ratio']:.3f}x the limit; worst {rl['window_s']:.0f} s window off by "
            f"{rl['worst_window_error'] * 100:.1f}% (target 5%)"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=1024 * 1024)
    p.add_argument("--step", type=int, default=1024 * 1024, help="bytes read per stream (max.partition.fetch.bytes)")
    p.add_argument("--backend", choices=["filesystem", "s3", "both"], default="both")
    p.add_argument("--rate-mb", type=int, default=50, help="upload rate limit to check (0 = skip)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--reps", type=int, default=3, help="alternating full-stream and cold catch-up passes")
    p.add_argument("--phase", choices=["restart"], help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--storage", help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = p.parse_args()
    threads = args.threads or os.cpu_count() or 2
    if args.phase == "restart":
        out = phase_restart(Path(args.work), json.loads(args.storage), args.chunk_size, args.step, args.endpoint)
        print(json.dumps(out))
        return 0
    from rsm.kafka.large_segment import write_large_segment

    kinds = ["filesystem", "s3"] if args.backend == "both" else [args.backend]
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="kts-catchup-") as tmp:
            work = Path(tmp)
            write_large_segment(work / "segment", args.size_mb * 1024 * 1024, seed=7)
            run_backend(kind, work, args, threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
