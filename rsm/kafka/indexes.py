"""Kafka's per-segment side files: offset index, time index, transaction index, producer snapshot, leader epochs.

The RSM stores these next to the log and hands them back through ``fetchIndex``; the broker's
``RemoteIndexCache`` then memory-maps them, so what we produce (in tests) and check must be exactly Kafka's
layout (reference §6). All integers are big-endian. Offsets in the public API are absolute; the relative
encoding (``offset - base_offset`` as int32) is an on-disk detail handled here.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c as _crc32c

from rsm.kafka.records import KafkaFormatError

__all__ = [
    "ABORTED_TXN_SIZE",
    "NO_TIMESTAMP",
    "OFFSET_INDEX_ENTRY_SIZE",
    "PRODUCER_ENTRY_SIZE",
    "TIME_INDEX_ENTRY_SIZE",
    "AbortedTxn",
    "EpochEntry",
    "IndexCorrupt",
    "OffsetIndex",
    "OffsetPosition",
    "ProducerSnapshotEntry",
    "TimeIndex",
    "TimestampOffset",
    "collect_aborted_txns",
    "decode_leader_epoch_checkpoint",
    "decode_offset_index",
    "decode_producer_snapshot",
    "decode_time_index",
    "decode_txn_index",
    "encode_leader_epoch_checkpoint",
    "encode_offset_index",
    "encode_producer_snapshot",
    "encode_time_index",
    "encode_txn_index",
    "segment_file_name",
    "segment_leader_epochs",
]

OFFSET_INDEX_ENTRY_SIZE = 8
TIME_INDEX_ENTRY_SIZE = 12
ABORTED_TXN_SIZE = 34
PRODUCER_ENTRY_SIZE = 46
_SNAPSHOT_HEADER_SIZE = 10  # version int16, crc uint32, count int32
_SNAPSHOT_VERSION = 1
_TXN_VERSION = 0
#: Kafka's ``RecordBatch.NO_TIMESTAMP``.
NO_TIMESTAMP = -1

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_ABORTED = struct.Struct(">hqqqq")
_PRODUCER = struct.Struct(">qhiqiqiq")
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_INT32_MAX = (1 << 31) - 1


class IndexCorrupt(KafkaFormatError):
    """An index, snapshot or checkpoint file does not have Kafka's layout (size, version, CRC, ordering)."""


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 zero-padded digits plus a suffix such as ``.log``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:020d}{suffix}"


def _relative(offset: int, base_offset: int) -> int:
    rel = offset - base_offset
    if not 0 <= rel <= _INT32_MAX:
        raise ValueError(f"offset {offset} is not within int32 of base offset {base_offset}")
    return rel


def _entry_count(data: bytes | bytearray | memoryview, entry_size: int, what: str, strip_preallocated: bool) -> int:
    """Number of real entries; an active (un-trimmed) index ends in zero-filled preallocated slots."""
    if len(data) % entry_size:
        raise IndexCorrupt(f"{what} size {len(data)} is not a multiple of {entry_size}")
    n = len(data) // entry_size
    if strip_preallocated:
        zero = bytes(entry_size)
        view = memoryview(data)
        while n and view[(n - 1) * entry_size : n * entry_size] == zero:
            n -= 1
    return n


# --------------------------------------------------------------------------------------------------------
# Offset index (.index)
# --------------------------------------------------------------------------------------------------------


class OffsetPosition(NamedTuple):
    """An offset-index entry with an absolute offset, or a lookup result."""

    offset: int
    position: int


def encode_offset_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """8-byte entries ``relativeOffset int32, position int32`` from absolute ``(offset, position)`` pairs.

    Offsets must strictly increase and positions must not decrease, as Kafka's ``OffsetIndex.append`` demands.
    """
    out = bytearray()
    last_offset = -1
    last_pos = -1
    for offset, position in entries:
        if offset <= last_offset or position < last_pos:
            raise ValueError(
                f"offset index entries must increase: ({offset}, {position}) after ({last_offset}, {last_pos})"
            )
        if not 0 <= position <= _INT32_MAX:
            raise ValueError(f"position {position} out of int32 range")
        out += _OFFSET_ENTRY.pack(_relative(offset, base_offset), position)
        last_offset, last_pos = offset, position
    return bytes(out)


def decode_offset_index(
    data: bytes | bytearray | memoryview, base_offset: int, *, strip_preallocated: bool = True, validate: bool = True
) -> list[OffsetPosition]:
    """Entries of a ``.index`` file with absolute offsets; ``validate`` checks they increase."""
    n = _entry_count(data, OFFSET_INDEX_ENTRY_SIZE, "offset index", strip_preallocated)
    out = [
        OffsetPosition(base_offset + rel, pos)
        for rel, pos in _OFFSET_ENTRY.iter_unpack(memoryview(data)[: n * OFFSET_INDEX_ENTRY_SIZE])
    ]
    if validate:
        for i in range(1, len(out)):
            if out[i].offset <= out[i - 1].offset or out[i].position < out[i - 1].position:
                raise IndexCorrupt(f"offset index entry {i} {tuple(out[i])} does not follow {tuple(out[i - 1])}")
    return out


