"""The two outputs of the record walks: :class:`Columns` lists and the compiled walk's :class:`RecordBuffers`.

``RecordBuilder`` is the compiled walk (``rsm/kafka/_recordwalk.c``, an optional extension built with the
package); :data:`COMPILED_WALK` says whether it is there. :class:`rsm.kafka.columnar.LogBatchDecoder` fills
either output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

try:  # our compiled walk into Arrow buffers; built with the package (an optional extension in setup.py)
    from rsm.kafka._recordwalk import RecordBuilder
except ImportError:  # pragma: no cover - exercised in a subprocess that hides the module (test_columnar_walk)
    RecordBuilder = None  # type: ignore[assignment,misc]

__all__ = ["COMPILED_WALK", "Columns", "RecordBuffers", "RecordBuilder"]

COMPILED_WALK: bool = RecordBuilder is not None
"""Whether v2 records can be walked into Arrow buffers by the compiled module (``new_columns(arrow=True)``)."""


@dataclass
class Columns:
    """Decoded records as parallel lists; ``headers`` stays ``None`` unless headers were asked for.

    ``keys`` or ``values`` stay empty when the decoder was told they are not wanted (``keys=False``); the
    other lists always hold every row. ``nbytes`` bounds the key, value and header bytes held from above (the
    size of the records the rows came from), so a reader can cut its batches by weight without summing lists.
    """

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] | None = None
    nbytes: int = field(default=0, compare=False)

    def __len__(self) -> int:
        return len(self.offsets)

    def value_bytes(self) -> int:
        """Bytes of keys and values held (a measure of how much a batch of rows weighs)."""
        return sum(len(k) for k in self.keys if k is not None) + sum(len(v) for v in self.values if v is not None)

    @property
    def has_headers(self) -> bool:
        return self.headers is not None

    def to_columns(self) -> Columns:
        """These lists (:class:`RecordBuffers` has the same method)."""
        return self

    def truncate(self, rows: int) -> None:
        """Drop the rows after the first ``rows`` (those of a batch found damaged half-way)."""
        for column in (self.offsets, self.timestamps, self.timestamp_types, self.keys, self.values, self.headers):
            if column is not None:
                del column[rows:]


def _binary_list(part: tuple[object, object, object, int] | None, rows: int) -> list[bytes | None]:
    """A variable-width column of :meth:`RecordBuffers.parts` as bytes and ``None``."""
    if part is None:
        return []
    validity, offsets, data = (None if b is None else memoryview(b) for b in part[:3])  # type: ignore[arg-type]
    ends = offsets.cast("i")  # type: ignore[union-attr]
    raw = bytes(data)  # type: ignore[arg-type]
    out: list[bytes | None] = []
    for i in range(rows):
        if validity is not None and not validity[i >> 3] >> (i & 7) & 1:
            out.append(None)
        else:
            out.append(raw[ends[i] : ends[i + 1]])
    return out


class RecordBuffers:
    """Rows kept by the compiled walk, held as Arrow column buffers (``rsm/kafka/_recordwalk.c``).

    The decoder appends to it; :meth:`parts` hands the buffers over (pyarrow wraps them without a copy, see
    :func:`rsm.spark.reader.to_record_batch`) and seals it: it takes no more rows, and later calls see the same
    parts. :meth:`to_columns` gives the rows as :class:`Columns` lists, for a quick look and for tests.
    """

    __slots__ = ("builder", "_parts")

    def __init__(self, *, keys: bool = True, values: bool = True, headers: bool = False) -> None:
        if RecordBuilder is None:
            raise RuntimeError("rsm.kafka._recordwalk is not built: use Columns (new_columns(arrow=False))")
        self.builder: RecordBuilder | None = RecordBuilder(keys, values, headers)
        self._parts: dict[str, object] | None = None

    def __len__(self) -> int:
        return len(self.builder) if self.builder is not None else self._parts["rows"]  # type: ignore[index]

    def __repr__(self) -> str:
        return f"RecordBuffers({len(self)} rows{'' if self.builder is not None else ', sealed'})"

    @property
    def has_headers(self) -> bool:
        """Whether headers are built."""
        return self.builder.headers if self.builder is not None else self._parts["headers"] is not None  # type: ignore[index]

    @property
    def nbytes(self) -> int:
        """Bytes of keys, values and headers held."""
        return self.builder.nbytes if self.builder is not None else 0

    def parts(self) -> dict[str, object]:
        """The column buffers (see ``RecordBuilder.take``): ``rows``, ``offset``, ``timestamp`` (ms),
        ``timestampType``, ``key``, ``value`` and ``headers``. Seals the buffers."""
        if self._parts is None:
            self._parts = self.builder.take()  # type: ignore[union-attr]
            self.builder = None
        return self._parts

    def to_columns(self) -> Columns:
        parts = self._parts if self._parts is not None else self.builder.copy()  # type: ignore[union-attr]
        rows: int = parts["rows"]  # type: ignore[assignment]
        cols = Columns(
            offsets=memoryview(parts["offset"]).cast("q").tolist(),  # type: ignore[arg-type]
            timestamps=memoryview(parts["timestamp"]).cast("q").tolist(),  # type: ignore[arg-type]
            timestamp_types=memoryview(parts["timestampType"]).cast("i").tolist(),  # type: ignore[arg-type]
            keys=_binary_list(parts["key"], rows),  # type: ignore[arg-type]
            values=_binary_list(parts["value"], rows),  # type: ignore[arg-type]
        )
        if parts["headers"] is not None:
            lists, names, values, count = parts["headers"]  # type: ignore[misc]
            name_list = [b.decode("utf-8") for b in _binary_list(names, count)]  # type: ignore[union-attr]
            value_list = _binary_list(values, count)
            starts = memoryview(lists).cast("i")
            cols.headers = [
                list(zip(name_list[starts[i] : starts[i + 1]], value_list[starts[i] : starts[i + 1]], strict=True))
                for i in range(rows)
            ]
        return cols
