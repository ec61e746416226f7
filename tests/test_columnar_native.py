"""The compiled record walk (aiokafka's C reader) against the pure-Python walk of ``LogBatchDecoder``.

The compiled walk is the fast path the Spark reader uses; the Python walk is both its fallback and the
reference. On valid batches the two must produce identical columns; on damaged or hostile record bytes the
compiled walk must only ever raise ``CorruptRecordBatch`` (never crash or raise anything else), must raise
whenever the Python walk does, and when both accept a payload they must agree on every column.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsm.kafka.columnar import NATIVE_RECORDS, Columns, LogBatchDecoder, ReadBounds
from rsm.kafka.records import BATCH_HEADER_SIZE, CorruptRecordBatch, encode_varint, encode_varlong
from rsm.kafka.writer import build_batch

pytestmark = pytest.mark.timeout(300)

_bytes = st.one_of(st.none(), st.binary(max_size=200))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.tuples(st.integers(-(10**6), 10**6), _bytes, _bytes, st.lists(_header, max_size=3))
_LOG_APPEND_TIME = 0x08


def _set_attributes(batch: bytes, *, log_append_time: int | None) -> bytes:
    """Mark a batch LOG_APPEND_TIME with the given max timestamp, as the broker does, and fix its CRC."""
    if log_append_time is None:
        return batch
    buf = bytearray(batch)
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | _LOG_APPEND_TIME)
    struct.pack_into(">q", buf, 35, log_append_time)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _decode(entries: list[bytes], native: bool, **options: object) -> Columns | CorruptRecordBatch:
    """All entries through one decoder; the corruption error if one is raised (any other error fails the test)."""
    decoder = LogBatchDecoder(options.pop("bounds", ReadBounds()), native=native, **options)  # type: ignore[arg-type]
    cols = decoder.new_columns()
    position = 0
    try:
        for entry in entries:
            if not decoder.feed(position, entry, cols):
                break
            position += len(entry)
    except CorruptRecordBatch as exc:
        return exc
    return cols


def test_the_compiled_walk_is_in_use() -> None:
    # The spark extra (and so CI's .[all,test]) installs aiokafka; without it every other test here compares
    # the Python walk with itself, so this must fail rather than quietly pass.
    assert NATIVE_RECORDS
    assert LogBatchDecoder(ReadBounds()).native
    assert not LogBatchDecoder(ReadBounds(), native=False).native


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(_record, min_size=1, max_size=15), min_size=1, max_size=3),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    log_append_time=st.one_of(st.none(), st.integers(0, 2 * 10**12)),
    offsets=st.tuples(st.integers(0, 60), st.integers(0, 60)),
    times=st.one_of(st.none(), st.tuples(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))),
    headers=st.booleans(),
)
def test_valid_batches_give_identical_columns(
    batches: list[list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]],
    codec: str,
    log_append_time: int | None,
    offsets: tuple[int, int],
    times: tuple[int, int] | None,
    headers: bool,
) -> None:
    base_ts = 1_700_000_000_000
    entries = []
    offset = 0
    for specs in batches:
        specs = [(base_ts + ts, k, v, h) for ts, k, v, h in specs]
        batch = build_batch(specs, base_offset=offset, codec=codec)
        entries.append(_set_attributes(batch, log_append_time=log_append_time))
        offset += len(specs)
    bounds = ReadBounds(
        min(offsets),
        max(offsets),
        None if times is None else base_ts + min(times),
        None if times is None else base_ts + max(times),
    )
    fast = _decode(entries, True, bounds=bounds, include_headers=headers)
    slow = _decode(entries, False, bounds=bounds, include_headers=headers)
    assert isinstance(slow, Columns)
    assert fast == slow
    if log_append_time is not None:
        assert set(fast.timestamps) <= {log_append_time}
        assert set(fast.timestamp_types) <= {1}


def _uncompressed(specs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    return build_batch([(1_700_000_000_000 + ts, k, v, h) for ts, k, v, h in specs], base_offset=100)


def _agree_on_damage(entry: bytes, headers: bool) -> None:
    """The property for hostile bytes; CRC checks are off so the damage reaches the record walk."""
    fast = _decode([entry], True, verify_crc=False, include_headers=headers)
    slow = _decode([entry], False, verify_crc=False, include_headers=headers)
    if isinstance(slow, CorruptRecordBatch):
        assert isinstance(fast, CorruptRecordBatch), "the compiled walk accepted records the Python walk rejects"
    elif isinstance(fast, Columns):
        assert fast == slow
    # else: the compiled walk is stricter (it checks header sections and out-of-bounds records in full)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(_record, min_size=1, max_size=8),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 8),
    headers=st.booleans(),
)
def test_mutated_records_never_escape_as_other_errors(
    specs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    edits: list[tuple[int, int]],
    cut: int,
    headers: bool,
) -> None:
    buf = bytearray(_uncompressed(specs))
    span = len(buf) - BATCH_HEADER_SIZE + 4  # the records and the 4-byte record count before them
    for where, value in edits:
        buf[BATCH_HEADER_SIZE - 4 + where % span] = value
    if cut:
        del buf[-cut:]
        struct.pack_into(">i", buf, 8, len(buf) - 12)  # keep the frame consistent: the damage is in the records
    _agree_on_damage(bytes(buf), headers)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(0, 40), payload=st.binary(max_size=300), headers=st.booleans())
def test_random_record_bytes_never_escape_as_other_errors(count: int, payload: bytes, headers: bool) -> None:
    header = bytearray(_uncompressed([(0, b"k", b"v", [])])[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(payload))
    struct.pack_into(">i", header, 57, count)
    _agree_on_damage(bytes(header) + payload, headers)


def _record_bytes(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    "record",
    [
        # the header count is the record's last byte and says "more follows": its varint ends past the records
        _record_bytes(b"\x00\x00\x00\x02k\x02v\x80"),
        # one header whose key-length varint runs off the end of the records
        _record_bytes(b"\x00\x00\x00\x02k\x02v\x02\xff"),
        # a key length close to 2**63: adding it to the read position overflows a signed 64-bit sum
        _record_bytes(b"\x00\x00\x00" + encode_varlong((1 << 63) - 10) + b"kv"),
        # a header key that is not UTF-8
        _record_bytes(b"\x00\x00\x00\x02k\x02v\x02\x04\xff\xfe\x00"),
        # an offset delta that needs 64 bits (Kafka's is an int32; the C reader reads any varlong)
        _record_bytes(b"\x00\x00" + encode_varlong(1 << 40) + b"\x02k\x02v\x00"),
    ],
)
def test_hostile_records_are_corrupt_batches(record: bytes) -> None:
    header = bytearray(_uncompressed([(0, b"k", b"v", [])])[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(record))
    struct.pack_into(">i", header, 57, 1)
    entry = bytes(header) + record
    decoder = LogBatchDecoder(ReadBounds(), verify_crc=False, include_headers=True)
    with pytest.raises(CorruptRecordBatch, match="malformed records") as info:
        decoder.feed(4096, entry, decoder.new_columns())
    assert info.value.position == 4096
    skipping = LogBatchDecoder(ReadBounds(), verify_crc=False, fail_on_corruption=False)
    cols = skipping.new_columns()
    assert skipping.feed(4096, entry, cols)
    assert len(cols) == 0 and skipping.skipped_batches == 1
