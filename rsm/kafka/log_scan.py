"""Walking a Kafka ``.log`` batch by batch: headers only, whole batches, or each batch with its decoded records.

The input is a path, a binary file object (seekable or a plain stream) or bytes. Seekable inputs skip batch
bodies with ``seek``, so walking the headers of a 1 GiB segment costs one small read per batch. Batch layout
and record decoding are :mod:`rsm.kafka.records`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import BinaryIO

from rsm.kafka.errors import CorruptRecordBatch, TruncatedBatch
from rsm.kafka.records import BATCH_HEADER_SIZE, BatchHeader, Record, decode_records, parse_batch_header, verify_crc

__all__ = ["batch_view", "iter_batch_headers", "iter_batches", "read_batch"]


def _as_reader(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
) -> tuple[BinaryIO, bool]:
    """Open a path (we close it) or use a caller's binary file/bytes (left open)."""
    if isinstance(path_or_file, (bytes, bytearray, memoryview)):
        return io.BytesIO(path_or_file), True
    if isinstance(path_or_file, (str, os.PathLike)):
        return open(path_or_file, "rb"), True  # noqa: SIM115 - closed by the generator
    return path_or_file, False


def _stream_size(f: BinaryIO) -> int | None:
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        pass
    try:
        if f.seekable():
            here = f.tell()
            end = f.seek(0, io.SEEK_END)
            f.seek(here)
            return end
    except (OSError, AttributeError, io.UnsupportedOperation):
        pass
    return None


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Read up to ``n`` bytes, looping over short reads (pipes and HTTP bodies return less than asked)."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _iter_raw(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
    start_position: int,
    want_body: bool,
    stop_on_truncated_tail: bool,
) -> Iterator[tuple[BatchHeader, bytes | None]]:
    """Shared walker: seekable inputs skip bodies with ``seek``; streams read them and drop them."""
    f, owned = _as_reader(path_or_file)
    try:
        seekable = False
        try:
            seekable = f.seekable()
        except (AttributeError, ValueError):
            seekable = False
        size = _stream_size(f) if seekable else None
        if seekable:
            f.seek(start_position)
        elif start_position:
            skipped = _read_exact(f, start_position)
            if len(skipped) < start_position:
                return
        pos = start_position
        while True:
            if size is not None and pos >= size:
                return
            head = _read_exact(f, BATCH_HEADER_SIZE)
            if not head:
                return
            try:
                header = parse_batch_header(head, pos)
            except TruncatedBatch:
                if stop_on_truncated_tail:
                    return
                raise
            total = header.size
            if size is not None and pos + total > size:
                if stop_on_truncated_tail:
                    return
                raise TruncatedBatch(pos, size - pos, total)
            body: bytes | None = None
            if want_body or not seekable:
                rest = _read_exact(f, total - BATCH_HEADER_SIZE)
                if len(rest) < total - BATCH_HEADER_SIZE:
                    if stop_on_truncated_tail:
                        return
                    raise TruncatedBatch(pos, BATCH_HEADER_SIZE + len(rest), total)
                if want_body:
                    body = head + rest
            else:
                f.seek(pos + total)
            yield header, body
            pos += total
    finally:
        if owned:
            f.close()


def iter_batch_headers(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
    start_position: int = 0,
    *,
    stop_on_truncated_tail: bool = False,
) -> Iterator[BatchHeader]:
    """Yield the header of every batch from ``start_position`` (a batch start) to the end of the log.

    Accepts a path, a binary file object (seekable or a plain stream) or bytes. An impossible header raises
    :class:`CorruptRecordBatch` carrying ``.position``; a batch cut off by the end of the data raises its
    subclass :class:`TruncatedBatch`, unless ``stop_on_truncated_tail=True``, which ends the iteration
    quietly instead (what a reader of a fetch stream cut at ``endPosition`` wants). Magic 0/1 raises
    :class:`UnsupportedFormat`. Bodies are skipped, not read, when the input is seekable.
    """
    for header, _ in _iter_raw(path_or_file, start_position, False, stop_on_truncated_tail):
        yield header


def iter_batches(
    path_or_file: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview,
    start_position: int = 0,
    *,
    stop_on_truncated_tail: bool = False,
    verify: bool = False,
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Like :func:`iter_batch_headers` but also yields each whole batch's bytes.

    With ``verify=True`` a CRC mismatch raises :class:`CorruptRecordBatch` at that batch's position.
    """
    for header, body in _iter_raw(path_or_file, start_position, True, stop_on_truncated_tail):
        assert body is not None
        if verify and not verify_crc(body):
            raise CorruptRecordBatch("CRC-32C mismatch", header.position)
        yield header, body


def read_batch(f: BinaryIO, header: BatchHeader) -> bytes:
    """Read the whole batch described by ``header`` from a seekable file (e.g. one found by an index lookup)."""
    f.seek(header.position)
    data = _read_exact(f, header.size)
    if len(data) < header.size:
        raise TruncatedBatch(header.position, len(data), header.size)
    return data


def batch_view(
    data: bytes | bytearray | memoryview, *, stop_on_truncated_tail: bool = False
) -> list[tuple[tuple[int, ...], list[Record]]]:
    """Every batch as its header fields (all but the length and CRC, which follow from the rest) and its decoded
    records: two copies of the same batches compare equal on this whatever bytes their codec produced."""
    out = []
    for h, body in iter_batches(data, verify=True, stop_on_truncated_tail=stop_on_truncated_tail):
        fields = (
            h.base_offset,
            h.partition_leader_epoch,
            h.attributes,
            h.last_offset_delta,
            h.base_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.records_count,
        )
        out.append((fields, decode_records(body)))
    return out
