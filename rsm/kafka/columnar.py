"""Decoding a stretch of a ``.log`` straight into columns (offsets, timestamps, keys, values, headers).

Why not :func:`rsm.kafka.records.decode_records`: it builds one frozen ``Record`` per record, which is what
tests want but costs several Python objects per row. An analytical reader (Spark, the bare reader API) wants
columns it can hand to Arrow in one call, and it wants to skip work early: batches outside the offset or
time bounds are dropped on their header without CRC or decompression, aborted transactional batches on their
producer id, and headers are jumped over unless asked for.

Two record walks read the records of a v2 batch:

- the compiled walk (``rsm/kafka/_recordwalk.c``, built with the package): from the decompressed records
  straight into Arrow column buffers (:class:`~rsm.kafka.record_columns.RecordBuffers`), which pyarrow wraps
  without a copy. Walking in Python, building a Python object per field and copying them again into Arrow
  cost more than twice the decompression of a zstd batch; this walk costs a fraction of it. It is the Python
  walk's exact twin (same rows kept, same batches refused), and a reader asks for it with
  ``new_columns(arrow=True)``;
- the pure-Python walk (:mod:`rsm.kafka.python_walk`), into :class:`~rsm.kafka.record_columns.Columns` lists
  (fields decoded inline with a fast path for one- and two-byte varints): the reference the compiled walk is
  tested against.

Header checks, CRC-32C, control and aborted batches and decompression (with our ``max_decompressed`` cap) stay
here whichever walk runs. Without the compiled module (a platform where the package was installed without a C
compiler) the decoder falls back to the Python walk, which gives the same rows, slower; one DEBUG line on this
module's logger says so.

Magic 2 batches and legacy magic 0/1 message sets are both read; an entry in either format is framed by
``offset int64, length int32``, so one walker serves both.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from rsm.kafka.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    DecompressionLimitExceeded,
    decompress,
)
from rsm.kafka.errors import CorruptRecordBatch, TruncatedBatch
from rsm.kafka.legacy import decode_legacy_entry
from rsm.kafka.python_walk import append_v2_records
from rsm.kafka.record_columns import COMPILED_WALK, Columns, RecordBuffers
from rsm.kafka.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_batch_header,
    verify_crc,
)

__all__ = [
    "LogBatchDecoder",
    "ReadBounds",
    "iter_log_entries",
]

log = logging.getLogger(__name__)

if not COMPILED_WALK:  # pragma: no cover - exercised in a subprocess that hides the module (test_columnar_walk)
    log.debug(
        "rsm.kafka._recordwalk is not built (the package was installed without a C compiler): v2 records are read "
        "by the pure-Python walk into Python lists, several times slower; reinstall with a compiler for the "
        "compiled walk"
    )

_PREFIX = struct.Struct(">qi")
_NO_LIMIT = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
# Output step of the zstd stream reader: most batches inflate in one step, and no step allocates the whole cap.
_INFLATE_STEP = 256 << 10


@dataclass(frozen=True)
class ReadBounds:
    """Which records to keep: offsets ``first..last`` inclusive, timestamps ``min_ts <= ts < end_ts``."""

    first_offset: int = 0
    last_offset: int = _NO_LIMIT
    min_timestamp: int | None = None
    end_timestamp: int | None = None


def iter_log_entries(f: BinaryIO, start_position: int, end_position: int | None) -> Iterator[tuple[int, bytes]]:
    """``(position, whole entry)`` for every batch (or legacy entry) starting in ``[start, end)`` of a stream.

    ``f`` is positioned at ``start_position``. Entries are whole: the one that starts before ``end_position``
    is read to its own end, which may lie past it (slices of a segment cut at batch starts read each batch
    exactly once). A length field that cannot be right raises :class:`CorruptRecordBatch`, since nothing
    after it can be framed.
    """
    pos = start_position

    def read(n: int) -> bytes:
        # Unbuffered on purpose: read-ahead would fetch chunks past the last batch the bounds need.
        first = f.read(n)
        if first is None or len(first) == n or not first:
            return first or b""
        parts = [first]
        got = len(first)
        while got < n:
            more = f.read(n - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    while end_position is None or pos < end_position:
        prefix = read(LOG_OVERHEAD)
        if not prefix:
            return
        if len(prefix) < LOG_OVERHEAD:
            raise TruncatedBatch(pos, len(prefix), None)
        _offset, length = _PREFIX.unpack(prefix)
        if length < 14 or length > DEFAULT_MAX_DECOMPRESSED_BYTES * 4:
            raise CorruptRecordBatch(f"impossible batch length {length}", pos)
        rest = read(length)
        if len(rest) < length:
            raise TruncatedBatch(pos, LOG_OVERHEAD + len(rest), LOG_OVERHEAD + length)
        yield pos, prefix + rest
        pos += LOG_OVERHEAD + length


class LogBatchDecoder:
    """Turns whole entries into rows within ``bounds``; read_committed when ``aborted`` is given.

    Rows go to the output the caller makes with :meth:`new_columns`: :class:`RecordBuffers` filled by the
    compiled walk (``arrow=True``, when built), else :class:`Columns` lists. Offsets and timestamps are int64,
    as Kafka's are: bounds beyond int64 are clamped, an offset beyond it is outside every bound, and a kept
    record whose timestamp leaves int64 is damage (every walk agrees).

    ``aborted`` maps producer id to ``(first_offset, last_offset)`` spans of its aborted transactions (the
    transaction index): a transactional batch of that producer inside a span is dropped, and control batches
    are always dropped. With ``fail_on_corruption=False`` a damaged batch is skipped instead of raising, none of
    its rows kept: it is kept in ``skipped`` (its error: position and reason; ``skipped_batches`` counts them),
    so the caller can report every skipped batch as it happens rather than only a total at the end.
    """

    def __init__(
        self,
        bounds: ReadBounds,
        *,
        include_headers: bool = False,
        aborted: Mapping[int, Sequence[tuple[int, int]]] | None = None,
        verify_crc: bool = True,
        fail_on_corruption: bool = True,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
        native: bool = True,
        keys: bool = True,
        values: bool = True,
    ) -> None:
        self.bounds = bounds
        # A read that needs no keys (or no values) leaves that list empty: no pass over the compiled walk's rows
        # for it, and nothing for Arrow to copy. The Python walks still decode the field to frame the record.
        self.keys = keys
        self.values = values
        # ``native=False`` forces the pure-Python walk (the reference the compiled walk is tested against).
        self.compiled = native and COMPILED_WALK
        # The bounds the record walks apply to rows, within int64 (``bounds`` itself decides on whole batches).
        lo, hi = max(bounds.first_offset, _INT64_MIN), min(bounds.last_offset, _NO_LIMIT)
        if lo > hi:
            lo, hi = _NO_LIMIT, _INT64_MIN  # nothing representable is kept
        ts_lo, ts_hi = bounds.min_timestamp, bounds.end_timestamp
        self._row_bounds = (
            lo,
            hi,
            None if ts_lo is None else min(max(ts_lo, _INT64_MIN), _NO_LIMIT),
            None if ts_hi is None else min(max(ts_hi, _INT64_MIN), _NO_LIMIT),
        )
        self.include_headers = include_headers
        self.aborted = aborted
        self.verify = verify_crc
        self.fail_on_corruption = fail_on_corruption
        self.max_decompressed = max_decompressed
        self.skipped: list[CorruptRecordBatch] = []
        self.control_batches = 0
        self.aborted_batches = 0
        self.batches = 0
        self._zstd: object | None = None  # a zstandard.ZstdDecompressor, made on the first zstd batch

    @property
    def skipped_batches(self) -> int:
        return len(self.skipped)

    def new_columns(self, arrow: bool = False) -> Columns | RecordBuffers:
        """An empty output: for Arrow (``arrow=True``) the compiled walk's buffers when it is built, else lists."""
        if arrow and self.compiled:
            return RecordBuffers(keys=self.keys, values=self.values, headers=self.include_headers)
        return Columns(headers=[] if self.include_headers else None)

    def _is_aborted(self, producer_id: int, base_offset: int) -> bool:
        spans = self.aborted.get(producer_id) if self.aborted else None
        return bool(spans) and any(first <= base_offset <= last for first, last in spans)  # type: ignore[union-attr]

    def feed(self, position: int, entry: bytes, out: Columns | RecordBuffers) -> bool:
        """Append the kept rows of one entry to ``out``; ``False`` once past ``last_offset`` (stop reading)."""
        rows = len(out)
        try:
            return self._feed(position, entry, out)
        except CorruptRecordBatch as exc:
            return self._damaged(exc, out, rows)
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            return self._damaged(CorruptRecordBatch(f"malformed records: {exc}", position), out, rows)

    def _damaged(self, exc: CorruptRecordBatch, out: Columns | RecordBuffers, rows: int) -> bool:
        if self.fail_on_corruption:
            raise exc
        if isinstance(out, Columns):  # the Python walk appends as it goes; the compiled one has rolled back
            out.truncate(rows)
        self.skipped.append(exc)
        return True

    def _feed(self, position: int, entry: bytes, out: Columns | RecordBuffers) -> bool:
        magic = entry[16] if len(entry) > 16 else -1
        if magic in (0, 1):
            return self._feed_legacy(position, entry, out)
        b = self.bounds
        header = parse_batch_header(entry, position)
        if header.base_offset > b.last_offset:
            return False
        if header.last_offset < b.first_offset:
            return True
        if b.min_timestamp is not None and header.max_timestamp < b.min_timestamp:
            return True
        if self.verify and not verify_crc(entry):
            raise CorruptRecordBatch("CRC-32C mismatch", position)
        self.batches += 1
        if header.is_control:
            self.control_batches += 1
            return True
        if header.is_transactional and self._is_aborted(header.producer_id, header.base_offset):
            self.aborted_batches += 1
            return True
        body = memoryview(entry)[BATCH_HEADER_SIZE : header.size]
        if isinstance(out, RecordBuffers):
            builder = out.builder
            if builder is None:
                raise RuntimeError("these RecordBuffers were handed over to Arrow: start new ones")
            records = self._inflate_batch(header, body, position) if header.compression else body
            builder.walk(
                records,
                header.records_count,
                header.base_offset,
                header.base_timestamp,
                header.max_timestamp if header.timestamp_type == 1 else None,
                self._row_bounds,
            )
            return True
        payload = self._inflate_batch(header, body, position)
        out.nbytes += len(payload)
        append_v2_records(
            payload, header.records_count, header, out, self._row_bounds, keys=self.keys, values=self.values
        )
        return True

    def _inflate_batch(self, header: BatchHeader, body: memoryview, position: int) -> bytes:
        """The batch's records section, uncompressed; any failure is damage of this batch."""
        try:
            return self.inflate(header.compression, body)
        except DecompressionLimitExceeded as exc:
            raise CorruptRecordBatch(str(exc), position) from None
        except Exception as exc:  # codec libraries raise assorted types
            raise CorruptRecordBatch(f"cannot decompress {header.compression_name} records: {exc}", position) from None

    def inflate(self, codec: int, body: memoryview) -> bytes:
        """The records section of a compressed batch, inflated under ``max_decompressed``.

        zstd, the codec most producers pick, is inflated here with one decompression context per decoder, read
        in :data:`_INFLATE_STEP` steps: :func:`rsm.kafka.compression.decompress` makes a context per batch and asks
        its stream for the whole cap at once, which allocated 64 MiB per batch and took 2.4x as long on producer
        batches of tens of KiB (the decoder's largest cost on zstd segments). Every other codec goes there.
        """
        if codec != CompressionType.ZSTD:
            return decompress(codec, body, self.max_decompressed)
        if self._zstd is None:
            import zstandard

            self._zstd = zstandard.ZstdDecompressor()
        cap = self.max_decompressed
        # Kafka's zstd streams need not record their content size, and may hold several frames
        reader = self._zstd.stream_reader(body, read_across_frames=True)  # type: ignore[attr-defined]
        parts: list[bytes] = []
        total = 0
        while step := reader.read(min(_INFLATE_STEP, cap + 1 - total)):
            parts.append(step)
            total += len(step)
            if total > cap:
                raise DecompressionLimitExceeded(f"zstd records inflate beyond the {cap}-byte decompression cap")
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _feed_legacy(self, position: int, entry: bytes, out: Columns | RecordBuffers) -> bool:
        b = self.bounds
        self.batches += 1
        messages = decode_legacy_entry(
            entry, verify=self.verify, position=position, max_decompressed=self.max_decompressed
        )
        if isinstance(out, RecordBuffers):
            builder = out.builder
            if builder is None:
                raise RuntimeError("these RecordBuffers were handed over to Arrow: start new ones")
            append = builder.append
        else:
            out.nbytes += len(entry)
        for m in messages:
            if m.offset > b.last_offset:
                return False
            if m.offset < b.first_offset:
                continue
            if b.min_timestamp is not None and m.timestamp < b.min_timestamp:
                continue
            if b.end_timestamp is not None and m.timestamp >= b.end_timestamp:
                continue
            if isinstance(out, RecordBuffers):
                append(m.offset, m.timestamp, m.timestamp_type, m.key, m.value)
                continue
            out.offsets.append(m.offset)
            out.timestamps.append(m.timestamp)
            out.timestamp_types.append(m.timestamp_type)
            if self.keys:
                out.keys.append(m.key)
            if self.values:
                out.values.append(m.value)
            if out.headers is not None:
                out.headers.append([])
        return True
