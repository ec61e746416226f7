"""Correctness at size: planning and listing many segments through the bounded pool (speed is in
benchmarks/bench_scale.py, never asserted here).

Segments come from the benchmarks' generator (benchmarks/segment_generator.py: small real Kafka logs copied by a
real manager), on a filesystem store or on moto behind the real proxy (tests/support/faultproxy.py), which counts every
request and the most in flight at once.
"""

from __future__ import annotations

import datetime
import gc
import io
import json
import sys
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from emulators import FIXTURE_FOR, StoreServer
from faultproxy import NO_FAULTS, FaultPlan, FaultProxy, Link
from helpers import encryption_configs
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm import RemoteStorageManager
from rsm.cli.main import main
from rsm.core.catalog import parse_manifest_key
from rsm.core.manifest import SegmentManifest
from rsm.core.manifest_reader import SegmentFailure, read_summaries
from rsm.core.parallel import WINDOW_PER_THREAD, ordered_map
from rsm.errors import RemoteStorageException
from rsm.kafka.writer import write_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid
from rsm.operator_tools.garbage import find_garbage
from rsm.spark.planning import PushedBounds, SegmentSlice
from rsm.spark.reader import TieredReader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from segment_generator import GeneratorSpec, generate  # noqa: E402

pytestmark = pytest.mark.timeout(300)

RECORDS = 4  # per generated segment: segment j holds offsets 4j..4j+3


def _fs(root: Path) -> dict[str, str]:
    return {"storage.backend.class": "filesystem", "storage.root": str(root), "storage.fsync.enabled": "false"}


def _plugin(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"chunk.size": "4096", **(extra or {})}


@pytest.fixture(scope="module")
def big_fs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], GeneratorSpec]:
    """1,500 segments in each of 2 partitions on a filesystem store, and 12 crashed copies (no manifest)."""
    root = tmp_path_factory.mktemp("scale-fs") / "store"
    spec = GeneratorSpec("big/", 1500, partitions=2, records_per_segment=RECORDS, orphans=12)
    # No prefetch: it would walk its 16 MiB budget across thousands of these 1.6 KB segments in the background.
    config = {**_fs(root), **_plugin(), "key.prefix": spec.prefix, "fetch.chunk.cache.prefetch.max.size": "0"}
    generate(config, config, spec, processes=1)
    return config, spec


def _by_partition(slices: list[SegmentSlice]) -> dict[int, list[SegmentSlice]]:
    out: dict[int, list[SegmentSlice]] = {}
    for s in slices:
        out.setdefault(s.partition, []).append(s)
    return out


def test_a_large_plan_covers_every_offset_once_from_every_segment(big_fs: tuple[dict[str, str], GeneratorSpec]) -> None:
    config, spec = big_fs
    reader = TieredReader({**config, "topic": spec.topic, "planningConcurrency": "8"})
    slices = reader.plan()
    parts = _by_partition(slices)
    assert sorted(parts) == [0, 1]
    for partition, pieces in parts.items():
        ids = [p.segment.segment_id for p in pieces]
        assert len(ids) == len(set(ids)) == spec.segments, "a segment planned twice or not at all"
        assert set(ids) == {spec.segment_id(partition, j) for j in range(spec.segments)}
        assert pieces[0].first_offset == 0 and pieces[-1].last_offset == spec.segments * RECORDS - 1
        for before, after in zip(pieces, pieces[1:], strict=False):
            assert after.first_offset == before.last_offset + 1, f"gap or overlap at {after.describe()}"
    # Every planned slice read once: the rows are exactly each offset of each partition, once.
    offsets: dict[int, Counter[int]] = {0: Counter(), 1: Counter()}
    for piece, cols in reader.columns():
        offsets[piece.partition].update(cols.to_columns().offsets)
    for partition in (0, 1):
        assert offsets[partition] == Counter(range(spec.segments * RECORDS)), partition


