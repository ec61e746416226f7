"""A fetch's bytes: the segment's batches rebuilt from its rows (``rsm.iceberg.segment_fetch``), as the lazy
stream ``fetch_log_segment`` returns."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import closing
from typing import Any

from rsm.errors import RemoteStorageException
from rsm.iceberg.batches import encode_row_batches
from rsm.iceberg.fetch_plan import SegmentRows
from rsm.iceberg.segment_fetch import RowGroupCache, iter_segment_rows


def iter_segment_batches(
    rows: SegmentRows,
    start: int,
    end: int | None,
    what: str,
    cache: RowGroupCache | None = None,
) -> Iterator[bytes]:
    """The batches of the segment whose original position is in ``[start, end]`` (``end`` None: to the end)."""
    with closing(iter_segment_rows(rows, start, end, what, cache)) as tables:
        for ready in tables:
            for _position, batch in encode_row_batches(ready, what):
                yield batch


class BatchStream(io.RawIOBase):
    """A lazy byte stream over rebuilt batches (what ``fetch_log_segment`` returns for an Iceberg segment), from
    ``first`` (a batch read already) on; closing it closes ``batches``."""

    def __init__(self, batches: Iterator[bytes], first: bytes = b"") -> None:
        self._batches = batches
        self._current = memoryview(first)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("read of a closed stream")
        while not self._current:
            nxt = next(self._batches, None)
            if nxt is None:
                return 0
            self._current = memoryview(nxt)
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            close = getattr(self._batches, "close", None)
            if close is not None:
                close()
        super().close()


class _BatchReader(io.BufferedReader):
    """``readinto`` gives what is ready (at most a batch or two), as ``readinto1`` does, instead of filling the
    caller's buffer: the transports read 1 MiB pieces, and a fetch's first bytes should not wait for a whole
    MiB of batches to be rebuilt, nor should batches the broker never reads be rebuilt after it closed."""

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        return self.readinto1(buffer)


def open_segment_stream(
    rows: SegmentRows,
    start: int,
    end: int | None,
    what: str,
    cache: RowGroupCache | None = None,
) -> io.BufferedReader:
    """The stream of a fetch; the first batch is built before it returns, so a missing file fails the call."""
    if start < 0:
        raise RemoteStorageException(f"{what}: start position {start} is negative")
    batches = iter_segment_batches(rows, start, end, what, cache)
    first = next(batches, b"")
    return _BatchReader(BatchStream(batches, first), buffer_size=256 << 10)
