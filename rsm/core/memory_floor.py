"""The memory a configuration certainly makes the plugin hold, key by key: what the sidecar's start-up check
(rsm.jvm.startup_check) counts against the container's memory limit, beside its own shared region.

The chunk cache's RAM (the whole cache for the memory class, its memory tier for the disk class), the read-ahead
of one fetch stream and, with Iceberg mode on, its row-group cache and the rows of one segment copy. Aiven's -1
(unbounded) cache cannot be bounded and counts as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.configdef import ConfigDef
from rsm.core.config import CORE
from rsm.iceberg.config import CONFIG_DEF as ICEBERG
from rsm.iceberg.config import WRITER_MEMORY_FACTOR, mode_on


def _value(raw: Mapping[str, Any], name: str, cdef: ConfigDef = CORE) -> Any:
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
    if "disk" in str(_value(config, "fetch.chunk.cache.class")).lower():  # "disk" or Aiven's DiskChunkCache
        cache_key = "fetch.chunk.cache.memory.size"
    else:
        cache_key = "fetch.chunk.cache.size"
    cache = max(int(_value(config, cache_key) or 0), 0)
    readahead = int(_value(config, "fetch.readahead.chunks") or 0) * chunk
    floor = [(cache_key, cache), ("fetch.readahead.chunks x chunk.size", readahead)]
    if mode_on(config):
        floor.append(("iceberg.mode.fetch.cache.size", int(_value(config, "iceberg.mode.fetch.cache.size", ICEBERG))))
        rows = int(_value(config, "iceberg.mode.write.batch.bytes", ICEBERG))
        floor.append(
            (f"{WRITER_MEMORY_FACTOR} x iceberg.mode.write.batch.bytes (one copy's rows)", WRITER_MEMORY_FACTOR * rows)
        )
    return floor
