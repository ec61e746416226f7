"""The parsing helpers of the broker benchmarks (benchmarks/broker_harness.py), on text shaped as the broker, jstat,
JmxTool, /proc and CatchUpConsumers.java print it. No broker runs here."""

from __future__ import annotations

import datetime as dt
import statistics
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import broker_harness as bh  # noqa: E402 - benchmarks/ is on sys.path

JSTAT_HEADER = (
    "    S0C         S1C         S0U         S1U          EC           EU           OC           OU          MC"
    "         MU       CCSC      CCSU     YGC     YGCT     FGC    FGCT     CGC    CGCT       GCT   "
)


def jstat_row(s0u: float, s1u: float, eu: float, ou: float, ygc: int, fgc: int, cgc: int) -> str:
    return (
        f"0.0 1024.0 {s0u} {s1u} 235520.0 {eu} 230400.0 {ou} 49088.0 48197.7 6144.0 5748.9 "
        f"{ygc} 1.5 {fgc} 0.4 {cgc} 1.0 3.0"
    )


def test_jstat_samples_are_read_by_column_name() -> None:
    text = "\n".join([JSTAT_HEADER, jstat_row(0, 423, 7168, 180900.5, 22, 1, 24)])
    [sample] = bh.parse_jstat_gc(text)
    assert sample.retained_bytes == int((423 + 180900.5) * 1024)
    assert sample.eden_bytes == 7168 * 1024
    assert sample.gcs == 23  # young and full collections; G1's concurrent cycles leave Eden alone


def test_heap_after_gc_peak_takes_only_samples_after_a_collection() -> None:
    rows = [
        jstat_row(0, 100, 5000, 900_000, 10, 0, 0),  # the first sample: no collection seen yet
        jstat_row(0, 100, 90000, 200_000, 11, 0, 0),  # after a young collection
        jstat_row(0, 100, 150000, 400_000, 11, 0, 3),  # no young or full collection since: old grows with garbage
        jstat_row(0, 200, 1000, 300_000, 12, 0, 3),
    ]
    samples = bh.parse_jstat_gc("\n".join([JSTAT_HEADER, *rows, JSTAT_HEADER]))
    assert len(samples) == 4
    assert bh.heap_after_gc_peak(samples) == (200 + 300_000) * 1024
    assert bh.heap_after_gc_peak(samples[:1]) is None


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), max_size=30))
def test_heap_after_gc_peak_is_a_retained_value_seen_after_a_gc(steps: list[tuple[int, int]]) -> None:
    gcs, samples = 0, []
    for retained, more in steps:
        gcs += more
        samples.append(bh.JstatSample(retained, 0, gcs))
    after = [s.retained_bytes for prev, s in zip(samples, samples[1:], strict=False) if s.gcs != prev.gcs]
    assert bh.heap_after_gc_peak(samples) == (max(after) if after else None)


def test_proc_status_sizes_are_bytes() -> None:
    text = "Name:\tpython\nVmHWM:\t  438272 kB\nVmRSS:\t  400000 kB\nRssShmem:\t  262144 kB\nThreads:\t12\n"
    status = bh.parse_proc_status(text)
    assert status == {"VmHWM": 438272 * 1024, "VmRSS": 400000 * 1024, "RssShmem": 262144 * 1024}
    assert bh.proc_status(-1) == {}


def test_jmx_properties_by_object_name_and_attribute() -> None:
    text = (
        f"{bh.READER_TIMER}:Count=41\n"
        f"{bh.READER_TIMER}:50thPercentile=2.2125\n"
        f"{bh.READER_TIMER}:99thPercentile=248.5\n"
        f"{bh.READER_TIMER}:Mean=NaN\n"
        "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec:Count=1.5E7\n"
        "Trying to connect to JMX url: service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi\n"
    )
    values = bh.parse_jmx_properties(text)
    assert values[bh.READER_TIMER]["Count"] == 41
    assert values[bh.READER_TIMER]["50thPercentile"] == 2.2125
    assert values[bh.READER_TIMER]["99thPercentile"] == 248.5
    assert values[bh.READER_TIMER]["Mean"] != values[bh.READER_TIMER]["Mean"]  # NaN
    assert values["kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec"] == {"Count": 1.5e7}
    assert len(values) == 2


@given(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 10**12), st.integers(0, 10**9), st.floats(0, 1e4))))
def test_consumer_lines_round_trip(runs: list[tuple[int, int, int, float]]) -> None:
    text = "\n".join(f"partition={p} bytes={b} records={r} seconds={s:.3f}" for p, b, r, s in runs)
    parsed = bh.parse_consumers("a log line\n" + text + "\n")
    assert [(c.partition, c.bytes, c.records) for c in parsed] == [(p, b, r) for p, b, r, _ in runs]
    assert all(abs(c.seconds - s) <= 0.0005 + 1e-9 for c, (_, _, _, s) in zip(parsed, runs, strict=True))


