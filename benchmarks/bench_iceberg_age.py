"""Iceberg mode: the copy time of a segment as the table ages, with the plugin's maintenance on.

One partition of one Iceberg-mode topic (the aged table), small segments copied one after another through the
plugin (``copy_log_segment_data``; filesystem backend, SQLite catalog), up to ``--commits`` commits. The plugin's
maintenance thread runs beside the copies (every ``--interval`` seconds), as on a broker. Time is compressed
(10,000 commits take minutes here, a week of a segment a minute on a broker), so snapshot expiry is by count
(the default ``snapshot.max.keep``), not by age.

At the 10th commit and every ``--every`` commits, 20 copies into the aged table (the 10 commits before the
checkpoint and the 10 after) alternate one by one with 20 copies into a young table: a fresh topic's table,
copies 1 to 20 (around its 10th commit), same segments, same plugin, same maintenance. It prints both medians,
their ratio (the target is 1.5 at most), the aged table's shape (snapshots, metadata JSON size, data manifests
of the current snapshot, live data files) and the load average; at the end, the first 20 copies of the aged
table against its last checkpoint.

    .venv/bin/python benchmarks/bench_iceberg_age.py [--commits 10000] [--every 1000] [--records 200]

``--partitions 20`` copies 20 partitions of the topic into its one table instead, as a broker at docs/iceberg.md's
settings for fresh rows does: each partition rolls a segment a minute (``--records`` records over a minute of
timestamps), and every minute (a wave, compressed in time) the 20 new segments are copied at once by
``--threads`` copier threads (Kafka's default pool is 10) through the plugin's own write path, so their commits
conflict and retry as on a broker. The last 2 waves before each checkpoint alternate with 2 waves of a young
20-partition table. It prints, per checkpoint: copy latency p50 and p99 (the copy includes its commit) of
the aged table's copies since the last checkpoint, the p50 of the alternating copies against the young table's,
commit retries per copy (pyiceberg's retries after a concurrent update plus the plugin's own), the longest and
median wave (a minute's 20 copies; at most 60 s to keep up) and the aged table's shape.

    .venv/bin/python benchmarks/bench_iceberg_age.py --partitions 20 --threads 10 --records 600 --commits 10000
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

from iceberg_testing import iceberg_config  # noqa: E402 - tests/support is on sys.path
from pyiceberg.exceptions import NoSuchTableError  # noqa: E402

from rsm import RemoteStorageManager  # noqa: E402
from rsm.formats.iceberg import iceberg_format  # noqa: E402
from rsm.iceberg.maintainer import CommitGate  # noqa: E402
from rsm.kafka.batch_builder import build_batch  # noqa: E402
from rsm.kafka.segment_files import SegmentFiles  # noqa: E402
from rsm.kafka.writer import write_entries_segment  # noqa: E402
from rsm.metadata import TopicIdPartition, random_kafka_uuid  # noqa: E402

DAY_MS = 1_767_225_600_000
AROUND = 20  # copies timed around each checkpoint
TARGET = 1.5


def segment(directory: Path, first: int, records: int, segment_ms: int) -> SegmentFiles:
    """Segment ``first // records``: ``records`` records spread evenly over ``segment_ms`` of timestamps."""
    entries = []
    start_ms = DAY_MS + first // records * segment_ms
    for i in range(first, first + records, 50):
        specs = [
            (start_ms + (o - first) * segment_ms // records, b"k%d" % (o % 17), b"v" * 80 + b"%d" % o, [])
            for o in range(i, min(i + 50, first + records))
        ]
        entries.append(build_batch(specs, base_offset=i, codec="zstd"))  # type: ignore[arg-type]
    return write_entries_segment(directory, entries)


COPYING = threading.local()
"""The topic the current thread copies, so that a retry logged inside pyiceberg is counted against it."""


class Partition:
    """One partition of a topic: the next segment to copy, and the copy times."""

    def __init__(self, topic: str, work: Path, records: int, segment_ms: int, topic_id: str = "", index: int = 0):
        self.tip = TopicIdPartition(topic_id or random_kafka_uuid(), topic, index)
        self.dir = work / f"seg-{topic}-{index}"
        self.records = records
        self.segment_ms = segment_ms
        self.commits = 0
        self.times: list[float] = []

    def copy(self, m: RemoteStorageManager, profile: cProfile.Profile | None = None) -> float:
        files = segment(self.dir, self.commits * self.records, self.records, self.segment_ms)
        COPYING.topic = self.tip.topic
        t0 = time.perf_counter()
        if profile is not None:
            profile.enable()
        m.copy_log_segment_data(files.to_metadata(self.tip), files.to_log_segment_data())  # type: ignore[attr-defined]
        if profile is not None:
            profile.disable()
        took = time.perf_counter() - t0
        COPYING.topic = None
        shutil.rmtree(self.dir)
        self.commits += 1
        self.times.append(took)
        return took


class RetryCounter(logging.Handler):
    """Counts pyiceberg's retries of a commit that lost to a concurrent update (each waits 100 ms or more), and
    the plugin's own retries of a copy's commit (logged at debug), per topic being copied."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self.by_topic: Counter[str | None] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("Commit failed due to a concurrent update") or "commit conflict on" in text:
            self.count += 1
            self.by_topic[getattr(COPYING, "topic", None)] += 1


def shape(m: RemoteStorageManager, topic: str) -> str:
    handle = iceberg_format(m).mode().handle
    table = handle.catalog.load_table(handle.table_identifier(topic))
    snap = table.current_snapshot()
    manifests = len(snap.manifests(table.io)) if snap else 0
    files = len(list(table.scan().plan_files())) if snap else 0
    meta = Path(table.metadata_location.removeprefix("file://")).stat().st_size
    return (
        f"snapshots {len(table.metadata.snapshots)}, metadata {meta / 1024:.0f} KiB, "
        f"manifests {manifests}, data files {files}"
    )


class DroppedTables(logging.Filter):
    """The maintainer's warnings about a young table the bench dropped: an expiry its last copies made due (or a
    pass) that runs as the table goes fails on it. That is the drop's doing, so those are counted, not shown."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.hidden = 0

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.levelno >= logging.WARNING and any(re.search(rf"\b{re.escape(n)}\b", text) for n in self.names):
            self.hidden += 1
            return False
        return True


