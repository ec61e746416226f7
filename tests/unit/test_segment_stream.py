"""SegmentStream against a fake chunk supply: the order chunks come in, and who decodes the chunk a reader waits
for when the shared pool is busy with other streams' read-ahead."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from chunking.buffer_pool import ChunkBuffer, ChunkBufferPool
from chunking.chunk_index import Chunk
from rsm.fetch.stream import SegmentStream

CHUNK = 16


class FakeSupply:
    """Chunk ``i`` holds 16 bytes of value ``i``; records which thread decoded each chunk."""

    def __init__(self) -> None:
        self.pool = ChunkBufferPool(CHUNK)
        self.loaded_by: dict[int, str] = {}
        self.lock = threading.Lock()

    def load(self, chunk: Chunk) -> ChunkBuffer:
        buf = self.pool.take(CHUNK)
        buf.memory[:CHUNK] = bytes([chunk.id]) * CHUNK
        buf.size = CHUNK
        with self.lock:
            self.loaded_by[chunk.id] = threading.current_thread().name
        return buf

    def lookup(self, chunk: Chunk) -> ChunkBuffer | None:
        return None

    def found(self, chunk: Chunk) -> None:
        pass

    def reached(self, chunk_id: int) -> None:
        pass


def chunks(n: int) -> list[Chunk]:
    return [Chunk(i, i * CHUNK, CHUNK, i * CHUNK, CHUNK) for i in range(n)]


def test_the_reader_decodes_its_next_chunk_itself_while_the_pool_is_busy() -> None:
    supply = FakeSupply()
    pool = ThreadPoolExecutor(1, thread_name_prefix="busy-pool")
    release = threading.Event()
    pool.submit(release.wait)  # another stream's work holds the only pool thread
    stream = SegmentStream(chunks(3), 0, 3 * CHUNK - 1, supply, pool, readahead=2, describe="segment s")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(stream.read(2 * CHUNK)), name="reader")
    try:
        reader.start()
        reader.join(30)  # the read needs no pool thread; the pool stays blocked until after the join
        assert not reader.is_alive(), "the reader waited for the busy pool"
        assert got == [bytes([0]) * CHUNK + bytes([1]) * CHUNK]
        assert supply.loaded_by[0] == "reader" and supply.loaded_by[1] == "reader"
    finally:
        release.set()
        stream.close()
        pool.shutdown(wait=True)
    assert 2 not in supply.loaded_by  # the read-ahead still queued was cancelled at close, never run


def test_chunks_the_pool_already_decoded_are_read_from_the_pool_in_order() -> None:
    supply = FakeSupply()
    with ThreadPoolExecutor(2, thread_name_prefix="pool") as pool:
        stream = SegmentStream(chunks(4), 5, 4 * CHUNK - 1, supply, pool, readahead=3, describe="segment s")
        data = stream.read()
        stream.close()
    assert data == (bytes([0]) * CHUNK)[5:] + b"".join(bytes([i]) * CHUNK for i in range(1, 4))
    assert set(supply.loaded_by) == {0, 1, 2, 3}
    assert len(supply.pool._idle) == supply.pool.allocated  # every buffer back in the pool after close
