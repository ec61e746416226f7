"""The compiled record walk (``rsm/kafka/_recordwalk.c``, into Arrow buffers) against the pure-Python walk.

The Python walk of ``LogBatchDecoder`` is the reference. The compiled walk must be its exact twin on any bytes:
the same rows kept, and a refused batch wherever the Python walk refuses one (a ``CorruptRecordBatch`` naming
the batch's position), with no rows of a refused batch left behind. No leniency is allowed, not even for an
over-long varint. The batches here are assembled byte by byte, so they reach shapes no producer library
writes: over-long and out-of-range varints, attributes bytes >= 0x80, any negative length as null, lengths
that lie, header keys that are not UTF-8, timestamps and offsets at the ends of int64, control and
transactional batches. Then random damage on top. Memory stays bounded by the records' own size whatever a
length or count says (checked with tracemalloc, which sees the walk's allocations).

The derandomized gate runs a few hundred examples per property; ``KTS_LONG_FUZZ=1`` runs 20,000 (and searches
new examples, see conftest.py).
"""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import crc32c
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.codec import snappy_encode
from spark_data import legacy_entry

from rsm.kafka.batch_builder import build_batch
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds
from rsm.kafka.record_columns import COMPILED_WALK, Columns, RecordBuffers
from rsm.kafka.records import BATCH_HEADER_SIZE, CorruptRecordBatch, zigzag_encode
from rsm.spark.arrow_batches import HEADERS_COLUMN, KAFKA_COLUMNS, to_record_batch

LONG = os.environ.get("KTS_LONG_FUZZ") == "1"
pytestmark = [pytest.mark.timeout(3600 if LONG else 300), *([pytest.mark.longfuzz] if LONG else [])]


def _examples(n: int) -> Any:
    return settings(
        max_examples=20_000 if LONG else n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_CODECS = {0: lambda b: b, 1: gzip.compress, 2: lambda b: snappy_encode(b, xerial_compatible=True)}
_CODECS[3] = lz4.frame.compress
_CODECS[4] = zstandard.ZstdCompressor().compress


# --- assembling batches byte by byte ---------------------------------------------------------------------------


def _uvarint(u: int, pad: int = 0) -> bytes:
    """LEB128 of ``u`` with ``pad`` redundant zero groups (an over-long encoding when ``pad`` > 0)."""
    groups = []
    while True:
        groups.append(u & 0x7F)
        u >>= 7
        if not u:
            break
    groups += [0] * pad
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def _varint(n: int, pad: int = 0) -> bytes:
    return _uvarint(zigzag_encode(n), pad)


# Each record is tame (what a producer could write, in any encoding Kafka reads: redundant varint groups within
# five bytes, any attributes byte, any negative length for null) or wild (out-of-range and over-long varints,
# lying lengths and counts, non-UTF-8 header keys); most batches are tame, so most reads keep rows.
_tame = st.sampled_from([True, True, True, False])
_int32ish = st.one_of(
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.sampled_from([(1 << 31) - 1, -(1 << 31), 1 << 31, -(1 << 31) - 1, 1 << 40]),
)
_int64ish = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MAX, INT64_MIN, 1 << 63, INT64_MIN - 1, 1 << 66]),
)


def _pad(tame: bool) -> Any:
    """Redundant varint groups: a small int32 in up to five bytes is still valid; six or more is refused."""
    return st.sampled_from([0, 0, 0, 0, 1, 2, 3] if tame else [0, 0, 0, 1, 4, 5, 6, 9])


@st.composite
def _field(draw: Any, tame: bool) -> bytes:
    """A key or value: length varint and bytes; a null is any negative length; a wild length may lie."""
    data = draw(st.one_of(st.none(), st.binary(max_size=40)))
    if data is None:
        return _varint(draw(st.sampled_from([-1, -1, -1, -2, -1000, -(1 << 31)])), draw(_pad(tame)))
    lie = 0 if tame else draw(st.sampled_from([0, 0, -1, 1, 3, 1 << 31]))
    return _varint(len(data) + lie, draw(_pad(tame))) + data


