"""What the manager and the backends call to record: one method per event, Aiven's tag variants behind it.

Each event updates every tagged variant Aiven shows (untagged, by topic, by topic and partition, and by
object type where Aiven has it). The sensors of one (topic, partition, object type) are looked up once and
kept, so recording on the hot path is a dict lookup and a few locked additions.
"""

from __future__ import annotations

import threading
from typing import Any

from backends.instrumentation import ERROR_KINDS
from rsm.metrics.catalog import BACKEND_BEANS, DOMAIN, KEY_SERVICE_SENSORS, KEY_SERVICE_TYPE, OBJECT_TYPES, RSM_TYPE
from rsm.metrics.registry import MetricsRegistry, Sensor, Tags


def _variants(topic: str, partition: int, object_type: str | None) -> list[Tags]:
    p = str(partition)
    out: list[Tags] = [(), (("topic", topic),), (("topic", topic), ("partition", p))]
    if object_type is not None:
        ot = ("object-type", object_type)
        out = [(ot,), (("topic", topic), ot), (("topic", topic), ("partition", p), ot)] + out
    return out


class RsmRecorder:
    """The RemoteStorageManager's own metrics (the ``remote-storage-manager-metrics`` beans)."""

    METERS = ("segment-delete", "segment-delete-errors", "segment-fetch-requested-bytes")
    METERS += ("segment-copy-errors", "segment-fetch-errors", "segment-fetch", "segment-fetch-resumed")
    TOTALS = ("segment-delete-bytes",)
    TIMES = ("segment-copy-time", "segment-delete-time")
    OBJECT_METERS = ("object-upload", "object-upload-bytes")

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int, str | None], dict[str, list[Sensor]]] = {}
        self._fetch_time = registry.sensor("segment-fetch-time", "DEBUG")
        registry.time(DOMAIN, RSM_TYPE, (), "segment-fetch-time", self._fetch_time)
        # The untagged beans exist from the start (Aiven's appear only after the first upload, its #625).
        for base in self.METERS + self.TOTALS + self.TIMES + self.OBJECT_METERS:
            self._declare(base, ())

    def _declare(self, base: str, tags: Tags) -> Sensor:
        sensor = self.registry.sensor(base + "".join(f"|{k}={v}" for k, v in tags))
        if base in self.TIMES:
            self.registry.time(DOMAIN, RSM_TYPE, tags, base, sensor)
        elif base in self.TOTALS:
            self.registry.total(DOMAIN, RSM_TYPE, tags, base, sensor)
        else:
            self.registry.meter(DOMAIN, RSM_TYPE, tags, base, sensor)
        return sensor

    def _sensors(self, topic: str, partition: int, object_type: str | None) -> dict[str, list[Sensor]]:
        key = (topic, partition, object_type)
        found = self._cache.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._cache.get(key)
            if found is None:
                bases = self.OBJECT_METERS if object_type is not None else self.METERS + self.TOTALS + self.TIMES
                variants = _variants(topic, partition, object_type)
                found = {b: [self._declare(b, tags) for tags in variants] for b in bases}
                self._cache[key] = found
            return found

    def _record(self, topic: str, partition: int, base: str, value: float, object_type: str | None = None) -> None:
        for sensor in self._sensors(topic, partition, object_type)[base]:
            sensor.record(value)

    def object_uploaded(self, topic: str, partition: int, object_type: str, size: int) -> None:
        if object_type not in OBJECT_TYPES:
            raise ValueError(f"unknown object type {object_type!r}; expected one of {OBJECT_TYPES}")
        self._record(topic, partition, "object-upload", 1, object_type)
        self._record(topic, partition, "object-upload-bytes", size, object_type)

    def segment_copied(self, topic: str, partition: int, seconds: float) -> None:
        self._record(topic, partition, "segment-copy-time", seconds * 1000)

    def segment_copy_failed(self, topic: str, partition: int) -> None:
        self._record(topic, partition, "segment-copy-errors", 1)

    def segment_deleted(self, topic: str, partition: int, size: int, seconds: float) -> None:
        self._record(topic, partition, "segment-delete", 1)
        self._record(topic, partition, "segment-delete-bytes", size)
        self._record(topic, partition, "segment-delete-time", seconds * 1000)

    def segment_delete_failed(self, topic: str, partition: int) -> None:
        self._record(topic, partition, "segment-delete-errors", 1)

    def fetch_requested(self, topic: str, partition: int, size: int, seconds: float | None) -> None:
        """``seconds`` is None for a fetch that opened nothing here (the shim resumed a stream it kept)."""
        self._record(topic, partition, "segment-fetch-requested-bytes", size)
        self._record(topic, partition, "segment-fetch", 1)
        if seconds is None:
            self._record(topic, partition, "segment-fetch-resumed", 1)
        else:
            self._fetch_time.record(seconds * 1000)

    def fetch_failed(self, topic: str, partition: int) -> None:
        self._record(topic, partition, "segment-fetch-errors", 1)


