"""The columnar decoder agrees with the reference record decoder on arbitrary batches, in both formats."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from spark_data import legacy_entry

from rsm.kafka.columnar import LogBatchDecoder, ReadBounds, iter_log_entries
from rsm.kafka.records import decode_legacy_entry, decode_records
from rsm.kafka.writer import build_batch

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.tuples(st.integers(0, 10**6), _bytes, _bytes, st.lists(_header, max_size=3))


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(_record, min_size=1, max_size=20), min_size=1, max_size=4),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    bounds=st.tuples(st.integers(0, 90), st.integers(0, 90)),
)
def test_v2_batches_decode_like_the_reference(
    batches: list[list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]],
    codec: str,
    bounds: tuple[int, int],
) -> None:
    log = b""
    offset = 0
    expected = []
    lo, hi = min(bounds), max(bounds)
    for specs in batches:
        specs = [(1_700_000_000_000 + ts, k, v, h) for ts, k, v, h in specs]
        batch = build_batch(specs, base_offset=offset, codec=codec)
        expected += [
            (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
            for r in decode_records(batch, verify=True)
            if lo <= r.offset <= hi
        ]
        log += batch
        offset += len(specs)
    decoder = LogBatchDecoder(ReadBounds(lo, hi), include_headers=True)
    cols = decoder.new_columns()
    for pos, entry in iter_log_entries(io.BytesIO(log), 0, None):
        if not decoder.feed(pos, entry, cols):
            break
    assert cols.headers is not None
    got = list(zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers, strict=True))
    assert got == expected


@settings(max_examples=40, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([0, 1, 2, 3]),
    specs=st.lists(st.tuples(st.integers(0, 10**6), _bytes, _bytes), min_size=1, max_size=10),
    base=st.integers(0, 10**9),
)
def test_legacy_message_sets_keep_absolute_offsets(
    magic: int, codec: int, specs: list[tuple[int, bytes | None, bytes | None]], base: int
) -> None:
    if magic == 0 and codec == 3:
        return  # magic 0 lz4 used a broken frame checksum (documented as unreadable)
    entry = legacy_entry(magic, codec, base, specs)
    messages = decode_legacy_entry(entry, verify=True)
    assert [m.offset for m in messages] == list(range(base, base + len(specs)))
    assert [(m.key, m.value) for m in messages] == [(k, v) for _, k, v in specs]
    if magic == 1:
        assert [m.timestamp for m in messages] == [ts for ts, _, _ in specs]
    decoder = LogBatchDecoder(ReadBounds(base + 1, base + 3))
    cols = decoder.new_columns()
    decoder.feed(0, entry, cols)
    assert cols.offsets == [o for o in range(base, base + len(specs)) if base + 1 <= o <= base + 3]
