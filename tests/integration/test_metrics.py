"""Metrics: the registry's Kafka semantics, exact values after a known workload, a retried backend error seen
through a real proxy, the Prometheus endpoint scraped over HTTP, and the generated docs table."""

from __future__ import annotations

import dataclasses
import math
import re
import socket
import urllib.request
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import psutil
import pytest
from emulators import FIXTURE_FOR
from faultproxy import FaultPlan, FaultProxy
from helpers import TIP
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from backends.instrumentation import ERROR_KINDS
from rsm import (
    CorruptDataException,
    IndexType,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
)
from rsm.cli.main import main as kts_main
from rsm.core.known_keys import unknown_keys
from rsm.core.object_keys import segment_keys
from rsm.errors import ConfigException
from rsm.metadata import TopicIdPartition
from rsm.metrics.catalog import BACKEND_BEANS, GC_CLUSTER_METRICS
from rsm.metrics.histogram import TIME_MS, LogBuckets
from rsm.metrics.prometheus import serve
from rsm.metrics.registry import PERCENTILES, MetricsConfig, MetricsRegistry
from rsm.operator_tools.reconcile import CLUSTER_KINDS

RSM = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"
CHUNK_CACHE = "aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics"
MANIFEST_CACHE = "aiven.kafka.server.tieredstorage.cache:type=segment-manifest-cache-metrics"
INDEX_CACHE = "aiven.kafka.server.tieredstorage.cache:type=segment-indexes-cache-metrics"
CHUNK = 65536
DETERMINISTIC = {  # one chunk per GET and no background loads: every hit and miss is the test's own doing
    "chunk.size": str(CHUNK),
    "fetch.readahead.chunks": "0",
    "fetch.chunk.cache.prefetch.max.size": "0",
    "fetch.coalesce.max.bytes": str(CHUNK),
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sensor_follows_kafka_sampled_stat_semantics() -> None:
    clock = Clock()
    registry = MetricsRegistry(MetricsConfig(samples=2, window_s=30.0), clock)
    sensor = registry.sensor("s")
    assert math.isnan(sensor.avg()) and math.isnan(sensor.max()) and sensor.rate() == 0.0
    sensor.record(60)
    # A fresh sensor divides by (samples - 1) full windows, not by the few seconds it has lived.
    assert sensor.rate() == 60 / 30
    clock.now += 45
    sensor.record(30)  # a new window starts: the first is 45 s old
    assert sensor.rate() == 90 / 45
    assert sensor.avg() == 45 and sensor.max() == 60 and sensor.total == 90
    clock.now += 20  # the first window (65 s old) is past samples * window and no longer counts
    assert sensor.avg() == 30 and sensor.max() == 30 and sensor.rate() == 30 / (20 + 30)
    clock.now += 60
    assert math.isnan(sensor.avg()) and sensor.rate() == 0.0 and sensor.total == 90 and sensor.count == 2


ERR = TIME_MS.relative_error
PCT = [f"-{suffix}" for suffix, _ in PERCENTILES]


def nearest_rank(values: list[float], permille: int) -> float:
    """The exact quantile: the ceil(q * n)-th smallest value, in exact arithmetic."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(Fraction(permille, 1000) * len(ordered))) - 1]


def within(estimate: float, exact: float, error: float = ERR) -> bool:
    return abs(estimate - exact) <= error * exact * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(TIME_MS.low, TIME_MS.high, allow_nan=False), min_size=1, max_size=300),
    st.integers(0, 1000),
    st.sampled_from([0.001, 0.01, 0.05]),
)
def test_log_buckets_report_every_quantile_within_the_relative_error(
    values: list[float], permille: int, error: float
) -> None:
    buckets = LogBuckets(error, TIME_MS.low, TIME_MS.high)
    counts: dict[int, int] = {}
    for v in values:
        counts[buckets.index(v)] = counts.get(buckets.index(v), 0) + 1
    (estimate,) = buckets.quantiles([counts], [permille / 1000])
    exact = nearest_rank(values, permille)
    assert within(estimate, exact, error)
    assert len(counts) <= buckets.size
    # A sensor reports the same, capped by the exact maximum (which only brings it closer).
    sensor = MetricsRegistry(clock=Clock()).sensor("s")
    sensor.keep_histogram(buckets)
    for v in values:
        sensor.record(v)
    assert within(sensor.percentile(permille / 1000), exact, error) and sensor.percentile(permille / 1000) <= max(
        values
    )


def test_log_buckets_outside_their_range_and_empty() -> None:
    assert TIME_MS.size == 1153  # 1 us .. 10**7 ms at 1 %: the most entries one window can hold
    assert TIME_MS.index(0.0) == TIME_MS.index(-3.0) == TIME_MS.index(math.nan) == TIME_MS.index(TIME_MS.low) == 0
    assert TIME_MS.value(0) == TIME_MS.low
    assert TIME_MS.index(1e12) == TIME_MS.index(1e300) == TIME_MS.top
    assert within(TIME_MS.value(TIME_MS.top), TIME_MS.high)
    assert all(math.isnan(v) for v in TIME_MS.quantiles([{}, {}], [0.5, 0.99]))
    with pytest.raises(ValueError, match="relative_error"):
        LogBuckets(0.0)
    with pytest.raises(ValueError, match="low < high"):
        LogBuckets(0.01, 5.0, 1.0)


def test_time_percentiles_after_known_durations() -> None:
    clock = Clock()
    registry = MetricsRegistry(MetricsConfig(samples=2, window_s=30.0), clock)
    sensor = registry.sensor("copy")
    registry.time("d", "t", (), "copy-time", sensor)
    bean = lambda: next(values for _, _, _, values in registry.beans())  # noqa: E731
    assert all(math.isnan(bean()[f"copy-time{p}"]) for p in ["-avg", "-max", *PCT])  # nothing recorded yet
    durations = [float(ms) for ms in range(1, 1001)]  # 1 .. 1000 ms, shuffled
    for ms in durations[::2] + durations[1::2]:
        sensor.record(ms)
    values = bean()
    assert within(values["copy-time-p50"], 500) and within(values["copy-time-p99"], 990)
    assert within(values["copy-time-p999"], 999)
    assert values["copy-time-max"] == 1000 and values["copy-time-avg"] == 500.5
    # One value: every percentile is it (the bucket's value is capped by the exact maximum when above it).
    single = registry.sensor("single")
    registry.time("d", "single", (), "x", single)
    single.record(0.25)
    assert all(within(single.percentile(q), 0.25) and single.percentile(q) <= 0.25 for _, q in PERCENTILES)
    # Zero durations (a clock too coarse to see them) read as zero, not as the lowest bucket's bound.
    zero = registry.sensor("zero")
    zero.keep_histogram()
    zero.record(0.0)
    assert zero.percentile(0.5) == 0.0
    # A sensor without a histogram (a rate, a total) has no percentiles.
    assert math.isnan(registry.sensor("plain").percentile(0.5))


def test_percentiles_cover_the_live_windows_only() -> None:
    clock = Clock()
    registry = MetricsRegistry(MetricsConfig(samples=2, window_s=30.0), clock)
    sensor = registry.sensor("fetch")
    registry.time("d", "t", (), "fetch-time", sensor)
    for _ in range(900):
        sensor.record(10.0)
    clock.now += 35  # a new window: the first is still live (35 s < 2 x 30 s)
    for _ in range(100):
        sensor.record(200.0)
    assert within(sensor.percentile(0.5), 10) and within(sensor.percentile(0.99), 200)
    assert within(sensor.percentile(0.9), 10) and within(sensor.percentile(0.901), 200)
    clock.now += 30  # the first window is 65 s old: past samples x window, its 900 values drop out
    assert within(sensor.percentile(0.5), 200) and sensor.avg() == 200
    clock.now += 30  # the second window expires too: NaN, exactly when avg and max are
    assert math.isnan(sensor.percentile(0.5)) and math.isnan(sensor.avg()) and math.isnan(sensor.max())
    sensor.record(3.0)  # the expired window is reused from empty
    assert within(sensor.percentile(0.999), 3) and sensor.percentile(0.999) <= 3


def test_histogram_memory_is_bounded_whatever_the_event_rate() -> None:
    clock = Clock()
    registry = MetricsRegistry(MetricsConfig(samples=3, window_s=30.0), clock)
    sensor = registry.sensor("get")
    registry.time("d", "t", (), "get-time", sensor)
    for k in range(60_000):  # 60 000 distinct durations from 1 ns to far past the top bucket
        sensor.record(1e-6 * 1.0005**k)
    hists = sensor._hists  # noqa: SLF001 - the bound is the point of the test
    assert hists is not None and len(hists) == 3
    assert sum(len(h) for h in hists) <= TIME_MS.size
    assert sum(sum(h.values()) for h in hists) == sensor.count == 60_000


def check_percentiles(bean: dict[str, float], base: str) -> None:
    """A time metric with values: its percentiles are numbers, in order, between 0 and its maximum."""
    p50, p99, p999 = (bean[f"{base}{p}"] for p in PCT)
    assert 0 <= p50 <= p99 <= p999 <= bean[f"{base}-max"], bean


def test_recording_level_decides_which_sensors_record() -> None:
    info = MetricsRegistry(MetricsConfig(recording_level="INFO"))
    debug = MetricsRegistry(MetricsConfig(recording_level="DEBUG"))
    for registry in (info, debug):
        registry.sensor("d", "DEBUG").record(5)
        registry.sensor("i", "INFO").record(5)
    assert info.sensor("d").total == 0 and info.sensor("i").total == 5
    assert debug.sensor("d").total == 5 and debug.sensor("i").total == 5


def test_metrics_keys_are_validated(make_manager: Callable[..., Any]) -> None:
    keys = {"metrics.num.samples": "3", "metrics.sample.window.ms": "1000", "metrics.recording.level": "debug"}
    keys.update({"metrics.prometheus.port": "9404", "metrics.jmx.mirror.domain": "io.kts.tieredstorage"})
    assert unknown_keys({"chunk.size": "1024", **keys}) == []  # declared: no WARN at configure()
    m = make_manager(keys)
    assert m.metrics_registry.config == MetricsConfig(3, 1.0, "DEBUG")
    assert m.metrics_settings["metrics.prometheus.port"] == 9404
    assert m.metrics_settings["metrics.prometheus.host"] == "127.0.0.1"  # this host only, unless asked
    for host in ("0.0.0.0", "::", "broker-1.example.com"):
        assert make_manager({"metrics.prometheus.host": host}).metrics_settings["metrics.prometheus.host"] == host
    for bad in ("", "0.0.0.0:9404", "two words"):
        with pytest.raises(ConfigException, match="metrics.prometheus.host"):
            make_manager({"metrics.prometheus.host": bad})
    with pytest.raises(ConfigException, match="metrics.recording.level"):
        make_manager({"metrics.recording.level": "LOUD"})
    with pytest.raises(ConfigException, match="metrics.num.samples"):
        make_manager({"metrics.num.samples": "0"})


def _stored_size(root: Path, key: str) -> int:
    return (root / key).stat().st_size


def test_exact_values_after_a_known_workload(
    make_manager: Callable[..., Any], segment_factory: Callable[..., Any], tmp_path: Path
) -> None:
    m: RemoteStorageManager = make_manager(DETERMINISTIC, metrics_recording_level="DEBUG")
    p8 = TopicIdPartition(TIP.topic_id, TIP.topic, 8)
    segs = [segment_factory(target_bytes=300_000, seed=s) for s in (31, 32, 33)]
    metas = [segs[0].to_metadata(TIP), segs[1].to_metadata(TIP), segs[2].to_metadata(p8)]
    for seg, meta in zip(segs, metas, strict=True):  # N = 3 copies
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
    root = tmp_path / "store"
    sizes = {
        (meta.topic_id_partition.partition, kind): 0 for meta in metas for kind in ("log", "indexes", "rsm-manifest")
    }
    for meta in metas:
        keys = segment_keys("", meta)
        p = meta.topic_id_partition.partition
        sizes[(p, "log")] += _stored_size(root, keys.log)
        sizes[(p, "indexes")] += _stored_size(root, keys.indexes)
        sizes[(p, "rsm-manifest")] += _stored_size(root, keys.manifest)

    # M = 4 fetches of segment 0: chunk 0 (miss), chunk 0 again (hit), chunk 1 (miss), chunks 0-1 (2 hits).
    original = segs[0].log.read_bytes()
    for start, end in [(0, 99), (10, 20), (CHUNK + 5, CHUNK + 9), (0, CHUNK + 9)]:
        with m.fetch_log_segment(metas[0], start, end) as f:
            assert f.read() == original[start : end + 1]
    # One integrity failure: a flipped byte in chunk 2 of segment 1 as stored.
    log_path = root / segment_keys("", metas[1]).log
    raw = bytearray(log_path.read_bytes())
    raw[2 * CHUNK + 7] ^= 0xFF
    log_path.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataException), m.fetch_log_segment(metas[1], 2 * CHUNK, 2 * CHUNK + 10) as f:
        f.read()
    # And one in an index: a flipped byte in segment 1's stored offset index.
    indexes_path = root / segment_keys("", metas[1]).indexes
    offset_entry = m.fetch_manifest(metas[1]).segment_indexes[IndexType.OFFSET]
    raw = bytearray(indexes_path.read_bytes())
    raw[offset_entry.position + 3] ^= 0xFF
    indexes_path.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataException, match="index is corrupt"):
        m.fetch_index(metas[1], IndexType.OFFSET)
    # One fetch that cannot start, one absent transaction index (routine, not an error), one delete.
    with pytest.raises(RemoteStorageException, match="end before start"):
        m.fetch_log_segment(metas[0], 5, 0)
    assert segs[0].txn_index is None or segs[0].txn_index.stat().st_size == 0
    with pytest.raises(RemoteResourceNotFoundException):
        m.fetch_index(metas[0], IndexType.TRANSACTION)
    m.delete_log_segment_data(metas[2])

    snap = m.metrics()
    total = snap[RSM]
    assert total["object-upload-total"] == 9
    assert total["object-upload-bytes-total"] == sum(sizes.values())
    for kind in ("log", "indexes", "rsm-manifest"):
        bean = snap[f"{RSM},object-type={kind}"]
        assert bean["object-upload-total"] == 3
        assert bean["object-upload-bytes-total"] == sizes[(7, kind)] + sizes[(8, kind)]
        assert snap[f"{RSM},topic=orders,partition=7,object-type={kind}"]["object-upload-total"] == 2
        assert (
            snap[f"{RSM},topic=orders,partition=8,object-type={kind}"]["object-upload-bytes-total"] == sizes[(8, kind)]
        )
    p7, p8_bean, topic = (
        snap[f"{RSM},topic=orders,partition=7"],
        snap[f"{RSM},topic=orders,partition=8"],
        snap[f"{RSM},topic=orders"],
    )
    assert p7["object-upload-total"] == 6 and p8_bean["object-upload-total"] == 3 and topic["object-upload-total"] == 9
    assert total["segment-copy-time-max"] >= total["segment-copy-time-avg"] > 0
    requested = 100 + 11 + 5 + (CHUNK + 10) + 11
    assert total["segment-fetch-requested-bytes-total"] == requested == p7["segment-fetch-requested-bytes-total"]
    assert p8_bean["segment-fetch-requested-bytes-total"] == 0
    # the corrupt chunk's fetch and the corrupt index's (the fetch that cannot start never began)
    assert total["segment-fetch-errors-total"] == 2 and p7["segment-fetch-errors-total"] == 2
    assert total["segment-fetch-time-max"] >= total["segment-fetch-time-avg"] > 0  # DEBUG level records it
    assert total["segment-delete-total"] == 1 == p8_bean["segment-delete-total"] and p7["segment-delete-total"] == 0
    assert total["segment-delete-bytes-total"] == segs[2].size == p8_bean["segment-delete-bytes-total"]
    assert total["segment-delete-errors-total"] == 0 and total["segment-copy-errors-total"] == 0
    assert total["segment-delete-time-max"] >= total["segment-delete-time-avg"] > 0
    for base in ("segment-copy-time", "segment-fetch-time", "segment-delete-time"):
        check_percentiles(total, base)
    check_percentiles(p7, "segment-copy-time")
    # Partition 8 copied and deleted one segment each: every percentile is that one duration (within 1 %).
    for base in ("segment-copy-time", "segment-delete-time"):
        one = p8_bean[f"{base}-max"]
        assert p8_bean[f"{base}-avg"] == one and all(within(p8_bean[base + p], one) for p in PCT)
    assert all(math.isnan(p7["segment-delete-time" + p]) for p in PCT)  # p7 deleted nothing: NaN, as its avg
    assert math.isnan(p7["segment-delete-time-avg"])
    # 3 copies: the median is the middle one, p99 and p999 the slowest (the 3rd of 3).
    assert within(total["segment-copy-time-p999"], total["segment-copy-time-max"])
    assert within(total["segment-copy-time-p99"], total["segment-copy-time-max"])

    chunk = snap[CHUNK_CACHE]
    assert (chunk["cache-hits-total"], chunk["cache-misses-total"]) == (3, 3)  # 3rd miss: the corrupt chunk
    assert chunk["integrity-failures-total"] == 1
    assert chunk["remote-get-total"] == 3 and chunk["remote-get-bytes-total"] == 3 * CHUNK
    assert snap[INDEX_CACHE]["integrity-failures-total"] == 1
    assert snap[INDEX_CACHE]["cache-load-failure-total"] == 1  # a corrupt index is never cached
    manifest = snap[MANIFEST_CACHE]
    # 6 calls on segment 0 (4 fetches, the failed one, which loads it first, the index) and 3 on segment 1 (the
    # fetch, the test's own fetch_manifest, the corrupt index).
    assert (manifest["cache-misses-total"], manifest["cache-hits-total"]) == (2, 7)
    assert "aiven.kafka.server.tieredstorage.thread-pool:type=transform-thread-pool-metrics" in snap


def test_info_level_skips_debug_sensors_and_mirror_domain(
    make_manager: Callable[..., Any], segment_factory: Any
) -> None:
    m = make_manager(DETERMINISTIC, metrics_jmx_mirror_domain="io.kts.tieredstorage")
    seg = segment_factory(target_bytes=100_000, seed=34)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    with m.fetch_log_segment(meta, 0, 9) as f:
        f.read()
    snap = m.metrics()
    assert math.isnan(snap[RSM]["segment-fetch-time-avg"])
    assert all(math.isnan(snap[RSM]["segment-fetch-time" + p]) for p in PCT)  # DEBUG sensor at INFO: NaN alike
    check_percentiles(snap[RSM], "segment-copy-time")
    assert snap[RSM]["segment-fetch-requested-bytes-total"] == 10
    mirrored = "io.kts.tieredstorage:type=remote-storage-manager-metrics"
    assert snap[mirrored]["object-upload-total"] == snap[RSM]["object-upload-total"] == 3
    assert snap["io.kts.tieredstorage.cache:type=chunk-cache-metrics"]["cache-misses-total"] == 1


def test_retried_backend_error_counts_once(s3_moto_server: Any, segment_factory: Any) -> None:
    server = s3_moto_server
    seg = segment_factory(target_bytes=200_000, seed=35)
    meta = seg.to_metadata(TIP)
    log_key = segment_keys("retry/", meta).log

    def is_log_get(method: str, path: str) -> bool:
        return method == "GET" and path.split("?", 1)[0].endswith(log_key.rsplit("/", 1)[-1])

    plan = FaultPlan(1.0, faults=("server-error",), match=is_log_get, limit=1)  # the first log GET gets a 500
    proxy = FaultProxy(server.endpoint, plan)
    try:
        m = RemoteStorageManager()
        storage = server.config(**{"s3.endpoint.url": proxy.url, "s3.retry.backoff.ms": "10"})
        m.configure(
            {
                **DETERMINISTIC,
                "key.prefix": "retry/",
                "storage.backend.class": "s3",
                **{f"storage.{k}": v for k, v in storage.items()},
            }
        )
        try:
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            with m.fetch_log_segment(meta, 0, 99) as f:
                assert f.read() == seg.log.read_bytes()[:100]
            bean = m.metrics()["aiven.kafka.server.tieredstorage.s3:type=s3-client-metrics"]
            counters = m.backend.metrics()
        finally:
            m.close()
    finally:
        proxy.stop()
    assert bean["server-errors-total"] == 1 and bean["throttling-errors-total"] == 0
    # The manifest GET, then the chunk's GET twice (the 500, then the retry): what the proxy saw.
    gets = [(path.split("?", 1)[0].rsplit(".", 1)[-1], status) for method, path, status in plan.seen if method == "GET"]
    assert gets == [("rsm-manifest", 200), ("log", 500), ("log", 206)]
    assert bean["get-object-requests-total"] == len(gets) == counters["get-object-requests"]
    assert bean["get-object-time-max"] >= bean["get-object-time-avg"] > 0
    check_percentiles(bean, "get-object-time")
    assert bean["get-object-time-p50"] > 0
    assert bean["put-object-requests-total"] == counters["put-object-requests"] >= 2
    assert bean["bytes-downloaded-total"] == counters["bytes-downloaded"]


def test_prometheus_endpoint_is_scraped_and_parsed(make_manager: Callable[..., Any], segment_factory: Any) -> None:
    m = make_manager(DETERMINISTIC)
    seg = segment_factory(target_bytes=100_000, seed=36)
    m.copy_log_segment_data(seg.to_metadata(TIP), seg.to_log_segment_data())
    server, thread = serve(m.metrics_snapshot, 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    uploads = families["kts_remote_storage_manager_metrics_object_upload"]
    assert uploads.type == "counter"
    values = {tuple(sorted(s.labels.items())): s.value for s in uploads.samples}
    assert values[()] == 3
    assert values[(("object_type", "log"), ("partition", "7"), ("topic", "orders"))] == 1
    assert families["kts_chunk_cache_metrics_cache_misses"].samples[0].value == 0
    assert families["kts_remote_storage_manager_metrics_object_upload_rate"].type == "gauge"
    snap = m.metrics()[RSM]
    for p in ("p50", "p99", "p999"):  # one gauge per percentile, the value the snapshot holds
        family = families[f"kts_remote_storage_manager_metrics_segment_copy_time_{p}"]
        assert family.type == "gauge"
        value = next(s.value for s in family.samples if not s.labels)
        assert value == snap[f"segment-copy-time-{p}"] and 0 < value <= snap["segment-copy-time-max"]
    # Levels Aiven names -total are gauges here, under the same sample name.
    for level in ("kts_chunk_cache_metrics_cache_size_total", "kts_transform_thread_pool_metrics_pool_size_total"):
        assert families[level].type == "gauge" and families[level].samples[0].name == level
    fetch_p99 = families["kts_remote_storage_manager_metrics_segment_fetch_time_p99"].samples
    assert len(fetch_p99) == 1 and math.isnan(fetch_p99[0].value)  # nothing fetched: NaN, like the average


def test_metrics_docs_are_current(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    assert kts_main(["metrics-docs", "--check", str(docs)]) == 0
    stale = tmp_path / "metrics.md"
    markers = ("metrics-table", "gc-cluster-table")
    stale.write_text("".join(f"<!-- {m}:begin -->\n| old |\n<!-- {m}:end -->\n" for m in markers))
    assert kts_main(["metrics-docs", "--check", str(stale)]) == 1
    assert kts_main(["metrics-docs", "--write", str(stale)]) == 0
    assert kts_main(["metrics-docs", "--check", str(stale)]) == 0
    text = stale.read_text()
    assert "`segment-fetch-requested-bytes-rate`" in text
    assert "`kts_gc_cluster_check_failures_total` | counter" in text
    # kts gc --watch's families: each kind of garbage it counts is named in their reference
    kinds = next(d for d in GC_CLUSTER_METRICS if d.name == "kts_gc_cluster_garbage_segments").meaning
    assert all(kind in kinds for kind in CLUSTER_KINDS), kinds


@pytest.mark.parametrize("flavour", ["gcs-fake", "azure-azurite"])
def test_gcs_and_azure_beans_mirror_the_backend_counters(
    flavour: str, request: pytest.FixtureRequest, segment_factory: Any
) -> None:
    server = request.getfixturevalue(FIXTURE_FOR[flavour])
    seg = segment_factory(target_bytes=200_000, seed=37)
    meta = seg.to_metadata(TIP)
    m = RemoteStorageManager()
    m.configure(
        {
            **DETERMINISTIC,
            "key.prefix": f"metrics-{flavour}/",
            "storage.backend.class": server.backend,
            **{f"storage.{k}": v for k, v in server.config().items()},
        }
    )
    try:
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        with m.fetch_log_segment(meta, 0, 99) as f:
            f.read()
        m.delete_log_segment_data(meta)
        domain, type_ = BACKEND_BEANS[server.backend]
        bean = m.metrics()[f"{domain}:type={type_}"]
        counters = m.backend.metrics()
    finally:
        m.close()
    requests = {k: v for k, v in counters.items() if k.endswith("-requests")}
    assert requests and all(bean[f"{k}-total"] == v for k, v in requests.items()), (bean, counters)
    assert all(bean[f"{kind}-errors-total"] == 0 for kind in ERROR_KINDS)
    assert bean["bytes-uploaded-total"] == counters["bytes-uploaded"] > 0
    timed = [k[: -len("-requests")] for k in requests]
    for op in timed:  # every operation that ran has its latency percentiles
        check_percentiles(bean, f"{op}-time")


def test_every_failed_copy_is_counted(make_manager: Callable[..., Any], segment_factory: Any, tmp_path: Path) -> None:
    """A copy the broker asked for and that failed counts in segment-copy-errors whatever the cause, a segment file
    that is gone included (it fails before anything is uploaded): KtsCopyErrors alerts on this counter."""
    m = make_manager(DETERMINISTIC)
    seg = segment_factory(target_bytes=100_000, seed=37)
    data = seg.to_log_segment_data()
    gone = dataclasses.replace(data, log_segment=tmp_path / "deleted-by-retention.log")
    with pytest.raises(RemoteStorageException, match="does not exist"):
        m.copy_log_segment_data(seg.to_metadata(TIP), gone)
    snap = m.metrics()
    assert snap[RSM]["segment-copy-errors-total"] == 1
    assert snap[f"{RSM},topic=orders,partition=7"]["segment-copy-errors-total"] == 1
    assert snap[RSM]["object-upload-total"] == 0


def _scrape_text(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def test_sidecar_endpoint_binds_the_configured_host_and_shows_the_shims_counts(
    make_manager: Callable[..., Any],
) -> None:
    """The endpoint the sidecar starts: metrics.prometheus.host decides where it listens (0.0.0.0: every
    interface, so a Prometheus in another container can scrape it), and it carries the counts the shim passed."""
    from rsm.jvm.seams import ManagerCapabilities
    from rsm.jvm.sidecar import _start_prometheus
    from rsm.metrics.sidecar_health import SidecarHealth

    m = make_manager({"metrics.prometheus.port": "0", "metrics.prometheus.host": "0.0.0.0"})
    now = [100.0]
    health = SidecarHealth(starts=3, restart_failures=1, clock=lambda: now[0])
    server = _start_prometheus(ManagerCapabilities.of(m), health)
    now[0] = 107.5  # the shim's last request was answered 7.5 s ago (at start: being ready is the first answer)
    assert server is not None
    try:
        assert server.server_address[0] == "0.0.0.0"
        # Loopback, and this host's other IPv4 addresses (where it has any): reachable from other hosts or containers.
        addresses = {"127.0.0.1"} | {
            a.address
            for nic in psutil.net_if_addrs().values()
            for a in nic
            if a.family == socket.AF_INET and not a.address.startswith("127.")
        }
        for address in addresses:
            families = {f.name: f for f in text_string_to_metric_families(_scrape_text(address, server.server_port))}
            values = {n: families[n].samples[0].value for n in families if n.startswith("kts_sidecar_metrics_")}
            assert values["kts_sidecar_metrics_starts"] == 3 and values["kts_sidecar_metrics_restarts"] == 2
            assert values["kts_sidecar_metrics_restart_failures"] == 1 and values["kts_sidecar_metrics_up"] == 1
            assert values["kts_sidecar_metrics_last_reply_age_seconds"] == 7.5
    finally:
        server.shutdown()
        server.server_close()
    loopback = make_manager({"metrics.prometheus.port": "0"})
    server = _start_prometheus(ManagerCapabilities.of(loopback), SidecarHealth())
    assert server is not None
    try:
        assert server.server_address[0] == "127.0.0.1"
        assert _scrape_text("127.0.0.1", server.server_port)
        for address in addresses - {"127.0.0.1"}:  # not reachable from elsewhere
            with pytest.raises(OSError):
                _scrape_text(address, server.server_port)
    finally:
        server.shutdown()
        server.server_close()


def test_sidecar_health_ages_from_the_last_reply() -> None:
    from rsm.metrics.sidecar_health import SidecarHealth

    clock = Clock()
    health = SidecarHealth(starts=1, clock=clock)
    clock.now += 7.5
    (row,) = health.rows()
    assert row.values["last-reply-age-seconds"] == 7.5 and row.values["restarts-total"] == 0
    health.replied()
    clock.now += 0.25
    assert health.rows()[0].values["last-reply-age-seconds"] == 0.25
    with pytest.raises(ValueError):
        SidecarHealth(starts=0)


def test_mirror_domain_does_not_repeat_samples_on_the_endpoint(make_manager: Callable[..., Any]) -> None:
    """metrics.jmx.mirror.domain shows every bean twice on JMX; Prometheus names drop the domain, so the second
    copy would repeat each sample (which Prometheus rejects as duplicates)."""
    m = make_manager(metrics_jmx_mirror_domain="io.kts.tieredstorage")
    assert "io.kts.tieredstorage.cache:type=chunk-cache-metrics" in m.metrics()
    server, thread = serve(m.metrics_snapshot, 0)
    try:
        text = _scrape_text("127.0.0.1", server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    samples = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert "kts_chunk_cache_metrics_cache_hits_total" in samples
    assert len(samples) == len(set(samples)), sorted(s for s in samples if samples.count(s) > 1)


def test_every_exported_attribute_is_declared(
    make_manager: Callable[..., Any], segment_factory: Any, tmp_path: Path
) -> None:
    """docs/metrics.md is generated from the catalog: every attribute a manager (disk chunk cache, both rate
    limiters) and a sidecar export must be declared there, with its bean."""
    from rsm.metrics.catalog import ALL
    from rsm.metrics.sidecar_health import SidecarHealth

    m = make_manager(
        DETERMINISTIC,
        fetch_chunk_cache_class="disk",
        fetch_chunk_cache_path=str(tmp_path / "disk-cache"),
        upload_rate_limit_bytes_per_second=str(10 * 1024 * 1024),
        fetch_rate_limit_bytes_per_second=str(10 * 1024 * 1024),
    )
    seg = segment_factory(target_bytes=100_000, seed=38)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    with m.fetch_log_segment(meta, 0) as f:
        f.read()

    def pattern(template: str) -> re.Pattern[str]:
        return re.compile(re.sub(r"<[a-z]+>", "[a-z-]+", re.escape(template).replace("\\<", "<").replace("\\>", ">")))

    declared = [(pattern(d.bean), [pattern(a) for a in d.attributes]) for d in ALL]
    rows = m.metrics_snapshot() + SidecarHealth().rows()
    assert any(r.type == "chunk-cache-metrics" and "disk-cache-bytes-total" in r.values for r in rows)
    missing = sorted(
        {
            f"{r.domain}:type={r.type} {attr}"
            for r in rows
            for attr in r.values
            if not any(
                bean.fullmatch(f"{r.domain}:type={r.type}") and any(a.fullmatch(attr) for a in attrs)
                for bean, attrs in declared
            )
        }
    )
    assert missing == []