@st.composite
def _headers(draw: Any, tame: bool) -> bytes:
    names = st.text(max_size=6).map(str.encode) if tame else st.binary(max_size=6)  # often not UTF-8
    items = draw(st.lists(st.tuples(names, st.one_of(st.none(), st.binary(max_size=12))), max_size=3))
    count = len(items) + (0 if tame else draw(st.sampled_from([0, 1, -1, -len(items) - 1, 1 << 62])))
    out = _uvarint(zigzag_encode(count), draw(_pad(tame)))
    for name, value in items:
        name_len = len(name) + (0 if tame else draw(st.sampled_from([0, 0, 1, -len(name) - 1])))
        out += _varint(name_len, draw(_pad(tame))) + name
        out += _varint(-1 if value is None else len(value), draw(_pad(tame))) + (value or b"")
    return out


@st.composite
def _crafted_record(draw: Any, tame: bool, offset_delta: int) -> bytes:
    body = bytes([draw(st.integers(0, 255))])  # attributes: unused by Kafka, any byte
    ts_delta = draw(st.integers(-1000, 1000) if tame else _int64ish)
    body += _varint(ts_delta, draw(_pad(tame)))
    body += _varint(offset_delta if tame else draw(_int32ish), draw(_pad(tame)))
    body += draw(_field(tame)) + draw(_field(tame)) + draw(_headers(tame))
    lie = 0 if tame else draw(st.sampled_from([0, 0, -1, 1, -len(body)]))
    return _varint(len(body) + lie, draw(_pad(tame))) + body


@st.composite
def _batch(draw: Any, base_offset: int) -> bytes:
    """A whole v2 batch with a valid CRC around records that may be anything."""
    tame = draw(_tame)
    n_records = draw(st.integers(1 if tame else 0, 6))
    records = [draw(_crafted_record(tame or draw(_tame), i)) for i in range(n_records)]
    count = len(records) + (0 if tame else draw(st.sampled_from([0, 1, -1, 1000])))
    codec = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
    # LOG_APPEND_TIME, transactional, control, delete horizon
    flags = draw(st.sampled_from([0, 0, 0, 0, 0x08, 0x10, 0x30, 0x40]))
    base_ts = 1_700_000_000_000 if tame else draw(st.integers(INT64_MIN, INT64_MAX))
    max_ts = draw(st.sampled_from([1_700_000_000_100, INT64_MAX, INT64_MIN]))
    producer_id = draw(st.sampled_from([-1, 7, 8]))
    payload = _CODECS[codec](b"".join(records))
    body = struct.pack(">hiqqqhii", codec | flags, max(count - 1, 0), base_ts, max_ts, producer_id, 0, 0, count)
    body += payload
    head = struct.pack(">qiib", base_offset, len(body) + 9, 0, 2)
    return head + struct.pack(">I", crc32c.crc32c(body)) + body


@st.composite
def _entries(draw: Any) -> list[bytes]:
    base = draw(st.sampled_from([0, 0, 0, 3, INT64_MAX - 25, 1 << 62]))
    return [draw(_batch(base + 10 * i)) for i in range(draw(st.integers(1, 3)))]


_some_bounds = st.builds(
    ReadBounds,
    st.sampled_from([0, 0, 0, 2, 11, -5, INT64_MAX, 1 << 64]),
    st.sampled_from([INT64_MAX, INT64_MAX, INT64_MAX, 13, 2, -1, 1 << 64, INT64_MAX - 2]),
    st.one_of(
        st.none(), st.none(), st.integers(1_699_999_999_000, 1_700_000_000_300), st.sampled_from([INT64_MIN, 1 << 70])
    ),
    st.one_of(
        st.none(),
        st.none(),
        st.integers(1_699_999_999_000, 1_700_000_001_300),
        st.sampled_from([INT64_MAX, -(1 << 70)]),
    ),
)
_bounds = st.booleans().flatmap(lambda every: st.just(ReadBounds()) if every else _some_bounds)
_options = st.fixed_dictionaries(
    {
        "bounds": _bounds,
        "include_headers": st.booleans(),
        "keys": st.booleans(),
        "values": st.booleans(),
        "aborted": st.sampled_from([None, None, {7: [(0, 1 << 63)]}, {8: [(50, 60)]}]),
        "fail_on_corruption": st.booleans(),
    }
)


