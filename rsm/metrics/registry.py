"""Sensors and the registry, with Kafka ``Metrics`` semantics so values read the way Aiven's beans read.

A sensor keeps ``samples`` windows of ``window_s`` seconds (Kafka's ``metrics.num.samples`` and
``metrics.sample.window.ms``): rates, averages and maxima look only at the live windows, totals are cumulative.
A rate divides by the time the windows span, but never by less than ``samples - 1`` full windows, exactly as
Kafka's ``Rate`` does, so a fresh sensor does not report a huge rate after one event. An average or maximum
over no events is NaN, as in Kafka. A sensor above the configured recording level records nothing.

A time sensor also keeps a bounded histogram per window (``rsm.metrics.histogram``: log-spaced buckets, 1 %
relative error), so its percentiles (``-p50``, ``-p99``, ``-p999``) cover the same live windows as its average
and maximum, and are NaN when they are NaN. Like Kafka's ``Percentiles`` stat, it keeps counts per bucket, never
the samples: memory per sensor is bounded whatever the event rate.

Recording is one lock and a few additions (plus one logarithm and a dict update for a time sensor); metric
values are computed only when someone reads them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from math import ceil, log

from rsm.metrics.histogram import TIME_MS, LogBuckets

LEVELS = ("INFO", "DEBUG", "TRACE")
"""Kafka's recording levels, in order: a sensor records when its level is at or below the configured one."""

Tags = tuple[tuple[str, str], ...]
"""A metric's tags in declaration order (Aiven's order: topic, partition, object-type)."""

Clock = Callable[[], float]

PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p999", 0.999))
"""The percentiles a time metric shows, as attribute suffix and quantile: the median, and the tail an operator
alerts on (p999 shows the rare slow GET or copy that p99 of a busy sensor hides)."""


@dataclass(frozen=True)
class MetricsConfig:
    """The three Kafka ``Metrics`` settings the plugin honours (``metrics.*`` keys)."""

    samples: int = 2
    window_s: float = 30.0
    recording_level: str = "INFO"

    def records(self, level: str) -> bool:
        return LEVELS.index(level) <= LEVELS.index(self.recording_level)


