"""Every metric, declared once: bean, attribute, type, tags and meaning. docs/metrics.md is generated from here
(``kts metrics-docs``) and ``make lint`` fails when it is stale.

Names follow Aiven's plugin wherever it has the metric, so an Aiven user's dashboards keep working; the rows
marked *ours* come on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from rsm.metrics.histogram import TIME_MS
from rsm.metrics.registry import PERCENTILES

DOMAIN = "aiven.kafka.server.tieredstorage"
RSM_TYPE = "remote-storage-manager-metrics"
CACHE_DOMAIN = f"{DOMAIN}.cache"
THREAD_POOL_DOMAIN = f"{DOMAIN}.thread-pool"
CACHE_TYPES = {"chunk": "chunk-cache-metrics", "manifest": "segment-manifest-cache-metrics"}
CACHE_TYPES["index"] = "segment-indexes-cache-metrics"
ICEBERG_CACHE_TYPE = "iceberg-row-group-cache-metrics"
"""Ours: decoded row groups of Iceberg-mode segments (present once Iceberg mode is on)."""
ICEBERG_VALUES_TYPE = "iceberg-values-metrics"
"""Ours: the parsed `value` column of Iceberg-mode topics (present once a topic's values are parsed)."""
KEY_SERVICE_TYPE = "key-service-metrics"
"""Ours: calls to the key services that hold key pairs (AWS KMS, Vault Transit, PKCS#11), tagged by provider."""
KEY_SERVICE_SENSORS = ("calls", "call-errors", "cache-hits", "call-time")
ICEBERG_MAINTENANCE_TYPE = "iceberg-maintenance-metrics"
"""Ours: the passes of Iceberg mode's table maintenance on this broker (present once a segment was copied in
Iceberg mode with maintenance on)."""
SIDECAR_TYPE = "sidecar-metrics"
"""The JVM shim's view of its Python sidecar: kept by the shim (JMX), passed to each sidecar it starts (Prometheus)."""
BACKEND_BEANS = {
    "s3": (f"{DOMAIN}.s3", "s3-client-metrics"),
    "gcs": (f"{DOMAIN}.gcs", "gcs-client-metrics"),
    "azure": (f"{DOMAIN}.azure", "azure-blob-storage-client-metrics"),
}

OBJECT_TYPES = ("log", "indexes", "rsm-manifest")
"""Aiven's object-type tag values: the suffixes of the three objects of a segment."""

PER_OBJECT = ("", "object-type", "topic", "topic,object-type", "topic,partition", "topic,partition,object-type")
PER_PARTITION = ("", "topic", "topic,partition")


@dataclass(frozen=True)
class MetricDecl:
    bean: str
    attributes: tuple[str, ...]
    kind: str
    tags: tuple[str, ...]
    meaning: str
    ours: bool = False


def _percentiles(base: str) -> tuple[str, ...]:
    return tuple(f"{base}-{suffix}" for suffix, _ in PERCENTILES)


_ERROR = f"{TIME_MS.relative_error:.0%}"
PERCENTILE_NOTE = (
    f"Windowed percentiles over the same windows as -avg and -max, within {_ERROR} (relative) of the exact "
    "value from 1 us to 2.8 h, never above -max; NaN when -avg is."
)


def _rsm(attrs: tuple[str, ...], kind: str, tags: tuple[str, ...], meaning: str, ours: bool = False) -> MetricDecl:
    return MetricDecl(f"{DOMAIN}:type={RSM_TYPE}", attrs, kind, tags, meaning, ours)


RSM_METRICS = [
    _rsm(
        ("object-upload-rate", "object-upload-total"),
        "rate/total",
        PER_OBJECT,
        "Objects uploaded (per second, in all).",
    ),
    _rsm(
        ("object-upload-bytes-rate", "object-upload-bytes-total"),
        "rate/total",
        PER_OBJECT,
        "Bytes of uploaded objects as stored (after compression and encryption).",
    ),
    _rsm(
        ("segment-copy-time-avg", "segment-copy-time-max"),
        "time (ms)",
        PER_PARTITION,
        "Duration of a successful copyLogSegmentData, milliseconds.",
    ),
    _rsm(
        _percentiles("segment-copy-time"),
        "time percentiles (ms)",
        PER_PARTITION,
        f"Duration of a successful copyLogSegmentData: median and tail. {PERCENTILE_NOTE}",
        ours=True,
    ),
    _rsm(("segment-delete-rate", "segment-delete-total"), "rate/total", PER_PARTITION, "Segments deleted."),
    _rsm(("segment-delete-bytes-total",), "total", PER_PARTITION, "Size in bytes of the deleted segments."),
    _rsm(
        ("segment-delete-errors-rate", "segment-delete-errors-total"),
        "rate/total",
        PER_PARTITION,
        "Deletes that failed (the broker retries them).",
    ),
    _rsm(
        ("segment-delete-time-avg", "segment-delete-time-max"),
        "time (ms)",
        PER_PARTITION,
        "Duration of a successful deleteLogSegmentData, milliseconds.",
    ),
    _rsm(
        _percentiles("segment-delete-time"),
        "time percentiles (ms)",
        PER_PARTITION,
        f"Duration of a successful deleteLogSegmentData: median and tail. {PERCENTILE_NOTE}",
        ours=True,
    ),
    _rsm(
        ("segment-fetch-requested-bytes-rate", "segment-fetch-requested-bytes-total"),
        "rate/total",
        PER_PARTITION,
        "Bytes the broker asked for in fetchLogSegment (the requested range, whether or not it reads it all; "
        "also for fetches the JVM shim served by going on with a stream it kept).",
    ),
    _rsm(
        ("segment-fetch-rate", "segment-fetch-total"),
        "rate/total",
        PER_PARTITION,
        "fetchLogSegment calls answered: the streams this plugin opened and the fetches the JVM shim served by "
        "going on with a stream it kept.",
        ours=True,
    ),
    _rsm(
        ("segment-fetch-resumed-rate", "segment-fetch-resumed-total"),
        "rate/total",
        PER_PARTITION,
        "Of those, the fetches the JVM shim served by going on with the stream it kept since the previous fetch "
        "of the same segment: nothing was opened and the broker waited for no round trip. A low share of "
        "segment-fetch-total for a lagging consumer means streams are not kept (jvm.sidecar.kept.streams, "
        "shared memory off or full); segment-fetch-time covers only the others.",
        ours=True,
    ),
    _rsm(
        ("segment-copy-errors-rate", "segment-copy-errors-total"),
        "rate/total",
        PER_PARTITION,
        "Copies that failed (their partial uploads were deleted).",
        ours=True,
    ),
    _rsm(
        ("segment-fetch-errors-rate", "segment-fetch-errors-total"),
        "rate/total",
        PER_PARTITION,
        "fetchLogSegment or fetchIndex calls that failed (missing segment, corrupt data, storage error); an "
        "absent optional index (no transaction index) is not counted.",
        ours=True,
    ),
    _rsm(
        ("segment-fetch-time-avg", "segment-fetch-time-max"),
        "time (ms), DEBUG",
        ("",),
        "Time to open a fetch stream (manifest load and range planning), milliseconds; recorded only when "
        "metrics.recording.level is DEBUG or TRACE.",
        ours=True,
    ),
    _rsm(
        _percentiles("segment-fetch-time"),
        "time percentiles (ms), DEBUG",
        ("",),
        f"Time to open a fetch stream: median and tail (DEBUG, as above). {PERCENTILE_NOTE}",
        ours=True,
    ),
]

_CACHE_ATTRS = [
    (
        "cache-hits-total",
        "Lookups answered from the cache, or by a load already on its way (another reader's, a "
        "coalesced GET in flight).",
    ),
    (
        "cache-misses-total",
        "Lookups that started a load (for the chunk cache: a read from the store or its disk tier).",
    ),
    ("cache-load-success-total", "Loads that succeeded."),
    ("cache-load-success-time-total", "Time spent in successful loads, nanoseconds."),
    ("cache-load-failure-total", "Loads that failed."),
    ("cache-load-failure-time-total", "Time spent in failed loads, nanoseconds."),
    ("cache-eviction-total", "Entries evicted (size or retention)."),
    ("cache-eviction-weight-total", "Weight of the evicted entries (bytes for weighed caches, else entries)."),
]
_CACHE_LEVEL = ("cache-size-total", "Entries held now.")
_CACHE_WEIGHT = (
    "Weight of the entries held now: bytes for the chunk, index and Iceberg row-group caches, entries for the "
    "manifest cache."
)
_DISK_LEVELS = [
    ("disk-cache-size-total", "Chunks held by the disk tier now (disk chunk cache only)."),
    ("disk-cache-bytes-total", "Bytes held by the disk tier now (disk chunk cache only)."),
]
_CHUNK_CACHE_OURS = [
    ("integrity-failures-total", "Chunks whose CRC-32C or AES-GCM tag did not match: corrupt stored data."),
    ("remote-get-total", "Ranged GETs sent to the store for chunks."),
    ("remote-get-bytes-total", "Stored bytes fetched by those GETs."),
    ("coalesced-get-total", "GETs that covered more than one chunk."),
    ("coalesced-get-bytes-total", "Stored bytes fetched by coalesced GETs."),
    ("prefetch-hits-total", "Reads answered by a chunk that prefetch loaded."),
    ("disk-cache-hits-total", "Reads answered by the disk tier (disk chunk cache only)."),
]

CACHE_METRICS = (
    [
        MetricDecl(f"{CACHE_DOMAIN}:type={t}", (name,), "total", ("",), meaning)
        for t in CACHE_TYPES.values()
        for name, meaning in _CACHE_ATTRS
    ]
    + [
        MetricDecl(f"{CACHE_DOMAIN}:type={t}", (_CACHE_LEVEL[0],), "gauge", ("",), _CACHE_LEVEL[1])
        for t in CACHE_TYPES.values()
    ]
    + [
        MetricDecl(f"{CACHE_DOMAIN}:type={t}", ("cache-weight-total",), "gauge", ("",), _CACHE_WEIGHT, ours=True)
        for t in CACHE_TYPES.values()
    ]
    + [
        MetricDecl(f"{CACHE_DOMAIN}:type={CACHE_TYPES['chunk']}", (name,), "gauge", ("",), meaning, ours=True)
        for name, meaning in _DISK_LEVELS
    ]
    + [
        MetricDecl(f"{CACHE_DOMAIN}:type={CACHE_TYPES['chunk']}", (name,), "total", ("",), meaning, ours=True)
        for name, meaning in _CHUNK_CACHE_OURS
    ]
    + [
        MetricDecl(
            f"{CACHE_DOMAIN}:type={CACHE_TYPES['index']}",
            ("integrity-failures-total",),
            "total",
            ("",),
            "Indexes whose CRC-32C or AES-GCM tag did not match when loaded: corrupt stored data.",
            ours=True,
        )
    ]
    + [
        MetricDecl(f"{CACHE_DOMAIN}:type={ICEBERG_CACHE_TYPE}", (name,), kind, ("",), meaning, ours=True)
        for name, meaning, kind in [
            *((n, m, "total") for n, m in _CACHE_ATTRS),
            (*_CACHE_LEVEL, "gauge"),
            ("cache-weight-total", _CACHE_WEIGHT, "gauge"),
        ]
    ]
    + [
        MetricDecl(
            f"{DOMAIN}:type={ICEBERG_VALUES_TYPE}",
            ("incompatible-rows-total",),
            "total",
            ("",),
            "Rows tiered in Iceberg mode whose registry schema id is incompatible with their table's `value` "
            "struct (a field changed type): `value` stays null, the bytes are in `value_raw`; the log names the id.",
            ours=True,
        )
    ]
)

ICEBERG_MAINTENANCE_METRICS = [
    MetricDecl(f"{DOMAIN}:type={ICEBERG_MAINTENANCE_TYPE}", (name,), kind, ("",), meaning, ours=True)
    for name, kind, meaning in [
        (
            "passes-total",
            "total",
            "Maintenance passes over the tables completed (each table whose lease this "
            "broker holds is maintained; the others are left to the broker holding theirs).",
        ),
        ("errors-total", "total", "Tables whose maintenance failed, and passes that failed (catalog down)."),
        (
            "conflicts-total",
            "total",
            "Steps that gave up some work because the table changed under them (left for the next pass).",
        ),
        (
            "compaction-bins-given-up-total",
            "total",
            "Compaction bins given up because a copy or another engine replaced rows of their files, or another "
            "engine's merge-on-read delete added delete files to them, meanwhile (left for the next pass). Rising "
            "at every pass for an hour: alert `KtsIcebergCompactionGivingUp`.",
        ),
        (
            "orphan-removals-refused-total",
            "total",
            "Orphan-file removals refused because another table of the namespace shares the table's location "
            "(a register_table clone, a backup); the log names both tables.",
        ),
        ("snapshots-expired-total", "total", "Snapshots expired."),
        ("files-compacted-total", "total", "Small data files rewritten into larger ones."),
        ("bytes-compacted-total", "total", "Bytes of the small data files rewritten."),
        ("manifests-rewritten-total", "total", "Data manifests merged."),
        (
            "orphan-files-removed-total",
            "total",
            "Files no kept table version referenced for longer than the grace period, moved into the warehouse's "
            "quarantine.",
        ),
        ("orphan-bytes-removed-total", "total", "Bytes of those files."),
        (
            "quarantine-files-purged-total",
            "total",
            "Files the warehouse's quarantine held past gc.quarantine.ms, removed for good.",
        ),
        ("quarantine-bytes-purged-total", "total", "Bytes of those files."),
        ("expire-snapshots-time-ms-total", "total", "Time spent expiring snapshots."),
        ("compaction-time-ms-total", "total", "Time spent compacting."),
        ("rewrite-manifests-time-ms-total", "total", "Time spent merging manifests."),
        ("remove-orphans-time-ms-total", "total", "Time spent finding orphan files and moving them aside."),
        (
            "seconds-since-last-pass",
            "gauge",
            "Seconds since the last completed pass (NaN before the first): "
            "grows without bound when passes fail or hang.",
        ),
        ("table-snapshots-max", "gauge", "The most snapshots any table maintained in the last pass kept."),
        ("table-data-manifests-max", "gauge", "The most manifests of any current snapshot after the last pass."),
    ]
]

PULLED_OURS = [
    MetricDecl(
        f"{DOMAIN}:type=prefetch-metrics",
        (name,),
        "total",
        ("",),
        meaning,
        ours=True,
    )
    for name, meaning in [
        ("prefetch-runs-total", "Prefetch runs started after a read."),
        ("prefetch-chunks-total", "Chunks loaded ahead."),
        ("prefetch-cross-segment-total", "Runs that continued into the partition's next segment."),
        ("prefetch-failures-total", "Prefetch loads that failed (the read itself is unaffected)."),
    ]
] + [
    MetricDecl(f"{DOMAIN}:type={d}-rate-limiter-metrics", (name,), "total", ("",), meaning, ours=True)
    for d in ("upload", "fetch")
    for name, meaning in [
        ("throttle-wait-time-total", f"Time {d}s waited for the rate limit, nanoseconds."),
        ("throttled-bytes-total", "Bytes that had to wait."),
        ("rate-limited-bytes-total", "Bytes that passed the limiter."),
    ]
]

THREAD_POOL_METRICS = [
    MetricDecl(f"{THREAD_POOL_DOMAIN}:type=<pool>-thread-pool-metrics", (name,), "gauge", ("",), meaning)
    for name, meaning in [
        ("active-thread-count-total", "Threads running a task."),
        ("parallelism-total", "Maximum threads of the pool."),
        ("pool-size-total", "Threads started."),
        ("queued-task-count-total", "Tasks waiting for a thread."),
    ]
]

BACKEND_METRICS = [
    MetricDecl(
        f"{domain}:type={type_}",
        attrs,
        kind,
        ("",),
        meaning,
        ours=ours,
    )
    for domain, type_ in BACKEND_BEANS.values()
    for attrs, kind, meaning, ours in [
        (
            ("<operation>-requests-rate", "<operation>-requests-total"),
            "rate/total",
            "Requests of one operation sent, retries included (get-object, put-object, upload-part...).",
            False,
        ),
        (("<operation>-time-avg", "<operation>-time-max"), "time (ms)", "Latency of one request attempt.", False),
        (
            _percentiles("<operation>-time"),
            "time percentiles (ms)",
            f"Latency of one request attempt: median and tail. {PERCENTILE_NOTE}",
            True,
        ),
        (
            ("<kind>-errors-rate", "<kind>-errors-total"),
            "rate/total",
            "Failed attempts by class: throttling, server, configured-timeout, io, other.",
            False,
        ),
        (("bytes-uploaded-total", "bytes-downloaded-total"), "total", "Payload bytes moved.", True),
    ]
]

SIDECAR_METRICS = [
    MetricDecl(f"{DOMAIN}:type={SIDECAR_TYPE}", (name,), kind, ("",), meaning, ours=True)
    for name, kind, meaning in [
        (
            "starts-total",
            "total",
            "Python sidecars the broker's shim started: the first, then one per restart. The shim passes the count "
            "to each sidecar it starts, so the Prometheus endpoint shows it too and it does not drop to 0 when a "
            "sidecar dies (only when the broker restarts).",
        ),
        (
            "restarts-total",
            "total",
            "Sidecars the shim started again after one died (crash, OOM killer, kill -9). The calls in flight at "
            "each restart failed, and the other counters started again from 0.",
        ),
        (
            "restart-failures-total",
            "total",
            "Restart attempts that failed (the sidecar exited before it was ready: a broken Python environment, a "
            "rejected configuration); the shim tries again with a growing backoff.",
        ),
        (
            "up",
            "gauge",
            "1 while the sidecar process runs, 0 while it is dead or being restarted (JMX). The endpoint is served "
            "by the sidecar, so it always shows 1 there: Prometheus sees a dead sidecar as a failed scrape (up == 0).",
        ),
        (
            "last-reply-age-seconds",
            "gauge",
            "Seconds since the sidecar last answered a request of the shim (JMX: as the shim saw it; Prometheus: as "
            "the sidecar sent it). The shim reads the metrics every 5 s, so this stays below about 5 s for a live "
            "sidecar even when the broker is idle; a growing value means a stuck sidecar.",
        ),
    ]
]

KEY_SERVICE_METRICS = [
    MetricDecl(f"{DOMAIN}:type={KEY_SERVICE_TYPE}", attrs, kind, ("provider",), meaning, ours=True)
    for attrs, kind, meaning in [
        (
            ("calls-rate", "calls-total"),
            "rate/total",
            "Calls to the key service: an unwrap per segment read (not in the cache), a public key per process.",
        ),
        (("call-time-avg", "call-time-max"), "time (ms)", "Latency of one call, retries of the SDK included."),
        (_percentiles("call-time"), "time percentiles (ms)", f"Latency of one call. {PERCENTILE_NOTE}"),
        (
            ("call-errors-rate", "call-errors-total"),
            "rate/total",
            "Failed calls: unreachable, access denied, key disabled or deleted. Fetches of the provider's segments "
            "fail (retriably) while this grows; copies go on (they wrap locally).",
        ),
        (
            ("cache-hits-rate", "cache-hits-total"),
            "rate/total",
            "Data keys served from encryption.data.key.cache instead of a call.",
        ),
    ]
]

LEVELS_NAMED_TOTAL = frozenset(
    a for d in CACHE_METRICS + THREAD_POOL_METRICS if d.kind == "gauge" for a in d.attributes
)
"""Attributes that end in ``-total`` (Aiven's names) but hold a level that goes up and down: gauges in Prometheus."""

ALL = (
    RSM_METRICS
    + CACHE_METRICS
    + THREAD_POOL_METRICS
    + BACKEND_METRICS
    + PULLED_OURS
    + ICEBERG_MAINTENANCE_METRICS
    + SIDECAR_METRICS
    + KEY_SERVICE_METRICS
)


def metrics_docs_markdown() -> str:
    """The table of every metric (docs/metrics.md holds it between markers)."""
    rows = ["| Bean | Attribute | Type | Tags | Meaning |", "|---|---|---|---|---|"]
    for d in ALL:
        tags = "; ".join(t or "none" for t in d.tags)
        meaning = d.meaning + (" *(ours)*" if d.ours else "")
        rows.append(f"| `{d.bean}` | {', '.join(f'`{a}`' for a in d.attributes)} | {d.kind} | {tags} | {meaning} |")
    return "\n".join(rows)


@dataclass(frozen=True)
class SeriesDecl:
    """A Prometheus family served by a ``kts`` command (not a bean of the plugin): name, type, labels, meaning."""

    name: str
    kind: str
    labels: tuple[str, ...]
    meaning: str

    @property
    def exposed(self) -> str:
        """The name a scrape shows: prometheus_client adds ``_total`` to a counter."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


GC_CLUSTER_SUBSYSTEM = "kts_gc_cluster"
GC_CLUSTER_METRICS = tuple(
    SeriesDecl(f"{GC_CLUSTER_SUBSYSTEM}_{name}", kind, labels, meaning)
    for name, kind, labels, meaning in [
        ("segments", "gauge", ("state",), "Segments in the cluster's record, by last state."),
        (
            "garbage_segments",
            "gauge",
            ("kind",),
            "Segments the record ties to nothing live, by kind (dead-topic-segment, dead-topic-iceberg-segment, "
            "deleted-segment, unfinished-copy; dead-topic-latest-rows counts latest-per-key tables holding rows of a "
            "dead topic id), with every signal their removal needs: what kts gc --delete removes.",
        ),
        ("garbage_bytes", "gauge", ("kind",), "Bytes in the store of those segments, by kind."),
        (
            "suspected_segments",
            "gauge",
            ("kind",),
            "Segments of those kinds that lack a signal their removal needs, by kind: a topic id one Metadata read "
            "lacks, not yet confirmed by a later read or a partition delete marker; any kind while the record is "
            "incomplete. kts gc --delete keeps them.",
        ),
        (
            "record_complete",
            "gauge",
            (),
            "1 when the last check read __remote_log_metadata whole (every partition from offset 0, without a gap), "
            "else 0 (retention removed its beginning: nothing is removed on its word).",
        ),
        (
            "lost_segments",
            "gauge",
            (),
            "Segments the cluster believes tiered whose objects are missing from the store (data loss).",
        ),
        (
            "unaccounted_bytes",
            "gauge",
            (),
            "Bytes in the store no live tiered segment accounts for: the kinds above, copies and deletes in "
            "progress, segments the record does not know.",
        ),
        ("unknown_bytes", "gauge", (), "Bytes of segments the cluster's record does not know (left alone)."),
        (
            "quarantined_objects",
            "gauge",
            (),
            "Objects `kts gc --delete` moved into the quarantine (`<key.prefix>kts-quarantine/`) and not yet "
            "purged: `kts gc restore` puts them back, `kts gc purge` or the next `--delete` after "
            "`gc.quarantine.ms` removes them.",
        ),
        ("quarantined_bytes", "gauge", (), "Bytes of those objects (they are still stored, and billed)."),
        ("last_success_timestamp_seconds", "gauge", (), "Unix time when the last check completed."),
        (
            "check_failures",
            "counter",
            (),
            "Checks that failed (cluster or store unreachable, access refused); each prints its cause on stderr "
            "and the gauges keep their last values.",
        ),
    ]
)
"""``kts gc --bootstrap-server ... --watch``: the cluster's record held against the store, on a schedule."""


def gc_cluster_docs_markdown() -> str:
    """The table of the ``kts gc --watch`` families (docs/metrics.md holds it between markers)."""
    rows = ["| Series | Type | Labels | Meaning |", "|---|---|---|---|"]
    for d in GC_CLUSTER_METRICS:
        labels = ", ".join(f"`{label}`" for label in d.labels) or "none"
        rows.append(f"| `{d.exposed}` | {d.kind} | {labels} | {d.meaning} |")
    return "\n".join(rows)
