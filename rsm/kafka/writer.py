"""Write real Kafka log segments (``.log`` + ``.index`` + ``.timeindex`` + ``.txnindex`` + ``.snapshot``).

Why: tests, the demo and the benchmarks must exercise the plugin with bytes a broker would hand it, so that
compression ratios, index lookups and CRC checks mean something. Record batches are built by kafka-python's
``DefaultRecordBatchBuilder`` (an implementation independent of our reader, so reader bugs cannot cancel
writer bugs); we only patch the fields a broker assigns after the producer built the batch (baseOffset and
partitionLeaderEpoch, both outside the CRC) and, for control batches and replicated large segments, fields
inside the CRC followed by a CRC recomputation. Index files follow ``LogSegment.append`` (Kafka 3.7+,
per batch). Needs kafka-python (a test dependency), imported lazily.
"""

from __future__ import annotations

import os
import random
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import crc32c as _crc32c

from rsm.kafka.indexes import (
    NO_TIMESTAMP,
    AbortedTxn,
    ProducerSnapshotEntry,
    encode_leader_epoch_checkpoint,
    encode_offset_index,
    encode_producer_snapshot,
    encode_time_index,
    encode_txn_index,
    segment_file_name,
    segment_leader_epochs,
)
from rsm.kafka.records import CompressionType, ControlRecordType
from rsm.metadata import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    random_kafka_uuid,
)

__all__ = [
    "DEFAULT_BASE_TIMESTAMP_MS",
    "RecordSpec",
    "SegmentFiles",
    "build_batch",
    "build_control_batch",
    "json_log_value",
    "write_empty_segment",
    "write_large_segment",
    "write_segment",
    "write_single_batch_segment",
]

Codec = Literal["none", "gzip", "snappy", "lz4", "zstd"]
ValueStyle = Literal["json-log", "random", "short"]

#: 2023-11-14T22:13:20Z; fixed so that segments are reproducible from the seed.
DEFAULT_BASE_TIMESTAMP_MS = 1_700_000_000_000
_BATCH_SIZE_LIMIT = 64 << 20  # builder refuses appends beyond this; we never want it to
_CONTROL_MASK = 0x20
_INT31 = 1 << 31

#: One record to append: ``(timestamp_ms, key, value, headers)``; offsets are assigned consecutively.
RecordSpec = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


# --------------------------------------------------------------------------------------------------------
# Result type
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentFiles:
    """Paths and facts of a written segment, ready to become ``LogSegmentData`` + metadata.

    ``end_offset`` is inclusive (``base_offset - 1`` for an empty segment); ``leader_epochs`` is the whole
    partition checkpoint (epoch -> start offset) the segment was written under.
    """

    directory: Path
    log: Path
    offset_index: Path
    time_index: Path
    txn_index: Path | None
    producer_snapshot: Path
    leader_epoch_bytes: bytes
    base_offset: int
    end_offset: int
    size: int
    max_timestamp_ms: int
    num_batches: int = 0
    num_records: int = 0
    codec: str = "none"
    leader_epochs: dict[int, int] = field(default_factory=dict)
    aborted_txns: tuple[AbortedTxn, ...] = ()

    def segment_leader_epochs(self) -> dict[int, int]:
        """Epoch -> first offset within this segment (never empty when any epoch applies)."""
        return segment_leader_epochs(self.leader_epochs, self.base_offset, max(self.end_offset, self.base_offset))

    def to_log_segment_data(self) -> LogSegmentData:
        """What the broker passes to ``copyLogSegmentData`` for this segment."""
        return LogSegmentData(
            log_segment=self.log,
            offset_index=self.offset_index,
            time_index=self.time_index,
            transaction_index=self.txn_index,
            producer_snapshot_index=self.producer_snapshot,
            leader_epoch_index=self.leader_epoch_bytes,
        )

    def to_metadata(
        self,
        topic_id_partition: TopicIdPartition,
        segment_id: str | RemoteLogSegmentId | None = None,
        *,
        broker_id: int = 0,
        event_timestamp_ms: int | None = None,
    ) -> RemoteLogSegmentMetadata:
        """The ``RemoteLogSegmentMetadata`` the broker would build for this segment (state COPY_SEGMENT_STARTED)."""
        if isinstance(segment_id, RemoteLogSegmentId):
            rlsid = segment_id
        else:
            rlsid = RemoteLogSegmentId(topic_id_partition, segment_id or random_kafka_uuid())
        txn_empty = self.txn_index is None or self.txn_index.stat().st_size == 0
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=rlsid,
            start_offset=self.base_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=broker_id,
            event_timestamp_ms=int(time.time() * 1000) if event_timestamp_ms is None else event_timestamp_ms,
            segment_size_in_bytes=self.size,
            segment_leader_epochs=self.segment_leader_epochs(),
            txn_idx_empty=txn_empty,
        )


