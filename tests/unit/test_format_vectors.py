"""Hand-checked vectors and property tests for the on-storage format shared with Aiven's plugin."""

from __future__ import annotations

import base64
import json

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from chunking.chunk_index import ChunkIndex, ChunkIndexError
from chunking.size_codec import ChunkSizeCodecError, decode_chunk_sizes, encode_chunk_sizes
from rsm.core.custom_metadata import CustomMetadata, CustomMetadataError
from rsm.core.manifest import SegmentManifest
from rsm.core.object_keys import segment_keys
from rsm.errors import CorruptDataException
from rsm.metadata import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    is_kafka_uuid,
    random_kafka_uuid,
)

# --- chunk size codec (aiven-plugin.md §1.6), bytes worked out by hand -----------------------------------------


@pytest.mark.parametrize(
    ("values", "hex_bytes"),
    [
        ([], "00000000"),
        ([7], "0000000100000007"),
        # count=4, base=min(10,20,30)=10, width=1, deltas 0,10,20, last=5 in full
        ([10, 20, 30, 5], "000000040000000a01000a1400000005"),
        # all deltas 0 still take width 1
        ([5, 5, 5], "000000030000000501000000000005"),
        # delta 0x10000 needs 3 bytes
        ([100, 100 + 0x10000, 9], "00000003000000640300000001000000000009"),
    ],
)
def test_chunk_size_codec_vectors(values: list[int], hex_bytes: str) -> None:
    assert encode_chunk_sizes(values).hex() == hex_bytes
    assert decode_chunk_sizes(bytes.fromhex(hex_bytes)) == values


@given(st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=200))
def test_chunk_size_codec_roundtrip(values: list[int]) -> None:
    encoded = encode_chunk_sizes(values)
    assert decode_chunk_sizes(encoded) == values
    if len(values) >= 2:
        width = encoded[8]
        assert len(encoded) == 9 + (len(values) - 1) * width + 4


@given(st.binary(max_size=64))
def test_chunk_size_codec_never_crashes_on_garbage(data: bytes) -> None:
    try:
        decoded = decode_chunk_sizes(data)
    except ChunkSizeCodecError:
        return
    assert encode_chunk_sizes(decoded) == data


def test_chunk_size_codec_rejects_negative() -> None:
    with pytest.raises(ChunkSizeCodecError):
        encode_chunk_sizes([1, -1])


# --- custom metadata (aiven-plugin.md §1.11) ---------------------------------------------------------------------


def test_custom_metadata_remote_size_vector() -> None:
    assert CustomMetadata(remote_size=1000).encode() == bytes.fromhex("010002d00f")
    assert CustomMetadata.decode(bytes.fromhex("010002d00f")) == CustomMetadata(remote_size=1000)


def test_custom_metadata_all_fields_vector() -> None:
    encoded = CustomMetadata(remote_size=1, object_prefix="p/", object_key="t-x/0/1").encode()
    # 3 fields; tag0 size1 zigzag(1)=2; tag1 size3 len+1=3 'p/'; tag2 size8 len+1=8 't-x/0/1'
    assert encoded == bytes.fromhex("03000102010303702f020808") + b"t-x/0/1"
    assert CustomMetadata.decode(encoded) == CustomMetadata(1, "p/", "t-x/0/1")


def test_custom_metadata_empty_is_none() -> None:
    assert CustomMetadata().encode() is None


@given(st.integers(min_value=0, max_value=2**62), st.text(max_size=40), st.text(max_size=80))
def test_custom_metadata_roundtrip(size: int, prefix: str, key: str) -> None:
    cm = CustomMetadata(size, prefix, key)
    assert CustomMetadata.decode(cm.encode()) == cm


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x01\x01\x03\x03\x00\x80", "is not UTF-8"),  # the object prefix's bytes (found by CI's fuzz run)
        (b"\x01\x01\x02\x09a", "declares a 8-byte string but holds 1 bytes"),  # a prefix longer than its field
    ],
)
def test_custom_metadata_damaged_string(data: bytes, says: str) -> None:
    """A damaged object prefix or key is an error, never a shortened or replaced name (the plugin would build
    object keys from it)."""
    with pytest.raises(CustomMetadataError, match=says):
        CustomMetadata.decode(data)


def test_custom_metadata_truncated() -> None:
    with pytest.raises(CustomMetadataError):
        CustomMetadata.decode(bytes.fromhex("010002d0"))


# --- object keys (aiven-plugin.md §1.3) ----------------------------------------------------------------------------


def _meta(start: int = 1234) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition("MWJ6FHTfRYy67jzwZdeqSQ", "topic", 7)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, "tqimKeZwStOEOwRzT3L5oQ"), start, start + 10, 1000, 2, 2000, 100, {0: 100, 1: 200}
    )


def test_object_keys_match_aiven_example() -> None:
    keys = segment_keys("someprefix/", _meta())
    assert keys.log == "someprefix/topic-MWJ6FHTfRYy67jzwZdeqSQ/7/00000000000000001234-tqimKeZwStOEOwRzT3L5oQ.log"
    assert keys.indexes.endswith("-tqimKeZwStOEOwRzT3L5oQ.indexes")
    assert keys.manifest.endswith("-tqimKeZwStOEOwRzT3L5oQ.rsm-manifest")


