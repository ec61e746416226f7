"""End to end over the filesystem backend: the matrix of chunk size x compression x encryption x txn index,
on real Kafka segments, every fetch range checked against the original bytes."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from helpers import TIP, encryption_configs

from rsm import IndexType, RemoteResourceNotFoundException, RemoteStorageException
from rsm.core.custom_metadata import CustomMetadata
from rsm.core.object_keys import segment_keys
from rsm.kafka.indexes import decode_offset_index
from rsm.kafka.log_scan import iter_batch_headers
from rsm.kafka.records import verify_crc


def _ranges(size: int, chunk: int, rng: random.Random) -> list[tuple[int, int | None]]:
    """Single bytes, chunk borders from both sides, the last byte, whole-file and random ranges."""
    out: list[tuple[int, int | None]] = [
        (0, None),
        (0, 0),
        (size - 1, None),
        (size - 1, size - 1),
        (0, size - 1),
        (0, size + 1000),
    ]
    for border in range(chunk, size, chunk)[:6]:
        out += [(border - 1, border), (border, border), (border - 1, border - 1), (border - 1, None)]
    for _ in range(8):
        a = rng.randrange(size)
        b = rng.randrange(a, size)
        out.append((a, b))
    return out


@pytest.mark.parametrize("chunk_size", [1024, 65536, 1 << 20])
@pytest.mark.parametrize("compression", [False, True])
@pytest.mark.parametrize("encryption", [False, True])
@pytest.mark.parametrize("transactional", [False, True])
def test_end_to_end_matrix(
    chunk_size: int,
    compression: bool,
    encryption: bool,
    transactional: bool,
    segment_factory: Any,
    key_pairs: Any,
    make_manager: Any,
) -> None:
    seg = segment_factory(target_bytes=300_000, transactional=transactional, seed=3)
    assert seg.size % chunk_size != 0
    extra = encryption_configs(key_pairs) if encryption else {}
    m = make_manager(
        extra,
        chunk_size=chunk_size,
        compression_enabled=compression,
        custom_metadata_fields_include="REMOTE_SIZE,OBJECT_PREFIX,OBJECT_KEY",
        key_prefix="pre/",
    )
    meta = seg.to_metadata(TIP)
    custom = m.copy_log_segment_data(meta, seg.to_log_segment_data())
    original = seg.log.read_bytes()

    keys = segment_keys("pre/", meta)
    stored_log = m.backend.fetch(keys.log).read()
    stored_size = sum(len(m.backend.fetch(k).read()) for k in keys.all())
    assert CustomMetadata.decode(custom) == CustomMetadata(stored_size, "pre/", keys.main_path)
    if not compression and not encryption:
        assert stored_log == original  # byte-identical to the segment, as Aiven's plugin stores it
    else:
        assert stored_log != original

    manifest = json.loads(m.backend.fetch(keys.manifest).read())
    assert manifest["version"] == "1"
    assert manifest["compression"] is compression
    assert manifest["chunkIndex"]["type"] == ("variable" if compression else "fixed")
    assert ("encryption" in manifest) is encryption
    if encryption:
        assert manifest["encryption"]["dataKey"].startswith("kek1:")
        assert manifest["chunkIndex"].get("transformedChunkSize", chunk_size + 28) == chunk_size + 28
    assert manifest["remoteLogSegmentMetadata"]["startOffset"] == seg.base_offset
    assert len(manifest["remoteLogSegmentMetadata"]["integrity"]["chunks"]) > 0

    meta_with_custom = dataclasses.replace(meta, custom_metadata=custom)
    rng = random.Random(chunk_size)
    for start, end in _ranges(len(original), chunk_size, rng):
        with m.fetch_log_segment(meta_with_custom, start, end) as f:
            got = f.read()
        stop = len(original) if end is None else min(end + 1, len(original))
        assert got == original[start:stop], (start, end)

    for t, path in [
        (IndexType.OFFSET, seg.offset_index),
        (IndexType.TIMESTAMP, seg.time_index),
        (IndexType.PRODUCER_SNAPSHOT, seg.producer_snapshot),
    ]:
        with m.fetch_index(meta, t) as f:
            assert f.read() == path.read_bytes()
    with m.fetch_index(meta, IndexType.LEADER_EPOCH) as f:
        assert f.read() == seg.leader_epoch_bytes
    if transactional:
        with m.fetch_index(meta, IndexType.TRANSACTION) as f:
            txn = f.read()
        assert txn == seg.txn_index.read_bytes() and len(txn) > 0
    else:
        with pytest.raises(RemoteResourceNotFoundException):
            m.fetch_index(meta, IndexType.TRANSACTION)

    m.delete_log_segment_data(meta)
    assert list(m.backend.list("pre/")) == []
    m.delete_log_segment_data(meta)  # idempotent
    with pytest.raises(RemoteResourceNotFoundException):
        m.fetch_log_segment(meta, 0)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_broker_style_reads_from_index_positions(
    codec: str, segment_factory: Any, key_pairs: Any, make_manager: Any
) -> None:
    """As the broker does: start at an offset-index position, read whole batches, stop early, close."""
    seg = segment_factory(target_bytes=400_000, codec=codec, seed=11)
    m = make_manager(encryption_configs(key_pairs), compression_enabled=True, chunk_size=16384)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    original = seg.log.read_bytes()
    with m.fetch_index(meta, IndexType.OFFSET) as f:
        entries = decode_offset_index(f.read(), seg.base_offset)
    assert entries, "a 400 KB segment has offset index entries"
    for entry in entries[:: max(1, len(entries) // 10)]:
        with m.fetch_log_segment(meta, entry.position) as stream:
            head = stream.read(200_000)
        assert head == original[entry.position : entry.position + 200_000]
        complete = []
        for header in iter_batch_headers(original, start_position=entry.position):
            if header.end_position - entry.position > len(head):
                break
            complete.append(header)
            assert verify_crc(head[header.position - entry.position : header.end_position - entry.position])
        assert complete, "200 KB from a batch start holds at least one whole batch"
        assert complete[0].base_offset <= entry.offset <= complete[0].last_offset


@pytest.mark.parametrize("kind", ["empty", "one-byte", "single-batch"])
def test_edge_case_segments(kind: str, tmp_path: Any, key_pairs: Any, make_manager: Any) -> None:
    from rsm.kafka.writer import write_empty_segment, write_single_batch_segment

    if kind == "single-batch":
        seg = write_single_batch_segment(tmp_path / "seg")
    else:
        seg = write_empty_segment(tmp_path / "seg")
        if kind == "one-byte":
            seg.log.write_bytes(b"\x00")
    m = make_manager(encryption_configs(key_pairs), compression_enabled=True, chunk_size=1024)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    original = seg.log.read_bytes()
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read() == original
    if original:
        with m.fetch_log_segment(meta, len(original) - 1, len(original) - 1) as f:
            assert f.read() == original[-1:]
    with pytest.raises(RemoteStorageException, match="past the end"):
        m.fetch_log_segment(meta, len(original) + 1)
    with m.fetch_index(meta, IndexType.OFFSET) as f:
        assert f.read() == seg.offset_index.read_bytes()


def test_lazy_stream_fetches_only_what_is_read(segment_factory: Any, make_manager: Any) -> None:
    """A reader that stops after a few KB of a segment must not make the manager fetch the whole segment."""
    seg = segment_factory(target_bytes=2_000_000, seed=5)
    m = make_manager(chunk_size=16384, compression_enabled=True, fetch_readahead_chunks=2)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    calls: list[tuple[str, int, Any]] = []
    backend = m.backend
    original_fetch = backend.fetch
    original_read_into = backend.read_range_into

    def counting_fetch(key: str, start: int = 0, end: Any = None) -> Any:
        calls.append((key, start, end))
        return original_fetch(key, start, end)

    def counting_read_into(key: str, start: int, end: int, out: Any) -> int:
        calls.append((key, start, end))
        return original_read_into(key, start, end, out)

    # spy on the real backend (both ways it can be read); it still does the real reads
    backend.fetch = counting_fetch
    backend.read_range_into = counting_read_into
    with m.fetch_log_segment(meta, 0) as f:
        assert f.read(1000) == seg.log.read_bytes()[:1000]
    chunk_reads = [c for c in calls if c[0].endswith(".log")]
    assert 1 <= len(chunk_reads) <= 3, chunk_reads  # the chunk read plus at most readahead=2 more
    total_chunks = -(-seg.size // 16384)
    assert total_chunks > 100