# --------------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------------

_SERVICES = (
    "checkout-service",
    "payment-gateway",
    "inventory-api",
    "search-frontend",
    "auth-service",
    "shipping-worker",
    "recommendation-engine",
    "cart-service",
)
_LEVELS = ("INFO", "INFO", "INFO", "INFO", "INFO", "INFO", "WARN", "WARN", "ERROR", "DEBUG")
_PATHS = (
    "/api/v1/orders",
    "/api/v1/cart/items",
    "/api/v2/search",
    "/api/v1/users/me",
    "/api/v1/payments/authorize",
    "/api/v1/inventory/reserve",
    "/healthz",
)
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) Chrome/124.0",
    "Mozilla/5.0 (iPhone; iOS 17_4) Mobile",
    "okhttp/4.12.0",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
)
_MESSAGES = (
    "request completed",
    "cache miss, fetched from origin",
    "upstream timeout, retrying",
    "user session refreshed",
    "payment authorized",
    "inventory reserved for order",
)
_STATUSES = (200, 200, 200, 200, 201, 204, 304, 400, 404, 500, 503)


def json_log_value(rng: random.Random, timestamp_ms: int) -> bytes:
    """A ~360-byte JSON log line: repeated vocabulary plus random ids, like machine-limits §2.1 (zstd ~4x)."""
    secs, ms = divmod(timestamp_ms, 1000)
    t = time.gmtime(secs)
    r = rng.getrandbits
    return (
        f'{{"ts":"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.'
        f'{ms:03d}Z","level":"{rng.choice(_LEVELS)}","service":"{rng.choice(_SERVICES)}",'
        f'"host":"ip-10-0-{r(4)}-{r(6)}","path":"{rng.choice(_PATHS)}",'
        f'"status":{rng.choice(_STATUSES)},"latency_ms":{r(16) / 100:.2f},"trace_id":"{r(64):016x}",'
        f'"span_id":"{r(32):08x}","request_id":"{r(128):032x}","ip":"{r(8)}.{r(8)}.{r(8)}.{r(8)}",'
        f'"ua":"{rng.choice(_AGENTS)}","amount":{r(20) / 100:.2f},"message":"{rng.choice(_MESSAGES)}"}}'
    ).encode()


def _make_value(style: str, rng: random.Random, timestamp_ms: int) -> bytes:
    if style == "json-log":
        return json_log_value(rng, timestamp_ms)
    if style == "random":
        return rng.randbytes(360)
    if style == "short":
        return f"v-{rng.getrandbits(32):08x}".encode()
    raise ValueError(f"unknown value_style {style!r}; expected json-log, random or short")


