"""Kafka on-disk segment formats: record batches, index files, producer snapshots, and a real-segment writer.

The plugin, the compression heuristic, the tests, the demo and the benchmarks all need to read or produce
bytes laid out exactly as a Kafka broker stores them, so that what we measure and verify is real Kafka data
and not random bytes. Reading lives in :mod:`rsm.kafka.records`, :mod:`rsm.kafka.log_scan` and
:mod:`rsm.kafka.indexes`; writing test segments lives in :mod:`rsm.kafka.writer` and
:mod:`rsm.kafka.large_segment` over :mod:`rsm.kafka.batch_builder` (which needs kafka-python, a test
dependency, and is therefore not imported here; the entry points are ``write_segment`` and
``write_large_segment``).

It may import ``rsm.errors``, ``rsm.metadata`` and the lower layers, never ``rsm.core`` or anything above.
"""

from __future__ import annotations

from rsm.kafka.log_scan import iter_batch_headers, iter_batches
from rsm.kafka.records import (
    BatchHeader,
    CompressionType,
    ControlRecordType,
    CorruptRecordBatch,
    KafkaFormatError,
    Record,
    TruncatedBatch,
    UnsupportedFormat,
    decode_records,
    verify_crc,
)

__all__ = [
    "BatchHeader",
    "CompressionType",
    "ControlRecordType",
    "CorruptRecordBatch",
    "KafkaFormatError",
    "Record",
    "TruncatedBatch",
    "UnsupportedFormat",
    "decode_records",
    "iter_batch_headers",
    "iter_batches",
    "verify_crc",
]
