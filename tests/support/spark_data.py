"""A tiered data set for the Spark reader's tests and benchmark, with the rows each partition must yield.

Segments are real Kafka logs (``rsm.kafka.writer``) copied through a real ``RemoteStorageManager``; the
expected rows come from decoding the source ``.log`` files with the reference decoders
(:func:`rsm.kafka.records.decode_records`, :func:`decode_legacy_entry`), not from the reader under test.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.record.legacy_records import LegacyRecordBatchBuilder

from rsm.kafka.batch_builder import build_batch
from rsm.kafka.log_scan import iter_batches
from rsm.kafka.records import decode_legacy_entry, decode_records
from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_entries_segment, write_segment
from rsm.metadata import TopicIdPartition, random_kafka_uuid

BASE_TS = 1_700_000_000_000
#: ``(key, value, topic, partition, offset, timestamp_ms, timestampType, headers)``
Row = tuple[Any, ...]


@dataclass
class Dataset:
    rows: list[Row] = field(default_factory=list)  # read_uncommitted, sorted
    aborted: set[tuple[str, int, int]] = field(default_factory=set)  # (topic, partition, offset)
    segments: dict[str, SegmentFiles] = field(default_factory=dict)  # name -> files
    topic_ids: dict[str, str] = field(default_factory=dict)

    def committed(self) -> list[Row]:
        return [r for r in self.rows if (r[2], r[3], r[4]) not in self.aborted]


def _rows_of(
    files: SegmentFiles, topic: str, partition: int, keep: tuple[int, int] | None, aborted: set[tuple[str, int, int]]
) -> list[Row]:
    rows: list[Row] = []
    for header, body in iter_batches_any(files.log):
        if body[16] == 2:
            if header is not None and header.is_control:
                continue
            in_abort = header.is_transactional and any(
                t.producer_id == header.producer_id and t.first_offset <= header.base_offset <= t.last_offset
                for t in files.aborted_txns
            )
            for r in decode_records(body, verify=True):
                if in_abort:
                    aborted.add((topic, partition, r.offset))
                if not r.is_control:
                    hs = [(k, v) for k, v in r.headers]
                    ts_type = (body[22] >> 3) & 1
                    rows.append((r.key, r.value, topic, partition, r.offset, r.timestamp, ts_type, hs))
        else:
            for m in decode_legacy_entry(body, verify=True):
                rows.append((m.key, m.value, topic, partition, m.offset, m.timestamp, m.timestamp_type, []))
    if keep is not None:
        rows = [r for r in rows if keep[0] <= r[4] <= keep[1]]
    return rows


def iter_batches_any(log: Path) -> list[tuple[Any, bytes]]:
    """Entries of a log in either format (``iter_batches`` refuses legacy entries by design)."""
    data = log.read_bytes()
    out: list[tuple[Any, bytes]] = []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        entry = data[pos : pos + 12 + length]
        header = next(iter(iter_batches(entry)))[0] if entry[16] == 2 else None
        out.append((header, entry))
        pos += 12 + length
    return out


_XXH_P1, _XXH_P2, _XXH_P3, _XXH_P4, _XXH_P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, the hash of lz4 frame checksums (kept here so the tests need no binding for it)."""
    n, pos = len(data), 0
    if n >= 16:
        acc = [
            (seed + _XXH_P1 + _XXH_P2) & _M32,
            (seed + _XXH_P2) & _M32,
            seed & _M32,
            (seed - _XXH_P1) & _M32,
        ]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos + 4 * i)
                acc[i] = (_rotl((acc[i] + lane * _XXH_P2) & _M32, 13) * _XXH_P1) & _M32
            pos += 16
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _M32
    else:
        h = (seed + _XXH_P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _XXH_P3) & _M32, 17) * _XXH_P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _XXH_P5) & _M32, 11) * _XXH_P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _XXH_P2) & _M32
    h ^= h >> 13
    h = (h * _XXH_P3) & _M32
    return h ^ (h >> 16)


def kafka_lz4_frame(payload: bytes, *, broken_header_checksum: bool) -> bytes:
    """An lz4 frame as Kafka's ``KafkaLZ4BlockOutputStream`` writes it: flags 0x60 (version 1, independent
    blocks, no checksums, no content size), 64 KiB blocks, a block that does not shrink stored raw (size with
    the high bit set), then the end mark. For magic 0 Kafka hashed the header checksum over the frame magic,
    flags and block descriptor instead of the descriptors alone (``broken_header_checksum``)."""
    import lz4.block

    header = struct.pack("<I", 0x184D2204) + bytes([0x60, 0x40])
    hashed = header if broken_header_checksum else header[4:]
    out = bytearray(header + bytes([(xxh32(hashed) >> 8) & 0xFF]))
    for start in range(0, len(payload), 64 << 10):
        block = payload[start : start + (64 << 10)]
        packed = lz4.block.compress(block, store_size=False)
        if len(packed) < len(block):
            out += struct.pack("<I", len(packed)) + packed
        else:
            out += struct.pack("<I", len(block) | 0x80000000) + block
    return bytes(out + struct.pack("<I", 0))


