"""``kts verify``: a scrub of the store. Every segment's manifest must parse, every chunk must pass its GCM
tag and recorded CRC-32C (the manager checks both when it decodes a chunk), every index its CRC-32C, and the
decoded log must have the size the manifest records. Segments are checked in parallel; nothing is changed. A
scope with nothing tiered fails (exit 1): a scrub of nothing never passes."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import click

from rsm.cli.progress import progress_bar, stdout
from rsm.cli.segments import parse_scope, select_segments
from rsm.cli.settings import config_options, open_manager
from rsm.core.catalog import TieredSegment
from rsm.core.manager import RemoteStorageManager
from rsm.core.manifest import SegmentManifest
from rsm.formats.iceberg import iceberg_section
from rsm.metadata import IndexType, RemoteLogSegmentMetadata

READ_PIECE = 1024 * 1024


@dataclass(frozen=True)
class Damage:
    object_key: str
    segment: str
    problem: str


@dataclass
class ScrubReport:
    segments: int = 0
    chunks: int = 0
    indexes: int = 0
    bytes_checked: int = 0
    damaged: list[Damage] = field(default_factory=list)


def _problem(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _stores_log(manager: RemoteStorageManager, kind: str) -> bool:
    """Whether segments of format ``kind`` have a ``.log`` body; a format this plugin does not read is read as
    one, so that reading it reports the damage."""
    fmt = manager.formats.named(kind)
    return fmt is None or fmt.stores_log


def scrub_segment(manager: RemoteStorageManager, seg: TieredSegment) -> tuple[int, int, int, list[Damage]]:
    """(chunks, indexes, bytes) checked and the damage found in one segment; never raises for bad data."""
    keys = seg.keys
    try:
        meta = manager.segment_metadata(seg)
        manifest = manager.fetch_manifest(meta)
    except Exception as e:
        return 0, 0, 0, [Damage(keys.manifest, seg.describe(), _problem(e))]
    if not _stores_log(manager, manifest.kind):
        return _scrub_iceberg(manager, seg, meta, manifest)
    damage: list[Damage] = []
    size = 0
    try:
        with manager.fetch_log_segment(meta, 0) as stream:
            while piece := stream.read(READ_PIECE):
                size += len(piece)
        if size != manifest.chunk_index.original_file_size:
            damage.append(
                Damage(
                    keys.log,
                    seg.describe(),
                    f"decoded {size} bytes, the manifest records {manifest.chunk_index.original_file_size}",
                )
            )
    except Exception as e:
        damage.append(Damage(keys.log, seg.describe(), _problem(e)))
    indexes = _scrub_indexes(manager, seg, meta, manifest, damage)
    return manifest.chunk_index.chunk_count, indexes, size, damage


def _scrub_indexes(
    manager: RemoteStorageManager,
    seg: TieredSegment,
    meta: RemoteLogSegmentMetadata,
    manifest: SegmentManifest,
    damage: list[Damage],
) -> int:
    """Read every index the manifest lists; each that fails goes to ``damage``. How many were read whole."""
    indexes = 0
    for index_type in IndexType:
        if manifest.segment_indexes.get(index_type) is None:
            continue
        try:
            with manager.fetch_index(meta, index_type) as f:
                f.read()
            indexes += 1
        except Exception as e:
            damage.append(Damage(seg.keys.indexes, seg.describe(), f"{index_type.name} index: {_problem(e)}"))
    return indexes


def _scrub_iceberg(
    manager: RemoteStorageManager, seg: TieredSegment, meta: RemoteLogSegmentMetadata, manifest: SegmentManifest
) -> tuple[int, int, int, list[Damage]]:
    """An Iceberg segment: every batch rebuilt from its data files must pass its CRC, and the batches, records
    and offsets must be those the manifest records; then its indexes, as for any segment."""
    from rsm.kafka.log_scan import iter_batches

    section = iceberg_section(manifest)
    assert section is not None
    where = f"{seg.keys.manifest} (table {section.table})"
    damage: list[Damage] = []
    batches = records = size = 0
    last = -1
    try:
        with manager.fetch_log_segment(meta, 0) as stream:
            for header, batch in iter_batches(stream, verify=True):
                batches += 1
                records += header.records_count
                size += len(batch)
                last = header.last_offset
        if (batches, records, last) != (section.batches, section.rows, section.last_offset):
            damage.append(
                Damage(
                    where,
                    seg.describe(),
                    f"rebuilt {batches} batches, {records} records up to offset {last}; the manifest records "
                    f"{section.batches}, {section.rows} up to {section.last_offset}",
                )
            )
    except Exception as e:
        damage.append(Damage(where, seg.describe(), _problem(e)))
    indexes = _scrub_indexes(manager, seg, meta, manifest, damage)
    return len(section.files), indexes, size, damage


def scrub(
    manager: RemoteStorageManager,
    segments: list[TieredSegment] | None = None,
    workers: int = 4,
    progress: bool = True,
) -> ScrubReport:
    """Check ``segments`` (default: every tiered segment)."""
    segments = manager.catalog().segments() if segments is None else segments
    report = ScrubReport(segments=len(segments))
    bar = progress_bar("verifying", len(segments)) if progress else contextlib.nullcontext(lambda _what="": None)
    with bar as advance:
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kts-verify") as pool:
            futures = {pool.submit(scrub_segment, manager, seg): seg for seg in segments}
            for future in as_completed(futures):
                chunks, indexes, size, damage = future.result()
                report.chunks += chunks
                report.indexes += indexes
                report.bytes_checked += size
                report.damaged.extend(damage)
                advance(futures[future].describe())
    report.damaged.sort(key=lambda d: d.object_key)
    return report


@click.command("verify")
@config_options
@click.argument("scope", required=False)
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="segments in parallel")
def verify_command(config: str | None, sets: tuple[str, ...], scope: str | None, workers: int) -> int:
    """Scrub tiered data (all, a topic, or topic/partition); exit 1 with the list of damaged objects."""
    wanted = parse_scope(scope)
    started = time.monotonic()
    with open_manager(config, sets) as manager:
        report = scrub(manager, select_segments(manager, wanted), workers)
    stdout.print(
        f"verified {report.segments} segments: {report.chunks} chunks ({report.bytes_checked:,} bytes decoded), "
        f"{report.indexes} indexes in {time.monotonic() - started:.1f} s; "
        f"{len(report.damaged)} damaged object{'s' if len(report.damaged) != 1 else ''}"
    )
    for d in report.damaged:
        click.echo(f"DAMAGED {d.object_key} ({d.segment}): {d.problem}", err=True)
    if report.damaged:
        click.echo(
            "the listed objects fail their integrity checks; restore them from a replica or backup, or delete the "
            "segment through the broker's retention once its data is no longer needed",
            err=True,
        )
    return 1 if report.damaged else 0
