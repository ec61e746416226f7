"""The metrics keys: Aiven's three Kafka ``Metrics`` settings plus ours (Prometheus endpoint, mirror domain)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from backends.configdef import ConfigDef, ConfigKey, in_range, one_of
from rsm.metrics.registry import LEVELS, MetricsConfig

_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*")


def _listen_address(_key: str, value: Any) -> str | None:
    """An IP address (v4 or v6) or a host name: what the endpoint can bind to."""
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if _HOST_NAME.fullmatch(value) and len(value) <= 253:
        return None
    return "expected an IP address to listen on (127.0.0.1, 0.0.0.0 for every interface, ::) or a host name"


_listen_address.valid_values = "an IP address or host name"  # type: ignore[attr-defined]

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
            "Serve every metric in Prometheus' text format on this port from the sidecar, at "
            "metrics.prometheus.host (unset: no endpoint; 0: any free port, printed at start).",
            validator=in_range(0, 65535),
        ),
        ConfigKey(
            "metrics.prometheus.host",
            "string",
            "127.0.0.1",
            "Address the Prometheus endpoint listens on: 127.0.0.1 serves this host only; 0.0.0.0 (or ::) every "
            "interface, for a Prometheus in another container or on another host. The endpoint has no "
            "authentication: expose it only to networks allowed to read the metrics.",
            validator=_listen_address,
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
