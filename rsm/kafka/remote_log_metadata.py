"""The records of Kafka's ``__remote_log_metadata`` topic, as its ``TopicBasedRemoteLogMetadataManager`` writes them.

A record's key is null; its value is Kafka's ``BytesApiMessageSerde`` framing: an unsigned varint frame version
(1), an unsigned varint api key, an unsigned varint message version, then the message in Kafka's "flexible"
encoding (compact strings, bytes and arrays; a tagged-fields section after every struct). The messages are the
generated ones of ``storage/src/main/resources/message/`` in apache/kafka:

| api key | message | versions |
|---|---|---|
| 0 | ``RemoteLogSegmentMetadataRecord`` | 0 (3.x), 1 (4.x: adds the tagged ``BrokerLeaderEpoch``) |
| 1 | ``RemoteLogSegmentMetadataUpdateRecord`` | 0, 1 (tagged ``BrokerLeaderEpoch`` and ``EndOffset``) |
| 2 | ``RemotePartitionDeleteMetadataRecord`` | 0, 1 (tagged ``BrokerLeaderEpoch`` and ``EndOffset``) |
| 3 | ``RemoteLogSegmentMetadataSnapshotRecord`` (the manager's local snapshot files, never the topic) | 0, 1 |

Every version is flexible; ``TxnIndexEmpty`` is tag 0 of api keys 0 and 3 from version 0. Tags this module does not
know are skipped, as Kafka's own readers do; a frame version, api key or message version it does not know is a
:class:`RemoteLogMetadataError` naming it, never a guess. :func:`encode` writes what :func:`decode` reads (the tests
round-trip through it and check it against records a real broker wrote).
"""

from __future__ import annotations

import base64
import enum
import struct
from dataclasses import dataclass, field

from rsm.kafka.errors import KafkaFormatError
from rsm.kafka.varint import decode_uvarint
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

FRAME_VERSION = 1
SEGMENT, SEGMENT_UPDATE, PARTITION_DELETE, SEGMENT_SNAPSHOT = 0, 1, 2, 3
MAX_VERSION = {SEGMENT: 1, SEGMENT_UPDATE: 1, PARTITION_DELETE: 1, SEGMENT_SNAPSHOT: 1}
"""The newest version of each message this module reads (Kafka 4.x writes version 1, 3.x version 0)."""
_NAMES = {
    SEGMENT: "RemoteLogSegmentMetadataRecord",
    SEGMENT_UPDATE: "RemoteLogSegmentMetadataUpdateRecord",
    PARTITION_DELETE: "RemotePartitionDeleteMetadataRecord",
    SEGMENT_SNAPSHOT: "RemoteLogSegmentMetadataSnapshotRecord",
}


class RemoteLogMetadataError(KafkaFormatError):
    """A ``__remote_log_metadata`` value this module cannot read: damaged, or of a version it does not know."""


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


@dataclass(frozen=True)
class SegmentRecord:
    """Api key 0: a segment's copy started (or, in a snapshot's terms, its metadata in full)."""

    metadata: RemoteLogSegmentMetadata
    broker_leader_epoch: int | None = None
    version: int = 1


@dataclass(frozen=True)
class SegmentUpdateRecord:
    """Api key 1: a segment's state moved on (copy finished, delete started or finished)."""

    segment_id: RemoteLogSegmentId
    broker_id: int
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None
    broker_leader_epoch: int | None = None
    end_offset: int | None = None
    version: int = 1


@dataclass(frozen=True)
class PartitionDeleteRecord:
    """Api key 2: a partition's remote data is to be, is being, or was deleted."""

    topic_id_partition: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: RemotePartitionDeleteState
    broker_leader_epoch: int | None = None
    end_offset: int | None = None
    version: int = 1


@dataclass(frozen=True)
class SegmentSnapshotRecord:
    """Api key 3: one segment in the metadata manager's snapshot file (its partition is the file's)."""

    segment_id: str
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: dict[int, int] = field(default_factory=dict)
    segment_size_in_bytes: int = 0
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    txn_idx_empty: bool = False
    broker_leader_epoch: int | None = None
    version: int = 1


RemoteLogMetadataRecord = SegmentRecord | SegmentUpdateRecord | PartitionDeleteRecord | SegmentSnapshotRecord


def uuid_to_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString()``: base64url of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def uuid_to_bytes(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka Uuid")
    return raw


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def fail(self, why: str) -> RemoteLogMetadataError:
        return RemoteLogMetadataError(f"{self.what}: {why} (at byte {self.pos} of {len(self.data)})")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"{n} bytes needed, {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        try:
            value, self.pos = decode_uvarint(self.data, self.pos, 5)
        except ValueError as e:
            raise self.fail(str(e)) from None
        if value >> 32:
            raise self.fail("unsigned varint does not fit in 32 bits")
        return value

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def bool(self) -> bool:
        b = self.take(1)[0]
        if b > 1:
            raise self.fail(f"boolean byte {b}")
        return b == 1

    def uuid(self) -> str:
        return uuid_to_str(self.take(16))

    def string(self) -> str:
        n = self.uvarint()
        if n == 0:
            raise self.fail("null string where Kafka requires one")
        try:
            return self.take(n - 1).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"string is not UTF-8: {e}") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1)

    def tags(self, known: dict[int, str]) -> dict[str, bytes]:
        """A tagged-fields section: the known tags' raw values by name; unknown tags are skipped."""
        out: dict[str, bytes] = {}
        last = -1
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if tag <= last:
                raise self.fail(f"tag {tag} after tag {last}")
            last = tag
            value = self.take(self.uvarint())
            if tag in known:
                out[known[tag]] = value
        return out


