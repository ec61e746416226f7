"""A point-in-time copy of every metric, shaped like JMX: one row per bean (ObjectName) with its attributes.

The same rows feed ``RemoteStorageManager.metrics()``, the Prometheus collector and the shim's MBeans (as
``to_lines``: one ``objectName<TAB>attribute<TAB>value`` line each, which Java parses without a JSON library).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rsm.metrics.catalog import DOMAIN
from rsm.metrics.registry import MetricsRegistry, Tags

Pulled = Callable[[], Iterable[tuple[str, str, Tags, Mapping[str, float]]]]
"""A source read at snapshot time (caches, prefetch, rate limiters, thread pools): (domain, type, tags, values)."""


@dataclass(frozen=True)
class MetricRow:
    domain: str
    type: str
    tags: Tags
    values: dict[str, float] = field(hash=False)

    @property
    def object_name(self) -> str:
        return f"{self.domain}:type={self.type}" + "".join(f",{k}={v}" for k, v in self.tags)


def collect(registry: MetricsRegistry, sources: Iterable[Pulled], mirror_domain: str | None = None) -> list[MetricRow]:
    rows = [MetricRow(d, t, tags, values) for d, t, tags, values in registry.beans()]
    for source in sources:
        rows.extend(MetricRow(d, t, tags, {k: float(v) for k, v in values.items()}) for d, t, tags, values in source())
    if mirror_domain:
        rows += [
            MetricRow(mirror_domain + r.domain[len(DOMAIN) :], r.type, r.tags, r.values)
            for r in rows
            if r.domain.startswith(DOMAIN)
        ]
    rows.sort(key=lambda r: r.object_name)
    return rows


def as_dict(rows: Iterable[MetricRow]) -> dict[str, dict[str, float]]:
    """ObjectName -> attribute -> value (what ``RemoteStorageManager.metrics()`` returns)."""
    return {r.object_name: dict(r.values) for r in rows}


def _java_double(value: float) -> str:
    """What ``Double.valueOf`` reads back exactly: repr for finite values, Java's spelling of NaN and infinities."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


def to_lines(rows: Iterable[MetricRow]) -> bytes:
    out = []
    for r in rows:
        name = r.object_name
        out.extend(f"{name}\t{attr}\t{_java_double(value)}" for attr, value in sorted(r.values.items()))
    return ("\n".join(out) + "\n").encode()