def _make_headers(style: str, rng: random.Random) -> list[tuple[str, bytes | None]]:
    """Roughly one record in eight carries headers, one of them null-valued, to exercise header decoding."""
    if style != "json-log" or rng.random() >= 0.125:
        return []
    return [("traceparent", f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01".encode()), ("retry", None)]


# --------------------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------------------


def _builder(
    codec: CompressionType, transactional: bool, producer_id: int, producer_epoch: int, base_sequence: int
) -> Any:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=_BATCH_SIZE_LIMIT,
    )


def _assign(buf: bytearray, base_offset: int, leader_epoch: int) -> bytes:
    """What the broker does on append: set baseOffset and partitionLeaderEpoch (neither is CRC-covered)."""
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    return bytes(buf)


def _codec(codec: str | int | CompressionType) -> CompressionType:
    if isinstance(codec, str):
        return CompressionType.from_name(codec)
    return CompressionType(codec)


def build_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: int = 0,
    codec: str | int = "none",
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One v2 batch built by kafka-python, with the broker-assigned base offset and leader epoch filled in.

    Note kafka-python (unlike the Java producer) falls back to an uncompressed batch when compression does
    not shrink it, so a ``zstd`` request over random bytes may yield codec 0.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    b = _builder(_codec(codec), transactional, producer_id, producer_epoch, base_sequence)
    for delta, (ts, key, value, headers) in enumerate(records):
        if b.append(delta, ts, key, value, list(headers)) is None:
            raise ValueError("record does not fit in one batch")
    return _assign(b.build(), base_offset, leader_epoch)


def build_control_batch(
    kind: ControlRecordType,
    *,
    base_offset: int,
    timestamp_ms: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    leader_epoch: int = 0,
) -> bytes:
    """A COMMIT/ABORT marker batch as the broker writes it (one record, uncompressed, no sequence).

    kafka-python cannot set the control bit, so we build the record with it, set bit 5 and recompute the CRC.
    """
    b = _builder(CompressionType.NONE, True, producer_id, producer_epoch, -1)
    key = struct.pack(">hh", 0, int(kind))
    value = struct.pack(">hi", 0, coordinator_epoch)
    b.append(0, timestamp_ms, key, value, [])
    buf = b.build()
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | _CONTROL_MASK)
    struct.pack_into(">I", buf, 17, _crc32c.crc32c(memoryview(buf)[21:]))
    return _assign(buf, base_offset, leader_epoch)


# --------------------------------------------------------------------------------------------------------
# Segment assembly (shared by the writers)
# --------------------------------------------------------------------------------------------------------


class _IndexBuilder:
    """Kafka 3.7+ ``LogSegment.append`` index policy, fed one batch at a time."""

    def __init__(self, interval_bytes: int) -> None:
        self.interval = interval_bytes
        self.bytes_since = 0
        self.max_ts = NO_TIMESTAMP
        self.offset_of_max = -1
        self.offset_entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []

    def _maybe_time(self) -> None:
        if self.max_ts == NO_TIMESTAMP:
            return
        if not self.time_entries or self.max_ts > self.time_entries[-1][0]:
            self.time_entries.append((self.max_ts, self.offset_of_max))

    def add(self, position: int, size: int, last_offset: int, max_ts: int) -> None:
        if max_ts > self.max_ts:
            self.max_ts, self.offset_of_max = max_ts, last_offset
        if self.bytes_since > self.interval:
            self.offset_entries.append((last_offset, position))
            self._maybe_time()
            self.bytes_since = 0
        self.bytes_since += size

    def roll(self) -> None:
        """On roll the broker appends the final max timestamp to the time index (``onBecomeInactiveSegment``)."""
        self._maybe_time()


def _epoch_at(epochs: list[tuple[int, int]], offset: int) -> int:
    epoch = epochs[0][0] if epochs else 0
    for e, start in epochs:
        if start <= offset:
            epoch = e
    return epoch


def _next_epoch_start(epochs: list[tuple[int, int]], offset: int) -> int | None:
    for _e, start in epochs:
        if start > offset:
            return start
    return None


def _sorted_epochs(leader_epochs: Mapping[int, int] | None) -> list[tuple[int, int]]:
    items = sorted((leader_epochs or {0: 0}).items(), key=lambda kv: (kv[1], kv[0]))
    return [(int(e), int(o)) for e, o in items]


