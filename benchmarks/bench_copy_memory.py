"""The plugin's memory while a broker copies many segments at once, next to what ``kts config check`` budgets.

Ten segments (``--segments``) are copied at once by as many Java threads (``--threads``, Kafka's default copier
pool is 10) through the JVM shim and its Python sidecar to SeaweedFS, with the README's S3 settings: 4 MiB chunks,
zstd and AES-256-GCM. A sampler reads the sidecar's resident memory (``VmRSS``, which includes the pages of the
shared region it touched, also shown alone as ``RssShmem``) every 20 ms, and the kernel's own peak (``VmHWM``)
at the end. Printed: the peaks, the copy rate in MB/s of segment bytes, and the budget of ``kts config check`` for
the same keys at Kafka's defaults: its total, and the terms a copy uses (the shared region, which the sidecar maps
whole at start, uploads, index cache, the interpreter); fetches in flight are the terms it leaves out.

    python benchmarks/bench_copy_memory.py [--segments 10] [--size-mb 128] [--threads 10] [--code DIR] [--iceberg]

``--iceberg`` copies the segments in Iceberg mode instead (topic ``orders`` in a SQLite catalog, the tables in the
same bucket): each segment holds Avro values of an order schema (about 800 bytes each, 100 to a zstd batch) with
the value schema configured, so every record becomes a row with its parsed ``value`` struct; ``--size-mb`` counts
the records' decompressed bytes. The budget's copy terms then include the Iceberg rows being written.

``--code DIR`` runs another checkout of the plugin (its ``rsm`` and ``backends``) in the sidecar and for the
budget, so one command measures before and after a change on the same machine. Not part of CI.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COPY_TERMS = ("shared region", "uploads", "index cache", "Python sidecar")
ICEBERG_COPY_TERMS = (*COPY_TERMS, "Iceberg rows being written")
ORDER_AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "total", "type": "double"},
        {"name": "currency", "type": "string"},
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "qty", "type": "int"},
                        {"name": "price", "type": "double"},
                    ],
                },
            },
        },
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "street", "type": "string"},
                    {"name": "city", "type": "string"},
                    {"name": "zip", "type": "string"},
                ],
            },
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def _avro_order_segment(directory: Path, record_bytes: int) -> Any:
    """A segment of Avro orders in ``directory`` whose records (decompressed) hold at least ``record_bytes``."""
    import io
    import random

    import fastavro

    from rsm.kafka.batch_builder import build_batch
    from rsm.kafka.writer import write_entries_segment

    schema = fastavro.parse_schema(ORDER_AVRO_SCHEMA)
    rng = random.Random(7)
    cities = ["Lisbon", "Oslo", "Lyon", "Turin", "Ghent", "Cork", "Graz", "Brno"]
    statuses = ["placed", "paid", "shipped", "delivered", "returned"]
    words = ["gift", "wrap", "leave", "at", "door", "call", "before", "fragile", "express", "weekend"]
    ts = 1_767_225_600_000
    pool = []  # distinct values, drawn from for every record (making each anew takes minutes)
    for n in range(4000):
        buf = io.BytesIO()
        fastavro.schemaless_writer(
            buf,
            schema,
            {
                "order_id": n,
                "customer": f"customer-{rng.randrange(100_000)}",
                "email": f"user{rng.randrange(100_000)}@example.com",
                "status": rng.choice(statuses),
                "created_at": ts + n,
                "total": round(rng.uniform(1, 900), 2),
                "currency": "EUR",
                "items": [
                    {"sku": f"sku-{rng.randrange(5000)}", "qty": rng.randrange(1, 5), "price": rng.uniform(1, 99)}
                    for _ in range(rng.randrange(1, 6))
                ],
                "address": {"street": f"{rng.randrange(300)} Main St", "city": rng.choice(cities), "zip": "1000"},
                "note": " ".join(rng.choice(words) for _ in range(rng.randrange(60, 140))),
            },
        )
        pool.append(buf.getvalue())
    entries = []
    held = offset = 0
    while held < record_bytes:
        records = []
        for _ in range(100):
            value = pool[rng.randrange(len(pool))]
            key = f"customer-{offset % 10_000}".encode()
            records.append((ts + offset, key, value, [("source", b"web")]))
            held += len(key) + len(value) + 20
            offset += 1
        entries.append(build_batch(records, base_offset=offset - len(records), codec="zstd"))
    return write_entries_segment(directory, entries)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def _status(pid: int) -> dict[str, int]:
    """The kB fields of /proc/PID/status, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[name] = int(parts[0]) * 1024
    return out


