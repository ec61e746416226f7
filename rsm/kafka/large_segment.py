"""Write a large real-format segment fast, for benchmarks of up to a GiB or more."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import crc32c as _crc32c

from rsm.kafka.batch_builder import Codec, RecordSpec, build_batch, codec_of
from rsm.kafka.indexes import ProducerSnapshotEntry, segment_file_name
from rsm.kafka.sample_values import DEFAULT_BASE_TIMESTAMP_MS, json_log_value, make_headers
from rsm.kafka.segment_files import SEQUENCE_MODULUS, IndexBuilder, SegmentFiles, finish_segment

__all__ = ["write_large_segment"]


def write_large_segment(
    path_dir: str | os.PathLike[str],
    size_bytes: int,
    seed: int = 0,
    *,
    base_offset: int = 0,
    codec: Codec | str = "none",
    num_templates: int = 256,
    records_per_batch: tuple[int, int] = (20, 200),
    leader_epoch: int = 0,
    index_interval_bytes: int = 4096,
    base_timestamp_ms: int = DEFAULT_BASE_TIMESTAMP_MS,
) -> SegmentFiles:
    """A real-format segment of up to ``size_bytes`` (at least one batch), fast enough for 1 GiB benchmarks.

    Building a GiB of batches record by record in Python takes about a minute, so we build ``num_templates``
    distinct batches with kafka-python once and replicate them, giving each copy its own base offset, leader
    epoch, base sequence and shifted timestamps; those last two are CRC-covered, so each copy gets a fresh
    CRC-32C (hardware-accelerated, ~10 GB/s). Offsets, sequences and timestamps strictly increase across the
    segment, one idempotent producer (id 1000) wrote everything, and the log is written in large cycles.
    """
    directory = Path(path_dir)
    directory.mkdir(parents=True, exist_ok=True)
    comp = codec_of(codec)
    rng = random.Random(seed)
    lo, hi = records_per_batch
    templates: list[bytes] = []
    counts: list[int] = []
    ts = base_timestamp_ms
    for _ in range(max(1, num_templates)):
        n = rng.randint(lo, hi)
        specs: list[RecordSpec] = []
        for _ in range(n):
            ts += rng.randint(1, 3)
            specs.append(
                (ts, f"user-{rng.randrange(100_000)}".encode(), json_log_value(rng, ts), make_headers("json-log", rng))
            )
        templates.append(build_batch(specs, codec=comp, producer_id=1000, producer_epoch=0, base_sequence=0))
        counts.append(n)
    cycle = b"".join(templates)
    starts: list[int] = []
    pos = 0
    for t in templates:
        starts.append(pos)
        pos += len(t)

    idx = IndexBuilder(index_interval_bytes)
    log_path = directory / segment_file_name(base_offset, ".log")
    next_offset = base_offset
    seq = 0
    ts = base_timestamp_ms
    position = 0
    batches = 0
    records_total = 0
    last_n = 1
    pack_q = struct.Struct(">q").pack_into
    pack_i = struct.Struct(">i").pack_into
    pack_crc = struct.Struct(">I").pack_into
    crc = _crc32c.crc32c
    finished = False
    with open(log_path, "wb") as out:  # buffered: its write() loops until every byte is written
        while not finished:
            buf = bytearray(cycle)
            view = memoryview(buf)
            used = 0
            for i, t in enumerate(templates):
                size = len(t)
                if position + size > size_bytes and batches > 0:
                    finished = True
                    break
                s = starts[i]
                n = counts[i]
                first_ts = ts + 1
                # the template's record timestamp deltas are relative to its first timestamp, so only shift it
                (tmpl_first,) = struct.unpack_from(">q", t, 27)
                (tmpl_max,) = struct.unpack_from(">q", t, 35)
                max_ts = first_ts + (tmpl_max - tmpl_first)
                pack_q(buf, s, next_offset)
                pack_i(buf, s + 12, leader_epoch)
                pack_q(buf, s + 27, first_ts)
                pack_q(buf, s + 35, max_ts)
                pack_i(buf, s + 53, seq)
                pack_crc(buf, s + 17, crc(view[s + 21 : s + size]))
                last = next_offset + n - 1
                idx.add(position, size, last, max_ts)
                position += size
                used = s + size
                batches += 1
                records_total += n
                next_offset = last + 1
                seq = (seq + n) % SEQUENCE_MODULUS
                ts = max_ts
                last_n = n
            if used:
                out.write(view[:used])
            view.release()
    snapshot = [ProducerSnapshotEntry(1000, 0, (seq - 1) % SEQUENCE_MODULUS, next_offset - 1, last_n - 1, ts, -1, -1)]
    return finish_segment(
        directory,
        base_offset,
        next_offset - 1,
        log_path,
        position,
        idx,
        [],
        snapshot,
        [(leader_epoch, base_offset)],
        False,
        batches,
        records_total,
        comp.codec_name,
    )
