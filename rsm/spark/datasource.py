"""``spark.read.format("kafka-tiered")``: PySpark's Python Data Source over tiered segments.

The driver plans (lists manifests, resolves overlaps, cuts large segments at batch starts through the remote
offset index); each :class:`SlicePartition` is pickled to an executor, whose reader fetches only that slice's
chunks and yields Arrow record batches in the schema of Spark's Kafka source.

Filter pushdown: PySpark refuses a reader that implements ``pushFilters`` while
``spark.sql.python.filterPushdown.enabled`` is false, so :func:`register` picks the pushdown-capable source when
that conf is on and the plain one otherwise. Filters on ``partition``, ``offset`` and ``timestamp`` prune
segments on manifest metadata and start reads mid-segment through the indexes; they are also handed back to
Spark, which re-checks them on the (already narrowed) rows, so a time-zone subtlety can never drop a row.
"""

from __future__ import annotations

import datetime as dt
import gc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rsm.spark.arrow_batches import HEADERS_COLUMN, KAFKA_COLUMNS, arrow_field
from rsm.spark.option_values import ReadOptionsError
from rsm.spark.options import TieredReadOptions, redact
from rsm.spark.planning import PushedBounds, SegmentSlice
from rsm.spark.reader import manager_for, read_slice

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["KafkaTieredDataSource", "KafkaTieredPushdownDataSource", "SlicePartition", "register"]

FORMAT = "kafka-tiered"
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS = ", headers array<struct<key: string, value: binary>>"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
REDACTION_CONF = "spark.sql.redaction.options.regex"
#: Option keys whose values Spark must mask in plans and the UI (Spark's own default masks only ``url``).
REDACTION_REGEX = (
    "(?i)url|secret|password|passphrase|private|token|credential|access.key|sas|connection.string|catalog.uri"
)


def requested_columns(schema: Any, include_headers: bool) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The Kafka source's columns a schema given with ``.schema(...)`` asks for, and the schema's spelling of
    them; ``None`` when it is the source's own schema.

    Spark (4.x) never tells a Python data source which columns a query reads: every row of every column goes
    through Arrow to the JVM, which copies each into a row. A job that needs a few columns says so with a
    schema, and only those are built and shipped. Names match case-insensitively, as Spark's columns do; types
    must be the Kafka source's.
    """
    from pyspark.sql.pandas.types import from_arrow_type

    known = {c.lower(): c for c in (*KAFKA_COLUMNS, HEADERS_COLUMN)}
    columns: list[str] = []
    names: list[str] = []
    for f in schema.fields:
        column = known.get(f.name.lower())
        if column is None:
            raise ReadOptionsError(
                f"column {f.name!r} of the given schema is not a column of the Kafka source; its columns are "
                f"{', '.join(known.values())}"
            )
        if column in columns:
            raise ReadOptionsError(f"column {f.name!r} appears twice in the given schema")
        expected = from_arrow_type(arrow_field(column).type)  # the type the batches carry, as Spark names it
        if f.dataType != expected or not f.nullable:
            given = f.dataType.simpleString() + ("" if f.nullable else " NOT NULL")
            raise ReadOptionsError(
                f"column {f.name!r} of the given schema must be {expected.simpleString()} (nullable), as in "
                f"Spark's Kafka source, not {given}"
            )
        columns.append(column)
        names.append(f.name)
    if not columns:
        raise ReadOptionsError("the given schema has no columns; name at least one column of the Kafka source")
    full = KAFKA_COLUMNS + ((HEADERS_COLUMN,) if include_headers else ())
    if tuple(columns) == full and tuple(names) == full:
        return None
    return tuple(columns), tuple(names)


_heap_frozen = False


def _freeze_worker_heap() -> None:
    """Keep the worker's long-lived objects out of the garbage collector's way, once per Python worker.

    A reused PySpark worker runs a full ``gc.collect()`` after every task, which walks every object the worker
    holds: pyspark, pyarrow and this package are some 60 k of them, and perf put the collector at half of the
    worker's CPU time on uncompressed segments (a seventh of the whole query's). Frozen after the first task's
    imports, they are left out of every later collection; they are still freed by reference counting as usual.
    """
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


class SlicePartition(InputPartition):
    """One slice of one segment; plain values only, so it pickles to any executor."""

    def __init__(self, piece: SegmentSlice) -> None:
        super().__init__(piece)
        self.piece = piece

    def __repr__(self) -> str:
        return f"SlicePartition({self.piece.describe()})"


class KafkaTieredReader(DataSourceReader):
    """Plans on the driver and reads a slice per task; carries the options (secrets included) to executors
    inside the pickled reader, never in partitions, plans or logs."""

    def __init__(
        self, options: TieredReadOptions, columns: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    ) -> None:
        self.opts = options
        self.pushed = PushedBounds()
        # (the Kafka source's columns to build, the schema's names for them), or None for every column
        self.columns = columns

    def __repr__(self) -> str:
        return f"KafkaTieredReader({self.opts!r}, config={redact(self.opts.plugin_config)})"

    def partitions(self) -> Sequence[InputPartition]:
        from rsm.spark.planning import plan_slices

        manager = manager_for(self.opts.plugin_config)
        slices = plan_slices(manager, self.opts, self.pushed)
        return [SlicePartition(s) for s in slices]  # none: PySpark runs one task with an empty partition

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        piece: SegmentSlice | None = getattr(partition, "piece", None)
        if piece is None:
            return
        _freeze_worker_heap()
        manager = manager_for(self.opts.plugin_config)
        columns, names = self.columns or (None, None)
        yield from read_slice(manager, piece, self.opts, self.pushed, columns=columns, names=names)


def _millis(value: Any) -> tuple[int, int] | None:
    """``(floor, ceil)`` milliseconds of a filter's timestamp value, or None when it is not a timestamp."""
    if isinstance(value, dt.datetime):
        micros = round(value.timestamp() * 1_000_000)
        return micros // 1000, -(-micros // 1000)
    return None


