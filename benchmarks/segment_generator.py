"""Fill a bucket with N tiered segments quickly, written by the plugin's own copy path.

Each segment is a small real Kafka log (``rsm.kafka.writer.write_segment``: v2 batches, offset and time indexes,
a producer snapshot) at its own base offset, copied by a real ``RemoteStorageManager`` (chunking, zstd, AES-GCM
under a fresh data key wrapped by the configured RSA pair, the indexes object, the manifest with its integrity
record) into a filesystem store on local disk. The three objects are then uploaded byte for byte to the target
store, ``concurrency`` PUTs at a time, and deleted locally. So every manifest and index is what the plugin writes,
the ``.log`` objects are only small, and the store is filled at local speed (no proxy, parallel PUTs, two worker
processes): about 190 segments a second on this 2-core machine against SeaweedFS, most of it the S3 client's CPU
per PUT and the server's.

Segment j of partition p starts at offset ``j * records_per_segment`` and holds exactly ``records_per_segment``
records whose timestamps grow with j (``timestamp_step_ms`` a segment), so offset and time bounds select known
segments. ``orphans`` extra segments get their ``.log`` and ``.indexes`` but no manifest: what a crashed copy
leaves, for ``kts gc``.

    python benchmarks/segment_generator.py --store s3-seaweedfs --segments 10000 --prefix n10000/ --workdir W
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends.registry import create_backend  # noqa: E402
from rsm.core.manager import RemoteStorageManager  # noqa: E402
from rsm.core.object_keys import segment_keys  # noqa: E402
from rsm.kafka.writer import write_segment  # noqa: E402
from rsm.metadata import TopicIdPartition  # noqa: E402

BASE_TIMESTAMP_MS = 1_700_000_000_000
TOPIC_ID = "Sc41eR5tQ0-gEnErAt0r0A"  # fixed, so a re-run finds (and skips) what an earlier run generated


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate: ``segments`` per partition of ``topic`` under ``prefix``."""

    prefix: str
    segments: int
    topic: str = "bench-scale"
    partitions: int = 1
    records_per_segment: int = 10
    timestamp_step_ms: int = 60_000
    orphans: int = 0
    codec: str = "none"
    topic_id: str = TOPIC_ID

    def tip(self, partition: int) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, partition)

    def segment_id(self, partition: int, index: int) -> str:
        """A deterministic Kafka Uuid per segment (so re-runs overwrite, never duplicate)."""
        raw = f"{partition:06d}{index:09d}".encode().ljust(16, b"\0")[:16]
        import base64

        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @property
    def total(self) -> int:
        return self.segments * self.partitions

    def __post_init__(self) -> None:
        if self.records_per_segment < 2 or self.records_per_segment % 2:
            raise ValueError(
                f"records_per_segment must be even and at least 2 (two equal batches), got {self.records_per_segment}"
            )


@dataclass(frozen=True)
class Generated:
    segments: int
    orphans: int
    objects: int
    seconds: float
    skipped: bool


def _storage_only(config: Mapping[str, str]) -> dict[str, str]:
    prefix = "storage."
    return {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix) and k != "storage.backend.class"}


def already_there(target: Mapping[str, str], spec: GeneratorSpec) -> bool:
    """Whether the target holds exactly the manifests ``spec`` generates (a listing, nothing read)."""
    backend = create_backend(target["storage.backend.class"], _storage_only(target))
    try:
        count = sum(1 for k in backend.list(f"{spec.prefix}{spec.topic}-") if k.endswith(".rsm-manifest"))
    finally:
        backend.close()
    return count == spec.total


RANGE = 500
"""Segments one worker process writes in one go (the unit of progress and of the split across processes)."""


def generate(
    target: Mapping[str, str],
    plugin: Mapping[str, str],
    spec: GeneratorSpec,
    *,
    concurrency: int = 8,
    processes: int = 2,
    progress: Callable[[int, int], None] | None = None,
    reuse: bool = True,
) -> Generated:
    """Write ``spec``'s segments into the store of ``target`` (``storage.*`` keys) as the plugin configured by
    ``plugin`` (encryption, compression, chunk size; its storage keys are replaced by a local store) writes them.

    ``processes`` worker processes (the copy and the S3 client's PUTs are CPU in Python: one process is held to
    one core) each run ``concurrency`` PUTs at a time. With ``reuse`` a target that already lists every manifest
    of ``spec`` is left as it is. ``progress(done, total)`` counts segments (orphans included)."""
    started = time.monotonic()
    if reuse and already_there(target, spec):
        return Generated(spec.total, spec.orphans, 0, time.monotonic() - started, True)
    ranges = []
    for partition in range(spec.partitions):
        count = spec.segments + (spec.orphans if partition == 0 else 0)
        ranges += [(partition, a, min(a + RANGE, count)) for a in range(0, count, RANGE)]
    total = sum(stop - a for _, a, stop in ranges)
    done = objects = 0
    args = [(dict(target), dict(plugin), spec, p, a, stop, concurrency) for p, a, stop in ranges]
    if processes <= 1:
        outcomes: Iterator[int] = (_write_range(*a) for a in args)
        pool = None
    else:
        pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        outcomes = pool.map(_write_range, *zip(*args, strict=True))
    try:
        for (_, a, stop), written in zip(ranges, outcomes, strict=True):
            objects += written
            done += stop - a
            if progress is not None:
                progress(done, total)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return Generated(spec.total, spec.orphans, objects, time.monotonic() - started, False)


