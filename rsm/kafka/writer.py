"""Write real Kafka log segments (``.log`` + ``.index`` + ``.timeindex`` + ``.txnindex`` + ``.snapshot``).

Why: tests, the demo and the benchmarks must exercise the plugin with bytes a broker would hand it, so that
compression ratios, index lookups and CRC checks mean something. Batches come from
:mod:`rsm.kafka.batch_builder` (kafka-python), the side files from :mod:`rsm.kafka.segment_files`; the fast
writer of benchmark-sized segments is :mod:`rsm.kafka.large_segment`. Needs kafka-python (a test dependency),
imported lazily.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from rsm.kafka.batch_builder import Codec, RecordSpec, build_batch, build_control_batch, codec_of
from rsm.kafka.indexes import AbortedTxn, segment_file_name
from rsm.kafka.records import ControlRecordType
from rsm.kafka.sample_values import DEFAULT_BASE_TIMESTAMP_MS, ValueStyle, make_headers, make_value
from rsm.kafka.segment_files import (
    SEQUENCE_MODULUS,
    IndexBuilder,
    ProducerState,
    SegmentFiles,
    epoch_at,
    finish_segment,
    next_epoch_start,
    sorted_epochs,
)

__all__ = [
    "write_empty_segment",
    "write_entries_segment",
    "write_segment",
    "write_single_batch_segment",
]


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
    comp = codec_of(codec)
    epochs = sorted_epochs(leader_epochs)
    rng = random.Random(seed)
    producers = [ProducerState(1000 + i, 0) for i in range(max(1, num_producers))]
    idx = IndexBuilder(index_interval_bytes)
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

        def end_txn(p: ProducerState, abort: bool) -> None:
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
                leader_epoch=epoch_at(epochs, marker_offset),
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
            boundary = next_epoch_start(epochs, next_offset)
            if boundary is not None:
                n = max(1, min(n, boundary - next_offset))
            specs: list[RecordSpec] = []
            for _ in range(n):
                ts += rng.randint(1, 3)
                specs.append(
                    (
                        ts,
                        f"user-{rng.randrange(100_000)}".encode(),
                        make_value(value_style, rng, ts),
                        make_headers(value_style, rng),
                    )
                )
            batch = build_batch(
                specs,
                base_offset=next_offset,
                codec=comp,
                leader_epoch=epoch_at(epochs, next_offset),
                producer_id=p.producer_id,
                producer_epoch=p.epoch,
                base_sequence=p.next_seq,
                transactional=transactional,
            )
            last = next_offset + n - 1
            if transactional and p.txn_first_offset is None:
                p.txn_first_offset = next_offset
            emit(batch, last, ts)
            p.last_seq = (p.next_seq + n - 1) % SEQUENCE_MODULUS
            p.next_seq = (p.next_seq + n) % SEQUENCE_MODULUS
            p.last_offset, p.offset_delta, p.timestamp = last, n - 1, ts
            next_offset = last + 1
            records_total += n
        for p in producers:  # a rolled test segment leaves no transaction hanging
            if p.txn_first_offset is not None:
                end_txn(p, abort=not aborted or rng.random() < 0.35)

    snapshot = [p.snapshot() for p in producers if p.last_offset >= 0]
    return finish_segment(
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
    return finish_segment(
        directory,
        base_offset,
        base_offset - 1,
        log_path,
        0,
        IndexBuilder(4096),
        [],
        [],
        sorted_epochs(leader_epochs),
        False,
        0,
        0,
        "none",
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
    producers: dict[int, ProducerState] = {}
    txn_first = dict(open_transactions or {})
    aborted: list[AbortedTxn] = []
    transactional = bool(txn_first)
    for entry in entries:
        if entry[16] == 2:
            h = parse_batch_header(entry)
            spans.append((h.base_offset, h.last_offset, h.max_timestamp))
            if h.producer_id < 0:
                continue
            p = producers.setdefault(h.producer_id, ProducerState(h.producer_id, h.producer_epoch))
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
    idx = IndexBuilder(index_interval_bytes)
    log_path = directory / segment_file_name(base, ".log")
    position = 0
    with open(log_path, "wb") as f:
        for entry, (_first, last, max_ts) in zip(entries, spans, strict=True):
            f.write(entry)
            idx.add(position, len(entry), last, max_ts)
            position += len(entry)
    records = sum(last - first + 1 for first, last, _ in spans)
    for pid, first in txn_first.items():
        producers.setdefault(pid, ProducerState(pid, 0)).txn_first_offset = first
    return finish_segment(
        directory,
        base,
        spans[-1][1],
        log_path,
        position,
        idx,
        aborted,
        [p.snapshot() for p in producers.values()],
        sorted_epochs(leader_epochs or {0: base}),
        transactional,
        len(entries),
        records,
        "mixed",
    )
