"""CoalescingFetcher alone, against an in-memory range reader: one GET per run, joins instead of second GETs,
GET buffers back in the pool once every holder let go, failures in the plugin's exception family."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from fetch_fakes import FakeRanges, chunked_source

from backends.base import StorageBackendException
from chunking.chunk_index import Chunk
from rsm.errors import CorruptDataException, RemoteStorageException
from rsm.fetch.coalescing_fetcher import CoalescingFetcher, StoredChunk
from rsm.fetch.source import SegmentSource

CHUNK = 64 * 1024
DATA = bytes(i % 251 for i in range(8 * CHUNK))


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


class Settled:
    """The cache's side of a fetch: which chunks to keep (all, decoded ahead when ``decode``) and what was kept."""

    def __init__(self, keep: bool = True, decode: bool = True) -> None:
        self.keep = keep
        self.decode = decode
        self.kept: dict[int, tuple[bytes, bool]] = {}

    def plan(self, run: Sequence[Chunk]) -> list[bool | None]:
        return [self.decode if self.keep else None for _ in run]

    def settle(self, src: SegmentSource, chunk: Chunk, stored: memoryview, decode: bool) -> None:
        self.kept[chunk.id] = (bytes(stored), decode)


def _fetcher(ranges: FakeRanges, pool: ThreadPoolExecutor, coalesce: int = 4 * CHUNK) -> CoalescingFetcher:
    return CoalescingFetcher(ranges, coalesce, get_timeout_s=10, background=pool)  # type: ignore[arg-type]


def _run(src: SegmentSource, first: int, count: int) -> list[Chunk]:
    return [src.index.chunk(i) for i in range(first, first + count)]


def _wait_landed(fetcher: CoalescingFetcher) -> None:
    for _ in range(2000):
        if not len(fetcher.flights):
            return
        threading.Event().wait(0.005)
    raise AssertionError("flights never landed")


def test_one_get_brings_a_run_and_every_chunk_is_settled(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    fetcher = _fetcher(ranges, pool)
    settled = Settled()
    with fetcher.fetch(src, _run(src, 0, 4), False, settled.plan, settled.settle) as stored:
        assert bytes(stored.data) == DATA[:CHUNK]
    _wait_landed(fetcher)
    assert ranges.reads == [("seg.log", 0, 4 * CHUNK - 1)]
    assert {i: kept for i, (kept, _) in settled.kept.items()} == {
        i: DATA[i * CHUNK : (i + 1) * CHUNK] for i in range(4)
    }
    assert fetcher.stats()["coalesced-get-total"] == 1
    assert fetcher.buffers.idle == 1  # the GET's buffer came back


def test_chunks_nothing_keeps_land_at_once(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    fetcher = _fetcher(ranges, pool)
    settled = Settled(keep=False)
    stored = fetcher.fetch(src, _run(src, 0, 2), False, settled.plan, settled.settle)
    assert len(fetcher.flights) == 0 and settled.kept == {}
    assert fetcher.buffers.idle == 0  # this reader still holds the GET's bytes
    stored.release()
    stored.release()  # a second release changes nothing
    assert fetcher.buffers.idle == 1


def test_a_reader_joins_the_get_in_flight_and_takes_its_chunk(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges(gate=threading.Event())
    src = chunked_source(ranges, DATA, CHUNK)
    fetcher = _fetcher(ranges, pool)
    settled = Settled()
    first: list[StoredChunk] = []
    getter = threading.Thread(
        target=lambda: first.append(fetcher.fetch(src, _run(src, 0, 4), False, settled.plan, settled.settle))
    )
    getter.start()
    assert ranges.started.wait(10)
    claimed: list[bool] = []
    joined: list[StoredChunk | None] = []

    def join() -> None:
        joined.append(fetcher.join(src, src.index.chunk(2), lambda: claimed.append(True)))

    joiner = threading.Thread(target=join)
    joiner.start()
    assert ranges.gate is not None
    ranges.gate.set()
    getter.join(10)
    joiner.join(10)
    assert claimed == [True]
    got = joined[0]
    assert got is not None and bytes(got.data) == DATA[2 * CHUNK : 3 * CHUNK]
    assert len(ranges.reads) == 1
    _wait_landed(fetcher)
    assert settled.kept[2][1] is False  # taken by the reader: not decoded a second time
    assert settled.kept[1][1] is True
    assert fetcher.buffers.idle == 0  # two readers still hold the bytes
    got.release()
    first[0].release()
    assert fetcher.buffers.idle == 1


def test_a_run_stops_at_a_chunk_already_in_flight(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    fetcher = _fetcher(ranges, pool)
    fetcher.flights.claim((src.cache_id, 2))  # another GET brings chunk 2
    settled = Settled(keep=False)
    fetcher.fetch(src, _run(src, 0, 4), False, settled.plan, settled.settle).release()
    assert ranges.reads == [("seg.log", 0, 2 * CHUNK - 1)]


def test_join_finds_nothing_when_no_get_brings_the_chunk(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    assert _fetcher(ranges, pool).join(src, src.index.chunk(0), lambda: pytest.fail("nothing was claimed")) is None


@pytest.mark.parametrize(
    ("failure", "raised", "message"),
    [
        (None, RemoteStorageException, "the .log object is missing although the manifest exists"),
        (StorageBackendException("connection reset"), RemoteStorageException, "cannot read chunk 0 of seg.log"),
    ],
)
def test_a_failed_get_reaches_every_waiter_and_leaves_nothing_in_flight(
    pool: ThreadPoolExecutor, failure: BaseException | None, raised: type[Exception], message: str
) -> None:
    ranges = FakeRanges(failure=failure)
    src = chunked_source(ranges, DATA, CHUNK)
    if failure is None:
        del ranges.objects["seg.log"]
    fetcher = _fetcher(ranges, pool)
    settled = Settled()
    with pytest.raises(raised, match=message):
        fetcher.fetch(src, _run(src, 0, 3), False, settled.plan, settled.settle)
    assert len(fetcher.flights) == 0 and settled.kept == {}
    assert fetcher.buffers.idle == 1  # the buffer nobody saw went back


def test_a_short_object_is_corrupt_data(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    ranges.objects["seg.log"] = ranges.objects["seg.log"][: 3 * CHUNK]
    settled = Settled()
    with pytest.raises(CorruptDataException, match="shorter than its manifest says"):
        _fetcher(ranges, pool).fetch(src, _run(src, 2, 2), False, settled.plan, settled.settle)


def test_small_gets_use_memory_of_their_own(pool: ThreadPoolExecutor) -> None:
    ranges = FakeRanges()
    src = chunked_source(ranges, DATA, CHUNK)
    fetcher = _fetcher(ranges, pool, coalesce=16 * CHUNK)  # one chunk is under a quarter of a GET buffer
    settled = Settled(keep=False)
    fetcher.fetch(src, _run(src, 0, 1), False, settled.plan, settled.settle).release()
    assert fetcher.buffers.idle == 0