def test_kafka_uuid_strings() -> None:
    assert is_kafka_uuid("MWJ6FHTfRYy67jzwZdeqSQ")
    assert not is_kafka_uuid("MWJ6FHTfRYy67jzwZdeqS")
    u = random_kafka_uuid()
    assert is_kafka_uuid(u) and not u.startswith("-")


# --- manifest (aiven-plugin.md §1.5) --------------------------------------------------------------------------------

# The manifest example of Aiven's format, as their plugin writes it (fixed index, encryption on).
AIVEN_FIXED_MANIFEST = json.dumps(
    {
        "version": "1",
        "chunkIndex": {
            "type": "fixed",
            "originalChunkSize": 100,
            "originalFileSize": 1000,
            "transformedChunkSize": 128,
            "finalTransformedChunkSize": 128,
        },
        "segmentIndexes": {
            "offset": {"position": 0, "size": 28},
            "timestamp": {"position": 28, "size": 28},
            "producerSnapshot": {"position": 56, "size": 28},
            "leaderEpoch": {"position": 84, "size": 28},
            "transaction": None,
        },
        "compression": False,
        "encryption": {
            "dataKey": "kek1:" + base64.b64encode(b"\x01" * 256).decode(),
            "aad": base64.b64encode(b"\x02" * 32).decode(),
        },
        "remoteLogSegmentMetadata": {
            "remoteLogSegmentId": {
                "topicIdPartition": {
                    "topicId": "lZ6vvmajTWKDBUTV6SQAtQ",
                    "topicPartition": {"topic": "topic1", "partition": 42},
                },
                "id": "adh9f8BMS4anaUnD8KWfWg",
            },
            "startOffset": 0,
            "endOffset": 1000,
            "maxTimestampMs": 1000000000,
            "brokerId": 2,
            "eventTimestampMs": 2000000000,
            "segmentLeaderEpochs": {"0": 100, "1": 200, "2": 300},
        },
    }
).encode()


def test_read_aiven_fixed_manifest() -> None:
    m = SegmentManifest.from_json_bytes(AIVEN_FIXED_MANIFEST)
    assert m.chunk_index.chunk_count == 10
    assert m.chunk_index.chunk(9).transformed_position == 9 * 128
    assert m.chunk_index.chunk_for_position(999).id == 9
    assert m.segment_indexes[IndexType.TRANSACTION] is None
    assert m.segment_indexes[IndexType.LEADER_EPOCH].position == 84
    assert m.encryption is not None and m.encryption.key_pair_id == "kek1" and m.encryption.aad == b"\x02" * 32
    assert m.integrity is None  # Aiven writes no checksums; reads still work
    # and writing it back gives the same document
    assert json.loads(m.to_json_bytes()) == json.loads(AIVEN_FIXED_MANIFEST)


def test_variable_chunk_index_encoding() -> None:
    sizes = [1000, 990, 1010, 17]
    index = ChunkIndex(4096, 3 * 4096 + 5, sizes)
    doc = index.to_json(variable=True)
    raw = base64.b64decode(doc["transformedChunks"])
    # zstd frame with the content size in its header, as Aiven's reader requires
    assert zstandard.get_frame_parameters(raw).content_size == len(encode_chunk_sizes(sizes))
    assert decode_chunk_sizes(zstandard.ZstdDecompressor().decompress(raw)) == sizes
    back = ChunkIndex.from_json(doc)
    assert back.transformed_sizes == sizes
    assert [c.transformed_position for c in back.chunks()] == [0, 1000, 1990, 3000]


def test_empty_file_chunk_index() -> None:
    index = ChunkIndex(100, 0, [0])
    chunk = index.chunk(0)
    assert (
        chunk.id,
        chunk.original_position,
        chunk.original_size,
        chunk.transformed_position,
        chunk.transformed_size,
    ) == (0, 0, 0, 0, 0)


def test_chunk_index_rejects_inconsistent_counts() -> None:
    with pytest.raises(ChunkIndexError):
        ChunkIndex(100, 250, [1, 2])


@pytest.mark.parametrize(
    "mutation",
    [
        lambda d: d.pop("chunkIndex"),
        lambda d: d.__setitem__("version", "2"),
        lambda d: d["segmentIndexes"].pop("offset"),
        lambda d: d.__setitem__("compression", "yes"),
        lambda d: d["chunkIndex"].__setitem__("type", "sparse"),
    ],
)
def test_malformed_manifest_errors(mutation) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(AIVEN_FIXED_MANIFEST)
    mutation(doc)
    with pytest.raises(CorruptDataException):
        SegmentManifest.from_json_bytes(json.dumps(doc).encode())


def test_manifest_garbage() -> None:
    with pytest.raises(CorruptDataException, match="not valid JSON"):
        SegmentManifest.from_json_bytes(b"\x00\xff{")
