"""The Prometheus endpoint: prometheus-client serves the snapshot through a custom collector.

Each JMX attribute becomes one family named ``kts_<type>_<attribute>`` (``-`` -> ``_``), with the bean's tags
as labels: ``kts_remote_storage_manager_metrics_object_upload_total{topic="t",partition="0",object_type="log"}``.
Totals are counters, the rest gauges, and so are the levels Aiven names ``-total`` too (``cache-size-total``, the
thread pools'), under the same sample name. Nothing here writes the text format: prometheus-client does.

Beans that differ only in their JMX domain (``metrics.jmx.mirror.domain`` shows every bean twice) have the same
family and labels here: the first is exported, so a scrape never holds a sample twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rsm.metrics.catalog import ALL, LEVELS_NAMED_TOTAL
from rsm.metrics.registry import Tags
from rsm.metrics.snapshot import MetricRow

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def _name(*parts: str) -> str:
    return _INVALID.sub("_", "kts_" + "_".join(parts))


def sample_name(bean_type: str, attr: str) -> str:
    """The name a scrape shows for ``attr`` of a bean of ``bean_type`` (a counter's ends in ``_total``)."""
    if attr.endswith("-total") and attr not in LEVELS_NAMED_TOTAL:
        return _name(bean_type, attr[: -len("-total")]) + "_total"
    return _name(bean_type, attr)


def catalog_sample_names() -> frozenset[str]:
    """Every sample name the plugin's endpoint can show: one per attribute of the metric catalog."""
    return frozenset(sample_name(d.bean.split("type=", 1)[1], a) for d in ALL for a in d.attributes)


class SnapshotCollector(Collector):
    """Reads a fresh snapshot on every scrape."""

    def __init__(self, snapshot: Callable[[], list[MetricRow]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        # One family per name; its samples carry each bean's own tags (the untagged bean has none), which the
        # text format allows: a dashboard sums or filters by label as it likes.
        families: dict[str, Metric] = {}
        exported: set[tuple[str, Tags]] = set()
        for row in self.snapshot():
            if (row.type, row.tags) in exported:
                continue  # the same bean under a mirror domain
            exported.add((row.type, row.tags))
            labels = {_INVALID.sub("_", k): v for k, v in row.tags}
            for attr, value in row.values.items():
                counter = attr.endswith("-total") and attr not in LEVELS_NAMED_TOTAL
                sample = sample_name(row.type, attr)
                name = sample.removesuffix("_total") if counter else sample
                family = families.get(name)
                if family is None:
                    doc = f"{row.domain}:type={row.type} {attr}"
                    family = families[name] = (CounterMetricFamily if counter else GaugeMetricFamily)(name, doc)
                family.add_sample(sample, labels, value)
        return iter(families.values())


def serve(snapshot: Callable[[], list[MetricRow]], port: int, host: str = "127.0.0.1") -> tuple[WSGIServer, Thread]:
    """Start the endpoint on ``host:port`` (0: any free port; read it from ``server.server_port``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return start_http_server(port, addr=host, registry=registry)
