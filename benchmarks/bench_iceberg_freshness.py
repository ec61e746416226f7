"""Iceberg mode: how long after produce a record is visible to SQL, in a real Kafka broker.

A single-node KRaft broker (Kafka ``--kafka``, default ``kafka_dist.NEWEST_4X``, from Maven Central) with the shim
in Iceberg mode (filesystem backend, SQLite catalog, the plugin's maintenance on with its defaults) and one topic
of ``--partitions`` partitions at the settings docs/iceberg.md recommends for fresh rows: ``segment.ms``
(``--segment-ms``), the remote log manager's pass (``--task-interval-ms``), ``remote.copy.lag.ms`` 0 where the
release has it. A producer (kafka-python) writes ``--rate`` records a second, spread over every partition, for
``--minutes`` minutes, then keeps writing (so that the last segments roll) until every measured record is
visible or ``--grace`` seconds pass. A SQL reader polls the table every ``--poll`` seconds: DuckDB's
``iceberg_scan`` of the current metadata file, the highest offset of each partition. A record is visible at the
first poll whose highest offset for its partition reaches it; its delay is that moment minus its CreateTime.

It prints the delay's p50, p99 and maximum over the records produced in the measured minutes, and, per minute,
the table's commits so far (copies: distinct segments in the table) and the plugin's mean copy time in that
minute (``segment-copy-time-avg`` over JMX), so the cost of a commit early in the table's life shows next to
the cost later. Not part of CI.

    python benchmarks/bench_iceberg_freshness.py [--partitions 20] [--minutes 10] [--rate 200]
        [--segment-ms 60000] [--task-interval-ms 5000] [--poll 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

import jvm_testing as jt  # noqa: E402 - tests/support is on sys.path
import kafka_dist as kd  # noqa: E402

TOPIC = "fresh"
BEAN = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"


def topic_config(segment_ms: int, version: str) -> dict[str, str]:
    config = {
        "remote.storage.enable": "true",
        "segment.ms": str(segment_ms),
        "local.retention.ms": "3600000",  # an hour on local disk: a consumer near the head never reads remote
        "retention.ms": "-1",
    }
    if tuple(map(int, version.split("."))) >= (4, 4, 0):
        config["remote.copy.lag.ms"] = "0"  # KIP-1241: copy a segment as soon as it rolls (its default)
    return config


def plugin_lines(work: Path, task_interval_ms: int) -> str:
    base = kd.plugin_properties(work / "remote", "sidecar")
    extra = {"iceberg.mode.topics.regex": TOPIC, "iceberg.mode.catalog.sqlite.path": str(work / "catalog.db")}
    lines = base + "".join(f"rsm.config.{k}={v}\n" for k, v in extra.items())
    # kraft_server_properties sets a 1 s pass for the tests; the last value of a key wins.
    return lines + f"remote.log.manager.task.interval.ms={task_interval_ms}\n"


class Producer(threading.Thread):
    """Writes ``rate`` records a second round-robin over the partitions until stopped; records each acked
    record's (partition, offset) -> CreateTime, and which were produced while ``measuring`` was set."""

    def __init__(self, bootstrap: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
        self.partitions = partitions
        self.rate = rate
        self.stop = threading.Event()
        self.measuring = threading.Event()
        self.lock = threading.Lock()
        self.sent: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}  # (offset, ts)
        self.measured: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        self.errors = 0

    def _acked(self, measured: bool, ts: int, md: Any) -> None:
        with self.lock:
            self.sent[md.partition].append((md.offset, ts))
            if measured:
                self.measured[md.partition].append((md.offset, ts))

    def _failed(self, _exc: BaseException) -> None:
        self.errors += 1

    def run(self) -> None:
        i = 0
        start = time.monotonic()
        while not self.stop.is_set():
            due = start + i / self.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            ts = int(time.time() * 1000)
            measured = self.measuring.is_set()
            fut = self.producer.send(TOPIC, value=b"r%d" % i, partition=i % self.partitions, timestamp_ms=ts)
            fut.add_callback(lambda md, m=measured, t=ts: self._acked(m, t, md))
            fut.add_errback(self._failed)
            i += 1
        self.producer.flush(60)
        self.producer.close(30)