def _sidecar(before: set[int]) -> int:
    """The Python child the shim started (a child of this process that was not there before)."""
    for _ in range(200):
        for pid in set(_children(os.getpid())) - before:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"python" in cmdline:
                return pid
        time.sleep(0.05)
    raise SystemExit("no sidecar process appeared under this process")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, default=10)
    ap.add_argument("--size-mb", type=int, default=128, help="size of each segment in MiB")
    ap.add_argument("--threads", type=int, default=10, help="Java threads copying at once (Kafka's default: 10)")
    ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose rsm and backends are measured")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--iceberg", action="store_true", help="copy in Iceberg mode (Avro order values, parsed)")
    args = ap.parse_args()
    code = args.code.resolve()
    sys.path[:0] = [str(code), str(REPO / "tests" / "support"), str(HERE)]

    import jpype
    import jvm_testing as jt
    from bench_config import encryption_config

    from rsm.cli.emulators import start_seaweedfs
    from rsm.cli.memory_budget import MIB, memory_budget
    from rsm.kafka.large_segment import write_large_segment
    from rsm.metadata import TopicIdPartition

    work = args.workdir or Path(tempfile.mkdtemp(prefix="kts-copy-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"code under test: {code}; work directory {work}")
    files_warm = None
    if args.iceberg:
        files_warm = _avro_order_segment(work / "orders-warm", MIB)
        t_seg = time.perf_counter()
        files = _avro_order_segment(work / "orders-seg", args.size_mb * MIB)
        print(f"segment of Avro orders: {files.size / MIB:.0f} MiB on disk ({time.perf_counter() - t_seg:.0f} s)")
    else:
        files = write_large_segment(work / "seg", args.size_mb * MIB, seed=1)
    warm = files_warm or files
    server = start_seaweedfs(work / "seaweedfs", credentials=args.iceberg)  # pyarrow's S3 uploads sign
    try:
        plugin = {
            "chunk.size": str(4 * MIB),
            "storage.backend.class": "s3",
            **{f"storage.{k}": str(v) for k, v in server.config().items()},
            "key.prefix": f"copy-memory-{os.getpid()}/",
            "compression.heuristic.enabled": "true",
            **encryption_config(work),
        }
        if args.iceberg:
            import json

            plugin |= {
                "iceberg.mode.topics.regex": "orders",
                "iceberg.mode.catalog.sqlite.path": str(work / "catalog.db"),
                "iceberg.mode.maintenance.enabled": "false",
                "iceberg.value.schema.orders.avro": json.dumps(ORDER_AVRO_SCHEMA),
            }
        shim = {
            **plugin,
            "python.executable": sys.executable,
            "python.path": str(code),
            "jvm.transport": "sidecar",
        }
        budget = memory_budget(plugin, {}, cpus=os.cpu_count())
        assert budget is not None and budget.total is not None

        jpype.startJVM("-Xmx1g", classpath=jt.classpath_list(), convertStrings=False)
        harness = jpype.JClass(jt.HARNESS_CLASS)
        jcfg = jpype.JClass("java.util.HashMap")()
        for k, v in shim.items():
            jcfg.put(k, v)
        before = set(_children(os.getpid()))
        rsm = harness.create(jt.SHIM_CLASS, jcfg)
        pid = _sidecar(before)

        to_path = lambda p: jpype.JClass("java.io.File")(str(p)).toPath()  # noqa: E731
        lsd = jpype.JClass("org.apache.kafka.server.log.remote.storage.LogSegmentData")
        optional = jpype.JClass("java.util.Optional")
        byte_buffer = jpype.JClass("java.nio.ByteBuffer")

        def segment(partition: int, files: Any = files) -> tuple[object, object]:
            tip = TopicIdPartition(jt.TEST_TIP[0], jt.TEST_TIP[1], partition)
            meta = jt.java_meta(files.to_metadata(tip))
            data = lsd(
                to_path(files.log),
                to_path(files.offset_index),
                to_path(files.time_index),
                optional.ofNullable(to_path(files.txn_index) if files.txn_index else None),
                to_path(files.producer_snapshot),
                byte_buffer.wrap(jpype.JArray(jpype.JByte)(files.leader_epoch_bytes)),
            )
            return meta, data

        # Warm: the sidecar's imports and the S3 client (and the Iceberg table, created by a small segment).
        rsm.copyLogSegmentData(*segment(1000, warm))
        idle = _status(pid)["VmRSS"]
        jobs = [segment(p) for p in range(args.segments)]
        peak = {"rss": 0, "shm": 0}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                s = _status(pid)
                peak["rss"] = max(peak["rss"], s["VmRSS"])
                peak["shm"] = max(peak["shm"], s.get("RssShmem", 0))
                stop.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
            for f in [pool.submit(rsm.copyLogSegmentData, m, d) for m, d in jobs]:
                f.result()
        elapsed = time.perf_counter() - t0
        stop.set()
        sampler.join()
        hwm = _status(pid)["VmHWM"]
        rsm.close()

        copied = args.segments * files.size
        terms = ICEBERG_COPY_TERMS if args.iceberg else COPY_TERMS
        copy_terms = sum(t.size or 0 for t in budget.terms if t.label in terms)
        measured = max(hwm, peak["rss"])
        mode = "Iceberg mode (Avro orders)" if args.iceberg else "classic"
        print(
            f"{args.segments} segments of {files.size / MIB:.0f} MiB, {mode}, {args.threads} threads, "
            f"{os.cpu_count()} cores"
        )
        print(f"copy rate            {copied / elapsed / 1e6:8.1f} MB/s ({elapsed:.1f} s)")
        print(f"sidecar idle RSS     {idle / MIB:8.1f} MiB")
        print(
            f"sidecar peak RSS     {measured / MIB:8.1f} MiB (sampled {peak['rss'] / MIB:.1f}, VmHWM {hwm / MIB:.1f})"
        )
        print(f"shared region in use {peak['shm'] / MIB:8.1f} MiB (peak RssShmem)")
        print(
            f"budget, copy terms   {copy_terms / MIB:8.1f} MiB ({', '.join(terms)}): "
            f"{copy_terms / measured:.2f}x the measured peak"
        )
        print(f"budget, total        {budget.total / MIB:8.1f} MiB (kts config check, Kafka's defaults)")
        for line in budget.lines():
            print("  " + line)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