class BackendRecorder:
    """Forwards a backend's ``BackendMetrics`` events (``add_listener``) into Aiven's client-metric beans:
    ``get-object-requests`` -> ``get-object-requests-rate/total`` and ``get-object-time-avg/max``;
    ``errors-throttling`` -> ``throttling-errors-rate/total``; ``bytes-uploaded`` -> ``bytes-uploaded-total``."""

    def __init__(self, registry: MetricsRegistry, store: str) -> None:
        self.registry = registry
        self.domain, self.type = BACKEND_BEANS[store]
        self._lock = threading.Lock()
        self._sensors: dict[str, tuple[Sensor, Sensor | None]] = {}
        for kind in ERROR_KINDS:  # every error class shows 0 before its first error
            self._sensor_for(f"errors-{kind}")

    def _sensor_for(self, name: str) -> tuple[Sensor, Sensor | None]:
        found = self._sensors.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._sensors.get(name)
            if found is not None:
                return found
            r = self.registry
            timer: Sensor | None = None
            if name.endswith("-requests"):
                op = name[: -len("-requests")]
                count = r.sensor(f"{self.type}|{name}")
                r.meter(self.domain, self.type, (), name, count)
                timer = r.sensor(f"{self.type}|{op}-time")
                r.time(self.domain, self.type, (), f"{op}-time", timer)
            elif name.startswith("errors-"):
                base = f"{name[len('errors-') :]}-errors"
                count = r.sensor(f"{self.type}|{base}")
                r.meter(self.domain, self.type, (), base, count)
            else:
                count = r.sensor(f"{self.type}|{name}")
                r.total(self.domain, self.type, (), name, count)
            found = self._sensors[name] = (count, timer)
            return found

    def __call__(self, name: str, n: int, latency: float | None) -> None:
        count, timer = self._sensor_for(name)
        count.record(n)
        if timer is not None and latency is not None:
            timer.record(latency * 1000)


class KeyServiceRecorder:
    """Calls to the key services (``encryption.keyservice.CallEvent``s) into the ``key-service-metrics`` beans, per
    provider: calls, their latency, failed calls and data keys served from the cache instead of a call."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        self._lock = threading.Lock()
        self._sensors: dict[str, dict[str, Sensor]] = {}

    def _for(self, provider: str) -> dict[str, Sensor]:
        found = self._sensors.get(provider)
        if found is not None:
            return found
        with self._lock:
            found = self._sensors.get(provider)
            if found is None:
                r, tags = self.registry, (("provider", provider),)
                found = {name: r.sensor(f"{KEY_SERVICE_TYPE}|{name}|{provider}") for name in KEY_SERVICE_SENSORS}
                for name in ("calls", "call-errors", "cache-hits"):
                    r.meter(DOMAIN, KEY_SERVICE_TYPE, tags, name, found[name])
                r.time(DOMAIN, KEY_SERVICE_TYPE, tags, "call-time", found["call-time"])
                self._sensors[provider] = found
            return found

    def declare(self, provider: str) -> None:
        """The provider's beans show 0 from the start, before its first call."""
        self._for(provider)

    def __call__(self, event: Any) -> None:
        sensors = self._for(event.provider)
        if event.operation == "cache-hit":
            sensors["cache-hits"].record(1)
            return
        sensors["calls"].record(1)
        sensors["call-time"].record(event.seconds * 1000)
        if event.error:
            sensors["call-errors"].record(1)