# --- the property --------------------------------------------------------------------------------------------


def _decode(entries: list[bytes], compiled: bool, options: dict[str, Any]) -> tuple[Any, ...]:
    """What a read of ``entries`` gives: its rows (or the corruption error) and the decoder's counts."""
    decoder = LogBatchDecoder(native=compiled, **options)
    out = decoder.new_columns(arrow=compiled)
    assert isinstance(out, RecordBuffers if compiled else Columns)
    position = 0
    result: Any = None
    try:
        for entry in entries:
            if not decoder.feed(position, entry, out):
                break
            position += len(entry)
        result = out.to_columns()
    except CorruptRecordBatch as exc:  # the rows the Python walk appended before the damage are left out
        result = ("corrupt", exc.position)
    skipped = [e.position for e in decoder.skipped]
    return result, (decoder.batches, decoder.control_batches, decoder.aborted_batches, skipped)


def _agree(entries: list[bytes], options: dict[str, Any]) -> Any:
    fast = _decode(entries, True, options)
    slow = _decode(entries, False, options)
    assert fast == slow
    return slow


def test_the_compiled_walk_is_built_and_used() -> None:
    # CI installs the package with a compiler: without the module every comparison here would compare the Python
    # walk with itself, so this must fail rather than quietly pass.
    assert COMPILED_WALK
    assert isinstance(LogBatchDecoder(ReadBounds()).new_columns(arrow=True), RecordBuffers)
    assert isinstance(LogBatchDecoder(ReadBounds()).new_columns(), Columns)
    assert isinstance(LogBatchDecoder(ReadBounds(), native=False).new_columns(arrow=True), Columns)


@_examples(250)
@given(entries=_entries(), options=_options)
def test_crafted_batches_read_alike(entries: list[bytes], options: dict[str, Any]) -> None:
    _agree(entries, options)


def _valid(specs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    return build_batch([(1_700_000_000_000 + ts, k, v, h) for ts, k, v, h in specs], base_offset=100)


_bytes = st.one_of(st.none(), st.binary(max_size=200))
_spec = st.tuples(st.integers(-(10**6), 10**6), _bytes, _bytes, st.lists(st.tuples(st.text(max_size=8), _bytes)))


@_examples(300)
@given(
    specs=st.lists(_spec, min_size=1, max_size=8),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 8),
    headers=st.booleans(),
)
# Found by random draws: an attributes byte >= 0x80, which a walk reading
# it as a varint shifts the record by (offset 101 for 100), and an over-long (six-byte) key-length varint.
@example(specs=[(0, b"\x00", b"\x80\x80\x80\x80\x80\x00", [])], edits=[(118, 128)], cut=0, headers=False)
@example(specs=[(0, b"\x00", b"\x00" * 6, [])], edits=[(59, 128)], cut=0, headers=False)
def test_damaged_records_are_refused_alike(
    specs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    edits: list[tuple[int, int]],
    cut: int,
    headers: bool,
) -> None:
    buf = bytearray(_edited(specs, edits))
    if cut:
        del buf[-cut:]
        struct.pack_into(">i", buf, 8, len(buf) - 12)  # keep the frame consistent: the damage is in the records
    for lenient in (False, True):
        _agree(
            [bytes(buf)],
            {
                "bounds": ReadBounds(),
                "include_headers": headers,
                "verify_crc": False,
                "fail_on_corruption": not lenient,
            },
        )


def _edited(specs: list[Any], edits: list[tuple[int, int]]) -> bytes:
    """A valid batch with bytes of its records (and the count before them) set, as the damage property does."""
    buf = bytearray(_valid(specs))
    span = len(buf) - BATCH_HEADER_SIZE + 4
    for where, value in edits:
        buf[BATCH_HEADER_SIZE - 4 + where % span] = value
    return bytes(buf)


