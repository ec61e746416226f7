"""Decide whether compressing a segment's chunks is worth it.

Producers often compress their batches already; zstd over zstd/lz4/snappy/gzip data burns CPU for nothing.
Aiven looks at the first batch only, which misjudges segments whose producers changed codec. We sample
batches spread over the whole segment, using the offset index (which points at batch starts) to find them
without scanning, and compress unless most sampled bytes are already compressed.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLES = 16
_INDEX_ENTRY = struct.Struct(">ii")


def _sample_positions(offset_index: Path | None, segment_size: int) -> list[int]:
    positions = {0}
    if offset_index is not None:
        try:
            raw = offset_index.read_bytes()
        except OSError:
            raw = b""
        n = len(raw) // _INDEX_ENTRY.size
        if n:
            step = max(1, n // SAMPLES)
            for i in range(0, n, step):
                _rel, pos = _INDEX_ENTRY.unpack_from(raw, i * _INDEX_ENTRY.size)
                if 0 <= pos < segment_size:
                    positions.add(pos)
    return sorted(positions)


def should_compress(log_segment: Path, offset_index: Path | None) -> bool:
    """True unless the sampled batches are mostly (by bytes) compressed by their producers already."""
    from rsm.kafka.log_scan import iter_batch_headers
    from rsm.kafka.records import KafkaFormatError

    size = log_segment.stat().st_size
    if size == 0:
        return False
    compressed = plain = 0
    with open(log_segment, "rb") as f:
        for pos in _sample_positions(offset_index, size):
            try:
                header = next(iter(iter_batch_headers(f, start_position=pos)), None)
            except (KafkaFormatError, ValueError) as e:
                log.warning(
                    "compression heuristic: cannot read the batch at position %d of %s (%s); sample skipped",
                    pos,
                    log_segment,
                    e,
                )
                continue
            if header is None:
                continue
            if header.compression:
                compressed += header.size
            else:
                plain += header.size
    if compressed == plain == 0:
        log.warning("compression heuristic: no readable batch in %s; compressing", log_segment)
        return True
    return compressed <= plain