def table_state(catalog: Any, con: Any) -> tuple[dict[int, int], int] | None:
    """{partition: highest offset} and the number of distinct segments, read by DuckDB from the table's current
    metadata; None before the first copy created the table."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = catalog.load_table(("kafka", TOPIC))
    except NoSuchTableError:
        return None
    rows = con.execute(
        "SELECT kafka.partition, max(kafka.offset), count(DISTINCT kafka.segment_id) FROM iceberg_scan(?) GROUP BY 1",
        [table.metadata_location],
    ).fetchall()
    return {int(p): int(o) for p, o, _ in rows}, sum(int(n) for _, _, n in rows)


def copy_time_avg(broker: kd.Broker) -> float:
    """The plugin's mean copy time (ms) over its recent window, all topics."""
    beans = kd.jmx_read(broker, BEAN, ["segment-copy-time-avg"])
    for name, attrs in beans.items():
        if "topic=" not in name:
            return float(attrs["segment-copy-time-avg"])
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kafka", default=kd.NEWEST_4X)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--rate", type=int, default=200, help="records a second, all partitions")
    ap.add_argument("--segment-ms", type=int, default=60_000)
    ap.add_argument("--task-interval-ms", type=int, default=5_000)
    ap.add_argument("--poll", type=float, default=1.0, help="seconds between the SQL reader's polls")
    ap.add_argument("--grace", type=float, default=300, help="seconds to wait for the last records")
    args = ap.parse_args()

    from pyiceberg.catalog.sql import SqlCatalog

    from rsm.iceberg.duckdb_reader import duckdb_with_iceberg

    jt.ensure_built()
    work = Path(tempfile.mkdtemp(prefix="kts-fresh-"))
    print(
        f"Kafka {args.kafka}, {args.partitions} partitions, {args.rate} records/s, segment.ms {args.segment_ms}, "
        f"remote.log.manager.task.interval.ms {args.task_interval_ms}, reader every {args.poll} s; work {work}"
    )
    with kd.running_broker(
        args.kafka, work / "broker", plugin_lines(work, args.task_interval_ms), jvm_options=kd.BENCHMARK_JVM_OPTIONS
    ) as b:
        kd.create_topic(b, TOPIC, topic_config(args.segment_ms, args.kafka), partitions=args.partitions)
        catalog = SqlCatalog("kafka_tiered", uri=f"sqlite:///{work / 'catalog.db'}")
        con = duckdb_with_iceberg()
        producer = Producer(b.bootstrap, args.partitions, args.rate)
        producer.measuring.set()
        producer.start()
        start = time.monotonic()
        end_measured = start + args.minutes * 60
        visible_at: dict[tuple[int, int], float] = {}  # (partition, offset) -> wall time first seen
        seen = dict.fromkeys(range(args.partitions), -1)
        minutes: list[tuple[int, int, float, float]] = []  # (minute, commits, copy-time avg ms, load)
        next_minute = start + 60
        commits = 0
        while True:
            now = time.monotonic()
            if now >= end_measured and producer.measuring.is_set():
                producer.measuring.clear()
            state = table_state(catalog, con)
            wall = time.time() * 1000
            if state is not None:
                highest, commits = state
                for p, top in highest.items():
                    for o in range(seen[p] + 1, top + 1):
                        visible_at[(p, o)] = wall
                    seen[p] = max(seen[p], top)
            if now >= next_minute:
                minutes.append((len(minutes) + 1, commits, copy_time_avg(b), os.getloadavg()[0]))
                m = minutes[-1]
                print(f"  minute {m[0]}: {m[1]} commits, copy {m[2]:.0f} ms mean, load {m[3]:.1f}", flush=True)
                next_minute += 60
            if not producer.measuring.is_set():
                with producer.lock:
                    pending = [(p, o) for p, recs in producer.measured.items() for o, _ in recs if o > seen[p]]
                if not pending or now > end_measured + args.grace:
                    break
            assert b.alive(), b.log()[-3000:]
            time.sleep(max(0.0, args.poll - (time.monotonic() - now)))
        producer.stop.set()
        producer.join(120)

    with producer.lock:
        measured = [(p, o, ts) for p, recs in producer.measured.items() for o, ts in recs]
    delays = [(visible_at[(p, o)] - ts) / 1000 for p, o, ts in measured if (p, o) in visible_at]
    missing = len(measured) - len(delays)
    print(f"\n{len(measured)} records measured, {missing} not visible within the grace, {producer.errors} send errors")
    if delays:
        print(
            f"produce-to-visible: p50 {statistics.median(delays):.1f} s, p99 {percentile(delays, 0.99):.1f} s, "
            f"max {max(delays):.1f} s"
        )
    print("\n| minute | commits so far | mean copy time that minute | load |\n|---|---|---|---|")
    for m, c, t, load in minutes:
        print(f"| {m} | {c} | {t:.0f} ms | {load:.1f} |")
    return 0 if delays and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
