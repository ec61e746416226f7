"""Bounded, log-spaced buckets for windowed percentiles (the ``-p50``/``-p99``/``-p999`` of time sensors).

Kafka's ``Percentiles`` stat keeps a fixed histogram per sample window instead of the samples themselves, so
its memory does not grow with the event rate; so do we. Kafka's buckets are linear or "constant" over a range
set per metric, which makes the error absolute and large at the low end. Ours grow geometrically, so the error
is *relative* and the same at 50 us as at 50 s:

- bucket 0 holds every value ``<= low``; bucket ``i >= 1`` holds ``(low * g**(i-1), low * g**i]`` with
  ``g = (1 + e) / (1 - e)``;
- a bucket reports ``2 * low * g**i / (g + 1)``, which lies within ``e`` (relative) of every value it holds;
- values above ``high`` share the top bucket (reported as about ``high``), values at or below ``low``
  share bucket 0 (reported as ``low``);
- a percentile is never reported above the largest value recorded in the live windows (known exactly), so
  a quantile that falls in the top bucket of a tight distribution is not overstated.

With the defaults (``e`` = 1 %, ``low`` = 0.001, ``high`` = 10**7, in milliseconds: 1 us to 2.8 h) that is
1153 buckets at most. Each window stores only the buckets it has seen (a dict ``index -> count``), so a
sensor's memory is bounded by ``metrics.num.samples * 1153`` small entries whatever the event rate, and a
sensor of rare events (a partition's segment copies) costs a handful.

The percentile is the nearest-rank one: the ``q`` quantile of ``n`` values is the ``ceil(q * n)``-th smallest.
For a value ``x`` of that rank between ``low`` and ``high`` the reported value is within ``e * x`` of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping


class LogBuckets:
    """The bucket scheme: which bucket a value falls in, and the value a bucket reports."""

    __slots__ = ("relative_error", "low", "high", "top", "inv_low", "inv_log_gamma", "_gamma")

    def __init__(self, relative_error: float = 0.01, low: float = 1e-3, high: float = 1e7) -> None:
        if not 0 < relative_error < 1:
            raise ValueError(f"relative_error must be in (0, 1), got {relative_error}")
        if not 0 < low < high:
            raise ValueError(f"need 0 < low < high, got low={low}, high={high}")
        self.relative_error = relative_error
        self.low = low
        self.high = high
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self.inv_low = 1 / low
        self.inv_log_gamma = 1 / math.log(self._gamma)
        self.top = math.ceil(math.log(high / low) * self.inv_log_gamma)

    @property
    def size(self) -> int:
        """Number of buckets: the most entries one window's histogram can hold."""
        return self.top + 1

    def index(self, value: float) -> int:
        if not value > self.low:  # at or below low, and NaN (which compares False)
            return 0
        i = math.ceil(math.log(value * self.inv_low) * self.inv_log_gamma)
        return i if i < self.top else self.top

    def value(self, index: int) -> float:
        if index <= 0:
            return self.low
        return 2 * self.low * self._gamma**index / (self._gamma + 1)

    def quantiles(self, windows: Iterable[Mapping[int, int]], qs: Iterable[float]) -> list[float]:
        """The nearest-rank ``qs`` quantiles of the values counted in ``windows`` (NaN each when none)."""
        merged: dict[int, int] = {}
        for window in windows:
            for i, c in window.items():
                merged[i] = merged.get(i, 0) + c
        n = sum(merged.values())
        qs = list(qs)
        if n == 0:
            return [math.nan] * len(qs)
        order = sorted(merged.items())
        out = []
        for q in qs:
            # Rounded first: 0.99 * 100 is 99.00000000000001 in binary, and the 99th value is meant.
            rank = min(n, max(1, math.ceil(round(q * n, 9))))
            seen = 0
            for i, c in order:
                seen += c
                if seen >= rank:
                    out.append(self.value(i))
                    break
        return out


TIME_MS = LogBuckets()
"""The scheme of every time sensor (values in milliseconds): 1 % relative error from 1 us to 2.8 h."""
