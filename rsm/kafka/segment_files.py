"""A written segment's files and the side files every segment writer derives from its batches.

``SegmentFiles`` holds the paths and facts of a written segment, ready to become ``LogSegmentData`` and metadata.
``IndexBuilder``, ``ProducerState`` and ``finish_segment`` write the ``.index``, ``.timeindex``, ``.txnindex``,
``.snapshot`` and the leader-epoch checkpoint as a broker would: index entries follow ``LogSegment.append``
(Kafka 3.7+, per batch).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
from rsm.metadata import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    random_kafka_uuid,
)

__all__ = [
    "SEQUENCE_MODULUS",
    "IndexBuilder",
    "ProducerState",
    "SegmentFiles",
    "epoch_at",
    "finish_segment",
    "next_epoch_start",
    "sorted_epochs",
]

#: Producer sequence numbers wrap around at this value.
SEQUENCE_MODULUS = 1 << 31


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


class IndexBuilder:
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


def epoch_at(epochs: list[tuple[int, int]], offset: int) -> int:
    epoch = epochs[0][0] if epochs else 0
    for e, start in epochs:
        if start <= offset:
            epoch = e
    return epoch


def next_epoch_start(epochs: list[tuple[int, int]], offset: int) -> int | None:
    for _e, start in epochs:
        if start > offset:
            return start
    return None


def sorted_epochs(leader_epochs: Mapping[int, int] | None) -> list[tuple[int, int]]:
    items = sorted((leader_epochs or {0: 0}).items(), key=lambda kv: (kv[1], kv[0]))
    return [(int(e), int(o)) for e, o in items]


def finish_segment(
    directory: Path,
    base_offset: int,
    end_offset: int,
    log_path: Path,
    size: int,
    idx: IndexBuilder,
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
class ProducerState:
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
