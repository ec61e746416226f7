"""hypothesis over every parser of untrusted bytes: only the documented exception may come out, never a hang,
never an unbounded allocation. ``KTS_LONG_FUZZ=1`` runs many more examples, all marked ``longfuzz``."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunking.size_codec import ChunkSizeCodecError, decode_chunk_sizes, encode_chunk_sizes
from rsm.core.custom_metadata import CustomMetadata, CustomMetadataError
from rsm.core.manifest import SegmentManifest
from rsm.errors import CorruptDataException
from rsm.jvm.codec import WireError, decode_config, decode_metadata, encode_metadata
from rsm.kafka.log_scan import iter_batches
from rsm.kafka.records import KafkaFormatError

LONG = os.environ.get("KTS_LONG_FUZZ") == "1"
FUZZ = settings(
    max_examples=20_000 if LONG else 300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The long run is opt-in: KTS_LONG_FUZZ=1 pytest -m longfuzz tests/unit/test_fuzz.py (20,000 examples per test).
pytestmark = [pytest.mark.timeout(1800 if LONG else 120), *([pytest.mark.longfuzz] if LONG else [])]

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
MANIFEST_KEYS = ["version", "chunkIndex", "segmentIndexes", "compression", "encryption", "remoteLogSegmentMetadata"]
CHUNK_INDEX_KEYS = [
    "type",
    "originalChunkSize",
    "originalFileSize",
    "transformedChunkSize",
    "finalTransformedChunkSize",
]
sizes = st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=5), st.none())


# The strategies the manifest strategy draws from, built once: a strategy built inside each draw is validated
# again on every example, which costs more than the parse under test.
index_types = st.sampled_from(["fixed", "variable", "other"])
transformed_chunks = st.text(max_size=40) | st.binary(max_size=30).map(lambda b: b.hex())
index_entries = st.none() | st.fixed_dictionaries({"position": sizes, "size": sizes})
versions = st.sampled_from(["1", 1, "2"])
compressions = st.booleans() | json_scalars
replaced_keys = st.lists(st.sampled_from(MANIFEST_KEYS), max_size=3)


@st.composite
def manifests(draw: Any) -> bytes:
    """Near-valid manifests: the right keys with hostile values, so the parser gets past its first checks."""
    index = {k: draw(sizes) for k in CHUNK_INDEX_KEYS}
    index["type"] = draw(index_types)
    if index["type"] == "variable":
        index["transformedChunks"] = draw(transformed_chunks)
    doc: dict[str, Any] = {
        "version": draw(versions),
        "chunkIndex": index,
        "segmentIndexes": {
            n: draw(index_entries) for n in ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")
        },
        "compression": draw(compressions),
    }
    for key in draw(replaced_keys):
        doc[key] = draw(json_values)
    return json.dumps(doc, allow_nan=True).encode()


@FUZZ
@given(st.one_of(manifests(), st.binary(max_size=300)))
def test_manifest_parser(data: bytes) -> None:
    try:
        manifest = SegmentManifest.from_json_bytes(data, "manifest fuzz")
    except CorruptDataException as e:
        assert "manifest fuzz" in str(e)
        return
    # What parses is a manifest the plugin can write again and read back the same.
    assert SegmentManifest.from_json_bytes(manifest.to_json_bytes(), "written again") == manifest


@FUZZ
@given(st.binary(max_size=200))
def test_chunk_size_codec_decode(data: bytes) -> None:
    try:
        values = decode_chunk_sizes(data)
    except ChunkSizeCodecError:
        return
    assert all(0 <= v < 2**31 for v in values)


@FUZZ
@given(st.lists(st.integers(0, 2**31 - 1), max_size=50))
def test_chunk_size_codec_round_trip(values: list[int]) -> None:
    assert decode_chunk_sizes(encode_chunk_sizes(values)) == values


@FUZZ
@given(st.binary(max_size=200))
def test_custom_metadata_codec(data: bytes) -> None:
    try:
        decoded = CustomMetadata.decode(data)
    except CustomMetadataError:
        return
    assert CustomMetadata.decode(decoded.encode()) == decoded


@FUZZ
@given(st.binary(max_size=400), st.booleans())
def test_record_batch_parser(data: bytes, verify: bool) -> None:
    position = 0
    try:
        for header, body in iter_batches(data, verify=verify):
            # Each batch starts where the previous one ended, and its bytes are the input's, whole.
            assert header.position == position and header.magic == 2
            assert body == data[position : position + header.size]
            position += header.size
    except KafkaFormatError:
        return
    assert position <= len(data)


@FUZZ
@given(st.binary(max_size=300))
def test_sidecar_frame_decoders(data: bytes) -> None:
    try:
        meta = decode_metadata(data)
    except WireError:
        pass
    else:
        assert decode_metadata(encode_metadata(meta)) == meta
    try:
        config = decode_config(data)
    except WireError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in config.items())


@FUZZ
@given(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64))
def test_sidecar_config_frame_with_hostile_count(count: int, rest: bytes) -> None:
    """A count of 2^31 entries must fail on the missing bytes, not allocate for the count."""
    try:
        config = decode_config(struct.pack(">i", count) + rest)
    except WireError:
        return
    assert len(config) <= max(count, 0)  # never more entries than the frame counts (fewer: a key repeated)
