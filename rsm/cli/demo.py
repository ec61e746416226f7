"""``kts demo``: the product's main job on a fresh machine, no cloud account, no broker.

It writes a small real Kafka partition (several rolled segments of v2 record batches with keys, idempotent
producers and transactions, with their offset/time/transaction indexes and producer snapshots), tiers it the
way a broker's RemoteLogManager does (compression with the heuristic, encryption under a key pair generated
into the demo folder), reads it back as a catching-up consumer would, scrubs it with ``kts verify``, tiers a
second topic in Iceberg mode and queries its table without Spark (``rsm.cli.demo_iceberg``; skipped, saying so,
when the ``iceberg`` extra is missing), runs the Spark example query, and prints a summary. It leaves
``<dir>/server.properties`` so every other command works on the demo's data.

Re-runs are idempotent: the partition, the store and the summary come out the same (segment ids are derived
from the partition, not random; the key pair is generated once and reused). A re-run replaces what the demo
wrote, so it works only in a folder the demo made: one holding its marker file ``MARKER``, a new folder or an
empty one; any other folder is refused.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rsm.cli.keys import generate_key_pair
from rsm.cli.progress import stdout
from rsm.cli.properties import BROKER_PREFIX, write_properties
from rsm.core.manager import RemoteStorageManager
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

TOPIC = TopicIdPartition(topic_id="MWJ6FHTfRYy67jzwZdeqSQ", topic="orders", partition=0)
KEY_ID = "demo"
KEY_BITS = 3072
EMULATORS = {"s3": "s3-moto", "gcs": "gcs-fake", "azure": "azure-azurite"}
MARKER = ".kts-demo"  # written into the demo's folder: the proof that a re-run may replace what is in it


@dataclass(frozen=True)
class DemoOptions:
    workdir: Path
    backend: str = "filesystem"
    segments: int = 4
    segment_bytes: int = 2 * 1024 * 1024
    chunk_size: int = 256 * 1024
    transport: str = "auto"  # jvm: through the shim in a real JVM; python: the manager directly; auto: jvm if possible
    spark: bool = True  # run the Spark example query over the tiered data (when pyspark is installed)
    iceberg: bool = True  # tier a second topic in Iceberg mode and query it (when the iceberg extra is installed)


@dataclass
class CatchUpResult:
    """What the catch-up read saw; ``gets``/``gets_saved`` come from the chunk cache when it is wired in."""

    records: int = 0
    bytes_read: int = 0
    keys: Counter[bytes] = field(default_factory=Counter)
    first_timestamp: int | None = None
    last_timestamp: int | None = None
    sha256: Any = field(default_factory=hashlib.sha256)  # of every batch read, in order
    cache_summary: str | None = None


def _say(msg: str) -> None:
    stdout.print(msg, markup=False)  # plain text: "[iceberg]" in an install hint is no style tag


def _segment_id(index: int) -> str:
    """A stable Kafka Uuid per demo segment, so re-runs write the same object keys."""
    raw = hashlib.sha256(f"kts-demo/{TOPIC.topic_id}/{TOPIC.partition}/{index}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _when(ms: int | None) -> str:
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@contextlib.contextmanager
def _store(opts: DemoOptions) -> Iterator[dict[str, str]]:
    """The plugin's storage keys: a folder, or a local emulator started for the run and stopped after it."""
    if opts.backend == "filesystem":
        root = opts.workdir / "store"
        if root.exists():
            shutil.rmtree(root)  # idempotent: a re-run tiers the same partition into an empty store
        root.mkdir(parents=True)
        yield {"storage.backend.class": "filesystem", "storage.root": str(root)}
        return
    from rsm.cli.emulators import STARTERS

    server_dir = opts.workdir / "emulator"
    if server_dir.exists():
        shutil.rmtree(server_dir)
    server_dir.mkdir(parents=True)
    _say(f"      starting a local {EMULATORS[opts.backend]} server (logs in {server_dir})")
    server = STARTERS[EMULATORS[opts.backend]](server_dir)
    try:
        configs = {"storage.backend.class": server.backend}
        configs.update({f"storage.{k}": str(v) for k, v in server.config().items()})
        yield configs
    finally:
        server.stop()


