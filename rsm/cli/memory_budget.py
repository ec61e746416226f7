"""The plugin's memory at a broker's settings: each term, the sum, and whether the chunk cache can hold what the
broker's remote reader threads read ahead (``kts config check`` prints it; docs/operations.md has the formula).

The terms, for the sidecar transport (the default; with ``jvm.transport=inprocess`` the same memory is in the
broker's process, ``jvm.inprocess.buffer.memory.bytes`` standing for the shared region):

- shared region: ``jvm.sidecar.shared.memory.bytes``; the chunk cache's memory tier lives in it (at most half)
  and so do chunks of fetches in flight. With 0 there is no region and the memory tier is on its own.
- fetches in flight beyond the region: each of ``remote.log.reader.threads`` streams and each kept stream
  decodes up to ``fetch.readahead.chunks`` + 1 chunks; what the other half of the region cannot take is
  allocated outside it while the fetch lasts.
- GETs in flight: each stream (reader threads and kept streams) and each prefetch thread reads at most
  ``fetch.coalesce.max.bytes`` of stored chunks in one ranged GET, held until they are decoded.
- the index cache: ``fetch.indexes.cache.size``.
- with Iceberg mode on (``iceberg.mode.topics.regex`` set), its row-group cache: ``iceberg.mode.fetch.cache.size``,
  the streaming readers of large row groups kept between fetches (``iceberg.mode.fetch.slice.readers``, warned
  about when fewer than the reader threads; ``rsm.iceberg.row_slices``), the index of the tables' live files
  (``iceberg.mode.fetch.index.files`` x ``INDEXED_FILE_BYTES``; ``rsm.iceberg.table_files``), and the rows being
  written: ``iceberg.mode.write.concurrency`` copies write at once (shared by the copier threads), each holding
  ``WRITER_MEMORY_FACTOR`` x ``ROW_GROUP_MAX_BYTES`` (one row group's rows and their encoding; counted on top of
  the uploads: a thread copies either kind of segment, so this errs high by the smaller).
- uploads: each of the broker's copier threads holds two chunks (one being transformed, one being uploaded), and
  all share a read-ahead of 2 x transform threads + 1 chunks; the backend's part buffers are one budget all
  copier threads share (``s3.upload.buffer.memory.bytes`` and its Azure and GCS
  twins).
- the Python interpreter with its libraries, measured at ``PYTHON_BASELINE`` (``ICEBERG_LIBRARIES`` more with
  Iceberg mode on): the sidecar process, or with the in-process transport the broker's own.

A ``-1`` size (Aiven's unbounded) makes the sum unbounded, which is said, never hidden.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsm.core.config_keys import AIVEN_DISK_CHUNK_CACHE, AIVEN_UNBOUNDED, CORE
from rsm.core.known_keys import backend_config_def
from rsm.iceberg.config import ROW_GROUP_MAX_BYTES, WRITER_MEMORY_FACTOR, mode_on
from rsm.iceberg.config_keys import CONFIG_DEF as ICEBERG_CONFIG_DEF
from rsm.iceberg.config_keys import CURSOR_MEMORY_BYTES, INDEXED_FILE_BYTES
from rsm.jvm.config import CONFIG_DEF as SHIM_CONFIG_DEF

MIB = 1024 * 1024
READER_THREADS_KEY = "remote.log.reader.threads"
READER_THREADS_DEFAULT = 10  # Kafka's default
COPIER_THREADS_KEYS = ("remote.log.manager.copier.thread.pool.size", "remote.log.manager.thread.pool.size")
COPIER_THREADS_DEFAULT = 10  # Kafka's default for both
# An idle sidecar with boto3, the GCS and Azure clients imported and an S3 client made measured 90 MiB resident;
# the rest is room for thread stacks and the allocator's slack.
PYTHON_BASELINE = 120 * MIB
# With Iceberg mode on, pyarrow and pyiceberg are loaded too: an idle sidecar measured 86 MiB more resident.
ICEBERG_LIBRARIES = 96 * MIB


COPY, FETCH, BOTH = "copy", "fetch", "both"
"""Which work a term's memory serves: copies to the store, fetches from it, or both (the interpreter, and the
sidecar's shared region, allocated whole at start)."""


@dataclass(frozen=True)
class Term:
    label: str
    size: int | None  # None: unbounded
    how: str
    side: str = BOTH


@dataclass
class MemoryBudget:
    reader_threads: int
    terms: list[Term] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def total(self) -> int | None:
        return _sum(self.terms)

    def side_total(self, side: str) -> int | None:
        """The terms of ``side`` (COPY or FETCH) and those both share: the memory while the broker only copies,
        or only serves remote fetches. The total holds both at once."""
        return _sum([t for t in self.terms if t.side in (side, BOTH)])

    def lines(self) -> list[str]:
        width = max(len(t.label) for t in self.terms)
        out = [f"{t.label:<{width}}  {_mib(t.size):>12}  {t.how}" for t in self.terms]
        out.append(f"{'total':<{width}}  {_mib(self.total):>12}  copies and fetches at once")
        for side, what in ((COPY, "copies only"), (FETCH, "fetches only")):
            labels = ", ".join(t.label for t in self.terms if t.side in (side, BOTH))
            out.append(f"{'  ' + what:<{width}}  {_mib(self.side_total(side)):>12}  {labels}")
        return out