class Sensor:
    """One recorded quantity: every ``record(v)`` adds ``v`` to the current window and the running totals."""

    __slots__ = ("_clock", "_lock", "_samples", "_window", "_starts", "_sums", "_counts", "_maxes", "_current")
    __slots__ += ("enabled", "total", "count", "_buckets", "_hists")

    def __init__(self, config: MetricsConfig, enabled: bool, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._samples = max(1, config.samples)
        self._window = config.window_s
        now = clock()
        self._starts = [now] * self._samples
        self._sums = [0.0] * self._samples
        self._counts = [0] * self._samples
        self._maxes = [-math.inf] * self._samples
        self._current = 0
        self.enabled = enabled
        self.total = 0.0
        self.count = 0
        self._buckets: LogBuckets = TIME_MS
        self._hists: list[dict[int, int]] | None = None

    def keep_histogram(self, buckets: LogBuckets = TIME_MS) -> None:
        """Count every later value in ``buckets`` too, per window, for ``percentile`` (idempotent)."""
        with self._lock:
            if self._hists is None:
                self._buckets = buckets
                self._hists = [{} for _ in range(self._samples)]

    def record(self, value: float = 1.0) -> None:
        if not self.enabled:
            return
        now = self._clock()
        hists = self._hists
        bucket = 0
        if hists is not None:
            b = self._buckets
            if value > b.low:  # LogBuckets.index, inlined: this is the hot path
                bucket = ceil(log(value * b.inv_low) * b.inv_log_gamma)
                if bucket > b.top:
                    bucket = b.top
        with self._lock:
            i = self._current
            if now - self._starts[i] >= self._window:
                i = self._current = (i + 1) % self._samples
                self._starts[i] = now
                self._sums[i] = 0.0
                self._counts[i] = 0
                self._maxes[i] = -math.inf
                if hists is not None:
                    hists[i] = {}
            if hists is not None:
                h = hists[i]
                h[bucket] = h.get(bucket, 0) + 1
            self._sums[i] += value
            self._counts[i] += 1
            if value > self._maxes[i]:
                self._maxes[i] = value
            self.total += value
            self.count += 1

    def _live(self, now: float) -> list[int]:
        """Windows young enough to count (Kafka purges those older than ``samples`` windows)."""
        horizon = self._samples * self._window
        return [i for i in range(self._samples) if now - self._starts[i] < horizon]

    def rate(self) -> float:
        """Sum of the live windows per second of the time they span (at least ``samples - 1`` windows)."""
        now = self._clock()
        with self._lock:
            live = self._live(now)
            total = sum(self._sums[i] for i in live)
            oldest = min((self._starts[i] for i in live), default=now)
        elapsed = now - oldest
        full = int(elapsed // self._window) if self._window > 0 else 0
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window
        return total / elapsed if elapsed > 0 else 0.0

    def avg(self) -> float:
        now = self._clock()
        with self._lock:
            live = self._live(now)
            count = sum(self._counts[i] for i in live)
            return sum(self._sums[i] for i in live) / count if count else math.nan

    def max(self) -> float:
        now = self._clock()
        with self._lock:
            live = [i for i in self._live(now) if self._counts[i]]
            return max(self._maxes[i] for i in live) if live else math.nan

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the values in the live windows, within the buckets' relative error and
        never above their maximum; NaN when they hold none, as ``avg`` and ``max``, or without a histogram."""
        now = self._clock()
        with self._lock:
            hists = self._hists
            if hists is None:
                return math.nan
            live = [i for i in self._live(now) if self._counts[i]]
            if not live:
                return math.nan
            (value,) = self._buckets.quantiles([hists[i] for i in live], [q])
            highest = max(self._maxes[i] for i in live)
        return min(value, highest)


Reader = Callable[[], float]


class MetricsRegistry:
    """Every metric the plugin records, keyed by (JMX domain, type, tags); thread-safe.

    Sensors are created once per name and shared by every variant that reads them; the metrics (attribute
    name -> reader) are grouped the way JMX shows them: one bean per (domain, type, tags).
    """

    def __init__(self, config: MetricsConfig | None = None, clock: Clock = time.monotonic) -> None:
        self.config = config or MetricsConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._sensors: dict[str, Sensor] = {}
        self._beans: dict[tuple[str, str, Tags], dict[str, Reader]] = {}

    def sensor(self, name: str, level: str = "INFO") -> Sensor:
        """The sensor called ``name``, created on first use (its level decides once whether it records)."""
        found = self._sensors.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._sensors.get(name)
            if found is None:
                found = self._sensors[name] = Sensor(self.config, self.config.records(level), self._clock)
            return found

    def add(self, domain: str, type_: str, tags: Tags, attribute: str, reader: Reader) -> None:
        with self._lock:
            self._beans.setdefault((domain, type_, tags), {})[attribute] = reader

    def meter(self, domain: str, type_: str, tags: Tags, base: str, sensor: Sensor) -> None:
        """``<base>-rate`` and ``<base>-total`` of ``sensor`` (Kafka's ``Meter``)."""
        self.add(domain, type_, tags, f"{base}-rate", sensor.rate)
        self.add(domain, type_, tags, f"{base}-total", lambda: sensor.total)

    def total(self, domain: str, type_: str, tags: Tags, base: str, sensor: Sensor) -> None:
        self.add(domain, type_, tags, f"{base}-total", lambda: sensor.total)

    def time(self, domain: str, type_: str, tags: Tags, base: str, sensor: Sensor) -> None:
        """``<base>-avg`` and ``<base>-max`` of ``sensor`` (Aiven's), and ``<base>-p50/-p99/-p999`` (ours)."""
        self.add(domain, type_, tags, f"{base}-avg", sensor.avg)
        self.add(domain, type_, tags, f"{base}-max", sensor.max)
        sensor.keep_histogram()
        for suffix, q in PERCENTILES:
            self.add(domain, type_, tags, f"{base}-{suffix}", partial(sensor.percentile, q))

    def beans(self) -> Iterable[tuple[str, str, Tags, dict[str, float]]]:
        """Every bean with its current values (read now, outside the registry's lock)."""
        with self._lock:
            items = [(k, dict(v)) for k, v in self._beans.items()]
        for (domain, type_, tags), readers in items:
            yield domain, type_, tags, {name: float(read()) for name, read in readers.items()}