def _write_range(
    target: Mapping[str, str],
    plugin: Mapping[str, str],
    spec: GeneratorSpec,
    partition: int,
    start: int,
    stop: int,
    concurrency: int,
) -> int:
    """Segments ``start..stop-1`` of ``partition`` (indexes past ``spec.segments`` are orphans); returns the
    number of objects uploaded."""
    work = Path(tempfile.mkdtemp(prefix="kts-gen-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    local = work / "store"
    manager = RemoteStorageManager()
    manager.configure(
        {
            **{k: v for k, v in plugin.items() if not k.startswith("storage.")},
            "storage.backend.class": "filesystem",
            "storage.root": str(local),
            "storage.fsync.enabled": "false",
            "key.prefix": spec.prefix,
        }
    )
    store = create_backend(target["storage.backend.class"], _storage_only(target))
    pool = ThreadPoolExecutor(concurrency, thread_name_prefix="kts-gen-put")
    slots = threading.BoundedSemaphore(4 * concurrency)  # PUTs queued at most: local files stay few
    pending: list[Future[None]] = []
    objects = 0

    def put(key: str) -> None:
        try:
            path = local / key
            store.upload(key, io.BytesIO(path.read_bytes()))
            path.unlink()
        finally:
            slots.release()

    try:
        for index in range(start, stop):
            orphan = index >= spec.segments
            files = write_segment(
                work / "src",
                base_offset=index * spec.records_per_segment,
                num_batches=2,
                records_per_batch=(spec.records_per_segment // 2, spec.records_per_segment // 2),
                codec=spec.codec,
                seed=index,
                num_producers=1,
                base_timestamp_ms=BASE_TIMESTAMP_MS + index * spec.timestamp_step_ms,
            )
            meta = files.to_metadata(
                spec.tip(partition),
                spec.segment_id(partition, index),
                event_timestamp_ms=BASE_TIMESTAMP_MS + index * spec.timestamp_step_ms,
            )
            manager.copy_log_segment_data(meta, files.to_log_segment_data())
            keys = segment_keys(spec.prefix, meta)
            if orphan:
                (local / keys.manifest).unlink()
            for key in [keys.log, keys.indexes] + ([] if orphan else [keys.manifest]):  # the manifest last
                slots.acquire()
                pending.append(pool.submit(put, key))
                objects += 1
            shutil.rmtree(work / "src")
            if len(pending) > 8 * concurrency:  # surface a failed PUT early, keep the list short
                for f in pending:
                    if f.done():
                        f.result()
                pending = [f for f in pending if not f.done()]
        for f in pending:
            f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        store.close()
        manager.close()
        shutil.rmtree(work, ignore_errors=True)
    return objects


def main(argv: list[str] | None = None) -> int:
    from bench_config import encryption_config
    from latency_store import latency_store

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="s3-seaweedfs", help="emulator to fill (kept under --workdir)")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--prefix", default="gen/")
    parser.add_argument("--orphans", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=8, help="PUTs in flight per process")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its server and workers
    spec = GeneratorSpec(args.prefix, args.segments, partitions=args.partitions, orphans=args.orphans)
    plugin = {"chunk.size": str(1 << 20), **encryption_config(args.workdir)}
    with latency_store(args.workdir, server=args.store) as store:
        done = generate(
            store.direct_config(),
            plugin,
            spec,
            concurrency=args.concurrency,
            processes=args.processes,
            progress=lambda n, total: print(f"\r{n}/{total}", end="", file=sys.stderr),
        )
    print(
        f"\n{done.segments} segments (+{done.orphans} orphans), {done.objects} objects in {done.seconds:.1f} s"
        + (" (already there)" if done.skipped else f" = {done.segments / max(done.seconds, 1e-9):.0f} segments/s")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