def _sum(terms: list[Term]) -> int | None:
    if any(t.size is None for t in terms):
        return None
    return sum(t.size or 0 for t in terms)


def _mib(size: int | None) -> str:
    return "unbounded" if size is None else f"{size / MIB:,.1f} MiB"


def _int(props: Mapping[str, str], key: str) -> int | None:
    try:
        value = int(str(props.get(key, "")).strip())
    except ValueError:
        return None
    return value if value > 0 else None


def broker_threads(props: Mapping[str, str]) -> tuple[int, int]:
    """Kafka's remote reader threads and copier threads from a broker file (Kafka's defaults when unset)."""
    readers = _int(props, READER_THREADS_KEY) or READER_THREADS_DEFAULT
    copiers = next((n for n in (_int(props, k) for k in COPIER_THREADS_KEYS) if n), COPIER_THREADS_DEFAULT)
    return readers, copiers


def _bounded(value: int | None) -> int | None:
    return None if value is None or value == AIVEN_UNBOUNDED else int(value)


def _upload_parts(configs: Mapping[str, Any]) -> tuple[int, str]:
    """The backend's upload buffers, shared by every copier thread, and how they are counted."""
    backend = str(configs.get("storage.backend.class") or "filesystem")
    cdef = backend_config_def(backend)
    if cdef is None:
        return 0, "a backend of your own: its buffers are not counted"
    values = cdef.parse_all(configs, "storage.")[0]
    for prefix in ("s3", "azure", "gcs"):
        key = f"{prefix}.upload.buffer.memory.bytes"
        if key in values:
            return values[key], f"{key}, shared"
    return 0, "filesystem: streamed"


def memory_budget(
    configs: Mapping[str, Any], broker: Mapping[str, str], cpus: int | None = None
) -> MemoryBudget | None:
    """The budget for the plugin keys ``configs`` (``rsm.config.`` stripped) under the broker file ``broker``;
    None when ``chunk.size`` is missing or invalid (every term depends on it). ``cpus`` stands for this host's
    core count where ``transform.thread.pool.size`` is unset (the guides size a host they name)."""
    core = CORE.parse_all(configs)[0]
    shim = SHIM_CONFIG_DEF.parse_all(configs)[0]
    iceberg = ICEBERG_CONFIG_DEF.parse_all(configs)[0]
    chunk = core["chunk.size"]
    if not chunk:
        return None
    readers, copiers = broker_threads(broker)
    budget = MemoryBudget(readers)
    inprocess = str(shim["jvm.transport"]).strip().lower() == "inprocess"
    region_key = "jvm.inprocess.buffer.memory.bytes" if inprocess else "jvm.sidecar.shared.memory.bytes"
    region = int(shim[region_key] or 0)
    disk = str(core["fetch.chunk.cache.class"]).strip().lower() in ("disk", AIVEN_DISK_CHUNK_CACHE.lower())
    tier_key = "fetch.chunk.cache.memory.size" if disk else "fetch.chunk.cache.size"
    tier = _bounded(core[tier_key])
    if region:
        tier = region // 2 if tier is None else min(tier, region // 2)
        where = "the broker's process" if inprocess else "/dev/shm, mapped by the sidecar and the broker"
        budget.terms.append(
            Term(
                "shared region",
                region,
                f"{region_key}, in {where}: the chunk cache's memory tier ({_mib(tier)}, at most half) and "
                "fetches in flight",
                FETCH if inprocess else BOTH,  # the sidecar allocates its region whole at start
            )
        )
    else:
        budget.terms.append(Term("chunk cache memory tier", tier, tier_key, FETCH))
    kept = 0 if inprocess else int(shim["jvm.sidecar.kept.streams"])
    per_stream = (core["fetch.readahead.chunks"] + 1) * chunk
    in_flight = (readers + kept) * per_stream
    room = region - (tier or 0) if region else 0
    budget.terms.append(
        Term(
            "fetches in flight",
            max(0, in_flight - room),
            f"({READER_THREADS_KEY} {readers} + kept streams {kept}) x (fetch.readahead.chunks + 1) x chunk.size"
            + (f", less the {_mib(room)} of the region they decode into" if region else ""),
            FETCH,
        )
    )
    cores = cpus or (os.cpu_count() or 1)
    background = core["fetch.chunk.cache.thread.pool.size"] or cores
    budget.terms.append(
        Term(
            "GETs in flight",
            (readers + kept + background) * core["fetch.coalesce.max.bytes"],
            f"({READER_THREADS_KEY} {readers} + kept streams {kept} + prefetch threads {background}) x "
            "fetch.coalesce.max.bytes: stored bytes read before they are decoded",
            FETCH,
        )
    )
    budget.terms.append(
        Term("index cache", _bounded(core["fetch.indexes.cache.size"]), "fetch.indexes.cache.size", FETCH)
    )
    if mode_on(configs):
        budget.terms.append(
            Term("Iceberg row groups", iceberg["iceberg.mode.fetch.cache.size"], "iceberg.mode.fetch.cache.size", FETCH)
        )
        _slice_readers(budget, iceberg["iceberg.mode.fetch.slice.readers"], readers)
        files = iceberg["iceberg.mode.fetch.index.files"]
        budget.terms.append(
            Term(
                "Iceberg fetch index",
                files * INDEXED_FILE_BYTES,
                f"iceberg.mode.fetch.index.files {files} live data files indexed x about {INDEXED_FILE_BYTES} bytes",
                FETCH,
            )
        )
    transform = core["transform.thread.pool.size"] or cores
    parts, parts_how = _upload_parts(configs)
    chunks = 2 * copiers + 2 * transform + 1
    budget.terms.append(
        Term(
            "uploads",
            chunks * chunk + parts,
            f"(copier threads {copiers} x 2 + the shared read-ahead 2 x {transform} transform threads + 1) x "
            f"chunk.size + {parts_how}",
            COPY,
        )
    )
    if mode_on(configs):
        writing = min(copiers, iceberg["iceberg.mode.write.concurrency"])
        budget.terms.append(
            Term(
                "Iceberg rows being written",
                writing * WRITER_MEMORY_FACTOR * ROW_GROUP_MAX_BYTES,
                f"{writing} copies writing at once (the fewer of iceberg.mode.write.concurrency and copier threads "
                f"{copiers}) x {WRITER_MEMORY_FACTOR} x a row group of at most {_mib(ROW_GROUP_MAX_BYTES)}",
                COPY,
            )
        )
    where = "in the broker's process" if inprocess else "the sidecar process"
    python, what = PYTHON_BASELINE, "the interpreter and its libraries"
    if mode_on(configs):
        python, what = python + ICEBERG_LIBRARIES, what + " (pyarrow and pyiceberg with Iceberg mode)"
    budget.terms.append(Term("Python", python, f"{what}, idle, {where}"))
    _thrashing_warning(budget, core, tier, disk, readers, chunk)
    if budget.total is None:
        unbounded = ", ".join(t.label for t in budget.terms if t.size is None)
        budget.warnings.append(
            f"memory is unbounded ({unbounded}: a size of -1); under a container memory limit the kernel kills a "
            "process once it is reached: set a size"
        )
    return budget