def _narrow(bounds: PushedBounds, f: Filter) -> PushedBounds:
    """Bounds tightened by one filter (unchanged for filters on other columns or of other shapes)."""
    column = getattr(f, "attribute", ())
    name = column[0] if len(column) == 1 else None
    value = getattr(f, "value", None)
    if name == "partition":
        if isinstance(f, EqualTo) and isinstance(value, int):
            wanted = frozenset({value})
        elif isinstance(f, In) and all(isinstance(v, int) for v in value):  # type: ignore[union-attr]
            wanted = frozenset(value)  # type: ignore[arg-type]
        else:
            return bounds
        keep = wanted if bounds.partitions is None else bounds.partitions & wanted
        return replace(bounds, partitions=keep)
    if name == "offset" and isinstance(value, int):
        lo, hi = bounds.first_offset, bounds.last_offset
        if isinstance(f, EqualTo):
            lo, hi = max(lo, value), min(hi, value)
        elif isinstance(f, GreaterThan):
            lo = max(lo, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            lo = max(lo, value)
        elif isinstance(f, LessThan):
            hi = min(hi, value - 1)
        elif isinstance(f, LessThanOrEqual):
            hi = min(hi, value)
        return replace(bounds, first_offset=lo, last_offset=hi)
    millis = _millis(value) if name == "timestamp" else None
    if millis is not None:
        floor, ceil = millis
        lo_ts, hi_ts = bounds.min_timestamp, bounds.end_timestamp
        new_lo: int | None = None
        new_hi: int | None = None
        if isinstance(f, EqualTo):
            new_lo, new_hi = ceil, floor + 1
        elif isinstance(f, GreaterThan):
            new_lo = floor + 1
        elif isinstance(f, GreaterThanOrEqual):
            new_lo = ceil
        elif isinstance(f, LessThan):
            new_hi = ceil
        elif isinstance(f, LessThanOrEqual):
            new_hi = floor + 1
        if new_lo is not None:
            lo_ts = new_lo if lo_ts is None else max(lo_ts, new_lo)
        if new_hi is not None:
            hi_ts = new_hi if hi_ts is None else min(hi_ts, new_hi)
        return replace(bounds, min_timestamp=lo_ts, end_timestamp=hi_ts)
    return bounds


def pushed_bounds(filters: Iterable[Filter]) -> PushedBounds:
    bounds = PushedBounds()
    for f in filters:
        bounds = _narrow(bounds, f)
    return bounds


class KafkaTieredPushdownReader(KafkaTieredReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - PySpark's name
        self.pushed = pushed_bounds(filters)
        # Handed back: Spark re-checks them on rows the reader already narrowed (cheap, and exact by construction).
        return filters


class KafkaTieredDataSource(DataSource):
    """``spark.read.format("kafka-tiered")`` without filter pushdown."""

    reader_class: type[KafkaTieredReader] = KafkaTieredReader

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _opts(self) -> TieredReadOptions:
        return TieredReadOptions.from_options(self.options)

    def schema(self) -> str:
        return SCHEMA + (HEADERS if self._opts().include_headers else "")

    def reader(self, schema: Any) -> DataSourceReader:
        opts = self._opts()
        columns = requested_columns(schema, opts.include_headers)
        if columns is not None and HEADERS_COLUMN in columns[0]:
            opts = replace(opts, include_headers=True)  # a schema that names headers asks for them
        return self.reader_class(opts, columns)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(dict(self.options))})"


class KafkaTieredPushdownDataSource(KafkaTieredDataSource):
    """The same source with ``pushFilters`` (needs ``spark.sql.python.filterPushdown.enabled=true``)."""

    reader_class = KafkaTieredPushdownReader


def register(spark: SparkSession, *, pushdown: bool | None = None) -> type[KafkaTieredDataSource]:
    """Register ``kafka-tiered`` with ``spark``; pushdown follows the session's conf unless given.

    Spark 4 registers the pushdown-free source by itself (the top-level ``pyspark_kafka_tiered``, found by its
    Python data source lookup, which cannot see the session's conf); this call is for the pushdown variant, for
    Pythons where that lookup does not see the package, and for sessions started without the redaction conf.
    It widens Spark's option-redaction regex so storage secrets and private keys given as options are masked
    in plans and the UI (Spark masks only ``url`` by default): a runtime conf, so it can be set here, but no code
    of ours runs in the session when Spark registers the source itself (docs/spark.md gives the line to add).
    """
    if pushdown is None:
        pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    current = str(spark.conf.get(REDACTION_CONF, "(?i)url"))
    if REDACTION_REGEX not in current:
        spark.conf.set(REDACTION_CONF, REDACTION_REGEX if current == "(?i)url" else f"{current}|{REDACTION_REGEX}")
    source = KafkaTieredPushdownDataSource if pushdown else KafkaTieredDataSource
    spark.dataSource.register(source)
    return source
