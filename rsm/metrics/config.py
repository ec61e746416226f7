"""The metrics keys: Aiven's three Kafka ``Metrics`` settings plus ours (Prometheus port, mirror domain)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.configdef import ConfigDef, ConfigKey, in_range, one_of
from rsm.metrics.registry import LEVELS, MetricsConfig

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "metrics.num.samples",
            "int",
            2,
            "Number of sample windows kept for rates, averages and maxima (Kafka's metrics.num.samples).",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "metrics.sample.window.ms",
            "long",
            30000,
            "Length of one sample window in milliseconds (Kafka's metrics.sample.window.ms).",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "metrics.recording.level",
            "string",
            "INFO",
            "Highest level of sensors that record: INFO, DEBUG or TRACE. Our per-fetch timings are DEBUG.",
            validator=one_of(*LEVELS),
        ),
        ConfigKey(
            "metrics.prometheus.port",
            "int",
            None,
            "Serve every metric in Prometheus' text format on this port of 127.0.0.1 from the sidecar "
            "(unset: no endpoint; 0: any free port, printed at start).",
            validator=in_range(0, 65535),
        ),
        ConfigKey(
            "metrics.jmx.mirror.domain",
            "string",
            None,
            "Also show every bean under this JMX domain (the part after aiven.kafka.server.tieredstorage is "
            "kept), e.g. io.kts.tieredstorage. Unset: Aiven's domain only.",
        ),
    ]
)


def metrics_config(configs: Mapping[str, Any]) -> tuple[MetricsConfig, dict[str, Any]]:
    """The registry settings and every parsed metrics key (raises ``ConfigException`` on a bad value)."""
    values = CONFIG_DEF.parse(configs)
    config = MetricsConfig(
        values["metrics.num.samples"],
        values["metrics.sample.window.ms"] / 1000,
        str(values["metrics.recording.level"]).upper(),
    )
    return config, values