DROPPED = DroppedTables()
logging.getLogger("rsm.iceberg.maintainer").addFilter(DROPPED)
logging.getLogger("rsm.iceberg.maintenance.lease").addFilter(DROPPED)


def drop(m: RemoteStorageManager, topic: str) -> None:
    """Drop a young table once measured, so that every checkpoint has the same tables beside the aged one."""
    handle = iceberg_format(m).mode().handle
    identifier = handle.table_identifier(topic)
    DROPPED.names.append(".".join(identifier))
    try:
        handle.catalog.drop_table(identifier)
    except NoSuchTableError:
        pass


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


class Topic:
    """The partitions of one topic, copied a wave at a time: each partition's next segment, all at once, on the
    copier threads (one copy per partition at a time, as Kafka's remote log manager runs them)."""

    def __init__(self, name: str, work: Path, args: argparse.Namespace) -> None:
        topic_id = random_kafka_uuid()
        self.name = name
        self.partitions = [
            Partition(name, work, args.records, args.segment_ms, topic_id, i) for i in range(args.partitions)
        ]
        self.waves: list[float] = []

    @property
    def commits(self) -> int:
        return sum(p.commits for p in self.partitions)

    def wave(self, m: RemoteStorageManager, pool: ThreadPoolExecutor) -> list[float]:
        t0 = time.perf_counter()
        took = list(pool.map(lambda p: p.copy(m), self.partitions))
        self.waves.append(time.perf_counter() - t0)
        return took


