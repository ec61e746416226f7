"""The decoder's cheaper paths against the independent readers: zstd inflated with a reused context, and reads
that leave keys or values out (a Spark read given only some columns).

``rsm.kafka.records.decompress`` (one context per batch, the whole cap asked at once) is the reference for the
zstd path: both must give the same bytes, or both refuse past the cap. A read without keys or values must keep
every other column exactly as a full read does, through the compiled walk, the Python walk and legacy entries,
and the Arrow batches built from it must be the full batch's columns.
"""

from __future__ import annotations

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_data import legacy_entry

from rsm.kafka.batch_builder import build_batch
from rsm.kafka.columnar import LogBatchDecoder, ReadBounds
from rsm.kafka.record_columns import Columns
from rsm.kafka.records import (
    BATCH_HEADER_SIZE,
    CompressionType,
    CorruptRecordBatch,
    DecompressionLimitExceeded,
    decompress,
)
from rsm.spark.arrow_batches import KAFKA_COLUMNS, to_record_batch

pytestmark = pytest.mark.timeout(300)

_bytes = st.one_of(st.none(), st.binary(max_size=200))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.tuples(st.integers(0, 10**6), _bytes, _bytes, st.lists(_header, max_size=3))
_BASE_TS = 1_700_000_000_000


def _frame(data: bytes, content_size: bool) -> bytes:
    return zstandard.ZstdCompressor(level=1, write_content_size=content_size).compress(data)


def _inflated(data: bytes, cap: int) -> bytes | type[DecompressionLimitExceeded]:
    try:
        return LogBatchDecoder(ReadBounds(), max_decompressed=cap).inflate(CompressionType.ZSTD, memoryview(data))
    except DecompressionLimitExceeded:
        return DecompressionLimitExceeded


def _reference(data: bytes, cap: int) -> bytes | type[DecompressionLimitExceeded]:
    try:
        return decompress(CompressionType.ZSTD, data, cap)
    except DecompressionLimitExceeded:
        return DecompressionLimitExceeded


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(st.tuples(st.binary(max_size=64), st.integers(0, 9000), st.booleans()), min_size=1, max_size=3),
    slack=st.integers(-2, 2),
)
def test_zstd_inflates_like_the_reference_across_frames_and_at_the_cap(
    parts: list[tuple[bytes, int, bool]], slack: int
) -> None:
    # Kafka's zstd streams may omit the content size and hold several frames; repeats make some frames inflate
    # past the 256 KiB read step, and the cap sits just below, at and just above the inflated size.
    frames = [(seed * (1 + repeat)) or b"x" for seed, repeat, _ in parts]
    data = b"".join(_frame(f, size) for f, (_, _, size) in zip(frames, parts, strict=True))
    inflated = b"".join(frames)
    cap = max(0, len(inflated) + slack)
    got = _inflated(data, cap)
    assert got == _reference(data, cap)
    assert got == (inflated if cap >= len(inflated) else DecompressionLimitExceeded)


def test_zstd_garbage_and_truncation_read_like_the_reference() -> None:
    frame = _frame(b"kafka" * 100_000, False)
    for data in (frame + b"junk", frame[:-3], b"\x28\xb5\x2f\xfd" + bytes(20)):
        try:
            expected: object = decompress(CompressionType.ZSTD, data)
        except zstandard.ZstdError:
            expected = zstandard.ZstdError
        try:
            got: object = _inflated(data, 64 << 20)
        except zstandard.ZstdError:
            got = zstandard.ZstdError
        assert got == expected


def test_a_zstd_batch_over_the_cap_is_corrupt_and_one_at_it_decodes() -> None:
    value = bytes(600_000)  # inflates in several read steps
    batch = build_batch([(_BASE_TS, b"k", value, [])], codec="zstd")
    full = LogBatchDecoder(ReadBounds())
    cols = full.new_columns()
    full.feed(0, batch, cols)
    inflated = len(decompress(CompressionType.ZSTD, batch[BATCH_HEADER_SIZE:]))
    at_cap = LogBatchDecoder(ReadBounds(), max_decompressed=inflated)
    exact = at_cap.new_columns()
    at_cap.feed(0, batch, exact)
    assert exact == cols and cols.values == [value]
    below = LogBatchDecoder(ReadBounds(), max_decompressed=inflated - 1)
    with pytest.raises(CorruptRecordBatch, match="decompression cap"):
        below.feed(0, batch, below.new_columns())


def _decode(entries: list[bytes], **options: object) -> Columns:
    decoder = LogBatchDecoder(options.pop("bounds", ReadBounds()), **options)  # type: ignore[arg-type]
    cols = decoder.new_columns()
    position = 0
    for entry in entries:
        if not decoder.feed(position, entry, cols):
            break
        position += len(entry)
    return cols


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(_record, min_size=1, max_size=12), min_size=1, max_size=3),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    legacy=st.lists(st.tuples(st.integers(0, 10**6), _bytes, _bytes), max_size=4),
    bounds=st.tuples(st.integers(0, 50), st.integers(0, 50)),
    native=st.booleans(),
    headers=st.booleans(),
    keep=st.sampled_from([(False, True), (True, False), (False, False)]),
)
def test_a_read_without_keys_or_values_keeps_every_other_column(
    batches: list[list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]],
    codec: str,
    legacy: list[tuple[int, bytes | None, bytes | None]],
    bounds: tuple[int, int],
    native: bool,
    headers: bool,
    keep: tuple[bool, bool],
) -> None:
    entries = []
    offset = 0
    if legacy:  # an old message set first, as a topic upgraded from magic 1 has
        entries.append(legacy_entry(1, 0, 0, [(_BASE_TS + ts, k, v) for ts, k, v in legacy]))
        offset += len(legacy)
    for specs in batches:
        entries.append(
            build_batch([(_BASE_TS + ts, k, v, h) for ts, k, v, h in specs], base_offset=offset, codec=codec)
        )
        offset += len(specs)
    options = {"bounds": ReadBounds(min(bounds), max(bounds)), "native": native, "include_headers": headers}
    full = _decode(entries, **options)
    keys, values = keep
    pruned = _decode(entries, **options, keys=keys, values=values)
    assert pruned.offsets == full.offsets and pruned.timestamps == full.timestamps
    assert pruned.timestamp_types == full.timestamp_types and pruned.headers == full.headers
    assert pruned.keys == (full.keys if keys else [])
    assert pruned.values == (full.values if values else [])
    # The Arrow batch of the columns a pruned read asks for is the full batch's, in the asked order and spelling.
    columns = [c for c in KAFKA_COLUMNS if (c != "key" or keys) and (c != "value" or values)][::-1]
    names = [c.upper() for c in columns]
    batch = to_record_batch(pruned, "orders", 3, columns, names)
    whole = to_record_batch(full, "orders", 3)
    assert batch.schema.names == names
    assert batch.rename_columns(columns).equals(whole.select(columns))
