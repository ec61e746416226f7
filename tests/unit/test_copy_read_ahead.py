"""Copies share their read-ahead (rsm.core.copy_pipeline.ReadAhead): ten segments read at once through one
transform pool hold one chunk each plus the shared tokens, and every byte comes out in order."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path

from chunking.transform import ChunkTransformer
from rsm.core.copy_pipeline import ReadAhead, TransformedLogReader

CHUNK = 4096
CHUNKS = 30


class Counting(ChunkTransformer):
    """The identity transform, counting chunks transformed and not yet consumed by their reader."""

    def __init__(self, state: dict[str, int], lock: threading.Lock) -> None:
        super().__init__(False)
        self.state, self.lock = state, lock

    def transform(self, data: bytes) -> bytes:  # type: ignore[override]
        with self.lock:
            self.state["live"] += 1
            self.state["peak"] = max(self.state["peak"], self.state["live"])
        return bytes(data)


def test_ten_copies_hold_one_chunk_each_plus_the_shared_tokens(tmp_path: Path) -> None:
    lock = threading.Lock()
    state = {"live": 0, "peak": 0}
    read_ahead = ReadAhead(3)
    files = []
    for i in range(10):
        path = tmp_path / f"seg{i}"
        path.write_bytes(bytes((i + j) % 256 for j in range(CHUNK * CHUNKS)))
        files.append(path)

    def copy(path: Path) -> bytes:
        reader = TransformedLogReader(path, CHUNK * CHUNKS, CHUNK, Counting(state, lock), transform, 9, read_ahead)
        out = bytearray()
        buf = bytearray(CHUNK)
        try:
            while True:
                n = reader.readinto(buf)
                if n == 0:
                    return bytes(out)
                out += buf[:n]
                with lock:
                    state["live"] -= 1  # one chunk consumed (each read takes exactly one)
                time.sleep(0.002)  # a slow upload: the transforms get ahead of it
        finally:
            reader.close()

    with (
        concurrent.futures.ThreadPoolExecutor(2) as transform,
        concurrent.futures.ThreadPoolExecutor(10) as copiers,
    ):
        results = list(copiers.map(copy, files))
    assert results == [p.read_bytes() for p in files]
    # per copy the chunk it uploads and the one transformed next, plus the shared tokens (a window each: 10 x 9)
    assert state["peak"] <= 10 * 2 + 3, state
    assert read_ahead.taken == 0


def test_one_copy_alone_uses_the_whole_read_ahead(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    path.write_bytes(b"x" * CHUNK * CHUNKS)
    read_ahead = ReadAhead(4)
    with concurrent.futures.ThreadPoolExecutor(2) as transform:
        reader = TransformedLogReader(path, CHUNK * CHUNKS, CHUNK, ChunkTransformer(False), transform, 9, read_ahead)
        buf = bytearray(CHUNK)
        assert reader.readinto(buf) == CHUNK
        # the oldest chunk in flight needs no token, the four after it take all there are
        assert read_ahead.taken == 4 and len(reader._pending) == 5
        reader.close()
    assert read_ahead.taken == 0