def _write_partition(opts: DemoOptions) -> list[Any]:
    import click

    from rsm.kafka.writer import write_segment

    try:
        import kafka.record  # noqa: F401 - the writer builds batches with kafka-python
    except ImportError:
        raise click.ClickException(
            "kts demo writes real Kafka batches with kafka-python: pip install 'kafka-tiered-storage[demo]'"
        ) from None

    partition_dir = opts.workdir / "partition"
    if partition_dir.exists():
        shutil.rmtree(partition_dir)
    segments = []
    base_offset, base_ts = 0, 1_700_000_000_000
    for i in range(opts.segments):
        seg = write_segment(
            partition_dir / f"segment-{i}",
            base_offset=base_offset,
            target_bytes=opts.segment_bytes,
            codec="zstd" if i == opts.segments - 1 and opts.segments > 1 else "none",
            transactional=True,
            seed=i,
            base_timestamp_ms=base_ts,
            leader_epochs={0: 0} if i < 2 else {0: 0, 1: base_offset},
        )
        segments.append(seg)
        base_offset, base_ts = seg.end_offset + 1, seg.max_timestamp_ms + 1
    return segments


def _plugin_configs(opts: DemoOptions, storage: dict[str, str], iceberg: bool) -> dict[str, str]:
    keys = opts.workdir / "keys"
    public, private = keys / f"{KEY_ID}-public.pem", keys / f"{KEY_ID}-private.pem"
    if not (public.exists() and private.exists()):
        generate_key_pair(KEY_ID, keys, KEY_BITS)
    configs = {
        "chunk.size": str(opts.chunk_size),
        **storage,
        "key.prefix": "demo/",
        "compression.enabled": "true",
        "compression.heuristic.enabled": "true",
        "encryption.enabled": "true",
        "encryption.key.pair.id": KEY_ID,
        "encryption.key.pairs": KEY_ID,
        f"encryption.key.pairs.{KEY_ID}.public.key.file": str(public),
        f"encryption.key.pairs.{KEY_ID}.private.key.file": str(private),
        "custom.metadata.fields.include": "REMOTE_SIZE",
    }
    if iceberg:
        from rsm.cli import demo_iceberg

        configs.update(demo_iceberg.plugin_configs(opts.workdir))
    return configs


