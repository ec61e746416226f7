"""The byte budget of upload parts (backends.buffers), cutting a source into reserved blocks (iter_blocks) and
sending them as parts (upload_parts), against a fake store that only sleeps and records what it was sent."""

from __future__ import annotations

import concurrent.futures
import io
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.buffers import UploadBuffers
from backends.cloud import upload_parts
from backends.retry import Deadline, DeadlineExceeded
from backends.streaming import blocks_after, iter_blocks


def test_reserve_and_release_count_bytes_and_the_peak() -> None:
    buffers = UploadBuffers(100)
    buffers.reserve(60)
    buffers.reserve(40)
    assert buffers.held == 100 and buffers.peak == 100
    buffers.release(70)
    assert buffers.held == 30 and buffers.peak == 100
    buffers.release(30)
    assert buffers.held == 0


def test_a_part_larger_than_the_budget_and_an_extra_release_are_refused() -> None:
    buffers = UploadBuffers(100)
    with pytest.raises(ValueError, match="101 bytes does not fit the upload buffer budget of 100"):
        buffers.reserve(101, what="S3 upload of key 'k'")
    buffers.reserve(10)
    with pytest.raises(ValueError, match="released 11 bytes"):
        buffers.release(11)
    with pytest.raises(ValueError, match="must be positive"):
        UploadBuffers(0)


def test_a_wait_past_the_deadline_raises_naming_the_upload() -> None:
    buffers = UploadBuffers(10)
    buffers.reserve(10)
    with pytest.raises(DeadlineExceeded, match="S3 upload of key 'k': waiting for upload buffer memory"):
        buffers.reserve(1, Deadline(0.05), "S3 upload of key 'k'")
    assert buffers.held == 10  # the failed wait took nothing


def test_waiters_are_served_in_order_so_a_large_part_is_not_starved() -> None:
    buffers = UploadBuffers(10)
    buffers.reserve(6)
    order: list[str] = []

    def take(name: str, size: int) -> None:
        buffers.reserve(size)
        order.append(name)

    large = threading.Thread(target=take, args=("large", 8))
    large.start()
    while not buffers._queue:  # the large part is waiting
        time.sleep(0.01)
    small = threading.Thread(target=take, args=("small", 3))
    small.start()
    small.join(0.5)
    assert order == [] and small.is_alive()  # 4 bytes are free, yet the small part waits behind the large one
    buffers.release(6)
    large.join(5)
    assert order == ["large"]
    buffers.release(8)
    small.join(5)
    assert order == ["large", "small"] and buffers.held == 3


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), block=st.integers(1, 64), buffered=st.integers(0, 20))
def test_iter_blocks_reserves_what_it_yields(data: bytes, block: int, buffered: int) -> None:
    """Every block but the last is whole, the blocks are the source, and each yielded block is held in the
    budget until the caller releases it; from a plain stream and from a buffered one (which is peeked at)."""
    source: io.RawIOBase | io.BufferedReader | io.BytesIO = io.BytesIO(data)
    if buffered:
        source = io.BufferedReader(io.BytesIO(data), buffer_size=buffered)
    buffers = UploadBuffers(block)
    out: list[bytes] = []
    lasts: list[bool] = []
    for piece, last in iter_blocks(source, block, buffers):  # type: ignore[arg-type]
        assert buffers.held == len(piece)
        out.append(piece)
        lasts.append(last)
        buffers.release(len(piece))
    assert b"".join(out) == data
    assert all(len(p) == block for p in out[:-1]) and len(out[-1]) <= block
    assert lasts == [False] * (len(out) - 1) + [True]
    assert buffers.held == 0 and buffers.peak <= block


def test_a_source_that_fails_gives_its_reservation_back() -> None:
    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: object) -> int:
            raise OSError("disk gone")

    buffers = UploadBuffers(16)
    with pytest.raises(OSError, match="disk gone"):
        next(iter_blocks(Broken(), 16, buffers))
    assert buffers.held == 0


class FakeStore:
    """Parts land after a short pause; the store records them and, once, fails the part it is told to."""

    def __init__(self, fail_part: int | None = None) -> None:
        self.lock = threading.Lock()
        self.parts: dict[tuple[str, int], bytes] = {}
        self.fail_part = fail_part

    def sender(self, key: str) -> object:
        def send(number: int, block: bytes) -> int:
            time.sleep(0.002)
            if number == self.fail_part:
                raise OSError(f"part {number} refused")
            with self.lock:
                self.parts[key, number] = bytes(block)
            return number

        return send


def _upload(store: FakeStore, pool: concurrent.futures.Executor, buffers: UploadBuffers, key: str, data: bytes) -> int:
    blocks = iter_blocks(io.BytesIO(data), 4, buffers)
    head = [next(blocks)[0]]
    numbers = upload_parts(
        pool,
        blocks_after(head, blocks),
        store.sender(key),  # type: ignore[arg-type]
        concurrency=3,
        deadline=Deadline(30),
        what=f"upload of {key}",
        buffers=buffers,
    )
    return len(numbers)


def test_ten_uploads_at_once_never_hold_more_than_the_budget() -> None:
    """Ten uploads of 40 parts each share a budget of 5 parts over a pool of 4 senders: the peak stays within
    it, every byte arrives in order, and the budget is empty afterwards."""
    store = FakeStore()
    buffers = UploadBuffers(5 * 4)
    bodies = {f"k{i}": bytes((i * 7 + j) % 256 for j in range(160)) for i in range(10)}
    with (
        concurrent.futures.ThreadPoolExecutor(4) as senders,
        concurrent.futures.ThreadPoolExecutor(10) as callers,
    ):
        done = [callers.submit(_upload, store, senders, buffers, k, v) for k, v in bodies.items()]
        assert [f.result() for f in done] == [40] * 10
    assert 4 < buffers.peak <= 20 and buffers.held == 0
    for key, data in bodies.items():
        assert b"".join(store.parts[key, n] for n in range(1, 41)) == data


def test_a_failed_part_gives_back_every_reservation() -> None:
    store = FakeStore(fail_part=3)
    buffers = UploadBuffers(12)
    with concurrent.futures.ThreadPoolExecutor(2) as senders:
        with pytest.raises(OSError, match="part 3 refused"):
            _upload(store, senders, buffers, "k", bytes(100))
    assert buffers.held == 0