def run_partitions(args: argparse.Namespace, config: dict[str, str], work: Path, retries: RetryCounter) -> None:
    """Many partitions into one table, copied a wave at a time by concurrent copier threads (module docstring)."""
    logging.getLogger("rsm.iceberg.replace").setLevel(logging.DEBUG)
    logging.getLogger("rsm.iceberg.replace").addHandler(retries)
    width = args.partitions
    block = 2  # waves of each table alternated around a checkpoint
    wanted = {width, *range(args.every, args.commits + 1, args.every), args.commits}
    checkpoints = sorted({max(width * block, -(-c // width) * width) for c in wanted})
    started = time.monotonic()
    aged = Topic("aging", work, args)
    window: list[float] = []
    window_waves: list[float] = []
    retried_before = 0
    commits_before = 0
    with RemoteStorageManager() as m, ThreadPoolExecutor(args.threads, thread_name_prefix="copier") as pool:
        m.configure(config)
        for point in checkpoints:
            while aged.commits < point - width * block:
                window += aged.wave(m, pool)
                window_waves.append(aged.waves[-1])
            maintainer = iceberg_format(m).mode().maintainer
            gate = maintainer.gate("aging") if maintainer is not None else CommitGate()
            waited = gate.copies_waited_s
            young = Topic(f"young-{point}", work, args)
            mine: list[float] = []
            theirs: list[float] = []
            for _ in range(block):  # alternating wave by wave: both see the same load
                took = aged.wave(m, pool)
                window += took
                window_waves.append(aged.waves[-1])
                mine += took
                theirs += young.wave(m, pool)
            drop(m, young.name)
            old, new = statistics.median(mine), statistics.median(theirs)
            retried = retries.by_topic["aging"] - retried_before
            copies = aged.commits - commits_before
            print(
                f"commit {aged.commits}: copies {copies}, p50 {statistics.median(window) * 1000:.0f} ms, "
                f"p99 {percentile(window, 99) * 1000:.0f} ms; alternating with a young table: aged p50 "
                f"{old * 1000:.0f} ms, young p50 {new * 1000:.0f} ms, ratio {old / new:.2f}; retries per copy "
                f"{retried / copies:.2f}; wave ({width} copies) median {statistics.median(window_waves):.1f} s, "
                f"longest {max(window_waves):.1f} s; the alternating copies waited for maintenance "
                f"{(gate.copies_waited_s - waited) * 1000 / len(mine):.0f} ms each; "
                f"{shape(m, 'aging')}; {time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            window, window_waves = [], []
            retried_before, commits_before = retries.by_topic["aging"], aged.commits
        stats = iceberg_format(m).maintenance_stats()
        if stats is not None:
            print("maintenance:", {k: round(v, 1) for k, v in stats.stats().items()})
            if DROPPED.hidden:
                print(f"  (errors-total counts {DROPPED.hidden} failures on young tables dropped meanwhile)")
    print(
        f"retries: aged {retries.by_topic['aging']} over {aged.commits} copies, young tables and maintenance "
        f"{retries.count - retries.by_topic['aging']}; load {os.getloadavg()}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=200, help="records per segment")
    ap.add_argument(
        "--segment-ms",
        type=int,
        default=60_000,
        help="the time a segment's records span (default a minute: 1,440 segments a day, the table's partitions "
        "being days); 2000 puts 10,000 segments in one day",
    )
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between maintenance passes")
    ap.add_argument("--every", type=int, default=1000, help="a checkpoint every this many commits")
    ap.add_argument("--no-maintenance", action="store_true", help="the same run with maintenance off")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the topic copied into its table")
    ap.add_argument("--threads", type=int, default=10, help="copier threads (with --partitions above 1)")
    ap.add_argument(
        "--profile",
        type=Path,
        help="write cProfile stats of the copies at each checkpoint to PROFILE-<commit>-{aged,young}.prof",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-age-"))
    config = iceberg_config(
        work,
        topics="aging|young-.*",
        **{
            "iceberg.mode.maintenance.enabled": str(not args.no_maintenance).lower(),
            "iceberg.mode.maintenance.interval.ms": str(int(args.interval * 1000)),
        },
    )
    retries = RetryCounter()
    logging.getLogger("pyiceberg").addHandler(retries)
    if args.partitions > 1:
        try:
            run_partitions(args, config, work, retries)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    checkpoints = sorted({AROUND // 2, *range(args.every, args.commits + 1, args.every), args.commits})
    aged = Partition("aging", work, args.records, args.segment_ms)
    ratios: dict[int, float] = {}
    started = time.monotonic()
    harness = 0.0
    try:
        with RemoteStorageManager() as m:
            m.configure(config)
            for point in checkpoints:
                while aged.commits < point - AROUND // 2:
                    t0 = time.perf_counter()
                    took = aged.copy(m)
                    harness += time.perf_counter() - t0 - took
                maintainer = iceberg_format(m).mode().maintainer
                gate = maintainer.gate("aging") if maintainer is not None else CommitGate()
                waited = gate.copies_waited_s
                young = Partition(f"young-{point}", work, args.records, args.segment_ms)
                profiles = (cProfile.Profile(), cProfile.Profile()) if args.profile else (None, None)
                for _ in range(AROUND):  # alternating one by one: both see the same load
                    aged.copy(m, profiles[0])
                    young.copy(m, profiles[1])
                for name, profile in zip(("aged", "young"), profiles, strict=True):
                    if profile is not None:
                        profile.dump_stats(f"{args.profile}-{point}-{name}.prof")
                drop(m, young.tip.topic)
                old, new = statistics.median(aged.times[-AROUND:]), statistics.median(young.times)
                ratios[point] = old / new
                print(
                    f"commit {point}: aged {old * 1000:.1f} ms, young {new * 1000:.1f} ms, "
                    f"ratio {old / new:.2f} (target <= {TARGET}); aged copies waited for maintenance "
                    f"{(gate.copies_waited_s - waited) * 1000 / AROUND:.1f} ms each; {shape(m, 'aging')}; "
                    f"{time.monotonic() - started:.0f} s, harness {harness:.0f} s, commit retries so far "
                    f"{retries.count}; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
            stats = iceberg_format(m).maintenance_stats()
            if stats is not None:
                print("maintenance:", {k: round(v, 1) for k, v in stats.stats().items()})
                if DROPPED.hidden:
                    print(f"  (errors-total counts {DROPPED.hidden} failures on young tables dropped meanwhile)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    early, late = statistics.median(aged.times[:AROUND]), statistics.median(aged.times[-AROUND:])
    print(
        f"aged table: first {AROUND} copies {early * 1000:.1f} ms, last {AROUND} (around {checkpoints[-1]}) "
        f"{late * 1000:.1f} ms ({late / early:.2f}x, loads differ)"
    )
    worst = max(ratios, key=lambda p: ratios[p])
    held = all(r <= TARGET for r in ratios.values())
    print(
        f"aged/young ratio <= {TARGET} at every checkpoint: {'yes' if held else 'no'} "
        f"(highest {ratios[worst]:.2f} at {worst}); load {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
