"""``kts ls``, ``kts inspect`` and ``kts cat``: what is tiered, what one segment's manifest says, its records.

``ls`` and ``inspect`` read manifests only, which are not encrypted: they need no private key and unwrap no data
key. Times are ISO 8601 in UTC (``2024-05-01T12:00:00.000Z``) and a missing value is ``null``, the same in the
text and the ``--json`` output.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import click

from rsm.cli.columns import Columns
from rsm.cli.progress import progress_bar
from rsm.cli.segments import iter_selected, parse_scope, resolve_segment
from rsm.cli.settings import config_options, open_manager
from rsm.core.manager import RemoteStorageManager
from rsm.core.manifest import SegmentManifest
from rsm.core.manifest_reader import SegmentFailure, read_summaries
from rsm.core.parallel import DEFAULT_CONCURRENCY
from rsm.formats.iceberg import iceberg_section
from rsm.metadata import IndexType, RemoteLogSegmentMetadata
from rsm.operator_tools.garbage_removal import quarantine_usage


def iso_time(ms: int | None) -> str | None:
    """ISO 8601 in UTC with milliseconds and ``Z``; None for Kafka's "no timestamp" (-1)."""
    if ms is None or ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _shown(value: str | None) -> str:
    """A value in the text output: ``null`` where the JSON output has null."""
    return "null" if value is None else value


def _stores_log(manager: RemoteStorageManager, kind: str) -> bool:
    """Whether segments of format ``kind`` have a ``.log`` body (one this plugin does not read is shown as one)."""
    fmt = manager.formats.named(kind)
    return fmt is None or fmt.stores_log


def _codec(manager: RemoteStorageManager, manifest: SegmentManifest) -> str:
    if not _stores_log(manager, manifest.kind):
        return f"none (rows of an {manifest.kind.capitalize()} table)"
    return "zstd" if manifest.compression else "none"


def _key_id(manifest: SegmentManifest) -> str:
    return manifest.encryption.key_pair_id if manifest.encryption else "-"


@click.command("ls")
@config_options
@click.argument("scope", required=False)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per segment instead of a table")
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="manifests read at once",
)
def ls_command(config: str | None, sets: tuple[str, ...], scope: str | None, as_json: bool, workers: int) -> int:
    """List tiered segments (all, a topic, or topic/partition): offsets, time, sizes, codec and key id.

    Reads manifests only (--workers at once): no private key is needed. A scope with nothing tiered is an error
    (exit 1); so is a manifest that cannot be read (named on stderr; the other rows still print). A last line
    says how many objects and bytes of the scope kts gc holds in its quarantine, when it holds any."""
    wanted = parse_scope(scope)
    with open_manager(config, sets, keys=False) as manager:
        columns = Columns(
            ("topic", "part", "offsets", "max timestamp", "size", "stored", "codec", "key id"),
            click.echo,
            right=frozenset({1, 4, 5}),
        )
        segments = iter_selected(manager, wanted)  # manifests are read while later pages are still listed
        failures: list[SegmentFailure] = []
        with progress_bar("reading manifests") as advance:
            for got in read_summaries(manager, segments, workers):
                advance(got.segment.describe())
                if isinstance(got, SegmentFailure):
                    failures.append(got)
                    continue
                seg = got.segment
                row = {
                    "topic": seg.topic,
                    "partition": seg.partition,
                    "start_offset": got.start_offset,
                    "end_offset": got.end_offset,
                    "max_timestamp": iso_time(got.max_timestamp_ms),
                    "max_timestamp_ms": got.max_timestamp_ms,
                    "size": got.segment_size_in_bytes,
                    "stored": got.stored_size,
                    "codec": got.kind if not _stores_log(manager, got.kind) else "zstd" if got.compression else "none",
                    "kind": got.kind,
                    "key_id": got.key_pair_id or "-",
                    "segment_id": seg.segment_id,
                }
                if as_json:
                    click.echo(json.dumps(row))
                else:
                    columns.add(
                        seg.topic,
                        str(seg.partition),
                        f"{got.start_offset}-{got.end_offset}",
                        _shown(row["max_timestamp"]),
                        f"{got.segment_size_in_bytes:,}",
                        f"{got.stored_size:,}",
                        row["codec"],
                        row["key_id"],
                    )
        columns.close()
        held, held_bytes = quarantine_usage(manager, wanted.topic, wanted.partition)
        if held and not as_json:
            click.echo(
                f"quarantine: {held} objects, {held_bytes:,} bytes held by kts gc --delete "
                "(kts gc quarantine lists them; kts gc restore puts them back)"
            )
    for failure in failures:
        click.echo(f"FAILED {failure.describe()}", err=True)
    return 1 if failures else 0