@dataclass(frozen=True)
class OffsetIndex:
    """A decoded ``.index`` with Kafka's lookup: the greatest entry whose offset is <= the target."""

    base_offset: int
    entries: tuple[OffsetPosition, ...]

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, base_offset: int) -> OffsetIndex:
        return cls(base_offset, tuple(decode_offset_index(data, base_offset)))

    def to_bytes(self) -> bytes:
        return encode_offset_index(self.entries, self.base_offset)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Where to start reading to find ``target_offset``; ``(base_offset, 0)`` when no entry is <= it."""
        i = bisect.bisect_right(self.entries, target_offset, key=lambda e: e.offset)
        if i == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entries[i - 1]

    def __len__(self) -> int:
        return len(self.entries)


# --------------------------------------------------------------------------------------------------------
# Time index (.timeindex)
# --------------------------------------------------------------------------------------------------------


class TimestampOffset(NamedTuple):
    """A time-index entry: every record after ``offset`` has a timestamp greater than ``timestamp``."""

    timestamp: int
    offset: int


def encode_time_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """12-byte entries ``timestamp int64, relativeOffset int32``; timestamps and offsets must not go back."""
    out = bytearray()
    last_ts: int | None = None
    last_offset = -1
    for timestamp, offset in entries:
        if (last_ts is not None and timestamp < last_ts) or offset < last_offset:
            raise ValueError(
                f"time index entries must be monotonic: ({timestamp}, {offset}) after ({last_ts}, {last_offset})"
            )
        out += _TIME_ENTRY.pack(timestamp, _relative(offset, base_offset))
        last_ts, last_offset = timestamp, offset
    return bytes(out)


def decode_time_index(
    data: bytes | bytearray | memoryview, base_offset: int, *, strip_preallocated: bool = True, validate: bool = True
) -> list[TimestampOffset]:
    """Entries of a ``.timeindex`` file with absolute offsets; ``validate`` checks monotonicity."""
    n = _entry_count(data, TIME_INDEX_ENTRY_SIZE, "time index", strip_preallocated)
    out = [
        TimestampOffset(ts, base_offset + rel)
        for ts, rel in _TIME_ENTRY.iter_unpack(memoryview(data)[: n * TIME_INDEX_ENTRY_SIZE])
    ]
    if validate:
        for i in range(1, len(out)):
            if out[i].timestamp < out[i - 1].timestamp or out[i].offset < out[i - 1].offset:
                raise IndexCorrupt(f"time index entry {i} {tuple(out[i])} goes back from {tuple(out[i - 1])}")
    return out


@dataclass(frozen=True)
class TimeIndex:
    """A decoded ``.timeindex`` with Kafka's lookup (greatest entry whose timestamp is <= the target)."""

    base_offset: int
    entries: tuple[TimestampOffset, ...]

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, base_offset: int) -> TimeIndex:
        return cls(base_offset, tuple(decode_time_index(data, base_offset)))

    def to_bytes(self) -> bytes:
        return encode_time_index(self.entries, self.base_offset)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The offset to start searching from; ``(NO_TIMESTAMP, base_offset)`` when no entry is <= target."""
        i = bisect.bisect_right(self.entries, target_timestamp, key=lambda e: e.timestamp)
        if i == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entries[i - 1]

    @property
    def last_entry(self) -> TimestampOffset | None:
        return self.entries[-1] if self.entries else None

    def __len__(self) -> int:
        return len(self.entries)


# --------------------------------------------------------------------------------------------------------
# Transaction index (.txnindex)
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its data spans ``first_offset``..``last_offset`` (the ABORT marker)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """34-byte ``AbortedTxn`` records (version int16 = 0 first)."""
    out = bytearray()
    for e in entries:
        if e.last_offset < e.first_offset:
            raise ValueError(f"aborted txn last offset {e.last_offset} < first offset {e.first_offset}")
        out += _ABORTED.pack(_TXN_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
    return bytes(out)


def decode_txn_index(data: bytes | bytearray | memoryview) -> list[AbortedTxn]:
    """All entries of a ``.txnindex``; an unknown version or a partial entry raises :class:`IndexCorrupt`."""
    if len(data) % ABORTED_TXN_SIZE:
        raise IndexCorrupt(f"transaction index size {len(data)} is not a multiple of {ABORTED_TXN_SIZE}")
    out: list[AbortedTxn] = []
    for i, (version, pid, first, last, lso) in enumerate(_ABORTED.iter_unpack(data)):
        if version != _TXN_VERSION:
            raise IndexCorrupt(f"transaction index entry {i} has unknown version {version}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted_txns(
    entries: Iterable[AbortedTxn],
    fetch_offset: int,
    upper_bound_offset: int,
) -> list[AbortedTxn]:
    """Kafka's ``TransactionIndex.collectAbortedTxns``: aborted txns overlapping [fetch_offset, upper_bound)."""
    return [e for e in entries if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset]


