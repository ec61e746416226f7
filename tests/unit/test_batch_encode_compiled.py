"""The compiled records encoder (``rsm/kafka/_batchencode.c``) against the Python one, record by record, and
what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.kafka import _batchencode as compiled  # built by make setup (setup.py, a C compiler)
from rsm.kafka import batch_encoder
from rsm.kafka.batch_encoder import BatchFields, RecordFields, encode_batch_payload, encode_record
from rsm.kafka.records import decode_records

_blob = st.none() | st.binary(max_size=300)
_header = st.tuples(st.text(max_size=20), _blob)
_record = st.builds(
    RecordFields,
    attributes=st.integers(0, 255),
    timestamp_delta=st.integers(-(1 << 63), (1 << 63) - 1),
    offset_delta=st.integers(-(1 << 31), (1 << 31) - 1),
    key=_blob,
    value=_blob,
    headers=st.lists(_header, max_size=4),
)


def _columns(records: list[RecordFields], as_dicts: bool) -> tuple[list[object], ...]:
    headers = [[{"key": k, "value": v} for k, v in r.headers] if as_dicts else list(r.headers) or None for r in records]
    return (
        [r.attributes for r in records],
        [r.timestamp_delta for r in records],
        [r.offset_delta for r in records],
        [r.key for r in records],
        [r.value for r in records],
        headers,
    )


@given(st.lists(_record, max_size=30), st.booleans())
def test_compiled_encoder_gives_the_python_bytes(records: list[RecordFields], as_dicts: bool) -> None:
    want = b"".join(encode_record(r) for r in records)
    cols = _columns(records, as_dicts)
    assert compiled.encode_records(*cols) == want
    assert batch_encoder._encode_records_py(*cols) == want


def test_the_encoded_records_decode_back() -> None:
    records = [
        RecordFields(0, 5, 0, b"k", b"v", [("h", b"1"), ("none", None)]),
        RecordFields(0, -1, 1, None, None, []),
        RecordFields(0, 0, 2, b"", b"", [("\u00e9", b"")]),
    ]
    fields = BatchFields(100, 0, 0, 2, 1000, 1005, -1, -1, -1)
    batch = encode_batch_payload(fields, compiled.encode_records(*_columns(records, True)), len(records))
    [a, b, c] = decode_records(batch, verify=True)
    assert (a.offset, a.key, a.value, a.headers) == (100, b"k", b"v", (("h", b"1"), ("none", None)))
    assert (b.key, b.value, b.timestamp, b.offset) == (None, None, 999, 101)
    assert (c.key, c.value, c.headers) == (b"", b"", (("\u00e9", b""),))
    assert batch_encoder.encode_records is compiled.encode_records  # what the fetch path uses


@pytest.mark.parametrize(
    ("columns", "error", "match"),
    [
        (([0], [0], [1 << 31], [None], [b""], [None]), ValueError, "int32"),
        (([0], [1 << 63], [0], [None], [b""], [None]), ValueError, "int64"),
        (([0], [0], [0], ["key"], [b""], [None]), TypeError, "the key must be bytes"),
        (([0], [0], [0], [None], [b""], [[(b"name", b"")]]), TypeError, "header name must be str"),
        (([0], [0], [0], [None], [b""], [[{"key": "k"}]]), TypeError, "'key' and 'value'"),
        (([0, 0], [0], [0], [None], [b""], [None]), ValueError, "column 1 has 1 items"),
    ],
)
def test_bad_columns_are_refused(columns: tuple[list[object], ...], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        compiled.encode_records(*columns)