def _finish(
    directory: Path,
    base_offset: int,
    end_offset: int,
    log_path: Path,
    size: int,
    idx: _IndexBuilder,
    aborted: list[AbortedTxn],
    snapshot: list[ProducerSnapshotEntry],
    epochs: list[tuple[int, int]],
    transactional: bool,
    num_batches: int,
    num_records: int,
    codec: str,
) -> SegmentFiles:
    idx.roll()
    offset_index = directory / segment_file_name(base_offset, ".index")
    time_index = directory / segment_file_name(base_offset, ".timeindex")
    offset_index.write_bytes(encode_offset_index(idx.offset_entries, base_offset))
    time_index.write_bytes(encode_time_index(idx.time_entries, base_offset))
    txn_index: Path | None = None
    if transactional or aborted:
        txn_index = directory / segment_file_name(base_offset, ".txnindex")
        txn_index.write_bytes(encode_txn_index(aborted))
    snapshot_path = directory / segment_file_name(end_offset + 1, ".snapshot")
    snapshot_path.write_bytes(encode_producer_snapshot(sorted(snapshot, key=lambda s: s.producer_id)))
    cutoff = max(end_offset, base_offset)
    checkpoint = [(e, o) for e, o in epochs if o <= cutoff]
    return SegmentFiles(
        directory=directory,
        log=log_path,
        offset_index=offset_index,
        time_index=time_index,
        txn_index=txn_index,
        producer_snapshot=snapshot_path,
        leader_epoch_bytes=encode_leader_epoch_checkpoint(checkpoint),
        base_offset=base_offset,
        end_offset=end_offset,
        size=size,
        max_timestamp_ms=idx.max_ts,
        num_batches=num_batches,
        num_records=num_records,
        codec=codec,
        leader_epochs=dict(checkpoint),
        aborted_txns=tuple(aborted),
    )


