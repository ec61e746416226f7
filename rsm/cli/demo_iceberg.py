"""The Iceberg part of ``kts demo``: a second topic tiered in Iceberg mode, queried without Spark, fetched back.

The topic ``events`` (three partitions, one small segment each, transactions with aborts, one partition zstd)
is tiered by the same plugin as the classic partition, with ``iceberg.mode.*`` set: its records become rows of
the Iceberg table ``kafka.events`` in pyiceberg's SQL catalog on SQLite, both under ``<dir>/iceberg/``. Then:

- the fetch path: each segment is read back as a broker reads it (from offset 0 and from a position its offset
  index names), and every batch must carry the offsets, timestamps, keys, values, headers and producer fields of
  the segment that was tiered, with a valid CRC;
- DuckDB's iceberg extension (``iceberg_scan`` of the table's metadata file) counts records per partition, all
  and ``read_committed``, and pyiceberg and DuckDB count a time range; every figure must equal the one decoded
  from the segment files themselves;
- ``kts verify`` scrubs the Iceberg segments.

It needs the ``iceberg`` extra (pyiceberg, pyarrow, DuckDB and its extensions); without it ``kts demo`` runs its
classic part and says the Iceberg part was skipped and how to install it.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rsm.core.manager import RemoteStorageManager
from rsm.formats.iceberg import iceberg_format, iceberg_section
from rsm.iceberg.duckdb_reader import duckdb_with_iceberg
from rsm.kafka.log_scan import batch_view
from rsm.kafka.segment_files import SegmentFiles
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

TOPIC = "events"
TOPIC_ID = base64.urlsafe_b64encode(hashlib.sha256(b"kts-demo/events").digest()[:16]).decode().rstrip("=")
PARTITIONS = 3
SEGMENT_BYTES = 256 * 1024
BASE_TIMESTAMP_MS = 1_700_000_000_000
NAMESPACE = "kafka"
FOLDER = "iceberg"  # under the demo's folder: the catalog, the warehouse and the segments written
EXTRA_MODULES = ("pyiceberg", "pyarrow", "duckdb", "duckdb_extension_iceberg", "duckdb_extension_avro")
INSTALL = "pip install 'kafka-tiered-storage[iceberg]'"


def unavailable() -> str | None:
    """Why the Iceberg part cannot run here (a module of the ``iceberg`` extra is missing), or None."""
    for name in EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return f"the iceberg extra is not installed (no {name}): {INSTALL}"
    return None


def place(workdir: Path) -> Path:
    return workdir / FOLDER


def reset(workdir: Path) -> None:
    """Empty the Iceberg folder: a re-run starts from a new catalog and warehouse, as the classic store does."""
    folder = place(workdir)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def plugin_configs(workdir: Path) -> dict[str, str]:
    """The ``iceberg.mode.*`` keys of the demo: the topic, the SQLite catalog and the warehouse in the folder."""
    folder = place(workdir)
    return {
        "iceberg.mode.topics.regex": TOPIC,
        "iceberg.mode.catalog.sqlite.path": str(folder / "catalog.db"),
        "iceberg.mode.warehouse": (folder / "warehouse").as_uri(),
        "iceberg.mode.delete.rows.enabled": "false",
    }


def _segment_id(partition: int) -> str:
    raw = hashlib.sha256(f"kts-demo/{TOPIC_ID}/{partition}/0".encode()).digest()[:16]
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@dataclass
class Expected:
    """What the segment files hold, decoded straight from them (the figures the queries must match)."""

    records: Counter[int]  # partition -> data records (control records left out)
    committed: Counter[int]  # partition -> data records not in an aborted transaction
    timestamps: list[int]  # every data record's timestamp

    def in_range(self, lo: int, hi: int) -> int:
        return sum(1 for ts in self.timestamps if lo <= ts < hi)


def _expected(segments: list[SegmentFiles]) -> Expected:
    from rsm.kafka.log_scan import iter_batches
    from rsm.kafka.records import decode_records

    exp = Expected(Counter(), Counter(), [])
    for partition, seg in enumerate(segments):
        for h, body in iter_batches(seg.log.read_bytes(), verify=True):
            if h.is_control:
                continue
            aborted = h.is_transactional and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                for a in seg.aborted_txns
            )
            for rec in decode_records(body):
                exp.records[partition] += 1
                exp.committed[partition] += 0 if aborted else 1
                exp.timestamps.append(rec.timestamp)
    return exp


def _write_segments(workdir: Path) -> list[SegmentFiles]:
    from rsm.kafka.writer import write_segment

    return [
        write_segment(
            place(workdir) / "segments" / f"{TOPIC}-{p}",
            target_bytes=SEGMENT_BYTES,
            codec="zstd" if p == PARTITIONS - 1 else "none",
            transactional=True,
            seed=100 + p,
            base_timestamp_ms=BASE_TIMESTAMP_MS,
        )
        for p in range(PARTITIONS)
    ]


def run(manager: RemoteStorageManager, workdir: Path, say: Callable[[str], None]) -> str | None:
    """Tier, fetch back, query and verify the Iceberg topic; the summary line, or None when a check failed (what
    failed was said)."""
    started = time.monotonic()
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

    from rsm.cli.scrub import scrub

    segments = _write_segments(workdir)
    metas: list[RemoteLogSegmentMetadata] = []
    for p, seg in enumerate(segments):
        tip = TopicIdPartition(TOPIC_ID, TOPIC, p)
        meta = seg.to_metadata(tip, RemoteLogSegmentId(tip, _segment_id(p)), event_timestamp_ms=0)
        manager.copy_log_segment_data(meta, seg.to_log_segment_data())
        metas.append(meta)
    sections = [iceberg_section(manager.fetch_manifest(m)) for m in metas]
    if any(s is None for s in sections):
        say("      MISMATCH: a segment was tiered in the classic format, not as rows")
        return None
    table = iceberg_format(manager).mode().handle.catalog.load_table((NAMESPACE, TOPIC))
    files = sum(len(s.files) for s in sections if s is not None)
    rows = sum(s.rows for s in sections if s is not None)
    size = sum(s.size for s in segments)
    expected = _expected(segments)
    records = sum(expected.records.values())
    say(
        f"      {PARTITIONS} segments ({size:,} bytes) -> {rows:,} rows ({records:,} records, {rows - records} "
        f"transaction markers) in {files} Parquet files of {NAMESPACE}.{TOPIC}, one commit per segment"
    )
    say(f"      catalog {place(workdir) / 'catalog.db'} (SQLite), warehouse {place(workdir) / 'warehouse'}")

    # the fetch path: what a broker serves a consumer, from the start and from an offset-index position
    from rsm.kafka.indexes import decode_offset_index

    batches = identical = 0
    for meta, seg in zip(metas, segments, strict=True):
        original = seg.log.read_bytes()
        entries = decode_offset_index(seg.offset_index.read_bytes(), seg.base_offset)
        for position in (0, entries[len(entries) // 2][1] if entries else 0):
            with manager.fetch_log_segment(meta, position) as stream:
                got = stream.read()
            view = batch_view(got)
            if view != batch_view(original[position:]):
                say(f"      MISMATCH: the batches fetched from {meta.describe()} at byte {position} differ")
                return None
            if position == 0:
                batches += len(view)
                identical += got == original
    same = "byte for byte" if identical == len(segments) else "field for field"
    say(f"      fetch path (what a consumer gets): {batches} batches rebuilt from the rows, from offset 0 and")
    say(f"      mid-segment: every CRC valid, offsets, keys, values, headers, producer fields as tiered ({same})")

    # the queries, without Spark
    con = duckdb_with_iceberg()
    scan = f"iceberg_scan('{table.metadata_location}')"
    per_partition = con.sql(
        "SELECT kafka.partition, count(*), count(*) FILTER (WHERE NOT kafka.aborted) "
        f"FROM {scan} WHERE NOT kafka.is_control GROUP BY 1 ORDER BY 1"
    ).fetchall()
    want = [(p, expected.records[p], expected.committed[p]) for p in range(PARTITIONS)]
    say("      DuckDB: SELECT kafka.partition, count(*), count(*) FILTER (WHERE NOT kafka.aborted)")
    say(f"              FROM iceberg_scan('<{TOPIC} metadata>') WHERE NOT kafka.is_control GROUP BY 1")
    for p, n, committed in per_partition:
        say(f"        partition {p}: {n:>6,} records, {committed:>6,} of them committed (read_committed)")
    if [tuple(r) for r in per_partition] != want:
        say(f"      MISMATCH: the segments hold {want}")
        return None

    first, last = min(expected.timestamps), max(expected.timestamps)
    lo, hi = first + (last - first) // 3, first + 2 * (last - first) // 3
    in_range = expected.in_range(lo, hi)
    duck = con.sql(
        f"SELECT count(*) FROM {scan} WHERE NOT kafka.is_control "
        f"AND kafka.timestamp >= '{_iso(lo)}'::TIMESTAMPTZ AND kafka.timestamp < '{_iso(hi)}'::TIMESTAMPTZ"
    ).fetchone()
    pyice = table.scan(
        row_filter=And(
            EqualTo("kafka.is_control", False),
            And(GreaterThanOrEqual("kafka.timestamp", _iso(lo)), LessThan("kafka.timestamp", _iso(hi))),
        ),
        selected_fields=("kafka.offset",),
    ).to_arrow()
    con.close()
    say(
        f"      time range {_iso(lo)[11:23]} .. {_iso(hi)[11:23]} UTC (the middle third): "
        f"{pyice.num_rows:,} records by pyiceberg's table.scan(row_filter), {duck[0] if duck else '-':,} by DuckDB"
    )
    if not (pyice.num_rows == in_range and duck is not None and duck[0] == in_range):
        say(f"      MISMATCH: the segments hold {in_range:,} records in that range")
        return None

    report = scrub(manager, manager.catalog().segments(TOPIC), progress=False)
    say(
        f"      kts verify: {report.segments} Iceberg segments, {report.chunks} data files rebuilt and checked: "
        f"{len(report.damaged)} damaged"
    )
    for d in report.damaged:
        say(f"      DAMAGED {d.object_key}: {d.problem}")
    if report.damaged or report.segments != PARTITIONS:
        return None
    return (
        f"table {NAMESPACE}.{TOPIC}: {records:,} records of {PARTITIONS} partitions fetched back as tiered; "
        f"DuckDB and pyiceberg match the segments ({time.monotonic() - started:.1f} s)"
    )
