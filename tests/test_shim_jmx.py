"""The shim's MBeans in a real JVM (JPype, this process): the shim is loaded by reflection as a broker loads it,
tiers real segments over each transport, and its metrics appear in the platform MBean server under Aiven's
ObjectNames with the values the Python registry holds; a read burst costs one snapshot; close() removes them."""

from __future__ import annotations

import math
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import jvm_testing as jt
import pytest
from emulators import free_port
from prometheus_client.parser import text_string_to_metric_families

jpype = pytest.importorskip("jpype")
pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")

RSM = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"
CHUNK_CACHE = "aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics"
DEBUG = {"metrics.recording.level": "DEBUG"}  # the per-fetch timing (and its percentiles) is a DEBUG sensor


@pytest.fixture(scope="module")
def jvm() -> None:
    jt.ensure_built()
    if not jpype.isJVMStarted():
        jpype.startJVM(classpath=[str(jt.PLUGIN_JAR), str(jt.STUBS_JAR), str(jt.TEST_JAR)], convertStrings=False)
    try:
        jpype.JClass(jt.SHIM_CLASS)
    except Exception:
        pytest.skip("a JVM without the shim jars was already started in this process")


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[jt.SpecSegment]:
    return jt.make_test_segments(tmp_path_factory.mktemp("jmx-segs"), batches=60)[:2]


def shim(cfg: dict[str, str]) -> Any:
    """Instantiated exactly as Kafka does: by name, no-arg constructor, then configure(Map)."""
    m = jpype.JClass("java.util.HashMap")()
    for k, v in cfg.items():
        m.put(k, v)
    rsm = jpype.JClass("java.lang.Class").forName(jt.SHIM_CLASS).getDeclaredConstructor().newInstance()
    rsm.configure(m)
    return rsm


def java_meta(meta: Any) -> Any:
    pkg = "org.apache.kafka.server.log.remote.storage."
    uuid = jpype.JClass("org.apache.kafka.common.Uuid")
    tip = meta.topic_id_partition
    jtip = jpype.JClass("org.apache.kafka.common.TopicIdPartition")(
        uuid.fromString(tip.topic_id), tip.partition, tip.topic
    )
    seg_id = jpype.JClass(pkg + "RemoteLogSegmentId")(jtip, uuid.fromString(meta.remote_log_segment_id.id))
    epochs = jpype.JClass("java.util.HashMap")()
    for epoch, offset in meta.segment_leader_epochs.items():
        epochs.put(jpype.JInt(epoch), jpype.JLong(offset))
    return jpype.JClass(pkg + "RemoteLogSegmentMetadata")(
        seg_id,
        meta.start_offset,
        meta.end_offset,
        meta.max_timestamp_ms,
        meta.broker_id,
        meta.event_timestamp_ms,
        meta.segment_size_in_bytes,
        epochs,
    )


def java_data(seg: jt.SpecSegment) -> Any:
    paths = jpype.JClass("java.nio.file.Paths")
    optional = jpype.JClass("java.util.Optional")

    def p(path: Path) -> Any:
        return paths.get(str(path), jpype.JArray(jpype.JString)([]))

    txn = optional.of(p(seg.txn_index)) if seg.txn_index is not None else optional.empty()
    epochs = jpype.JClass("java.nio.ByteBuffer").wrap(jpype.JArray(jpype.JByte)(seg.leader_epoch_bytes))
    return jpype.JClass("org.apache.kafka.server.log.remote.storage.LogSegmentData")(
        p(seg.log), p(seg.offset_index), p(seg.time_index), txn, p(seg.producer_snapshot), epochs
    )


def server() -> Any:
    return jpype.JClass("java.lang.management.ManagementFactory").getPlatformMBeanServer()


def attr(name: str, attribute: str) -> float:
    return float(server().getAttribute(jpype.JClass("javax.management.ObjectName")(name), attribute))


def our_beans() -> list[str]:
    pattern = jpype.JClass("javax.management.ObjectName")("aiven.kafka.server.tieredstorage*:*")
    return sorted(str(n) for n in server().queryNames(pattern, None))


def exercise(rsm: Any, segments: list[jt.SpecSegment]) -> None:
    for seg in segments:
        rsm.copyLogSegmentData(java_meta(seg.meta), java_data(seg))
    for _ in range(2):  # the second read of chunk 0 is a cache hit
        stream = rsm.fetchLogSegment(java_meta(segments[0].meta), 0, 99)
        try:
            assert len(bytes(stream.readAllBytes())) == 100
        finally:
            stream.close()


