"""The dashboard and the alert rules that ship in rsm/metrics/monitoring/, checked with the real tools.

- ``promtool check rules`` and ``promtool test rules`` (Debian's prometheus package, installed by
  .ci/ensure_system_deps.sh): the rules parse, and fire on the series of the unit-test file that must fire them
  and on no other.
- A real Prometheus server (its own free port, a temporary config, 1 s scrapes and rule evaluations) scrapes
  the endpoint of a running sidecar, started by the JVM shim as a broker starts it, under a known workload: the
  sidecar killed and restarted, copies through the upload rate limit, fetches through a chunk cache too small
  for them, a corrupt chunk, copies and fetches that fail. Then every PromQL expression of the dashboard (panels
  and variables) and of the rules returns a series there, every metric they name exists (a renamed metric fails
  here), and Prometheus' own evaluation of the rules file raises the alerts the workload calls for.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jvm_testing as jt
import pytest
import yaml
from emulators import StoreServer, free_port
from helpers import wait_until
from jvm_testing import java_meta
from processes import stop_process
from shim_in_jvm import java_data, jvm, shim  # noqa: F401 - jvm is a fixture

from backends.s3 import S3Backend
from rsm.core.object_keys import segment_keys
from rsm.metrics.catalog import GC_CLUSTER_METRICS
from rsm.metrics.monitoring import ALERT_RULE_TESTS, ALERT_RULES, DASHBOARD, GC_ALERT_RULE_TESTS, GC_ALERT_RULES
from rsm.metrics.prometheus import catalog_sample_names

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
JOB = "kafka-tiered-storage"


def _tool(path: str | None, name: str) -> str:
    if path is None:
        pytest.fail(f"{name} is not installed: run `bash .ci/ensure_system_deps.sh` (Debian's prometheus package)")
    return path


# --- the files --------------------------------------------------------------------------------------------------


def dashboard_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def dashboard_expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable (``label_values(selector, label)``: the
    selector)."""
    out = [
        (f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in dashboard_panels(board) for t in p.get("targets", [])
    ]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert found, f"variable {var['name']}: unexpected query {query!r}"
            out.append((f"variable {var['name']}", found.group(1)))
    return out


def alert_rules(path: Path = ALERT_RULES) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


@pytest.mark.parametrize(
    ("rules_file", "tests_file"), [(ALERT_RULES, ALERT_RULE_TESTS), (GC_ALERT_RULES, GC_ALERT_RULE_TESTS)]
)
def test_promtool_checks_and_unit_tests_the_alert_rules(rules_file: Path, tests_file: Path) -> None:
    promtool = _tool(PROMTOOL, "promtool")
    check = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    rules = alert_rules(rules_file)
    assert f"SUCCESS: {len(rules)} rules found" in check.stdout, check.stdout
    unit = subprocess.run(
        [promtool, "test", "rules", tests_file.name], capture_output=True, text=True, cwd=rules_file.parent
    )
    assert unit.returncode == 0 and "SUCCESS" in unit.stdout, unit.stdout + unit.stderr
    # Every alert is unit-tested: some evaluation expects it and some expects it silent.
    cases = yaml.safe_load(tests_file.read_text())["tests"]
    checked = [c for case in cases for c in case["alert_rule_test"]]
    for rule in rules:
        expected = [c["exp_alerts"] for c in checked if c["alertname"] == rule["alert"]]
        assert any(expected) and not all(expected), f"{rule['alert']}: needs cases that fire and cases that do not"
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]


@pytest.mark.parametrize("rules_file", [ALERT_RULES, GC_ALERT_RULES], ids=["plugin", "gc"])
def test_every_alert_reads_metrics_the_catalog_declares(rules_file: Path) -> None:
    """An alert whose series no scrape of this suite shows (Iceberg maintenance, key services) is still held to
    the names the endpoints serve: the plugin's catalog, and ``kts gc --watch``'s."""
    declared = catalog_sample_names() | {d.exposed for d in GC_CLUSTER_METRICS} | {"up"}
    for rule in alert_rules(rules_file):
        names, regexes = metric_names(rule["expr"])
        assert names, f"{rule['alert']} reads no metric"
        assert names <= declared, f"{rule['alert']} reads undeclared metrics: {sorted(names - declared)}"
        for regex in regexes:
            assert any(re.fullmatch(regex, n) for n in declared), f"{rule['alert']}: no metric matches {regex!r}"
    # A renamed series is caught.
    renamed = "kts_iceberg_maintenance_metrics_passes_total".replace("passes", "pass")
    assert not metric_names(f"increase({renamed}[30m])")[0] <= declared


