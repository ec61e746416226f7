"""Python mirrors of Kafka's KIP-405 value classes.

They carry exactly what the broker passes to the plugin. Ids are Kafka ``Uuid`` strings (22 characters of
base64url without padding), which is also how they appear in object keys and in the manifest.
"""

from __future__ import annotations

import base64
import enum
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path


def is_kafka_uuid(value: str) -> bool:
    """True when ``value`` is a Kafka ``Uuid.toString()``: 16 bytes in base64url with no padding."""
    if not isinstance(value, str) or len(value) != 22:
        return False
    try:
        raw = base64.urlsafe_b64decode(value + "==")
    except (ValueError, TypeError):
        return False
    return len(raw) == 16 and base64.urlsafe_b64encode(raw).decode().rstrip("=") == value


def random_kafka_uuid() -> str:
    """A new random id in Kafka's string form (like ``Uuid.randomUuid()``, never starting with '-')."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


class IndexType(enum.Enum):
    """Kafka's ``RemoteStorageManager.IndexType``."""

    OFFSET = "OFFSET"
    TIMESTAMP = "TIMESTAMP"
    PRODUCER_SNAPSHOT = "PRODUCER_SNAPSHOT"
    TRANSACTION = "TRANSACTION"
    LEADER_EPOCH = "LEADER_EPOCH"


BROKER_INDEX_SET = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION)
"""What Kafka's RemoteIndexCache fetches, in this order, the first time a consumer's fetch meets a segment, before
the segment's first ``fetchLogSegment``: the plugin loads them ahead with the segment's chunks, and the sidecar
answers a request for one of them with all three."""


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


@dataclass(frozen=True)
class TopicIdPartition:
    topic_id: str
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka's TopicIdPartition.toString()
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: str

    @staticmethod
    def generate_new(topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return RemoteLogSegmentId(topic_id_partition, random_kafka_uuid())


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """What the broker knows about a segment it is tiering; ``end_offset`` is inclusive."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: dict[int, int] = field(default_factory=dict)
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def describe(self) -> str:
        """A short human name for error messages: topic-partition, offsets and segment id."""
        tip = self.topic_id_partition
        return (
            f"segment {self.remote_log_segment_id.id} of {tip.topic}-{tip.partition} "
            f"(offsets {self.start_offset}..{self.end_offset})"
        )


@dataclass(frozen=True)
class LogSegmentData:
    """Kafka's ``LogSegmentData``: the rolled segment's files plus the leader-epoch checkpoint bytes."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes

    def __post_init__(self) -> None:
        for name in ("log_segment", "offset_index", "time_index", "producer_snapshot_index"):
            value = getattr(self, name)
            if not isinstance(value, Path):
                object.__setattr__(self, name, Path(os.fspath(value)))
        if self.transaction_index is not None and not isinstance(self.transaction_index, Path):
            object.__setattr__(self, "transaction_index", Path(os.fspath(self.transaction_index)))
        if not isinstance(self.leader_epoch_index, (bytes, bytearray, memoryview)):
            raise TypeError("leader_epoch_index must be bytes (the leader-epoch checkpoint text)")
        object.__setattr__(self, "leader_epoch_index", bytes(self.leader_epoch_index))