def check_beans(rsm: Any, segments: list[jt.SpecSegment]) -> None:
    tip = segments[0].meta.topic_id_partition
    tagged = f"{RSM},topic={tip.topic},partition={tip.partition},object-type=log"
    deadline = time.monotonic() + 3  # a copy makes the shim look for new beans right away, off the broker's thread
    while tagged not in (names := our_beans()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert RSM in names and CHUNK_CACHE in names and tagged in names, names
    time.sleep(1.1)  # the cached snapshot is stale: the next read burst asks Python once
    before = int(rsm.metricsRequests())
    assert attr(RSM, "object-upload-total") == 3 * len(segments)
    assert attr(f"{RSM},object-type=rsm-manifest", "object-upload-total") == len(segments)
    assert attr(tagged, "object-upload-total") == len(segments)
    for kind in ("log", "indexes"):
        assert attr(f"{RSM},object-type={kind}", "object-upload-bytes-total") > 0
    assert attr(RSM, "segment-fetch-requested-bytes-total") == 200
    assert attr(f"{RSM},topic={tip.topic}", "segment-fetch-requested-bytes-total") == 200
    # Bounded fetches are never served from a kept stream: two fetches, both opened here.
    assert attr(RSM, "segment-fetch-total") == 2 and attr(RSM, "segment-fetch-resumed-total") == 0
    assert attr(CHUNK_CACHE, "cache-misses-total") == 1 and attr(CHUNK_CACHE, "cache-hits-total") == 1
    # Our percentiles next to Aiven's avg and max, on the untagged and the per-partition beans.
    partition = f"{RSM},topic={tip.topic},partition={tip.partition}"
    for bean, base in [(RSM, "segment-copy-time"), (partition, "segment-copy-time"), (RSM, "segment-fetch-time")]:
        p50, p99, p999, top = (attr(bean, f"{base}-{s}") for s in ("p50", "p99", "p999", "max"))
        assert 0 < p50 <= p99 <= p999 <= top, (bean, base, p50, p99, p999, top)
        # 2 copies, 2 fetches: p99 is the slower of the two, within the buckets' 1 %.
        assert abs(p99 - top) <= 0.01 * top
    assert math.isnan(attr(RSM, "segment-delete-time-p99"))  # nothing deleted: NaN, as its avg
    for name in names:  # every attribute of every bean, still the same burst
        info = server().getMBeanInfo(jpype.JClass("javax.management.ObjectName")(name))
        for a in info.getAttributes():
            attr(name, str(a.getName()))
    assert int(rsm.metricsRequests()) - before == 1
    rsm.close()
    assert our_beans() == []


def scrape(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return {f.name: f for f in text_string_to_metric_families(r.read().decode())}


def test_mbeans_and_prometheus_over_sidecar(jvm: None, segments: list[jt.SpecSegment], tmp_path: Path) -> None:
    port = free_port()
    rsm = shim(
        jt.base_config(
            tmp_path / "store", **{"jvm.transport": "sidecar", "metrics.prometheus.port": str(port)}, **DEBUG
        )
    )
    try:
        assert str(rsm.transportName()) == "sidecar"
        exercise(rsm, segments)
        families = scrape(port)  # the sidecar's endpoint, parsed by prometheus-client's own parser
        uploads = families["kts_remote_storage_manager_metrics_object_upload"]
        untagged = [s.value for s in uploads.samples if not s.labels]
        assert untagged == [3 * len(segments)]  # JMX reads lag by up to the 1 s snapshot age: compared below
        misses = families["kts_chunk_cache_metrics_cache_misses"].samples
        assert [s.value for s in misses] == [1]
        p99 = families["kts_remote_storage_manager_metrics_segment_copy_time_p99"]
        assert p99.type == "gauge" and [s.value > 0 for s in p99.samples if not s.labels] == [True]
        check_beans(rsm, segments)
        with pytest.raises(OSError):  # the endpoint went away with the sidecar
            scrape(port)
    finally:
        rsm.close()


def test_mbeans_in_process(jvm: None, segments: list[jt.SpecSegment], tmp_path: Path) -> None:
    from rsm.jvm import inprocess as jvm_inprocess

    jvm_inprocess.install(adopt_hooks=False)
    try:
        rsm = shim(jt.base_config(tmp_path / "store", **{"jvm.transport": "inprocess"}, **DEBUG))
        try:
            assert str(rsm.transportName()) == "in-process"
            exercise(rsm, segments)
            check_beans(rsm, segments)
        finally:
            rsm.close()
    finally:
        jvm_inprocess.uninstall()