def kafka_lz4_wrapper(
    magic: int,
    base_offset: int,
    specs: list[tuple[int, bytes | None, bytes | None]],
    *,
    broken_header_checksum: bool | None = None,
) -> bytes:
    """A magic 0/1 lz4 wrapper message as a Kafka broker stores it: the inner message set (absolute offsets for
    magic 0, relative for magic 1) in a Kafka lz4 frame, the broken header checksum for magic 0, and the wrapper
    carrying the last absolute offset (and for magic 1 the largest inner timestamp, CreateTime)."""
    inner = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 24)
    for i, (ts, key, value) in enumerate(specs):
        inner.append(i if magic == 1 else base_offset + i, ts, key, value)
    broken = magic == 0 if broken_header_checksum is None else broken_header_checksum
    frame = kafka_lz4_frame(bytes(inner.build()), broken_header_checksum=broken)
    timestamp = struct.pack(">q", max(ts for ts, _, _ in specs)) if magic == 1 else b""
    body = bytes([magic, 3]) + timestamp + struct.pack(">i", -1) + struct.pack(">i", len(frame)) + frame
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", base_offset + len(specs) - 1, len(message)) + message


def legacy_entry(
    magic: int, codec: int, base_offset: int, specs: list[tuple[int, bytes | None, bytes | None]]
) -> bytes:
    """A magic 0/1 message set as a broker stores it: absolute offsets, or for a compressed v1 wrapper
    relative inner offsets and the wrapper carrying the last absolute offset. lz4 wrappers are framed as
    Kafka's own writer frames them (:func:`kafka_lz4_wrapper`)."""
    if codec == 3:
        return kafka_lz4_wrapper(magic, base_offset, specs)
    relative = magic == 1 and codec != 0
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 24)
    for i, (ts, key, value) in enumerate(specs):
        b.append(i if relative else base_offset + i, ts, key, value)
    buf = bytearray(b.build())
    if codec:
        struct.pack_into(">q", buf, 0, base_offset + len(specs) - 1)
    return bytes(buf)


def build_dataset(manager: Any, workdir: Path, *, with_legacy: bool = True) -> Dataset:
    """Topics ``orders`` (4 partitions of assorted content) and ``payments`` (1 partition)."""
    ds = Dataset()
    orders = TopicIdPartition(random_kafka_uuid(), "orders", 0)
    payments_id = random_kafka_uuid()
    ds.topic_ids = {"orders": orders.topic_id, "payments": payments_id}

    def tier(name: str, files: SegmentFiles, topic: str, partition: int, keep: tuple[int, int] | None = None) -> None:
        tip = TopicIdPartition(ds.topic_ids[topic], topic, partition)
        manager.copy_log_segment_data(files.to_metadata(tip), files.to_log_segment_data())
        ds.segments[name] = files
        ds.rows.extend(_rows_of(files, topic, partition, keep, ds.aborted))

    # orders-0: one segment per codec, the third one transactional with aborts.
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        files = write_segment(
            workdir / f"o0-{i}",
            base_offset=i * 1000,
            num_batches=8,
            codec=codec,
            seed=i,
            transactional=i == 2,
            records_per_batch=(10, 60),
            base_timestamp_ms=BASE_TS + i * 60_000,
        )
        tier(f"o0-{codec}", files, "orders", 0)
    # orders-1: uncompressed batches of ~70 KB, far larger than the 4 KiB chunks (every batch spans chunks).
    big = write_segment(workdir / "o1", num_batches=12, records_per_batch=(150, 200), seed=7, base_timestamp_ms=BASE_TS)
    tier("o1-big", big, "orders", 1)
    # orders-2: null keys and values, headers, then legacy v0/v1 message sets.
    specs = [
        (BASE_TS + 1, None, b"no key", [("h", b"1")]),
        (BASE_TS + 2, b"k-null-value", None, []),
        (BASE_TS + 3, None, None, [("a", None), ("b", b"")]),
        (BASE_TS + 4, b"", b"", []),
    ]
    entries = [
        build_batch(specs, base_offset=0, codec="none"),
        build_batch(specs, base_offset=4, codec="zstd"),
    ]
    if with_legacy:
        legacy = [(BASE_TS + 10 + i, f"lk{i}".encode() if i % 2 else None, f"lv{i}".encode()) for i in range(5)]
        entries += [
            legacy_entry(0, 0, 8, legacy),
            legacy_entry(0, 1, 13, legacy),  # v0 gzip wrapper, absolute inner offsets
            legacy_entry(1, 0, 18, legacy),
            legacy_entry(1, 1, 23, legacy),  # v1 gzip wrapper, relative inner offsets
            legacy_entry(1, 2, 28, legacy),  # v1 snappy
            legacy_entry(1, 3, 33, legacy),  # v1 lz4, Kafka's frame
            legacy_entry(0, 3, 38, legacy),  # v0 lz4, Kafka's frame with its broken header checksum
        ]
    tier("o2-odd", write_entries_segment(workdir / "o2", entries), "orders", 2)
    # orders-3: a leader change. The old leader (epoch 0) tiered 0..N; the new leader (epoch 1) diverged at
    # offset 100 and tiered its own 100..M. Offsets >= 100 must come from the new leader only.
    old = write_segment(workdir / "o3a", num_batches=20, records_per_batch=(10, 10), seed=11, leader_epochs={0: 0})
    new = write_segment(
        workdir / "o3b",
        base_offset=100,
        num_batches=10,
        records_per_batch=(10, 10),
        seed=12,
        leader_epochs={0: 0, 1: 100},
    )
    tier("o3-old", old, "orders", 3, keep=(0, 99))
    tier("o3-new", new, "orders", 3)
    # payments-0
    tier("p0", write_segment(workdir / "p0", num_batches=5, seed=21, codec="zstd"), "payments", 0)
    ds.rows.sort(key=lambda r: (r[2], r[3], r[4]))
    return ds