# --------------------------------------------------------------------------------------------------------
# Producer snapshot (.snapshot, version 1)
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's state; ``current_txn_first_offset`` is -1 when it has no open transaction."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int = -1


def encode_producer_snapshot(entries: Sequence[ProducerSnapshotEntry]) -> bytes:
    """``version int16 = 1, crc uint32 = CRC-32C over [6, end), count int32``, then 46-byte entries."""
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        body += _PRODUCER.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return struct.pack(">hI", _SNAPSHOT_VERSION, _crc32c.crc32c(bytes(body))) + bytes(body)


def decode_producer_snapshot(data: bytes | bytearray | memoryview) -> list[ProducerSnapshotEntry]:
    """Entries of a v1 producer snapshot after checking version, CRC and length (as ``ProducerStateManager``)."""
    if len(data) < _SNAPSHOT_HEADER_SIZE:
        raise IndexCorrupt(f"producer snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != _SNAPSHOT_VERSION:
        raise IndexCorrupt(f"producer snapshot version {version} is not supported (expected 1)")
    actual = _crc32c.crc32c(bytes(memoryview(data)[6:]))
    if actual != crc:
        raise IndexCorrupt(f"producer snapshot CRC mismatch: stored {crc:#010x}, computed {actual:#010x}")
    if count < 0 or len(data) != _SNAPSHOT_HEADER_SIZE + count * PRODUCER_ENTRY_SIZE:
        raise IndexCorrupt(f"producer snapshot says {count} entries but holds {len(data)} bytes")
    return [
        ProducerSnapshotEntry(*fields) for fields in _PRODUCER.iter_unpack(memoryview(data)[_SNAPSHOT_HEADER_SIZE:])
    ]


# --------------------------------------------------------------------------------------------------------
# Leader-epoch checkpoint (text)
# --------------------------------------------------------------------------------------------------------


class EpochEntry(NamedTuple):
    """Leader ``epoch`` began at ``start_offset``."""

    epoch: int
    start_offset: int


def _epoch_items(entries: Mapping[int, int] | Iterable[tuple[int, int]]) -> list[EpochEntry]:
    items = entries.items() if isinstance(entries, Mapping) else entries
    return [EpochEntry(int(e), int(o)) for e, o in items]


def encode_leader_epoch_checkpoint(entries: Mapping[int, int] | Iterable[tuple[int, int]]) -> bytes:
    """The checkpoint text: ``0`` (version), the count, then ``"<epoch> <startOffset>"`` lines, each ``\\n``-ended.

    Epochs and start offsets must increase, as in ``LeaderEpochFileCache``.
    """
    items = _epoch_items(entries)
    for prev, cur in zip(items, items[1:], strict=False):
        if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
            raise ValueError(f"leader epoch entries must increase: {cur} after {prev}")
    lines = ["0", str(len(items))] + [f"{e.epoch} {e.start_offset}" for e in items]
    return ("\n".join(lines) + "\n").encode("utf-8")


def decode_leader_epoch_checkpoint(data: bytes | bytearray | memoryview | str) -> list[EpochEntry]:
    """Parse checkpoint text (any whitespace separates fields, as Kafka's ``CheckpointFile`` reader allows)."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise IndexCorrupt("leader-epoch checkpoint needs a version line and a count line")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError:
        raise IndexCorrupt(f"bad leader-epoch checkpoint header {lines[:2]!r}")
    if version != 0:
        raise IndexCorrupt(f"leader-epoch checkpoint version {version} is not supported")
    if count != len(lines) - 2:
        raise IndexCorrupt(f"leader-epoch checkpoint says {count} entries but has {len(lines) - 2}")
    out: list[EpochEntry] = []
    for ln in lines[2:]:
        parts = ln.split()
        if len(parts) != 2:
            raise IndexCorrupt(f"bad leader-epoch line {ln!r}")
        try:
            out.append(EpochEntry(int(parts[0]), int(parts[1])))
        except ValueError:
            raise IndexCorrupt(f"bad leader-epoch line {ln!r}")
    return out


def segment_leader_epochs(
    entries: Mapping[int, int] | Iterable[tuple[int, int]], base_offset: int, end_offset: int
) -> dict[int, int]:
    """Epoch -> start offset within [base_offset, end_offset], the way the broker fills ``segmentLeaderEpochs``.

    Mirrors ``LeaderEpochFileCache.epochEntriesInRange``: the epoch in force at ``base_offset`` is kept with its
    start moved up to ``base_offset``; epochs starting after ``end_offset`` are dropped.
    """
    items = sorted(_epoch_items(entries), key=lambda e: e.start_offset)
    out: dict[int, int] = {}
    for i, e in enumerate(items):
        nxt = items[i + 1].start_offset if i + 1 < len(items) else None
        if e.start_offset > end_offset:
            break
        if nxt is not None and nxt <= base_offset:
            continue
        out[e.epoch] = max(e.start_offset, base_offset)
    return out