def test_kts_ls_and_gc_at_size_name_every_segment_and_every_orphan_once(
    big_fs: tuple[dict[str, str], GeneratorSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    config, spec = big_fs
    sets = [x for k, v in config.items() for x in ("--set", f"{k}={v}")]
    capsys.readouterr()
    assert main(["ls", *sets, "--json", "--workers", "8", spec.topic]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["partition"], r["segment_id"]) for r in rows] == [
        (p, spec.segment_id(p, j)) for p in range(2) for j in range(spec.segments)
    ], "a segment listed twice, out of order or not at all"
    assert [(r["start_offset"], r["end_offset"]) for r in rows] == [
        (j * RECORDS, j * RECORDS + RECORDS - 1) for _ in range(2) for j in range(spec.segments)
    ]

    orphans = {spec.segment_id(0, j) for j in range(spec.segments, spec.segments + spec.orphans)}
    with RemoteStorageManager() as m:
        m.configure(config)
        items = find_garbage(m, 0.0, concurrency=8)
    keys = [item.key for item in items]
    assert len(keys) == len(set(keys)) == 2 * spec.orphans  # each orphan's .log and .indexes, once
    named = [parse_manifest_key(k.rsplit(".", 1)[0] + ".rsm-manifest", spec.prefix) for k in keys]
    assert {seg.segment_id for seg in named if seg is not None} == orphans
    assert main(["gc", *sets, "--older-than", "0s"]) == 0
    assert f"{2 * spec.orphans} items" in capsys.readouterr().out


def test_planning_keeps_a_few_numbers_per_segment_not_the_manifests(tmp_path: Path) -> None:
    """What a plan holds grows by a fraction of a parsed manifest (chunk index, per-chunk checksums) per segment:
    planning 300 and 2,100 segments of 40 chunks each, the difference per segment.

    Two measures. What the finished plan keeps (traced after a collection, the plan alive) does not depend on how
    the four planning threads interleave: 573 to 575 bytes a segment in three runs at load 20, against half a
    manifest (about 2,560); a plan that kept each parsed manifest would keep a whole one a segment. The peak
    while planning does depend on it: about 1,650 bytes a segment quiet, 1,340 to 2,004 at load 20, where the
    threads and the cyclic collector moved one peak by 1.9 MB (1,050 bytes a segment). Its bound is a whole
    manifest a segment (about 5,120), which a plan that parsed every manifest before dropping any would reach."""
    config = {**_fs(tmp_path / "store"), **_plugin({"chunk.size": "1024"}), "key.prefix": "mem/"}
    peaks: dict[int, int] = {}
    kept: dict[int, int] = {}
    per_manifest = 0.0
    for n in (300, 2100):
        spec = GeneratorSpec("mem/", n, topic=f"mem-{n}", records_per_segment=100)
        generate(config, config, spec, processes=1)
        reader = TieredReader({**config, "topic": spec.topic, "planningConcurrency": "4"})
        segments = reader.manager.catalog().segments(spec.topic)
        assert len(segments) == n
        tracemalloc.start()
        try:
            held = [
                SegmentManifest.from_json_bytes(Path(config["storage.root"], s.keys.manifest).read_bytes())
                for s in segments[:200]
            ]
            per_manifest = tracemalloc.get_traced_memory()[0] / len(held)
            assert held[0].chunk_index.chunk_count >= 30
            del held
            gc.collect()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            plan = reader.plan()
            assert len(plan) == n
            peaks[n] = tracemalloc.get_traced_memory()[1] - base
            gc.collect()
            kept[n] = tracemalloc.get_traced_memory()[0] - base
            del plan
        finally:
            tracemalloc.stop()
    kept_per_segment = (kept[2100] - kept[300]) / 1800
    peak_per_segment = (peaks[2100] - peaks[300]) / 1800
    assert kept_per_segment < per_manifest / 2, (kept_per_segment, per_manifest)
    assert peak_per_segment < per_manifest, (peak_per_segment, per_manifest)


def test_summaries_need_no_private_key(tmp_path: Path, key_pairs: dict[str, tuple[Path, Path]]) -> None:
    spec = GeneratorSpec("enc/", 20, records_per_segment=RECORDS)
    plugin = _plugin(encryption_configs(key_pairs))
    config = {**_fs(tmp_path / "store"), **plugin, "key.prefix": spec.prefix}
    generate(config, plugin, spec, processes=1)
    public_only = {k: v for k, v in config.items() if not k.endswith(".private.key.file")}
    with RemoteStorageManager() as m:
        m.configure(public_only)
        got = list(read_summaries(m, m.catalog().segments(spec.topic), 4))
    assert all(not isinstance(g, SegmentFailure) for g in got), got
    assert [g.key_pair_id for g in got] == ["kek1"] * 20  # type: ignore[union-attr]
    assert [g.start_offset for g in got] == [j * RECORDS for j in range(20)]  # type: ignore[union-attr]


def test_bad_manifests_are_each_named_and_hide_no_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = GeneratorSpec("bad/", 60, records_per_segment=RECORDS)
    config = {**_fs(tmp_path / "store"), **_plugin(), "key.prefix": spec.prefix}
    generate(config, config, spec, processes=1)
    with RemoteStorageManager() as m:
        m.configure(config)
        segments = m.catalog().segments(spec.topic)
    root = Path(config["storage.root"])
    damaged = {segments[5].segment_id, segments[30].segment_id, segments[59].segment_id}
    (root / segments[5].keys.manifest).write_bytes(b"{not json")
    (root / segments[30].keys.manifest).write_bytes((root / segments[31].keys.manifest).read_bytes())  # misplaced
    (root / segments[59].keys.manifest).write_bytes(b'{"version": "1"}')

    with pytest.raises(RemoteStorageException) as caught:
        TieredReader({**config, "topic": spec.topic, "planningConcurrency": "4"}).plan()
    message = str(caught.value)
    assert "3 of 60 manifests could not be read" in message
    assert all(seg_id in message for seg_id in damaged), message

    sets = [x for k, v in config.items() for x in ("--set", f"{k}={v}")]
    capsys.readouterr()
    rc = main(["ls", *sets, "--json", "--workers", "4", spec.topic])
    out, err = capsys.readouterr()
    assert rc == 1
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 57 and damaged.isdisjoint(r["segment_id"] for r in rows)
    failed = [line for line in err.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 3 and all(any(seg_id in line for line in failed) for seg_id in damaged), err


# --- through the real proxy, counting requests ----------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_topic(
    s3_moto_server: StoreServer,
) -> Iterator[tuple[dict[str, str], GeneratorSpec]]:
    """300 segments on moto, written straight to the server."""
    spec = GeneratorSpec(f"scale-{random_kafka_uuid()}/", 300, records_per_segment=10)
    direct = {
        "storage.backend.class": "s3",
        **{f"storage.{k}": str(v) for k, v in s3_moto_server.config().items()},
    }
    generate(direct, _plugin(), spec, processes=1)
    yield {**direct, **_plugin(), "key.prefix": spec.prefix}, spec


def _through(proxy: FaultProxy, config: dict[str, str]) -> dict[str, str]:
    return {**config, "storage.s3.endpoint.url": proxy.url}


def _manifest_gets(plan: FaultPlan, prefix: str) -> list[str]:
    """The segment ids whose manifests were read (S3 paths are /<bucket>/<key>)."""
    paths = [unquote(path.split("?", 1)[0]) for method, path, _ in plan.seen if method == "GET"]
    keys = [p.split("/", 2)[2] for p in paths if p.count("/") >= 2]
    return [seg.segment_id for k in keys if (seg := parse_manifest_key(k, prefix)) is not None]


def test_offset_bounds_read_no_manifest_of_a_skipped_segment(
    moto_topic: tuple[dict[str, str], GeneratorSpec],
    s3_moto_server: StoreServer,
) -> None:
    config, spec = moto_topic
    plan = FaultPlan(NO_FAULTS)
    proxy = FaultProxy(s3_moto_server.endpoint, plan)
    try:
        options = {**_through(proxy, config), "topic": spec.topic}
        full = TieredReader(options).plan()
        assert len(_manifest_gets(plan, spec.prefix)) == spec.segments  # no bound: every manifest, once
        for first, last in [(1005, 1044), (0, 9), (2990, 2999), (1500, 1500)]:
            plan.seen.clear()
            bounded = TieredReader(
                {
                    **options,
                    "startingOffsets": json.dumps({spec.topic: {"0": first}}),
                    "endingOffsets": json.dumps({spec.topic: {"0": last + 1}}),
                }
            ).plan()
            wanted = {j for j in range(spec.segments) if first <= j * 10 + 9 and j * 10 <= last}
            below = [j for j in range(spec.segments) if j * 10 < first][-2:]  # the look-behind: two segments
            expected = {spec.segment_id(0, j) for j in wanted | set(below)}
            read = Counter(_manifest_gets(plan, spec.prefix))
            assert set(read) == expected, (first, last)
            # Once each, but for a read starting inside a segment: the manager loads that one again (it unwraps
            # the data key the planner leaves wrapped) to look the start up in its offset index.
            inside = {spec.segment_id(0, first // 10)} if first % 10 else set()
            assert read == Counter({seg: 2 if seg in inside else 1 for seg in expected}), (first, last)
            # The same rows as the full plan cut to the bounds.
            cut = [
                (s.segment.segment_id, max(s.first_offset, first), min(s.last_offset, last))
                for s in full
                if s.first_offset <= last and s.last_offset >= first
            ]
            assert [(s.segment.segment_id, s.first_offset, s.last_offset) for s in bounded] == cut
        # Pushed-down offset filters select the same way.
        plan.seen.clear()
        pushed = TieredReader(options).plan(PushedBounds(first_offset=2000, last_offset=2029))
        assert [s.segment.segment_id for s in pushed] == [spec.segment_id(0, j) for j in (200, 201, 202)]
        assert len(_manifest_gets(plan, spec.prefix)) == 5
    finally:
        proxy.stop()


def test_the_pool_bounds_requests_in_flight(
    moto_topic: tuple[dict[str, str], GeneratorSpec],
    s3_moto_server: StoreServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, spec = moto_topic
    plan = FaultPlan(NO_FAULTS)
    proxy = FaultProxy(s3_moto_server.endpoint, plan, Link(delay_s=0.02))
    try:
        options = {**_through(proxy, config), "topic": spec.topic, "planningConcurrency": "4"}
        assert len(TieredReader(options).plan()) == spec.segments
        assert 2 <= proxy.stats.max_in_flight <= 4, proxy.stats.snapshot()
        assert proxy.stats.by_kind["GET manifest"] == spec.segments

        proxy.stats.reset()
        sets = [x for k, v in _through(proxy, config).items() for x in ("--set", f"{k}={v}")]
        capsys.readouterr()
        assert main(["ls", *sets, "--json", "--workers", "6", spec.topic]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["start_offset"] for r in rows] == [j * 10 for j in range(spec.segments)]
        assert 2 <= proxy.stats.max_in_flight <= 6, proxy.stats.snapshot()
        assert proxy.stats.by_kind["GET manifest"] == spec.segments
    finally:
        proxy.stop()


# --- overlapping segments: bounds on the keys agree with the full plan ------------------------------------------


def test_bounded_plans_agree_with_the_full_plan_across_overlaps_and_gaps(tmp_path: Path) -> None:
    """A leader change (the new leader's copy starts inside the old leader's last segment and reaches past it),
    a gap, and contiguous runs: for every pair of bounds, reading only the manifests the keys point at plans the
    same offsets from the same segments as reading all of them and cutting."""
    config = {**_fs(tmp_path / "store"), **_plugin()}
    tip = TopicIdPartition(random_kafka_uuid(), "lc", 0)
    layout = [  # (base offset, batches of 10 records, leader epochs)
        (0, 10, {0: 0}),
        (100, 10, {0: 0}),
        (200, 10, {0: 0}),  # the old leader's copy of 200..299
        (250, 8, {0: 0, 1: 250}),  # the new leader diverged at 250: 250..329 wins over the old copy
        (330, 5, {0: 0, 1: 250}),
        (500, 5, {0: 0, 1: 250}),  # after a gap (380..499 never tiered)
    ]
    with RemoteStorageManager() as m:
        m.configure(config)
        for i, (base, batches, epochs) in enumerate(layout):
            files = write_segment(
                tmp_path / f"s{i}",
                base_offset=base,
                num_batches=batches,
                records_per_batch=(10, 10),
                seed=i,
                leader_epochs=epochs,
            )
            m.copy_log_segment_data(files.to_metadata(tip, event_timestamp_ms=i), files.to_log_segment_data())
    reader = TieredReader({**config, "topic": "lc"})
    full = [(s.segment.start_offset, s.first_offset, s.last_offset) for s in reader.plan()]
    assert full == [(0, 0, 99), (100, 100, 199), (200, 200, 249), (250, 250, 329), (330, 330, 379), (500, 500, 549)]
    for first in range(0, 560, 15):
        for last in (first, first + 40, first + 260, 10_000):
            bounded = reader.plan(PushedBounds(first_offset=first, last_offset=last))
            cut = [(s, max(a, first), min(b, last)) for s, a, b in full if a <= last and b >= first]
            assert [(s.segment.start_offset, s.first_offset, s.last_offset) for s in bounded] == cut, (first, last)


# --- the pool itself -------------------------------------------------------------------------------------------


def test_ordered_map_keeps_order_bounds_threads_and_reads_items_lazily() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    fed = 0

    def items() -> Iterator[int]:
        nonlocal fed
        for i in range(200):
            fed += 1
            yield i

    def work(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.002 * (i % 3))
        with lock:
            running -= 1
        if i % 37 == 0:
            raise ValueError(f"item {i} is bad")
        return i * i

    results: list[Any] = []
    for taken, outcome in enumerate(ordered_map(work, items(), 5), 1):
        assert fed - taken <= WINDOW_PER_THREAD * 5, "items were read ahead without bound"
        results.append(outcome.result if outcome.ok else str(outcome.error))
    assert most <= 5 and most >= 2
    assert results == [f"item {i} is bad" if i % 37 == 0 else i * i for i in range(200)]


# --- listing a range of a large partition ----------------------------------------------------------------------


def test_the_catalog_lists_partitions_from_directories_and_segments_from_an_offset(tmp_path: Path) -> None:
    from backends.filesystem import FileSystemBackend
    from rsm.core.catalog import SegmentCatalog
    from rsm.core.object_keys import segment_keys

    backend = FileSystemBackend()
    backend.configure({"root": str(tmp_path / "store"), "fsync.enabled": "false"})
    orders, orders_eu = random_kafka_uuid(), random_kafka_uuid()
    metas = []
    for topic_id, topic, partition, start in [
        (orders, "orders", 0, 0),
        (orders, "orders", 0, 100),
        (orders, "orders", 0, 250),
        (orders, "orders", 7, 5),
        (orders, "orders", 70, 5),
        (orders_eu, "orders-eu", 0, 0),
    ]:
        files = write_segment(tmp_path / "src", base_offset=start, num_batches=1, records_per_batch=(2, 2))
        metas.append(files.to_metadata(TopicIdPartition(topic_id, topic, partition)))
    for meta in metas:
        for key in segment_keys("p/", meta).all():
            backend.upload(key, io.BytesIO(b"x"))
    backend.upload("p/orders-not-a-topic-id/0/x.rsm-manifest", io.BytesIO(b"x"))
    catalog = SegmentCatalog(backend, "p/")
    assert catalog.partitions("orders") == [
        TopicIdPartition(orders, "orders", 0),
        TopicIdPartition(orders, "orders", 7),
        TopicIdPartition(orders, "orders", 70),
    ]
    assert {t.topic for t in catalog.partitions() or []} == {"orders", "orders-eu"}
    tip = TopicIdPartition(orders, "orders", 0)
    assert [s.start_offset for s in catalog.segments_from(tip, 0)] == [0, 100, 250]
    assert [s.start_offset for s in catalog.segments_from(tip, 100)] == [100, 250]
    assert [s.start_offset for s in catalog.segments_from(tip, 101)] == [250]
    assert list(catalog.segments_from(tip, 251)) == []
    assert [s.start_offset for s in catalog.segments_from(TopicIdPartition(orders, "orders", 7), 1)] == [5]


@settings(max_examples=200)
@given(
    moment=st.datetimes(
        min_value=datetime.datetime(1971, 1, 1),
        max_value=datetime.datetime(2200, 1, 1),
        timezones=st.just(datetime.UTC),
    ),
    millis=st.booleans(),
)
def test_s3_timestamps_parse_as_botocore_parses_them(moment: datetime.datetime, millis: bool) -> None:
    """The listing's fast timestamp parser agrees with botocore's on both forms S3 sends."""
    from botocore.utils import parse_timestamp

    from backends.s3_client import parse_timestamp as s3_timestamp

    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000 if millis else 0)
    iso = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond // 1000:03d}" if millis else "") + "Z"
    rfc822 = moment.strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert s3_timestamp(iso) == parse_timestamp(iso) == moment
    assert s3_timestamp(rfc822) == parse_timestamp(rfc822) == moment.replace(microsecond=0)


def test_the_latency_store_delays_caps_and_counts(tmp_path: Path) -> None:
    """The benchmarks' store: every request through the proxy process waits its delay, bodies keep to the cap, and
    the counters it serves add up (lower bounds only: a loaded machine may take longer, never shorter)."""
    from latency_store import latency_store

    from backends.registry import create_backend

    def backend(config: dict[str, str]) -> Any:
        return create_backend(
            "s3", {k[len("storage.") :]: v for k, v in config.items() if k.startswith("storage.") and "class" not in k}
        )

    body = bytes(range(256)) * 1200  # 307,200 bytes
    with latency_store(tmp_path, server="s3-moto", delay_ms=40, bandwidth_mbps=1.0) as store:
        direct, slow = backend(store.direct_config()), backend(store.plugin_config())
        try:
            direct.upload("a/b.log", io.BytesIO(body))
            store.reset()
            started = time.monotonic()
            with slow.fetch("a/b.log") as f:
                assert f.read() == body
            assert time.monotonic() - started >= 0.04 + len(body) / 1e6 * 0.9
            assert [k for k in slow.list("a/")] == ["a/b.log"]
            counts = store.stats()
            assert counts.get("log") == 1 and counts.get("other") == 1 and counts.requests == 2
            assert counts.bytes_down >= len(body) and counts.max_in_flight == 1
            store.reset()
            assert store.stats().requests == 0
        finally:
            direct.close()
            slow.close()


def test_lazy_listing_keeps_the_catalogs_order(tmp_path: Path) -> None:
    """iter_segments lists partition by partition yet yields what segments() does, re-created topics included."""
    from backends.filesystem import FileSystemBackend
    from rsm.core.catalog import SegmentCatalog

    backend = FileSystemBackend()
    backend.configure({"root": str(tmp_path / "store"), "fsync.enabled": "false"})
    ids = [random_kafka_uuid(), random_kafka_uuid()]
    for i, (topic, partition, start) in enumerate(
        [("t", 2, 0), ("t", 10, 0), ("t", 2, 40), ("t", 1, 7), ("u", 0, 3), ("t-x", 0, 1)] * 2
    ):
        seg = f"{topic}-{ids[i // 6]}/{partition}/{start + i // 6 * 5:020d}-{random_kafka_uuid()}"
        for suffix in (".log", ".rsm-manifest"):
            backend.upload(f"pre/{seg}{suffix}", io.BytesIO(b"x"))
    catalog = SegmentCatalog(backend, "pre/")
    for topic, partition in [(None, None), ("t", None), ("t", 2), ("u", 0), ("t-x", None), ("v", None)]:
        assert list(catalog.iter_segments(topic, partition)) == catalog.segments(topic, partition), (topic, partition)


@pytest.mark.parametrize("store", ["gcs-fake", "azure-azurite", "s3-moto"])
def test_a_full_pool_of_reads_keeps_its_connections(
    store: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """32 manifest reads at once on one client: every store's connection pool holds them (a smaller pool discards a
    connection after each request, reconnecting and logging a warning every time)."""

    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[store])
    spec = GeneratorSpec(f"pool-{random_kafka_uuid()}/", 80, records_per_segment=RECORDS)
    config = {
        "storage.backend.class": server.backend,
        **{f"storage.{k}": str(v) for k, v in server.config().items()},
        **_plugin(),
        "key.prefix": spec.prefix,
    }
    generate(config, config, spec, processes=1)
    with RemoteStorageManager() as m:
        m.configure(config)
        with caplog.at_level("WARNING"):
            got = list(read_summaries(m, m.catalog().segments(spec.topic), 32))
    assert [g.start_offset for g in got] == [j * RECORDS for j in range(80)]  # type: ignore[union-attr]
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]


def test_columns_align_from_a_lookahead_then_stream() -> None:
    from rsm.cli.columns import Columns

    lines: list[str] = []
    cols = Columns(("topic", "size", "key id"), lines.append, right=frozenset({1}), lookahead=2)
    cols.add("t", "1,024", "a")
    assert lines == []  # still looking ahead
    cols.add("orders", "9", "-")
    assert lines == ["topic    size  key id", "t       1,024  a", "orders      9  -"]
    cols.add("a-much-longer-topic", "12", "b")  # streamed at once; only its own line is wider
    assert lines[-1] == "a-much-longer-topic     12  b" and cols.rows == 3
    cols.close()
    assert len(lines) == 4
    empty: list[str] = []
    Columns(("a",), empty.append).close()
    assert empty == []  # no rows, no header
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        cols.add("x", "y")


def test_range_listing_is_a_capability_found_once() -> None:
    """S3 and the filesystem list part of a key space; GCS and Azure do not (the catalog then lists whole
    prefixes): BackendCapabilities.of says which, and a catalog asks it once, when it is made."""
    from backends.azure import AzureBlobBackend
    from backends.base import BackendCapabilities
    from backends.filesystem import FileSystemBackend
    from backends.gcs import GcsBackend
    from backends.s3 import S3Backend

    found = {c.__name__: BackendCapabilities.of(b := c()).range_listing is b for c in (FileSystemBackend, S3Backend)}
    assert found == {"FileSystemBackend": True, "S3Backend": True}
    assert all(BackendCapabilities.of(c()).range_listing is None for c in (GcsBackend, AzureBlobBackend))


def test_a_corrupt_manifest_is_named_with_the_prefix_masked(tmp_path: Path) -> None:
    """Summaries read manifests through the catalog of the manager, which masks key.prefix in what it names."""
    spec = GeneratorSpec("secret-account/", 3, records_per_segment=RECORDS)
    config = {**_fs(tmp_path / "store"), **_plugin(), "key.prefix": spec.prefix}
    generate(config, config, spec, processes=1)
    with RemoteStorageManager() as m:
        m.configure({**config, "key.prefix.mask": "true"})
        segments = m.catalog().segments(spec.topic)
        Path(config["storage.root"], segments[1].keys.manifest).write_bytes(b"{not json")
        got = list(read_summaries(m, segments, 2))
    failure = got[1]
    assert isinstance(failure, SegmentFailure) and not isinstance(got[0], SegmentFailure)
    text = failure.describe()
    assert "<prefix>" in text and "secret-account" not in text and segments[1].segment_id in text, text
