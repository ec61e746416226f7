"""The manifest of a segment of a plugged-in format (Iceberg mode): its section read by the format's parser, as
older copies wrote it, and the choice of a segment's format by the manifest's kind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.core.manifest import SegmentManifest
from rsm.core.segment_format import Formats
from rsm.errors import CorruptDataException
from rsm.formats.iceberg import iceberg_section
from rsm.iceberg.section import DataFileRef, IcebergSection

pytestmark = pytest.mark.unit

# An Iceberg-mode manifest as copies before the formats stood apart wrote it, with encryption on: a wrapped data
# key (which encrypted its .indexes) and the CRC-32C of the segment file as its one chunk.
OLD_ICEBERG_MANIFEST = (
    b'{"version":"1","chunkIndex":{"type":"fixed","originalChunkSize":152989,"originalFileSize":152989,'
    b'"transformedChunkSize":152989,"finalTransformedChunkSize":152989},"segmentIndexes":{"offset":{"position":0,'
    b'"size":44},"timestamp":{"position":44,"size":52},"producerSnapshot":{"position":96,"size":130},"leaderEpoch":'
    b'{"position":226,"size":36},"transaction":null},"compression":false,"encryption":{"dataKey":"k1:UGhjn3SQ1FSxM3'
    b'1JOtdFFfESsbD5XrXSk6BQIAmd5Y6UrZOsqMhGoA3jYi06clLwFWeE6A9sTU6U+QIay3Hts16gRQ==","aad":"5RgurhSlrglgYKKB+3cV3z'
    b'LS97YojNRJdlXbO5psvTY="},"remoteLogSegmentMetadata":{"remoteLogSegmentId":{"topicIdPartition":{"topicId":'
    b'"MWJ6FHTfRYy67jzwZdeqSQ","topicPartition":{"topic":"orders","partition":0}},"id":"2sy1kKEBTt6nAVJFfXakYg"},'
    b'"startOffset":0,"endOffset":385,"maxTimestampMs":1700000000805,"brokerId":0,"eventTimestampMs":1795928356124,'
    b'"segmentLeaderEpochs":{"0":0},"integrity":{"algorithm":"crc32c","chunks":"UE2gXg==","indexes":{"offset":'
    b'4164938104,"timestamp":1306009572,"producerSnapshot":3752964124,"leaderEpoch":1884391198}}},"iceberg":{"format":'
    b'"iceberg","table":"kafka.orders","snapshotId":8812454229520864914,"partition":0,"firstOffset":0,"lastOffset":'
    b'385,"rows":386,"batches":3,"segmentSize":152989,"files":[{"path":"file:///wh/kafka/orders/data/day=2023-11-14/'
    b'00000-0-d0fb82b0.parquet","rows":386,"size":83222}]}}'
)


def test_an_old_iceberg_manifest_reads_as_an_iceberg_segment_and_writes_back_the_same() -> None:
    manifest = SegmentManifest.from_json_bytes(OLD_ICEBERG_MANIFEST)
    assert manifest.kind == "iceberg"
    section = iceberg_section(manifest)
    assert section == IcebergSection(
        table="kafka.orders",
        snapshot_id=8812454229520864914,
        partition=0,
        first_offset=0,
        last_offset=385,
        rows=386,
        batches=3,
        segment_size=152989,
        files=(DataFileRef("file:///wh/kafka/orders/data/day=2023-11-14/00000-0-d0fb82b0.parquet", 386, 83222),),
    )
    assert section.stored_size == 83222
    assert manifest.encryption is not None and manifest.encryption.key_pair_id == "k1"
    assert manifest.integrity is not None and manifest.integrity.chunk_crcs == [0x504DA05E]
    assert manifest.to_json_bytes() == OLD_ICEBERG_MANIFEST


def test_a_manifest_without_a_section_is_classic() -> None:
    doc = json.loads(OLD_ICEBERG_MANIFEST)
    del doc["iceberg"]
    manifest = SegmentManifest.from_json_bytes(json.dumps(doc).encode())
    assert manifest.kind == "classic" and manifest.section is None and iceberg_section(manifest) is None


@given(
    st.sampled_from(["files", "segmentSize", "format", "table", "partition"]),
    st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)),
)
def test_a_malformed_iceberg_section_is_corrupt_data_naming_the_manifest(field: str, value: Any) -> None:
    doc = json.loads(OLD_ICEBERG_MANIFEST)
    doc["iceberg"][field] = value
    data = json.dumps(doc).encode()
    try:
        parsed = SegmentManifest.from_json_bytes(data, "manifest m1")
    except CorruptDataException as e:
        assert "manifest m1" in str(e)
        return
    # Parsing succeeded: only a value the section accepts for that field can do that, and it reads back as given.
    section = iceberg_section(parsed)
    assert section is not None
    assert section.to_json()[field] == value


class _Named:
    def __init__(self, kind: str) -> None:
        self.kind = kind


def test_the_format_is_chosen_by_the_manifests_kind_and_an_unknown_one_is_refused() -> None:
    classic, iceberg = _Named("classic"), _Named("iceberg")
    formats = Formats(classic, [iceberg])  # type: ignore[list-item, arg-type]
    old = SegmentManifest.from_json_bytes(OLD_ICEBERG_MANIFEST)
    assert formats.of(old, "manifest m1") is iceberg
    doc = json.loads(OLD_ICEBERG_MANIFEST)
    del doc["iceberg"]
    assert formats.of(SegmentManifest.from_json_bytes(json.dumps(doc).encode()), "m") is classic
    with pytest.raises(CorruptDataException, match="manifest m1 is a segment of format 'iceberg'"):
        Formats(classic, []).of(old, "manifest m1")  # type: ignore[arg-type]
