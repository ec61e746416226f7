"""The memory a configuration certainly makes the plugin hold, key by key: what the sidecar's start-up check
(rsm.jvm.startup_check) counts against the container's memory limit, beside its own shared region.

The chunk cache's RAM (the whole cache for the memory class, its memory tier for the disk class), the read-ahead
of one fetch stream, and what each format plugged in counts (Iceberg mode, when on: its row-group cache and the
rows of one segment copy). Aiven's -1 (unbounded) cache cannot be bounded and counts as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.configdef import ConfigDef
from rsm.core.config_keys import CORE
from rsm.core.segment_format import plugged_formats


def config_value(raw: Mapping[str, Any], name: str, cdef: ConfigDef = CORE) -> Any:
    """``name``'s value in ``raw`` as ``cdef`` declares it; its default where the value is invalid."""
    key = cdef.keys[name]
    try:
        return key.value_from(raw.get(name))
    except ValueError:  # configure() reports an invalid value with its own message; count the default here
        return key.value_from(None)


def memory_floor(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(what, bytes) of the memory ``config`` holds in the plugin's process, each ``what`` naming its key(s)."""
    try:
        chunk = max(int(config.get("chunk.size", 0)), 0)
    except (TypeError, ValueError):
        chunk = 0
    if "disk" in str(config_value(config, "fetch.chunk.cache.class")).lower():  # "disk" or Aiven's DiskChunkCache
        cache_key = "fetch.chunk.cache.memory.size"
    else:
        cache_key = "fetch.chunk.cache.size"
    cache = max(int(config_value(config, cache_key) or 0), 0)
    readahead = int(config_value(config, "fetch.readahead.chunks") or 0) * chunk
    floor = [(cache_key, cache), ("fetch.readahead.chunks x chunk.size", readahead)]
    for plugin in plugged_formats():
        floor += plugin.memory_floor(config)
    return floor