@dataclass
class _Producer:
    producer_id: int
    epoch: int
    next_seq: int = 0
    last_seq: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = NO_TIMESTAMP
    coordinator_epoch: int = -1
    txn_first_offset: int | None = None

    def snapshot(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(
            self.producer_id,
            self.epoch,
            self.last_seq,
            self.last_offset,
            self.offset_delta,
            self.timestamp,
            self.coordinator_epoch,
            -1 if self.txn_first_offset is None else self.txn_first_offset,
        )


# --------------------------------------------------------------------------------------------------------
# Public writers
# --------------------------------------------------------------------------------------------------------


def write_segment(
    directory: str | os.PathLike[str],
    *,
    base_offset: int = 0,
    num_batches: int | None = None,
    target_bytes: int | None = None,
    codec: Codec | str = "none",
    records_per_batch: tuple[int, int] = (20, 200),
    transactional: bool = False,
    value_style: ValueStyle | str = "json-log",
    seed: int = 0,
    index_interval_bytes: int = 4096,
    leader_epochs: Mapping[int, int] | None = None,
    num_producers: int = 3,
    base_timestamp_ms: int = DEFAULT_BASE_TIMESTAMP_MS,
) -> SegmentFiles:
    """Write a rolled segment of real Kafka batches and its side files into ``directory``.

    Stops after ``num_batches`` batches (control batches count) or once the log reaches ``target_bytes``;
    with neither given, 50 batches. Producers are idempotent (they carry ids and sequences, as Kafka 3+
    producers do by default). With ``transactional=True`` the producers run interleaved transactions, each
    ended by a COMMIT or ABORT control batch; at least one is aborted, so the ``.txnindex`` is non-empty.
    ``leader_epochs`` (epoch -> start offset, default ``{0: 0}``) sets each batch's partitionLeaderEpoch;
    batches are cut at epoch boundaries. Deterministic for a given ``seed``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if num_batches is None and target_bytes is None:
        num_batches = 50
    lo, hi = records_per_batch
    if not 1 <= lo <= hi:
        raise ValueError(f"records_per_batch must be 1 <= lo <= hi, got {records_per_batch}")
    comp = _codec(codec)
    epochs = _sorted_epochs(leader_epochs)
    rng = random.Random(seed)
    producers = [_Producer(1000 + i, 0) for i in range(max(1, num_producers))]
    idx = _IndexBuilder(index_interval_bytes)
    aborted: list[AbortedTxn] = []
    log_path = directory / segment_file_name(base_offset, ".log")
    next_offset = base_offset
    ts = base_timestamp_ms
    position = 0
    batches = 0
    records_total = 0
    coordinator_epoch = 0

    def done() -> bool:
        if num_batches is not None and batches >= num_batches:
            return True
        return target_bytes is not None and position >= target_bytes

    with open(log_path, "wb", buffering=1 << 20) as out:

        def emit(batch: bytes, last_offset: int, max_ts: int) -> None:
            nonlocal position, batches
            out.write(batch)
            idx.add(position, len(batch), last_offset, max_ts)
            position += len(batch)
            batches += 1

        def end_txn(p: _Producer, abort: bool) -> None:
            nonlocal next_offset, ts
            assert p.txn_first_offset is not None
            ts += 1
            marker_offset = next_offset
            batch = build_control_batch(
                ControlRecordType.ABORT if abort else ControlRecordType.COMMIT,
                base_offset=marker_offset,
                timestamp_ms=ts,
                producer_id=p.producer_id,
                producer_epoch=p.epoch,
                coordinator_epoch=coordinator_epoch,
                leader_epoch=_epoch_at(epochs, marker_offset),
            )
            emit(batch, marker_offset, ts)
            if abort:
                others = [q.txn_first_offset for q in producers if q is not p and q.txn_first_offset is not None]
                lso = min(others) if others else marker_offset + 1
                aborted.append(AbortedTxn(p.producer_id, p.txn_first_offset, marker_offset, lso))
            p.txn_first_offset = None
            # like ProducerAppendInfo.appendEndTxnMarker: epoch, timestamp and txn state change; the last data
            # offset and sequence do not (a marker is not producer data)
            p.coordinator_epoch = coordinator_epoch
            p.timestamp = ts
            next_offset += 1

        while not done():
            p = rng.choice(producers)
            if transactional and p.txn_first_offset is not None and rng.random() < 0.3:
                end_txn(p, abort=not aborted or rng.random() < 0.35)
                continue
            n = rng.randint(lo, hi)
            boundary = _next_epoch_start(epochs, next_offset)
            if boundary is not None:
                n = max(1, min(n, boundary - next_offset))
            specs: list[RecordSpec] = []
            for _ in range(n):
                ts += rng.randint(1, 3)
                specs.append(
                    (
                        ts,
                        f"user-{rng.randrange(100_000)}".encode(),
                        _make_value(value_style, rng, ts),
                        _make_headers(value_style, rng),
                    )
                )
            batch = build_batch(
                specs,
                base_offset=next_offset,
                codec=comp,
                leader_epoch=_epoch_at(epochs, next_offset),
                producer_id=p.producer_id,
                producer_epoch=p.epoch,
                base_sequence=p.next_seq,
                transactional=transactional,
            )
            last = next_offset + n - 1
            if transactional and p.txn_first_offset is None:
                p.txn_first_offset = next_offset
            emit(batch, last, ts)
            p.last_seq = (p.next_seq + n - 1) % _INT31
            p.next_seq = (p.next_seq + n) % _INT31
            p.last_offset, p.offset_delta, p.timestamp = last, n - 1, ts
            next_offset = last + 1
            records_total += n
        for p in producers:  # a rolled test segment leaves no transaction hanging
            if p.txn_first_offset is not None:
                end_txn(p, abort=not aborted or rng.random() < 0.35)

    snapshot = [p.snapshot() for p in producers if p.last_offset >= 0]
    return _finish(
        directory,
        base_offset,
        next_offset - 1,
        log_path,
        position,
        idx,
        aborted,
        snapshot,
        epochs,
        transactional,
        batches,
        records_total,
        comp.codec_name,
    )


def write_single_batch_segment(
    directory: str | os.PathLike[str],
    *,
    base_offset: int = 0,
    records: int = 1,
    codec: Codec | str = "none",
    seed: int = 0,
) -> SegmentFiles:
    """The smallest real segment: one batch of ``records`` records (empty offset index, one time-index entry)."""
    return write_segment(
        directory,
        base_offset=base_offset,
        num_batches=1,
        codec=codec,
        records_per_batch=(records, records),
        seed=seed,
        num_producers=1,
    )


def write_empty_segment(
    directory: str | os.PathLike[str], *, base_offset: int = 0, leader_epochs: Mapping[int, int] | None = None
) -> SegmentFiles:
    """A 0-byte log with empty indexes and an empty producer snapshot; ``end_offset`` is ``base_offset - 1``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / segment_file_name(base_offset, ".log")
    log_path.write_bytes(b"")
    return _finish(
        directory,
        base_offset,
        base_offset - 1,
        log_path,
        0,
        _IndexBuilder(4096),
        [],
        [],
        _sorted_epochs(leader_epochs),
        False,
        0,
        0,
        "none",
    )


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
    comp = _codec(codec)
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
                (ts, f"user-{rng.randrange(100_000)}".encode(), json_log_value(rng, ts), _make_headers("json-log", rng))
            )
        templates.append(build_batch(specs, codec=comp, producer_id=1000, producer_epoch=0, base_sequence=0))
        counts.append(n)
    cycle = b"".join(templates)
    starts: list[int] = []
    pos = 0
    for t in templates:
        starts.append(pos)
        pos += len(t)

    idx = _IndexBuilder(index_interval_bytes)
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
                seq = (seq + n) % _INT31
                ts = max_ts
                last_n = n
            if used:
                out.write(view[:used])
            view.release()
    snapshot = [ProducerSnapshotEntry(1000, 0, (seq - 1) % _INT31, next_offset - 1, last_n - 1, ts, -1, -1)]
    return _finish(
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


def write_entries_segment(
    directory: str | os.PathLike[str],
    entries: Sequence[bytes],
    *,
    leader_epochs: Mapping[int, int] | None = None,
    index_interval_bytes: int = 4096,
    open_transactions: Mapping[int, int] | None = None,
) -> SegmentFiles:
    """A segment of caller-built entries, in order: v2 batches (``build_batch``, ``build_control_batch``) or
    legacy magic 0/1 message sets, each already carrying its absolute offsets. Indexes, transaction index,
    producer snapshot and checkpoint are derived from them as a broker would, so odd data (null keys and
    values, old formats, a chunk-spanning batch, transactions left open or ended in a later segment) tiers like
    any segment. ``open_transactions`` (producer id -> first offset) are transactions an earlier segment left
    open: an ABORT marker here for one of them lists that first offset in this segment's ``.txnindex``."""
    from rsm.kafka.records import decode_legacy_entry, decode_records, parse_batch_header, parse_control_key

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not entries:
        raise ValueError("a segment needs at least one entry")
    spans: list[tuple[int, int, int]] = []  # first offset, last offset, max timestamp
    producers: dict[int, _Producer] = {}
    txn_first = dict(open_transactions or {})
    aborted: list[AbortedTxn] = []
    transactional = bool(txn_first)
    for entry in entries:
        if entry[16] == 2:
            h = parse_batch_header(entry)
            spans.append((h.base_offset, h.last_offset, h.max_timestamp))
            if h.producer_id < 0:
                continue
            p = producers.setdefault(h.producer_id, _Producer(h.producer_id, h.producer_epoch))
            p.epoch, p.timestamp = h.producer_epoch, h.max_timestamp
            if h.is_transactional:
                transactional = True
            if h.is_control:  # a marker ends the producer's transaction (ProducerStateManager's rule)
                first = txn_first.pop(h.producer_id, None)
                (record,) = decode_records(entry)
                if first is not None and parse_control_key(record.key)[1] == ControlRecordType.ABORT:
                    lso = min(txn_first.values(), default=h.base_offset + 1)
                    aborted.append(AbortedTxn(h.producer_id, first, h.base_offset, lso))
                continue
            if h.is_transactional:
                txn_first.setdefault(h.producer_id, h.base_offset)
            p.last_seq = h.last_sequence
            p.last_offset, p.offset_delta = h.last_offset, h.last_offset_delta
        else:
            msgs = decode_legacy_entry(bytes(entry))
            spans.append((msgs[0].offset, msgs[-1].offset, max(m.timestamp for m in msgs)))
    base = spans[0][0]
    idx = _IndexBuilder(index_interval_bytes)
    log_path = directory / segment_file_name(base, ".log")
    position = 0
    with open(log_path, "wb") as f:
        for entry, (_first, last, max_ts) in zip(entries, spans, strict=True):
            f.write(entry)
            idx.add(position, len(entry), last, max_ts)
            position += len(entry)
    records = sum(last - first + 1 for first, last, _ in spans)
    for pid, first in txn_first.items():
        producers.setdefault(pid, _Producer(pid, 0)).txn_first_offset = first
    return _finish(
        directory,
        base,
        spans[-1][1],
        log_path,
        position,
        idx,
        aborted,
        [p.snapshot() for p in producers.values()],
        _sorted_epochs(leader_epochs or {0: base}),
        transactional,
        len(entries),
        records,
        "mixed",
    )