def test_dashboard_is_well_formed_and_covers_the_issue() -> None:
    board = json.loads(DASHBOARD.read_text())
    panels = list(dashboard_panels(board))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p.get("description"), p["title"]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "job", "instance"}
    # The panels issue #29 asks for, by the series they read.
    text = " ".join(e for _, e in dashboard_expressions(board))
    for needed in [
        "object_upload_bytes_total",  # copy throughput
        "segment_copy_time_p99",  # copy latency percentiles
        "remote_get_bytes_total",  # fetch throughput
        "segment_fetch_time_p99",  # fetch latency percentiles
        "cache_hits_total",  # hit ratio
        "cache_eviction_total",  # evictions
        "remote_get_total",  # GETs per fetched MB
        "integrity_failures_total",
        "segment_copy_errors_total",  # errors by operation
        "segment_fetch_errors_total",
        "segment_delete_errors_total",
        "upload_rate_limiter_metrics_throttle_wait_time_total",
        "sidecar_metrics_restarts_total",
        "kts_gc_cluster_quarantined_bytes",  # what kts gc --delete holds in the quarantine (issue #53)
    ]:
        assert needed in text, needed


# --- a real Prometheus scraping a real sidecar ---------------------------------------------------------------------


class Prometheus:
    """A Prometheus server of the test's own: free port, temporary config and storage, stopped at the end."""

    def __init__(self, workdir: Path, target: str, rules: Path) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = (workdir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                _tool(PROMETHEUS, "prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.logfile = workdir / "prometheus.log"
        if not wait_until(self._ready, 60):
            self.stop()
            pytest.fail(f"Prometheus did not become ready:\n{self.logfile.read_text()[-3000:]}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return data["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        stop_process(self.process, grace=20)
        self.log.close()


def instantiate(expr: str, window: str) -> str:
    """A dashboard or rule expression as it can run over the seconds this test lasts: Grafana's variables and
    every range set to ``window`` (rules look at 10 minutes to 6 hours, which only their unit tests can span;
    here what matters is that each names series that exist and computes something from them)."""
    expr = expr.replace("$__rate_interval", window).replace("$__range", window).replace("$__interval", window)
    expr = expr.replace('"$job"', '".*"').replace('"$instance"', '".*"')
    assert "$" not in expr, f"an unknown Grafana variable in {expr!r}"
    return re.sub(r"\[\d+[smhdwy]\]", f"[{window}]", expr)


def metric_names(expr: str) -> tuple[set[str], set[str]]:
    """The metric names an expression reads, and the ``__name__`` regexes it matches names with."""
    regexes = set(re.findall(r'__name__=~"([^"]+)"', expr))
    names = set(re.findall(r"\b(kts_[a-z0-9_]+)\b", re.sub(r'__name__=~"[^"]+"', "", expr)))
    names |= {"up"} if re.search(r"\bup\b", expr) else set()
    return names, regexes


CHUNK = 64 * 1024


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("jvm")
def test_real_prometheus_scrapes_a_sidecar_and_resolves_every_expression(
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    s3: StoreServer = request.getfixturevalue("s3_moto_server")
    segments = jt.make_test_segments(tmp_path / "segments", batches=60)
    prefix = "monitoring/"
    port = free_port()
    rsm = shim(
        {
            "jvm.transport": "sidecar",
            "python.executable": sys.executable,
            "python.path": str(jt.REPO),
            "storage.backend.class": "s3",
            **{f"storage.{k}": v for k, v in s3.config().items()},
            "key.prefix": prefix,
            "chunk.size": str(CHUNK),
            "compression.enabled": "true",
            "upload.rate.limit.bytes.per.second": str(1024 * 1024),
            # Two chunks of cache, one chunk per GET, nothing read ahead: every chunk read is a load that evicts one.
            "fetch.chunk.cache.size": str(2 * CHUNK),
            "fetch.chunk.cache.prefetch.max.size": "0",
            "fetch.readahead.chunks": "0",
            "fetch.coalesce.max.bytes": str(CHUNK),
            "metrics.recording.level": "DEBUG",  # the fetch latency panel's sensor
            "metrics.prometheus.port": str(port),
            "jvm.sidecar.restart.backoff.ms": "100",
        }
    )
    prometheus = None
    closed = False
    try:
        prometheus = Prometheus(tmp_path, f"127.0.0.1:{port}", ALERT_RULES)
        started = time.monotonic()
        p = prometheus
        assert wait_until(lambda: p.value("kts_sidecar_metrics_starts_total") == 1, 30), "no scrape of the sidecar"

        # 1. The sidecar dies and the shim starts another: the endpoint comes back on the same port.
        os.kill(int(rsm.sidecarPid()), signal.SIGKILL)
        assert wait_until(lambda: p.value("kts_sidecar_metrics_starts_total") == 2, 60), "no scrape after restart"

        # 2. Copies through the upload rate limit, and copies that fail (the segment file is gone).
        good = segments[:3]
        for seg in good:
            rsm.copyLogSegmentData(java_meta(seg.meta), java_data(seg))
        broken = segments[3]
        missing = dataclasses.replace(broken, log=tmp_path / "no-such-segment.log")
        for _ in range(3):
            with pytest.raises(Exception, match="no-such-segment"):
                rsm.copyLogSegmentData(java_meta(broken.meta), java_data(missing))

        # 3. Fetches through a cache of two chunks (a thrashing cache), whole segments, three times over.
        for _ in range(3):
            for seg in good:
                stream = rsm.fetchLogSegment(java_meta(seg.meta), 0)
                try:
                    assert len(bytes(stream.readAllBytes())) == seg.log.stat().st_size
                finally:
                    stream.close()
        # 4. Fetches that fail: a segment that was never copied (its copies failed).
        for _ in range(10):
            with pytest.raises(Exception, match="RemoteResourceNotFound|not found|does not exist"):
                rsm.fetchLogSegment(java_meta(broken.meta), 0)
        # 5. A corrupt chunk: one byte flipped in the middle of a stored .log object.
        direct = S3Backend()
        direct.configure(s3.config())
        try:
            key = segment_keys(prefix, good[1].meta).log
            with direct.fetch(key) as f:
                stored = bytearray(f.read())
            stored[len(stored) // 2] ^= 0xFF
            direct.upload(key, io.BytesIO(bytes(stored)))
        finally:
            direct.close()
        stream = rsm.fetchLogSegment(java_meta(good[1].meta), 0)
        try:
            with pytest.raises(Exception, match="corrupt"):
                stream.readAllBytes()
        finally:
            stream.close()
        # 6. A delete.
        rsm.deleteLogSegmentData(java_meta(good[2].meta))

        # Prometheus scrapes what the sidecar holds now, and evaluates its rules on it.
        assert wait_until(lambda: (p.value("kts_chunk_cache_metrics_integrity_failures_total") or 0) >= 1, 30)
        time.sleep(3)
        window = f"{math.ceil(time.monotonic() - started) + 10}s"

        board = json.loads(DASHBOARD.read_text())
        expressions = dashboard_expressions(board) + [(f"alert {r['alert']}", r["expr"]) for r in alert_rules()]
        known = set(p.api("label/__name__/values"))
        empty = []
        sidecar_down = None
        for where, expr in expressions:
            if where == "alert KtsKeyServiceErrors":
                # This sidecar holds no key pair of a key service, so these series do not exist here;
                # tests/integration/test_key_services.py checks the names against one that does.
                continue
            if where in ("alert KtsIcebergMaintenanceBehind", "alert KtsIcebergCompactionGivingUp"):
                # Their series exist on brokers with Iceberg-mode topics only: promtool's tests cover the rules,
                # and the names are the catalog's.
                assert metric_names(expr)[0] <= catalog_sample_names(), where
                continue
            if where.startswith("panel 'Quarantine"):
                # kts gc --watch serves these, not the sidecar: tests/system/test_gc_cluster.py scrapes them
                assert metric_names(expr)[0] <= {d.name for d in GC_CLUSTER_METRICS}, where
                continue
            names, regexes = metric_names(expr)
            assert names <= known, f"{where} reads metrics that do not exist: {sorted(names - known)}"
            for regex in regexes:
                assert any(re.fullmatch(regex, n) for n in known), f"{where}: no metric matches {regex!r}"
            if where == "alert KtsSidecarDown":
                sidecar_down = expr  # it fires when the endpoint is gone: checked below
                continue
            if not p.query(instantiate(expr, window)):
                empty.append(where)
        assert empty == [], f"expressions with no series under the workload: {empty}"

        # What the workload did shows in the values, not only in the names.
        def total(name: str) -> float | None:
            return p.value(f"sum(max_over_time({name}[{window}]))")

        assert total("kts_sidecar_metrics_restarts_total") == 1
        assert total("kts_chunk_cache_metrics_integrity_failures_total") == 1
        assert total('kts_remote_storage_manager_metrics_segment_copy_errors_total{topic=""}') == 3
        assert total('kts_remote_storage_manager_metrics_segment_fetch_errors_total{topic=""}') == 10
        assert (total("kts_upload_rate_limiter_metrics_throttle_wait_time_total") or 0) > 0
        assert (total("kts_chunk_cache_metrics_cache_eviction_total") or 0) > 100

        # A renamed metric is caught: an expression that reads it, with the name changed, returns nothing.
        name = "kts_sidecar_metrics_restarts_total"
        renamed = next(e for _, e in expressions if name in e).replace(name, name.replace("restarts", "restart"))
        assert not p.query(instantiate(renamed, window))

        # Prometheus' own evaluation of the rules file, with the rules' real windows.
        rules = [r for g in p.api("rules")["groups"] for r in g["rules"]]
        assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
        alerts = {(a["labels"]["alertname"], a["state"]) for a in p.api("alerts")["alerts"]}
        for expected in [
            ("KtsIntegrityFailure", "firing"),
            ("KtsSidecarRestarting", "firing"),
            ("KtsCopyErrors", "firing"),
            ("KtsFetchErrorRatio", "pending"),  # for: 5m
        ]:
            assert expected in alerts, alerts

        # Last, the endpoint goes away with the sidecar: the down alert's expression finds the target.
        rsm.close()
        closed = True
        assert sidecar_down is not None
        assert wait_until(lambda: p.value(f'up{{job="{JOB}"}}') == 0, 30)
        down = p.query(instantiate(sidecar_down, window))
        assert [(r["metric"]["job"], r["metric"]["instance"]) for r in down] == [(JOB, f"127.0.0.1:{port}")]
    finally:
        if not closed:
            rsm.close()
        if prometheus is not None:
            prometheus.stop()