def test_the_reproducers_read_as_kafka_reads_them() -> None:
    # The value length (6) made 0x80: its varint now runs six bytes through the value, longer than Kafka allows.
    over_long = _edited([(0, b"\x00", b"\x80\x80\x80\x80\x80\x00", [])], [(118, 128)])
    assert _agree([over_long], {"bounds": ReadBounds(), "verify_crc": False})[0] == ("corrupt", 0)
    # The attributes byte made 0x80: any byte to Kafka, so the record is still offset 100 with its own fields.
    attributes = _edited([(0, b"\x00", b"\x00" * 6, [])], [(59, 128)])
    assert attributes[BATCH_HEADER_SIZE + 1] == 0x80
    rows, _ = _agree([attributes], {"bounds": ReadBounds(), "verify_crc": False})
    assert rows.offsets == [100] and rows.keys == [b"\x00"] and rows.values == [b"\x00" * 6]


def _framed(body: bytes) -> bytes:
    return _varint(len(body)) + body


def _raw_batch(records: bytes, count: int, base_offset: int = 100) -> bytes:
    body = struct.pack(">hiqqqhii", 0, 0, 1_700_000_000_000, 1_700_000_000_000, -1, 0, 0, count) + records
    return struct.pack(">qiib", base_offset, len(body) + 9, 0, 2) + struct.pack(">I", crc32c.crc32c(body)) + body


@pytest.mark.parametrize(
    ("records", "count", "expect"),
    [
        # a count of 2**31 - 1 over two records: refused after the records run out, nothing allocated for the count
        (_framed(b"\x00\x00\x00\x02k\x02v\x00") * 2, (1 << 31) - 1, "corrupt"),
        # a key length of 2**31 - 1 in a record of ten bytes
        (_framed(b"\x00\x00\x00" + _varint((1 << 31) - 1) + b"kv\x00"), 1, "corrupt"),
        # a header count of 2**62 in a short record: the walk ends at the record's end, not after 2**62 steps
        (_framed(b"\x00\x00\x00\x02k\x02v" + _varint(1 << 62) + b"\x02a\x02b" * 4), 1, "corrupt"),
        # a header value length close to 2**63: adding it to a position must not wrap
        (_framed(b"\x00\x00\x00\x02k\x02v\x02\x02h" + _varint(INT64_MAX - 3) + b"x"), 1, "corrupt"),
        # an offset delta of -2**31 from base offset 100: a negative offset, outside the bounds, skipped
        (_framed(b"\x00\x00" + _varint(-(1 << 31)) + b"\x02k\x02v\x00"), 1, "rows"),
    ],
)
def test_hostile_lengths_stay_within_the_records(records: bytes, count: int, expect: str) -> None:
    entry = _raw_batch(records, count)
    tracemalloc.start()
    try:
        result, _ = _agree([entry], {"bounds": ReadBounds(), "include_headers": True})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result == ("corrupt", 0)) == (expect == "corrupt"), result
    # Measured 5.7 to 12.7 KB for these batches of under 100 bytes; allocating for a hostile count or length
    # would be gigabytes (or a MemoryError), so 1 MiB is far from both.
    assert peak < 1 << 20, f"{peak} bytes allocated for a {len(entry)}-byte batch"


def test_offsets_and_timestamps_at_the_ends_of_int64() -> None:
    # base offset 2**63 - 2: deltas 0 and 1 are the last two int64 offsets, delta 2 is past int64 and never kept
    near_end = _framed(b"\x00\x00\x00\x02k\x02v\x00") + _framed(b"\x00\x00\x02\x02k\x02v\x00")
    near_end += _framed(b"\x00\x00\x04\x02k\x02v\x00")
    (rows, _) = _agree([_raw_batch(near_end, 3, base_offset=INT64_MAX - 1)], {"bounds": ReadBounds()})
    assert rows.offsets == [INT64_MAX - 1, INT64_MAX]
    # a timestamp delta that takes the timestamp past int64: damage when the record is kept, nothing when not
    late = _framed(b"\x00" + _varint(INT64_MAX) + b"\x00\x02k\x02v\x00")
    (result, _) = _agree([_raw_batch(late, 1)], {"bounds": ReadBounds()})
    assert result == ("corrupt", 0)
    (rows, _) = _agree([_raw_batch(late, 1)], {"bounds": ReadBounds(0, INT64_MAX, None, 1_800_000_000_000)})
    assert rows.offsets == []


