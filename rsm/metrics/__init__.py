"""The plugin's metrics: one thread-safe registry, Aiven's names, and what exports it.

``registry`` holds sampled stats with Kafka ``Metrics`` semantics (``metrics.num.samples`` windows of
``metrics.sample.window.ms``; a sensor below ``metrics.recording.level`` records nothing), ``catalog`` declares
every metric once (name, type, tags, meaning) for the generated docs/metrics.md, ``snapshot`` turns the registry
plus the pull-collected sources into JMX-shaped rows, and ``prometheus`` serves those rows over HTTP.

It sits beside ``rsm.errors``/``rsm.metadata`` so that the manager, the fetch path and the shim can all record
into it; it imports only the standard library, prometheus-client and the layers below (``backends``).
"""

from rsm.metrics.registry import MetricsConfig, MetricsRegistry, Sensor
from rsm.metrics.snapshot import MetricRow

__all__ = ["MetricRow", "MetricsConfig", "MetricsRegistry", "Sensor"]
