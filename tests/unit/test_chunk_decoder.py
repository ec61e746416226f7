"""ChunkDecoder alone: original bytes out, or a counted CorruptDataException naming the chunk."""

from __future__ import annotations

import pytest
from fetch_fakes import FakeRanges, chunked_source

from rsm.errors import CorruptDataException
from rsm.fetch.chunk_decoder import ChunkDecoder

DATA = bytes(range(256)) * 40


@pytest.mark.parametrize("compression", [False, True])
def test_a_stored_chunk_decodes_to_its_original_bytes(compression: bool) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, 4096, compression=compression)
    decoder = ChunkDecoder()
    for chunk_id in range(src.index.chunk_count):
        chunk = src.index.chunk(chunk_id)
        stored = ranges.objects["seg.log"][chunk.transformed_position : chunk.transformed_end]
        out = bytearray(4096 + 7)  # a buffer larger than the chunk: only its start is written
        decoder.decode(src, chunk, stored, memoryview(out))
        assert out[: chunk.original_size] == DATA[chunk.original_position : chunk.original_end]
    assert decoder.integrity_failures == 0


def test_a_short_untransformed_chunk_is_corrupt() -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, 4096)
    decoder = ChunkDecoder()
    chunk = src.index.chunk(0)
    with pytest.raises(CorruptDataException, match="chunk 0 of seg.log.*4095 stored bytes for 4096"):
        decoder.decode(src, chunk, DATA[:4095], memoryview(bytearray(4096)))
    assert decoder.integrity_failures == 1


def test_a_flipped_bit_fails_the_crc() -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, 4096)
    decoder = ChunkDecoder()
    stored = bytearray(DATA[:4096])
    stored[100] ^= 1
    with pytest.raises(CorruptDataException, match="CRC-32C mismatch.*run kts verify"):
        decoder.decode(src, src.index.chunk(0), stored, memoryview(bytearray(4096)))
    assert decoder.integrity_failures == 1


def test_a_damaged_compressed_chunk_is_corrupt() -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, 4096, compression=True)
    decoder = ChunkDecoder()
    chunk = src.index.chunk(1)
    stored = bytearray(ranges.objects["seg.log"][chunk.transformed_position : chunk.transformed_end])
    stored[len(stored) // 2] ^= 0xFF
    with pytest.raises(CorruptDataException, match="chunk 1 of seg.log"):
        decoder.decode(src, chunk, stored, memoryview(bytearray(4096)))
    assert decoder.integrity_failures == 1