@pytest.mark.parametrize("compiled", [True, False])
def test_a_batch_refused_half_way_leaves_no_rows(compiled: bool) -> None:
    good = _framed(b"\x00\x00\x00\x02k\x02v\x00")
    bad = _framed(b"\x00\x00\x02\x02k\x02v\x02\x02\xff\x00")  # a header key that is not UTF-8
    damaged = _raw_batch(good + good + bad, 3)
    clean = _raw_batch(good, 1, base_offset=200)
    decoder = LogBatchDecoder(ReadBounds(), include_headers=True, fail_on_corruption=False, native=compiled)
    out = decoder.new_columns(arrow=compiled)
    assert decoder.feed(0, damaged, out) and decoder.feed(len(damaged), clean, out)
    assert out.to_columns().offsets == [200]
    assert [e.position for e in decoder.skipped] == [0]
    assert "not UTF-8" in decoder.skipped[0].reason or "utf-8" in decoder.skipped[0].reason


# --- Arrow batches from the buffers --------------------------------------------------------------------------


@_examples(60)
@given(
    batches=st.lists(st.lists(_spec, min_size=1, max_size=10), min_size=1, max_size=3),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    headers=st.booleans(),
    keep=st.sampled_from([(True, True), (False, True), (True, False), (False, False)]),
    bounds=st.tuples(st.integers(0, 30), st.integers(0, 30)),
    legacy=st.lists(st.tuples(st.integers(0, 10**6), _bytes, _bytes), max_size=4),
)
def test_arrow_batches_from_buffers_equal_those_from_lists(
    batches: list[list[Any]],
    codec: str,
    headers: bool,
    keep: tuple[bool, bool],
    bounds: tuple[int, int],
    legacy: list[tuple[int, bytes | None, bytes | None]],
) -> None:
    entries, offset = [], 0
    if legacy:  # an old message set first, as a topic upgraded from magic 1 has (its rows have no headers)
        entries.append(legacy_entry(1, 0, 0, [(1_700_000_000_000 + ts, k, v) for ts, k, v in legacy]))
        offset += len(legacy)
    for specs in batches:
        entries.append(
            build_batch([(1_700_000_000_000 + t, k, v, h) for t, k, v, h in specs], base_offset=offset, codec=codec)
        )
        offset += len(specs)
    columns = [c for c in KAFKA_COLUMNS if (c != "key" or keep[0]) and (c != "value" or keep[1])]
    columns += [HEADERS_COLUMN] if headers else []
    got = []
    for compiled in (True, False):
        options = {"include_headers": headers, "keys": keep[0], "values": keep[1], "native": compiled}
        decoder = LogBatchDecoder(ReadBounds(min(bounds), max(bounds)), **options)
        out = decoder.new_columns(arrow=compiled)
        for position, entry in enumerate(entries):
            decoder.feed(position, entry, out)
        got.append(to_record_batch(out, "orders", 3, columns))
    fast, slow = got
    fast.validate(full=True)
    assert fast.equals(slow), (fast.to_pylist(), slow.to_pylist())


def test_buffers_are_handed_over_once() -> None:
    decoder = LogBatchDecoder(ReadBounds(), include_headers=True)
    out = decoder.new_columns(arrow=True)
    batch = build_batch([(1, b"k", b"v", [("h", b"x")]), (2, None, None, [])], base_offset=5)
    decoder.feed(0, batch, out)
    first = to_record_batch(out, "t", 0)
    assert to_record_batch(out, "t", 0).equals(first)  # sealed: the same parts again
    assert len(out) == 2 and out.to_columns().offsets == [5, 6]
    with pytest.raises(RuntimeError, match="handed over"):
        decoder.feed(0, batch, out)
    assert first.column("headers").to_pylist() == [[{"key": "h", "value": b"x"}], []]


