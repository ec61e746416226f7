"""The compiled record walk (aiokafka's C reader) against the pure-Python walk of ``LogBatchDecoder``.

The compiled walk is the fast path the Spark reader uses; the Python walk is both its fallback and the
reference. On valid batches the two must produce identical columns; on damaged or hostile record bytes the
compiled walk must only ever raise ``CorruptRecordBatch`` (never crash or raise anything else), must raise
whenever the Python walk does, and when both accept a payload they must agree on every column. The one
exception is an over-long (six bytes or more) int32 varint, which Kafka and the Python walk refuse: the compiled
walk may accept it, and its rows must then be the values those bytes encode (an independent lenient reading).
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, example, given, settings
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


def _lenient_varint(buf: bytes, pos: int, bits: int) -> tuple[int, int]:
    """A zigzag varint of up to ten bytes whose value must fit ``bits``: over-long encodings pass (Kafka refuses)."""
    u = shift = 0
    for _ in range(10):
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            value = (u >> 1) ^ -(u & 1)
            if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
                raise ValueError(f"{value} does not fit {bits} bits")
            return value, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def _lenient_rows(entry: bytes, headers: bool) -> Columns | None:
    """An independent reading of an uncompressed batch that accepts over-long varints, else ``None``.

    The compiled walk is allowed exactly this leniency (over-long encodings of int32 fields, read as the value
    they encode); where the Python walk refuses such a batch and the compiled walk accepts it, its rows must be
    these.
    """
    base_offset, base_ts, max_ts = struct.unpack_from(">q", entry, 0)[0], *struct.unpack_from(">qq", entry, 27)
    log_append = struct.unpack_from(">h", entry, 21)[0] & 0x08
    (count,) = struct.unpack_from(">i", entry, 57)
    cols = Columns(headers=[] if headers else None)
    pos = BATCH_HEADER_SIZE
    try:
        for _ in range(count):
            length, pos = _lenient_varint(entry, pos, 32)
            end = pos + length
            pos += 1  # attributes: one byte, any value
            ts_delta, pos = _lenient_varint(entry, pos, 64)
            offset_delta, pos = _lenient_varint(entry, pos, 32)
            fields: list[bytes | None] = []
            for _field in ("key", "value"):
                n, pos = _lenient_varint(entry, pos, 32)
                fields.append(None if n < 0 else entry[pos : pos + n])
                pos += max(n, 0)
            n_headers, pos = _lenient_varint(entry, pos, 32)
            items: list[tuple[str, bytes | None]] = []
            for _ in range(n_headers):
                n, pos = _lenient_varint(entry, pos, 32)
                name = entry[pos : pos + n].decode("utf-8")
                pos += n
                n, pos = _lenient_varint(entry, pos, 32)
                items.append((name, None if n < 0 else entry[pos : pos + n]))
                pos += max(n, 0)
            if n_headers < 0 or length <= 0 or pos != end or end > len(entry):
                return None
            cols.offsets.append(base_offset + offset_delta)
            cols.timestamps.append(max_ts if log_append else base_ts + ts_delta)
            cols.timestamp_types.append(1 if log_append else 0)
            cols.keys.append(fields[0])
            cols.values.append(fields[1])
            if cols.headers is not None:
                cols.headers.append(items)
    except (IndexError, ValueError):
        return None
    return cols if pos == len(entry) else None


def _agree_on_damage(entry: bytes, headers: bool) -> None:
    """The property for hostile bytes; CRC checks are off so the damage reaches the record walk."""
    fast = _decode([entry], True, verify_crc=False, include_headers=headers)
    slow = _decode([entry], False, verify_crc=False, include_headers=headers)
    if isinstance(slow, CorruptRecordBatch):
        if isinstance(fast, Columns) and "longer than 5 bytes" in str(slow):
            assert fast == _lenient_rows(entry, headers), "the compiled walk misread an over-long varint"
            return
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
# Found by random draws: an attributes byte >= 0x80 (the compiled walk read it as a varint and returned offset
# 101 where the batch says 100), and an over-long (six-byte) key-length varint.
@example(specs=[(0, b"\x00", b"\x80\x80\x80\x80\x80\x00", [])], edits=[(118, 128)], cut=0, headers=False)
@example(specs=[(0, b"\x00", b"\x00" * 6, [])], edits=[(59, 128)], cut=0, headers=False)
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


def test_an_attributes_byte_above_0x7f_reads_as_kafka_reads_it() -> None:
    # Kafka reads a record's attributes as one byte and ignores its value; the compiled walk reads a varint
    # there, so such a batch (valid CRC) must go to the Python walk and give the records' own rows.
    clean = _uncompressed([(0, b"k0", b"v0", [("h", b"x")]), (5, b"k1", None, [])])
    buf = bytearray(clean)
    first_attributes = BATCH_HEADER_SIZE + 1  # after the record's one-byte length varint
    assert buf[first_attributes] == 0
    buf[first_attributes] = 0x80
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    expected = _decode([clean], False, include_headers=True)
    assert isinstance(expected, Columns) and expected.offsets == [100, 101]
    assert _decode([bytes(buf)], True, include_headers=True) == expected