@click.command("inspect")
@config_options
@click.argument("segment")
def inspect_command(config: str | None, sets: tuple[str, ...], segment: str) -> int:
    """Show a segment's manifest and a chunk-index summary.

    SEGMENT is an object key, topic/partition/offset, or a segment id. Needs no private key.
    """
    with open_manager(config, sets, keys=False) as manager:
        seg = resolve_segment(manager, segment)
        with manager.backend.fetch(seg.keys.manifest) as f:
            raw = f.read()
        doc = json.loads(raw)
        manifest = SegmentManifest.from_json_bytes(raw, f"manifest {seg.keys.manifest}")
        meta = manifest.recorded_metadata(f"manifest {seg.keys.manifest}")
        index = manifest.chunk_index
        sizes = [c.transformed_size for c in index.chunks()]
        click.echo(f"segment      {seg.describe()} (topic id {seg.topic_id})")
        click.echo(f"manifest     {seg.keys.manifest} ({len(raw):,} bytes)")
        when = _shown(iso_time(meta.max_timestamp_ms))
        click.echo(f"offsets      {meta.start_offset}..{meta.end_offset}, max timestamp {when}")
        click.echo(f"leader epochs {meta.segment_leader_epochs}")
        click.echo(f"kind         {manifest.kind}")
        section = iceberg_section(manifest)
        if section is not None:
            stored = sum(f.size for f in section.files)
            click.echo(
                f"table        {section.table} (snapshot {section.snapshot_id}): {section.rows:,} rows of "
                f"{section.batches:,} batches, offsets {section.first_offset}..{section.last_offset}"
            )
            click.echo(f"data files   {len(section.files)}, {stored:,} B; original segment {section.segment_size:,} B")
            for f in section.files:
                click.echo(f"data file    {f.path} ({f.rows:,} rows, {f.size:,} B)")
        click.echo(
            f"chunks       {index.chunk_count} of {index.original_chunk_size:,} B; "
            f"original {index.original_file_size:,} B, stored {index.transformed_file_size:,} B"
            + (f" ({index.original_file_size / max(1, index.transformed_file_size):.2f}x)" if sizes else "")
        )
        if sizes:
            click.echo(f"stored chunk sizes min {min(sizes):,} / max {max(sizes):,} B")
        click.echo(f"compression  {_codec(manager, manifest)}; encryption key pair {_key_id(manifest)}")
        click.echo(f"integrity    {'crc32c per chunk and index' if manifest.integrity else 'none recorded'}")
        for t in IndexType:
            entry = manifest.segment_indexes.get(t)
            click.echo(
                f"index {t.name:<18} " + ("absent" if entry is None else f"{entry.size:,} B at {entry.position}")
            )
        if "encryption" in doc:
            doc["encryption"]["dataKey"] = doc["encryption"]["dataKey"].split(":", 1)[0] + ":<wrapped>"
        click.echo("manifest JSON:")
        click.echo(json.dumps(doc, indent=2)[:20000])
    return 0


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def _start_position(manager: RemoteStorageManager, meta: RemoteLogSegmentMetadata, offset: int) -> int:
    """The offset index's floor entry for ``offset``: where a broker would start reading."""
    from rsm.kafka.indexes import decode_offset_index

    with manager.fetch_index(meta, IndexType.OFFSET) as f:
        entries = decode_offset_index(f.read(), meta.start_offset)
    position = 0
    for entry in entries:
        if entry.offset > offset:
            break
        position = entry.position
    return position


@click.command("cat")
@config_options
@click.argument("segment")
@click.option("--from-offset", type=int, default=None, help="first offset to print (default: the segment's first)")
@click.option("--limit", type=click.IntRange(0), default=None, help="at most this many records")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of text")
@click.option("--control/--no-control", default=False, help="include transaction markers")
def cat_command(
    config: str | None,
    sets: tuple[str, ...],
    segment: str,
    from_offset: int | None,
    limit: int | None,
    as_json: bool,
    control: bool,
) -> int:
    """Print decoded records (offset, timestamp, key, value, headers) of one tiered segment."""
    from rsm.kafka.log_scan import iter_batches
    from rsm.kafka.records import decode_records

    with open_manager(config, sets) as manager:
        seg = resolve_segment(manager, segment)
        meta = manager.segment_metadata(seg)
        start = meta.start_offset if from_offset is None else from_offset
        printed = 0
        with manager.fetch_log_segment(meta, _start_position(manager, meta, start)) as stream:
            for header, body in iter_batches(stream, verify=True):
                if header.last_offset < start:
                    continue
                for rec in decode_records(body, position=header.position):
                    if rec.offset < start or (rec.is_control and not control):
                        continue
                    if limit is not None and printed >= limit:
                        return 0
                    row = {
                        "offset": rec.offset,
                        "timestamp": iso_time(rec.timestamp),
                        "timestamp_ms": rec.timestamp,
                        "key": _text(rec.key),
                        "value": _text(rec.value),
                        "headers": [[k, _text(v)] for k, v in rec.headers],
                        "producer_id": header.producer_id,
                        "transactional": header.is_transactional,
                    }
                    if rec.is_control:
                        row["control"] = True
                    if as_json:
                        click.echo(json.dumps(row))
                    else:
                        hdrs = " ".join(f"{k}={_shown(v)}" for k, v in row["headers"])
                        click.echo(
                            f"{rec.offset}\t{_shown(row['timestamp'])}\t{_shown(row['key'])}\t"
                            f"{_shown(row['value'])}\t{hdrs}"
                        )
                    printed += 1
    return 0