# --- without the compiled module -------------------------------------------------------------------------------


_FALLBACK = textwrap.dedent(
    """
    import logging, sys
    sys.modules["rsm.kafka._recordwalk"] = None  # as if the extension had not been built
    logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
    from rsm.kafka.columnar import LogBatchDecoder, ReadBounds
    from rsm.kafka.record_columns import COMPILED_WALK, Columns
    from rsm.spark.arrow_batches import to_record_batch
    import pyarrow as pa
    entries = [bytes.fromhex(h) for h in sys.argv[1:]]
    decoder = LogBatchDecoder(ReadBounds(1), include_headers=True)
    out = decoder.new_columns(arrow=True)
    assert not COMPILED_WALK and isinstance(out, Columns)
    for position, entry in enumerate(entries):
        decoder.feed(position, entry, out)
    sink = pa.BufferOutputStream()
    batch = to_record_batch(out, "orders", 3)
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    sys.stdout.write(sink.getvalue().to_pybytes().hex())
    """
)


def test_without_the_compiled_module_the_list_walks_give_the_same_rows() -> None:
    import pyarrow as pa

    entries = [
        build_batch(
            [(1, b"k0", b"v0", [("a", b"1")]), (2, None, b"v1", []), (3, b"k2", None, [("b", None)])],
            base_offset=0,
            codec="zstd",
        ),
        build_batch([(4, b"k3", b"" * 3, [])], base_offset=3),
    ]
    r = subprocess.run(
        [sys.executable, "-c", _FALLBACK, *(e.hex() for e in entries)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "rsm.kafka.columnar DEBUG rsm.kafka._recordwalk is not built" in r.stderr
    fallback = pa.ipc.open_stream(bytes.fromhex(r.stdout)).read_next_batch()
    decoder = LogBatchDecoder(ReadBounds(1), include_headers=True)
    out = decoder.new_columns(arrow=True)
    assert isinstance(out, RecordBuffers)
    for position, entry in enumerate(entries):
        decoder.feed(position, entry, out)
    compiled = to_record_batch(out, "orders", 3)
    assert compiled.num_rows == 3 and compiled.equals(fallback)


def test_memory_of_a_live_batch_is_never_reused() -> None:
    # Blocks of batches that are gone are kept for the next ones (rsm/kafka/_recordwalk.c's pool): a batch still
    # held must keep its bytes while later batches are built, and a batch built in recycled memory is whole.
    def batch(seed: int) -> Any:
        decoder = LogBatchDecoder(ReadBounds())
        out = decoder.new_columns(arrow=True)
        specs = [(i, bytes([seed, i % 251]) * 50, bytes([seed]) * (600 + i), []) for i in range(300)]
        decoder.feed(0, build_batch(specs, base_offset=seed * 1000), out)
        return to_record_batch(out, "t", 0)

    held = batch(1)
    expected = held.to_pylist()
    for seed in range(2, 12):  # each is dropped at once: its blocks go back for the next
        assert batch(seed).column("offset")[0].as_py() == seed * 1000
    assert held.to_pylist() == expected
    del held
    again = batch(1)
    again.validate(full=True)
    assert again.to_pylist() == expected


def test_without_a_compiler_the_build_goes_on_without_the_walk(tmp_path: Path) -> None:
    # A host with no C compiler (or no Python headers) still installs the package: the extension is optional, its
    # failed build is a warning, and the reader takes the list walks above. CC=false fails every compilation.
    root = Path(__file__).resolve().parents[2]
    build = [sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"), "--build-temp"]
    env = {**os.environ, "CC": "false"}
    r = subprocess.run([*build, str(tmp_path / "tmp")], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert 'building extension "rsm.kafka._recordwalk" failed' in r.stderr
    assert not list(tmp_path.rglob("_recordwalk*.so"))
