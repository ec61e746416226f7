"""The pure-Python walk of v2 records into :class:`~rsm.kafka.record_columns.Columns` lists.

Fields are decoded inline with a fast path for one- and two-byte varints. It is the reference the compiled walk
(``rsm/kafka/_recordwalk.c``) is tested against, and the walk the decoder falls back to without it.
"""

from __future__ import annotations

from rsm.kafka.record_columns import Columns
from rsm.kafka.varint import decode_varint, decode_varlong

__all__ = ["append_v2_records"]

_NO_LIMIT = (1 << 63) - 1
_INT64_MIN = -(1 << 63)


def _v(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint with the one-byte case inline (callers inline it again where it matters)."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return decode_varlong(buf, pos)


def append_v2_records(
    payload: bytes,
    count: int,
    header: object,
    out: Columns,
    row_bounds: tuple[int, int, int | None, int | None],
    *,
    keys: bool = True,
    values: bool = True,
) -> None:
    """Append the records of an uncompressed v2 records section to ``out``, those within ``row_bounds`` only.

    ``row_bounds`` is ``(first_offset, last_offset, min_timestamp, end_timestamp)`` within int64 (the
    timestamps may be ``None``). With ``keys`` or ``values`` false that list stays empty. Malformed records
    raise ``ValueError`` or ``IndexError``: the caller turns them into damage of the batch.
    """
    lo, hi, ts_lo, ts_hi = row_bounds
    base_off = header.base_offset  # type: ignore[attr-defined]
    base_ts = header.base_timestamp  # type: ignore[attr-defined]
    ts_type = header.timestamp_type  # type: ignore[attr-defined]
    log_append_ts = header.max_timestamp if ts_type == 1 else None  # type: ignore[attr-defined]
    want_headers = out.headers is not None
    offs, tss, types = out.offsets, out.timestamps, out.timestamp_types
    keep_keys = out.keys if keys else []  # a list thrown away: the field is decoded to frame the record
    vals = out.values if values else []
    hdrs = out.headers
    end = len(payload)
    pos = 0
    first = len(tss)
    for _ in range(count):
        c = payload[pos]
        if c < 0x80:
            length = (c >> 1) ^ -(c & 1)
            pos += 1
        elif payload[pos + 1] < 0x80:  # two bytes: lengths of a few hundred bytes, ms deltas
            c = (c & 0x7F) | (payload[pos + 1] << 7)
            length = (c >> 1) ^ -(c & 1)
            pos += 2
        else:
            length, pos = decode_varint(payload, pos)
        rec_end = pos + length
        if length <= 0 or rec_end > end:
            raise ValueError(f"record length {length} runs past the batch")
        pos += 1  # record attributes, unused
        c = payload[pos]
        if c < 0x80:
            ts_delta = (c >> 1) ^ -(c & 1)
            pos += 1
        elif payload[pos + 1] < 0x80:  # two bytes: lengths of a few hundred bytes, ms deltas
            c = (c & 0x7F) | (payload[pos + 1] << 7)
            ts_delta = (c >> 1) ^ -(c & 1)
            pos += 2
        else:
            ts_delta, pos = decode_varlong(payload, pos)
        c = payload[pos]
        if c < 0x80:
            off_delta = (c >> 1) ^ -(c & 1)
            pos += 1
        elif payload[pos + 1] < 0x80:  # two bytes: lengths of a few hundred bytes, ms deltas
            c = (c & 0x7F) | (payload[pos + 1] << 7)
            off_delta = (c >> 1) ^ -(c & 1)
            pos += 2
        else:
            off_delta, pos = decode_varint(payload, pos)
        offset = base_off + off_delta
        ts = log_append_ts if log_append_ts is not None else base_ts + ts_delta
        if offset < lo or offset > hi or (ts_lo is not None and ts < ts_lo) or (ts_hi is not None and ts >= ts_hi):
            pos = rec_end
            continue
        c = payload[pos]
        if c < 0x80:
            n = (c >> 1) ^ -(c & 1)
            pos += 1
        elif payload[pos + 1] < 0x80:  # two bytes: lengths of a few hundred bytes, ms deltas
            c = (c & 0x7F) | (payload[pos + 1] << 7)
            n = (c >> 1) ^ -(c & 1)
            pos += 2
        else:
            n, pos = decode_varint(payload, pos)
        if n < 0:
            key = None
        else:
            key = payload[pos : pos + n]
            pos += n
        c = payload[pos]
        if c < 0x80:
            n = (c >> 1) ^ -(c & 1)
            pos += 1
        elif payload[pos + 1] < 0x80:  # two bytes: lengths of a few hundred bytes, ms deltas
            c = (c & 0x7F) | (payload[pos + 1] << 7)
            n = (c >> 1) ^ -(c & 1)
            pos += 2
        else:
            n, pos = decode_varint(payload, pos)
        if n < 0:
            value = None
        else:
            value = payload[pos : pos + n]
            pos += n
        if pos > rec_end:
            raise ValueError("key and value run past the record")
        if want_headers:
            pos = _headers(payload, pos, rec_end, hdrs)  # type: ignore[arg-type]
        pos = rec_end
        offs.append(offset)
        tss.append(ts)
        types.append(ts_type)
        keep_keys.append(key)
        vals.append(value)
    if pos != end:
        raise ValueError(f"{end - pos} bytes left after {count} records")
    if log_append_ts is None and len(tss) > first:
        kept = tss[first:]
        if min(kept) < _INT64_MIN or max(kept) > _NO_LIMIT:
            raise ValueError("a timestamp does not fit in 64 bits")


def _headers(payload: bytes, pos: int, rec_end: int, out: list[list[tuple[str, bytes | None]]]) -> int:
    count, pos = _v(payload, pos)
    if count < 0:
        raise ValueError(f"negative header count {count}")
    items: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        n, pos = _v(payload, pos)
        if n < 0:
            raise ValueError("null header key")
        name = payload[pos : pos + n].decode("utf-8")
        pos += n
        n, pos = _v(payload, pos)
        value = None
        if n >= 0:
            value = payload[pos : pos + n]
            pos += n
        items.append((name, value))
    if pos != rec_end:
        raise ValueError(f"record ends at {pos}, its length says {rec_end}")
    out.append(items)
    return pos
