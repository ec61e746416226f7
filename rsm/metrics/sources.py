"""The pull-collected sources: parts of the fetch path that keep their own counters (``stats()``, keyed by
Aiven's names) are read at snapshot time, so recording into them costs nothing extra on the hot path."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from rsm.metrics.catalog import (
    CACHE_DOMAIN,
    CACHE_TYPES,
    DOMAIN,
    ICEBERG_CACHE_TYPE,
    ICEBERG_MAINTENANCE_TYPE,
    ICEBERG_VALUES_TYPE,
    THREAD_POOL_DOMAIN,
)
from rsm.metrics.registry import Tags
from rsm.metrics.snapshot import Pulled


class HasStats(Protocol):
    def stats(self) -> dict[str, float]: ...


Row = tuple[str, str, Tags, Mapping[str, float]]


def fetch_path_sources(
    chunk_cache: HasStats | None,
    manifest_cache: HasStats,
    index_cache: HasStats,
    prefetcher: HasStats | None,
    rate_limiters: Mapping[str, HasStats | None],
    thread_pools: Callable[[], Mapping[str, Mapping[str, Any]]],
    iceberg_row_groups: Callable[[], HasStats | None] = lambda: None,
    iceberg_values: Callable[[], HasStats | None] = lambda: None,
    iceberg_maintenance: Callable[[], HasStats | None] = lambda: None,
) -> list[Pulled]:
    """``iceberg_row_groups`` gives Iceberg mode's row-group cache once the mode is built, else None;
    ``iceberg_values`` its value parsing's counters once a topic's values are parsed, else None;
    ``iceberg_maintenance`` its maintenance counters (None also when maintenance is off)."""

    def caches() -> Iterable[Row]:
        for kind, cache in (("chunk", chunk_cache), ("manifest", manifest_cache), ("index", index_cache)):
            if cache is not None:
                yield CACHE_DOMAIN, CACHE_TYPES[kind], (), cache.stats()
        row_groups = iceberg_row_groups()
        if row_groups is not None:
            yield CACHE_DOMAIN, ICEBERG_CACHE_TYPE, (), row_groups.stats()

    def prefetch() -> Iterable[Row]:
        if prefetcher is not None:
            stats = dict(prefetcher.stats())
            stats.pop("prefetch-hits-total", None)  # shown once, on the chunk cache's bean
            yield DOMAIN, "prefetch-metrics", (), stats

    def limiters() -> Iterable[Row]:
        for direction, limiter in rate_limiters.items():
            if limiter is not None:
                yield DOMAIN, f"{direction}-rate-limiter-metrics", (), limiter.stats()

    def pools() -> Iterable[Row]:
        for name, values in thread_pools().items():
            yield THREAD_POOL_DOMAIN, f"{name}-thread-pool-metrics", (), {k: float(v) for k, v in values.items()}

    def values() -> Iterable[Row]:
        parsing = iceberg_values()
        if parsing is not None:
            yield DOMAIN, ICEBERG_VALUES_TYPE, (), parsing.stats()

    def maintenance() -> Iterable[Row]:
        stats = iceberg_maintenance()
        if stats is not None:
            yield DOMAIN, ICEBERG_MAINTENANCE_TYPE, (), stats.stats()

    return [caches, prefetch, limiters, pools, values, maintenance]