def write_server_properties(path: Path, configs: dict[str, str], backend: str) -> None:
    from rsm.jvm.launcher import PLUGIN_JAR

    lines = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.path": f"{PLUGIN_JAR.parent}/*",
        "remote.log.storage.manager.class.name": "io.kts.shim.PythonRemoteStorageManager",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
    }
    lines.update({BROKER_PREFIX + k: v for k, v in configs.items()})
    note = (
        "Written by `kts demo`: the broker lines of the demo's tiered storage. Every kts command reads it:\n"
        f"  kts ls --config {path}"
    )
    if backend != "filesystem":
        note += f"\nThe {backend} emulator of the demo is stopped when the demo ends: re-run with --backend {backend}."
    write_properties(path, lines, note)


BROKER_FETCH_BYTES = 256 * 1024


def catch_up_read(manager: RemoteStorageManager, metas: list[RemoteLogSegmentMetadata]) -> CatchUpResult:
    """Read the whole tiered partition from offset 0, as a consumer that fell behind makes the broker do it: a
    new stream at each position, ``BROKER_FETCH_BYTES`` read, closed. The chunk cache, coalesced GETs and
    prefetch (into the next segment too) decide how many GETs that costs; the summary says."""
    import io

    from rsm.kafka.log_scan import iter_batches
    from rsm.kafka.records import decode_records

    result = CatchUpResult()
    cache = manager.chunk_cache
    before = cache.stats() if cache is not None else {}
    fetches = chunks = 0
    for meta in metas:
        size = manager.fetch_manifest(meta).chunk_index.original_file_size
        chunks += manager.fetch_manifest(meta).chunk_index.chunk_count
        data = bytearray()
        while len(data) < size:
            with manager.fetch_log_segment(meta, len(data)) as stream:
                data += stream.read(BROKER_FETCH_BYTES)
            fetches += 1
        for header, body in iter_batches(io.BytesIO(data), verify=True):
            result.bytes_read += len(body)
            result.sha256.update(body)
            if header.is_control:
                continue
            for rec in decode_records(body, position=header.position):
                result.records += 1
                result.keys[rec.key or b""] += 1
                ts = rec.timestamp
                result.first_timestamp = ts if result.first_timestamp is None else min(result.first_timestamp, ts)
                result.last_timestamp = ts if result.last_timestamp is None else max(result.last_timestamp, ts)
    if cache is not None:
        after = cache.stats()
        gets = after["remote-get-total"] - before.get("remote-get-total", 0)
        hits = after["cache-hits-total"] - before.get("cache-hits-total", 0)
        result.cache_summary = (
            f"{fetches} broker-style fetches of {BROKER_FETCH_BYTES // 1024} KiB over {chunks} chunks took "
            f"{gets} GETs ({hits} chunk reads served by the cache, "
            f"{after['prefetch-hits-total'] - before.get('prefetch-hits-total', 0)} of them prefetched)"
        )
    return result


SPARK_LOG4J2 = """\
# kts demo: Spark's own lines at WARN and above, on the JVM's stderr (the demo sends it to spark.log).
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


@contextlib.contextmanager
def stderr_to(log: Path) -> Iterator[None]:
    """This process's stderr file descriptor appends to ``log`` while the block runs. A JVM that Spark starts
    inside the block keeps writing there (its warnings, Java's own messages) after the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def spark_example_query(properties: Path, log: Path) -> str | None:
    """The Spark example (``rsm.spark.example``) on ``local[2]`` over the demo's tiered data, read straight
    from the store with the demo's ``server.properties``; None when pyspark is not installed. Spark's log lines
    (WARN and above) and the JVM's messages go to ``log``, its progress bars nowhere."""
    try:
        import pyspark  # noqa: F401 - only whether it is installed
    except ImportError:
        return None
    from rsm.spark.example import example_query, local_session

    log4j = log.with_name("spark-log4j2.properties")
    log4j.write_text(SPARK_LOG4J2)
    # The demo's job lasts seconds: the JIT's quick tier and the serial collector spend about a third less CPU
    # than the JVM's defaults, tuned for long-lived servers.
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile={log4j.as_uri()} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        ),
    }
    with stderr_to(log):
        spark = local_session("kts demo", conf)
        try:
            summary = example_query(spark, {"config.file": str(properties)}, topic=TOPIC.topic, top=3)
        finally:
            spark.stop()
    keys = ", ".join(f"{k} ({n})" for k, n in summary["count_by_key"])
    return (
        f"{summary['records']:,} records read by Spark from the store; "
        f"{summary['time_range']['records']:,} in the middle third of the time span; most frequent keys: {keys}"
    )


def claim_workdir(workdir: Path) -> None:
    """Make ``workdir`` the demo's, or refuse: a re-run deletes and rewrites files in it, so only a folder that
    is new, empty or marked by an earlier demo is used."""
    import click

    marker = workdir / MARKER
    if workdir.exists() and not workdir.is_dir():
        raise click.ClickException(f"--dir {workdir} is a file; pass a new folder for the demo")
    if workdir.is_dir() and not marker.is_file() and any(workdir.iterdir()):
        raise click.ClickException(
            f"--dir {workdir} is not empty and was not made by kts demo (no {MARKER} file in it); the demo "
            "replaces its store/, partition/, iceberg/, emulator/ and server.properties, so it only works in a new "
            "or empty folder: pass one, e.g. --dir ./kts-demo"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    marker.write_text("This folder was made by kts demo; a re-run replaces its contents.\n")


def run_demo(opts: DemoOptions) -> int:
    import click

    from rsm.cli import demo_iceberg
    from rsm.cli.jvm_tier import jvm_unavailable_reason, tier_through_jvm
    from rsm.cli.scrub import scrub

    opts = dataclasses.replace(opts, workdir=opts.workdir.resolve())
    no_jvm = jvm_unavailable_reason() if opts.transport != "python" else "--transport python"
    if opts.transport == "jvm" and no_jvm:
        raise click.ClickException(f"--transport jvm: {no_jvm}")
    claim_workdir(opts.workdir)
    no_iceberg = demo_iceberg.unavailable() if opts.iceberg else "--no-iceberg"
    if no_iceberg is None:
        demo_iceberg.reset(opts.workdir)
    started = time.monotonic()
    _say(f"[1/7] writing a real Kafka partition {TOPIC.topic}-{TOPIC.partition}: {opts.segments} segments")
    segments = _write_partition(opts)
    original_bytes = sum(s.size for s in segments)
    _say(
        f"      {original_bytes:,} bytes, offsets 0..{segments[-1].end_offset}, transactions with aborts, "
        f"producer ids and keys"
    )
    with _store(opts) as storage:
        configs = _plugin_configs(opts, storage, iceberg=no_iceberg is None)
        properties = opts.workdir / "server.properties"
        write_server_properties(properties, configs, opts.backend)
        _say(f"[2/7] key pair {KEY_ID!r} ({KEY_BITS}-bit RSA) in {opts.workdir / 'keys'}; broker config {properties}")
        with RemoteStorageManager() as manager:
            manager.configure(configs)
            metas = [
                seg.to_metadata(TOPIC, RemoteLogSegmentId(TOPIC, _segment_id(i)), event_timestamp_ms=0)
                for i, seg in enumerate(segments)
            ]
            if no_jvm is None:
                _say(
                    "[3/7] tiering as a broker does: the shim io.kts.shim.PythonRemoteStorageManager in a JVM, "
                    f"copyLogSegmentData then a byte-compared fetch, onto {manager.backend}"
                )
                customs = tier_through_jvm(segments, metas, configs, opts.workdir)
            else:
                _say(f"[3/7] tiering through copyLogSegmentData in Python ({no_jvm}) onto {manager.backend}")
                customs = [
                    manager.copy_log_segment_data(m, s.to_log_segment_data())
                    for m, s in zip(metas, segments, strict=True)
                ]
            metas = [dataclasses.replace(m, custom_metadata=c) for m, c in zip(metas, customs, strict=True)]
            manifests = {s.segment_id: manager.fetch_manifest(s.metadata_stub()) for s in manager.catalog().segments()}
            stored = sum(m.chunk_index.transformed_file_size for m in manifests.values())
            _say(f"      {len(manifests)} segments tiered: {original_bytes:,} -> {stored:,} bytes")

            _say("[4/7] catch-up read of the whole partition from offset 0, every batch CRC checked")
            read = catch_up_read(manager, metas)
            expected = hashlib.sha256()
            for seg in segments:
                expected.update(seg.log.read_bytes())
            if read.bytes_read != original_bytes or read.sha256.digest() != expected.digest():
                _say(f"      MISMATCH: read {read.bytes_read:,} bytes of {original_bytes:,}, or different bytes")
                return 1
            _say(f"      {read.records:,} records in {read.bytes_read:,} bytes: bytes identical to the partition")

            _say("[5/7] kts verify: every chunk's GCM tag and CRC-32C, every index, every manifest")
            report = scrub(manager, progress=False)
            _say(
                f"      {report.segments} segments, {report.chunks} chunks, {report.indexes} indexes: "
                f"{len(report.damaged)} damaged"
            )
            if report.damaged:
                for d in report.damaged:
                    _say(f"      DAMAGED {d.object_key}: {d.problem}")
                return 1

            _say(f"[6/7] Iceberg mode: topic {demo_iceberg.TOPIC} tiered as rows of an Iceberg table, no Spark")
            if no_iceberg is not None:
                iceberg_summary = f"skipped: {no_iceberg}"
                _say(f"      {iceberg_summary}; the classic part above ran in full")
            else:
                iceberg_result = demo_iceberg.run(manager, opts.workdir, _say)
                if iceberg_result is None:
                    return 1
                iceberg_summary = iceberg_result

            _say("[7/7] Spark example query (rsm.spark.example on local[2])")
            if not opts.spark:
                _say("      skipped (--no-spark)")
            else:
                spark_log = opts.workdir / "spark.log"
                spark_log.unlink(missing_ok=True)
                spark_result = spark_example_query(properties, spark_log)
                _say(f"      {spark_result}" if spark_result else "      skipped: pyspark is not installed")
                if spark_result:
                    _say(f"      Spark's own warnings: {spark_log}")

    top = read.keys.most_common(1)[0] if read.keys else (b"", 0)
    _say("")
    _say("Summary")
    _say(f"  segments           {len(segments)} of topic {TOPIC.topic} partition {TOPIC.partition}")
    _say(f"  bytes              {original_bytes:,} before, {stored:,} stored ({original_bytes / max(1, stored):.2f}x)")
    _say(f"  records            {read.records:,} data records (those of aborted transactions included, as stored)")
    _say(
        f"  records per key    {len(read.keys):,} keys, {read.records / max(1, len(read.keys)):.2f} records per key "
        f"on average, most {top[1]} ({top[0].decode(errors='replace')})"
    )
    _say(f"  time range         {_when(read.first_timestamp)} .. {_when(read.last_timestamp)} UTC")
    _say(f"  cache              {read.cache_summary or 'plain reads (no chunk cache wired in)'}")
    _say(f"  verify             {report.chunks} chunks, {report.indexes} indexes, no damage")
    _say(f"  iceberg            {iceberg_summary}")
    _say(f"  done in            {time.monotonic() - started:.1f} s")
    _say("")
    if opts.backend == "filesystem":
        _say(f"Try: kts ls --config {properties}")
        _say(f"     kts cat --config {properties} {TOPIC.topic}/{TOPIC.partition}/0 --limit 5")
        _say(f"     kts verify --config {properties}")
        if no_iceberg is None:
            _say(f"     kts inspect --config {properties} {demo_iceberg.TOPIC}/0/0")
    else:
        _say(f"{properties} records the configuration; the {opts.backend} emulator stopped with the demo")
    _say("demo OK")
    return 0