def test_starved_consumers_are_outside_twice_the_median_either_way() -> None:
    assert bh.starved({0: 10.0, 1: 9.0, 2: 11.0, 3: 4.9, 4: 21.0}) == [3, 4]
    assert bh.starved({0: 10.0, 1: 5.0, 2: 20.0}) == []  # exactly 2x is within
    assert bh.starved({}) == []


@given(st.dictionaries(st.integers(0, 50), st.floats(0.01, 1e4), min_size=1))
def test_starved_matches_its_definition(rates: dict[int, float]) -> None:
    median = statistics.median(rates.values())
    expected = [p for p in sorted(rates) if not median / 2 <= rates[p] <= median * 2]
    assert bh.starved(rates) == expected


def _line(at: dt.datetime, partition: str, text: str) -> str:
    stamp = at.strftime("%Y-%m-%d %H:%M:%S,") + f"{at.microsecond // 1000:03d}"
    cls = "(org.apache.kafka.server.log.remote.storage.RemoteLogManager$RLMCopyTask)"
    return f"[{stamp}] INFO [RemoteLogManager=1 partition=4EIRjS1TSiWbHerKmneR_g:{partition}] {text} {cls}"


def test_copy_times_pair_the_lines_of_each_partitions_segment() -> None:
    t0 = dt.datetime(2026, 11, 29, 7, 42, 31, 570000)
    ms = dt.timedelta(milliseconds=1)
    log = "\n".join(
        [
            _line(t0, "t-2", "Copying 00000000000000000000.log to remote storage."),
            _line(t0 + 50 * ms, "t-1", "Copying 00000000000000000000.log to remote storage."),
            "[2026-11-29 07:42:31,700] INFO an unrelated line (kafka.server.KafkaBroker)",
            _line(t0 + 900 * ms, "t-1", "Copied 00000000000000000000.log to remote storage with segment-id: x"),
            _line(t0 + 1200 * ms, "t-2", "Copied 00000000000000000000.log to remote storage with segment-id: y"),
            _line(t0 + 1300 * ms, "t-2", "Copying 00000000000000008290.log to remote storage."),  # still running
        ]
    )
    copies = bh.parse_copy_times(log)
    assert [name for _, _, name in copies] == [
        "4EIRjS1TSiWbHerKmneR_g:t-1/00000000000000000000.log",
        "4EIRjS1TSiWbHerKmneR_g:t-2/00000000000000000000.log",
    ]
    assert [round((end - start) * 1000) for start, end, _ in copies] == [850, 1200]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert bh.percentile(values, 0.5) == 50
    assert bh.percentile(values, 0.99) == 99
    assert bh.percentile(values, 1.0) == 100
    assert bh.percentile([7.0], 0.99) == 7
    assert bh.percentile([], 0.5) != bh.percentile([], 0.5)  # NaN


def test_collapsed_stacks_and_their_innermost_frames() -> None:
    text = (
        "process 1:python;thread (0x1);run (sidecar.py:10);compress (zstd.py:5) 30\n"
        "process 1:python;thread (0x2);run (sidecar.py:10);encrypt (aes.py:7) 12\n"
        "process 1:python;thread (0x1);run (sidecar.py:10);compress (zstd.py:5) 8\n"
        "not a stack line\n"
    )
    stacks = bh.parse_collapsed(text)
    assert sum(stacks.values()) == 50
    assert bh.top_leaves(stacks, 1) == [("compress (zstd.py:5)", 38)]
    assert bh.top_leaves(stacks) == [("compress (zstd.py:5)", 38), ("encrypt (aes.py:7)", 12)]


def test_host_cpu_counts_idle_and_iowait_as_not_busy() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    before = bh.parse_host_cpu("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    after = bh.parse_host_cpu("cpu  400 0 150 900 50 0 0 0 90 0\n")
    assert before == (150, 1000)
    assert after == (550, 1500)
    assert bh.busy_share(before, after) == 0.8


def test_peak_sizes_keep_each_fields_own_maximum() -> None:
    samples = [{"VmRSS": 10, "RssAnon": 7}, {"VmRSS": 12, "RssAnon": 5, "RssShmem": 6}, {}]
    assert bh.peak_sizes(samples, ("VmRSS", "RssAnon", "RssShmem", "VmSwap")) == {
        "VmRSS": 12,
        "RssAnon": 7,
        "RssShmem": 6,
    }