def _slice_readers(budget: MemoryBudget, kept: int, readers: int) -> None:
    """The readers of large row groups kept between fetches; a warning when fewer than the reader threads."""
    budget.terms.append(
        Term(
            "Iceberg slice readers",
            kept * CURSOR_MEMORY_BYTES,
            f"iceberg.mode.fetch.slice.readers {kept} readers of large row groups kept between fetches x "
            f"{_mib(CURSOR_MEMORY_BYTES)}",
            FETCH,
        )
    )
    if kept < readers:
        budget.warnings.append(
            f"iceberg.mode.fetch.slice.readers is {kept}, fewer than {READER_THREADS_KEY} {readers}: when more "
            "consumers catch up through compacted Iceberg files at once than readers are kept, each fetch opens a "
            f"reader again and decodes its row group from the start. Set it to {readers}"
        )


def _thrashing_warning(
    budget: MemoryBudget, core: Mapping[str, Any], tier: int | None, disk: bool, readers: int, chunk: int
) -> None:
    """Every reader thread reads ahead ``prefetch.max.size`` plus the two chunks it is between; a cache smaller
    than all of that evicts chunks before their reader gets to them (the KtsCacheThrashing alert)."""
    per_reader = core["fetch.chunk.cache.prefetch.max.size"] + 2 * chunk
    need = readers * per_reader
    if disk:
        holds, what = _bounded(core["fetch.chunk.cache.size"]), "the disk chunk cache"
    else:
        holds, what = tier, "the chunk cache's memory tier"
    if holds is None or holds >= need:
        return
    budget.warnings.append(
        f"{what} holds {_mib(holds)}, less than {READER_THREADS_KEY} {readers} x (fetch.chunk.cache.prefetch.max.size "
        f"+ 2 x chunk.size) = {_mib(need)}: concurrent readers evict each other's chunks before they are read "
        "(the KtsCacheThrashing alert). Raise fetch.chunk.cache.size"
        + ("" if disk else " (and jvm.sidecar.shared.memory.bytes to twice it: the tier is at most half the region)")
        + ", or lower fetch.chunk.cache.prefetch.max.size"
    )
