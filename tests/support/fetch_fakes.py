"""Small fakes for unit tests of the read path's parts: an in-memory range reader and a segment source over it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import crc32c

from backends.base import InvalidRange, KeyNotFound
from chunking.chunk_index import ChunkIndex
from chunking.transform import ChunkTransformer
from rsm.fetch.source import SegmentSource
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition


@dataclass
class FakeRanges:
    """Objects in a dict, read by range. Counts every read; ``gate`` (when set) holds each read until it opens;
    ``failure`` (when set) is raised by the next reads instead."""

    objects: dict[str, bytes] = field(default_factory=dict)
    reads: list[tuple[str, int, int]] = field(default_factory=list)
    gate: threading.Event | None = None
    failure: BaseException | None = None
    started: threading.Event = field(default_factory=threading.Event)

    def _bytes(self, key: str, start: int, end: int) -> bytes:
        self.reads.append((key, start, end))
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        if self.failure is not None:
            raise self.failure
        if key not in self.objects:
            raise KeyNotFound(key)
        data = self.objects[key]
        if end >= len(data):
            raise InvalidRange(key, start, end, len(data))
        return data[start : end + 1]

    def read(self, key: str, start: int, end: int) -> bytearray:
        return bytearray(self._bytes(key, start, end))

    def read_into(self, key: str, start: int, end: int, out: memoryview) -> None:
        out[: end - start + 1] = self._bytes(key, start, end)


def fake_meta() -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition("MWJ6FHTfRYy67jzwZdeqSQ", "orders", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, "tqimKeZwStOEOwRzT3L5oQ"), 0, 99, 0, 0, 0, 0, {0: 0})


def chunked_source(
    ranges: FakeRanges, original: bytes, chunk_size: int, compression: bool = False, tag: str = "a"
) -> SegmentSource:
    """``original`` cut into chunks, each stored (compressed when asked) one after the other as ``seg.log`` in
    ``ranges``, and the source that reads them."""
    transformer = ChunkTransformer(compression=compression)
    pieces = [original[i : i + chunk_size] for i in range(0, len(original), chunk_size)]
    stored = [bytes(transformer.transform(p)) for p in pieces]
    ranges.objects["seg.log"] = b"".join(stored)
    return SegmentSource(
        meta=fake_meta(),
        segment_key="seg",
        cache_id=f"seg@{tag}",
        log_key="seg.log",
        shown_log_key="seg.log",
        index=ChunkIndex(chunk_size, len(original), [len(s) for s in stored]),
        transformer=transformer,
        chunk_crcs=[crc32c.crc32c(p) for p in pieces],
        indexes_key="seg.indexes",
        shown_indexes_key="seg.indexes",
        indexes={},
        index_crcs=None,
    )