def _tag_int(r: _Reader, raw: bytes | None, fmt: str) -> int | None:
    if raw is None:
        return None
    if len(raw) != struct.calcsize(fmt):
        raise r.fail(f"tagged field of {len(raw)} bytes where {struct.calcsize(fmt)} are expected")
    return int(struct.unpack(fmt, raw)[0])


def _tag_bool(r: _Reader, raw: bytes | None) -> bool:
    if raw is None:
        return False
    if raw not in (b"\x00", b"\x01"):
        raise r.fail(f"tagged boolean {raw!r}")
    return raw == b"\x01"


def _topic_id_partition(r: _Reader) -> TopicIdPartition:
    name = r.string()
    topic_id = r.uuid()
    partition = r.int32()
    r.tags({})
    return TopicIdPartition(topic_id, name, partition)


def _segment_id(r: _Reader) -> RemoteLogSegmentId:
    tip = _topic_id_partition(r)
    sid = r.uuid()
    r.tags({})
    return RemoteLogSegmentId(tip, sid)


def _leader_epochs(r: _Reader) -> dict[int, int]:
    n = r.uvarint()
    if n == 0:
        raise r.fail("null array of leader epochs")
    epochs: dict[int, int] = {}
    for _ in range(n - 1):
        epoch = r.int32()
        epochs[epoch] = r.int64()
        r.tags({})
    return epochs


def _segment_state(r: _Reader) -> RemoteLogSegmentState:
    state = r.int8()
    try:
        return RemoteLogSegmentState(state)
    except ValueError:
        raise r.fail(f"unknown remote log segment state {state}") from None


def decode(value: bytes) -> RemoteLogMetadataRecord:
    """One record value of ``__remote_log_metadata`` (or of the metadata manager's snapshot file)."""
    r = _Reader(bytes(value), "__remote_log_metadata record")
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise r.fail(f"frame version {frame}; only {FRAME_VERSION} is known")
    api_key, version = r.uvarint(), r.uvarint()
    if api_key not in MAX_VERSION:
        raise r.fail(f"unknown record type (api key) {api_key}; known: {sorted(MAX_VERSION)}")
    name = _NAMES[api_key]
    r.what = f"{name} v{version}"
    if version > MAX_VERSION[api_key]:
        raise r.fail(
            f"version {version} is newer than this kts reads (up to {MAX_VERSION[api_key]}); "
            "upgrade kafka-tiered-storage to read this cluster's record"
        )
    record: RemoteLogMetadataRecord
    if api_key == SEGMENT:
        sid = _segment_id(r)
        start, end, broker, max_ts, event_ts = r.int64(), r.int64(), r.int32(), r.int64(), r.int64()
        epochs = _leader_epochs(r)
        size, custom, state = r.int32(), r.nullable_bytes(), _segment_state(r)
        tags = r.tags({0: "txn", 1: "epoch"} if version >= 1 else {0: "txn"})
        meta = RemoteLogSegmentMetadata(
            sid, start, end, max_ts, broker, event_ts, size, epochs, custom, state, _tag_bool(r, tags.get("txn"))
        )
        record = SegmentRecord(meta, _tag_int(r, tags.get("epoch"), ">i"), version)
    elif api_key == SEGMENT_UPDATE:
        sid = _segment_id(r)
        broker, event_ts, custom, state = r.int32(), r.int64(), r.nullable_bytes(), _segment_state(r)
        tags = r.tags({0: "epoch", 1: "end"} if version >= 1 else {})
        epoch, end = _tag_int(r, tags.get("epoch"), ">i"), _tag_int(r, tags.get("end"), ">q")
        record = SegmentUpdateRecord(sid, broker, event_ts, state, custom, epoch, end, version)
    elif api_key == PARTITION_DELETE:
        tip = _topic_id_partition(r)
        broker, event_ts, raw_state = r.int32(), r.int64(), r.int8()
        try:
            delete_state = RemotePartitionDeleteState(raw_state)
        except ValueError:
            raise r.fail(f"unknown remote partition delete state {raw_state}") from None
        tags = r.tags({0: "epoch", 1: "end"} if version >= 1 else {})
        epoch, end = _tag_int(r, tags.get("epoch"), ">i"), _tag_int(r, tags.get("end"), ">q")
        record = PartitionDeleteRecord(tip, broker, event_ts, delete_state, epoch, end, version)
    else:
        seg = r.uuid()
        start, end, broker, max_ts, event_ts = r.int64(), r.int64(), r.int32(), r.int64(), r.int64()
        epochs = _leader_epochs(r)
        size, custom, state = r.int32(), r.nullable_bytes(), _segment_state(r)
        tags = r.tags({0: "txn", 1: "epoch"} if version >= 1 else {0: "txn"})
        txn, epoch = _tag_bool(r, tags.get("txn")), _tag_int(r, tags.get("epoch"), ">i")
        record = SegmentSnapshotRecord(
            seg, start, end, broker, max_ts, event_ts, epochs, size, custom, state, txn, epoch, version
        )
    if r.pos != len(r.data):
        raise r.fail(f"{len(r.data) - r.pos} bytes left after the message")
    return record


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def uvarint(self, n: int) -> None:
        while n >= 0x80:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def pack(self, fmt: str, value: int) -> None:
        self.out += struct.pack(fmt, value)

    def string(self, s: str) -> None:
        raw = s.encode()
        self.uvarint(len(raw) + 1)
        self.out += raw

    def nullable_bytes(self, b: bytes | None) -> None:
        if b is None:
            self.uvarint(0)
        else:
            self.uvarint(len(b) + 1)
            self.out += b

    def tags(self, tags: list[tuple[int, bytes]]) -> None:
        self.uvarint(len(tags))
        for tag, raw in tags:
            self.uvarint(tag)
            self.uvarint(len(raw))
            self.out += raw

    def topic_id_partition(self, tip: TopicIdPartition) -> None:
        self.string(tip.topic)
        self.out += uuid_to_bytes(tip.topic_id)
        self.pack(">i", tip.partition)
        self.tags([])

    def segment_id(self, sid: RemoteLogSegmentId) -> None:
        self.topic_id_partition(sid.topic_id_partition)
        self.out += uuid_to_bytes(sid.id)
        self.tags([])

    def leader_epochs(self, epochs: dict[int, int]) -> None:
        self.uvarint(len(epochs) + 1)
        for epoch, offset in epochs.items():
            self.pack(">i", epoch)
            self.pack(">q", offset)
            self.tags([])


