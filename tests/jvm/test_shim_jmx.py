"""The shim's MBeans in a real JVM (JPype, this process): the shim is loaded by reflection as a broker loads it,
tiers real segments over each transport, and its metrics appear in the platform MBean server under Aiven's
ObjectNames with the values the Python registry holds; a read burst costs one snapshot; close() removes them."""

from __future__ import annotations

import math
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import jvm_testing as jt
import pytest
from emulators import free_port
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families
from shim_in_jvm import java_data, jvm, shim  # noqa: F401 - jvm is a fixture

from rsm.metrics.catalog import DOMAIN, SIDECAR_TYPE

jpype = pytest.importorskip("jpype")
pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")

RSM = "aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics"
SIDECAR = f"{DOMAIN}:type={SIDECAR_TYPE}"  # the Java side keeps this bean: read under the name the catalog documents
CHUNK_CACHE = "aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics"
DEBUG = {"metrics.recording.level": "DEBUG"}  # the per-fetch timing (and its percentiles) is a DEBUG sensor


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[jt.SpecSegment]:
    return jt.make_test_segments(tmp_path_factory.mktemp("jmx-segs"), batches=60)[:2]


def server() -> Any:
    return jpype.JClass("java.lang.management.ManagementFactory").getPlatformMBeanServer()


def attr(name: str, attribute: str) -> float:
    return float(server().getAttribute(jpype.JClass("javax.management.ObjectName")(name), attribute))


def our_beans() -> list[str]:
    pattern = jpype.JClass("javax.management.ObjectName")("aiven.kafka.server.tieredstorage*:*")
    return sorted(str(n) for n in server().queryNames(pattern, None))


def exercise(rsm: Any, segments: list[jt.SpecSegment]) -> None:
    for seg in segments:
        rsm.copyLogSegmentData(jt.java_meta(seg.meta), java_data(seg))
    for _ in range(2):  # the second read of chunk 0 is a cache hit
        stream = rsm.fetchLogSegment(jt.java_meta(segments[0].meta), 0, 99)
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


@pytest.mark.usefixtures("jvm")
def test_mbeans_and_prometheus_over_sidecar(segments: list[jt.SpecSegment], tmp_path: Path) -> None:
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


@pytest.mark.usefixtures("jvm")
def test_mbeans_in_process(segments: list[jt.SpecSegment], tmp_path: Path) -> None:
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


def sidecar_series(port: int) -> dict[str, float]:
    """The sidecar-metrics families of the endpoint: name -> value."""
    return {
        s.name: s.value for f in scrape(port).values() if f.name.startswith("kts_sidecar_metrics_") for s in f.samples
    }


@pytest.mark.usefixtures("jvm")
def test_sidecar_restarts_and_liveness_on_the_bean_and_the_endpoint(tmp_path: Path) -> None:
    """kill -9 the sidecar: the shim's bean shows it down, then restarted; restarts that fail are counted; each new
    sidecar's endpoint carries the shim's counts, so the counter grows across restarts instead of resetting."""
    # The interpreter behind a script the test can break: restarts then fail until it is mended.
    python = tmp_path / "python"
    working = f'#!/bin/sh\nexec {sys.executable} "$@"\n'
    python.write_text(working)
    python.chmod(0o755)
    port = free_port()
    rsm = shim(
        jt.base_config(
            tmp_path / "store",
            **{
                "jvm.transport": "sidecar",
                "python.executable": str(python),
                "metrics.prometheus.port": str(port),
                "metrics.jmx.mirror.domain": "io.kts.tieredstorage",
                "jvm.sidecar.restart.backoff.ms": "100",
            },
        )
    )
    try:
        mirrored = "io.kts.tieredstorage:type=sidecar-metrics"
        assert SIDECAR in our_beans() and mirrored in server_mirror_names()
        assert attr(SIDECAR, "starts-total") == 1 and attr(SIDECAR, "restarts-total") == 0
        assert attr(SIDECAR, "up") == 1 and attr(mirrored, "up") == 1
        # Seconds since the sidecar was ready (its first answer): measured 0.5 to 1.4 s here at load 20, against 5 s.
        # A gauge in milliseconds would read hundreds; one that never counts from the start, a machine's uptime.
        assert 0 <= attr(SIDECAR, "last-reply-age-seconds") < 5
        series = sidecar_series(port)
        assert series["kts_sidecar_metrics_starts_total"] == 1 and series["kts_sidecar_metrics_restarts_total"] == 0
        assert series["kts_sidecar_metrics_up"] == 1 and series["kts_sidecar_metrics_restart_failures_total"] == 0
        assert 0 <= series["kts_sidecar_metrics_last_reply_age_seconds"] < 5

        # A clean restart. The bean is read live: it shows the dead sidecar as down until the next one is ready.
        pid1 = int(rsm.sidecarPid())
        os.kill(pid1, signal.SIGKILL)
        assert wait_until(lambda: attr(SIDECAR, "up") == 0, 5), "the bean never showed the dead sidecar down"
        assert wait_until(lambda: attr(SIDECAR, "up") == 1, 60)
        pid2 = int(rsm.sidecarPid())
        assert pid2 != pid1
        assert attr(SIDECAR, "starts-total") == 2 and attr(SIDECAR, "restarts-total") == 1
        assert wait_until(lambda: _scrapes(port), 30)
        series = sidecar_series(port)  # the new sidecar's endpoint, on the same port
        assert series["kts_sidecar_metrics_starts_total"] == 2 and series["kts_sidecar_metrics_restarts_total"] == 1

        # Restarts that fail (the interpreter is broken) are counted, and the sidecar stays down meanwhile.
        python.write_text("#!/bin/sh\nexit 7\n")
        os.kill(pid2, signal.SIGKILL)
        assert wait_until(lambda: attr(SIDECAR, "restart-failures-total") >= 2, 30)
        assert attr(SIDECAR, "up") == 0 and attr(SIDECAR, "starts-total") == 2
        with pytest.raises(OSError):
            scrape(port)  # nothing serves the endpoint: Prometheus sees up == 0
        python.write_text(working)
        assert wait_until(lambda: attr(SIDECAR, "up") == 1, 60)
        failures = attr(SIDECAR, "restart-failures-total")
        assert attr(SIDECAR, "starts-total") == 3 and attr(SIDECAR, "restarts-total") == 2
        assert wait_until(lambda: _scrapes(port), 30)
        series = sidecar_series(port)
        assert series["kts_sidecar_metrics_starts_total"] == 3 and series["kts_sidecar_metrics_restarts_total"] == 2
        assert series["kts_sidecar_metrics_restart_failures_total"] == failures
    finally:
        rsm.close()
    assert our_beans() == []


def server_mirror_names() -> list[str]:
    pattern = jpype.JClass("javax.management.ObjectName")("io.kts.tieredstorage*:*")
    return sorted(str(n) for n in server().queryNames(pattern, None))


def _scrapes(port: int) -> bool:
    try:
        scrape(port)
        return True
    except OSError:
        return False