def _optional_tags(version: int, *values: tuple[int, str, int | None]) -> list[tuple[int, bytes]]:
    return [(tag, struct.pack(fmt, v)) for tag, fmt, v in values if v is not None and version >= 1]


def encode(record: RemoteLogMetadataRecord) -> bytes:
    """The value Kafka's serde writes for ``record`` (at ``record.version``)."""
    w = _Writer()
    w.uvarint(FRAME_VERSION)
    if isinstance(record, SegmentRecord):
        m = record.metadata
        w.uvarint(SEGMENT)
        w.uvarint(record.version)
        w.segment_id(m.remote_log_segment_id)
        for fmt, v in ((">q", m.start_offset), (">q", m.end_offset), (">i", m.broker_id)):
            w.pack(fmt, v)
        w.pack(">q", m.max_timestamp_ms)
        w.pack(">q", m.event_timestamp_ms)
        w.leader_epochs(m.segment_leader_epochs)
        w.pack(">i", m.segment_size_in_bytes)
        w.nullable_bytes(m.custom_metadata)
        w.pack(">b", int(m.state))
        tags = [(0, b"\x01")] if m.txn_idx_empty else []
        w.tags(tags + _optional_tags(record.version, (1, ">i", record.broker_leader_epoch)))
    elif isinstance(record, SegmentUpdateRecord):
        w.uvarint(SEGMENT_UPDATE)
        w.uvarint(record.version)
        w.segment_id(record.segment_id)
        w.pack(">i", record.broker_id)
        w.pack(">q", record.event_timestamp_ms)
        w.nullable_bytes(record.custom_metadata)
        w.pack(">b", int(record.state))
        w.tags(_optional_tags(record.version, (0, ">i", record.broker_leader_epoch), (1, ">q", record.end_offset)))
    elif isinstance(record, PartitionDeleteRecord):
        w.uvarint(PARTITION_DELETE)
        w.uvarint(record.version)
        w.topic_id_partition(record.topic_id_partition)
        w.pack(">i", record.broker_id)
        w.pack(">q", record.event_timestamp_ms)
        w.pack(">b", int(record.state))
        w.tags(_optional_tags(record.version, (0, ">i", record.broker_leader_epoch), (1, ">q", record.end_offset)))
    else:
        w.uvarint(SEGMENT_SNAPSHOT)
        w.uvarint(record.version)
        w.out += uuid_to_bytes(record.segment_id)
        for fmt, v in ((">q", record.start_offset), (">q", record.end_offset), (">i", record.broker_id)):
            w.pack(fmt, v)
        w.pack(">q", record.max_timestamp_ms)
        w.pack(">q", record.event_timestamp_ms)
        w.leader_epochs(record.segment_leader_epochs)
        w.pack(">i", record.segment_size_in_bytes)
        w.nullable_bytes(record.custom_metadata)
        w.pack(">b", int(record.state))
        tags = [(0, b"\x01")] if record.txn_idx_empty else []
        w.tags(tags + _optional_tags(record.version, (1, ">i", record.broker_leader_epoch)))
    return bytes(w.out)
