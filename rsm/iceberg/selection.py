"""Which rows of a topic's table a commit replaces, a retention delete removes or a fetch reads: a partition's
offset range, narrowed to one topic incarnation and one segment where the rows say which wrote them.

As an Iceberg filter (what planning prunes data files by), as a mask over rows, and as a test of a data file's
bounds (a file every row of which is selected goes without being read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    IsNull,
    LessThanOrEqual,
    Or,
)
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from rsm.iceberg.data_files import exact_bounds

__all__ = ["RowSelection", "offset_range_filter"]


def offset_range_filter(partition: int, first: int, last: int) -> BooleanExpression:
    """The rows of ``partition`` with offsets ``first..last``."""
    return And(
        EqualTo("kafka.partition", partition),
        And(GreaterThanOrEqual("kafka.offset", first), LessThanOrEqual("kafka.offset", last)),
    )


@dataclass(frozen=True)
class RowSelection:
    """Rows of ``partition`` with offsets ``first..last``, written by topic ``topic_id`` and segment
    ``segment_id`` when those are given. A row whose ``kafka.topic_id`` or ``kafka.segment_id`` is null (written
    before rows carried them) is selected by its offset alone, unless ``ids_required``: then only rows that
    carry the ids given are selected (a table without those fields has none)."""

    partition: int
    first: int
    last: int
    topic_id: str | None = None
    segment_id: str | None = None
    ids_required: bool = False

    def _given(self) -> list[tuple[str, str]]:
        given = (("topic_id", self.topic_id), ("segment_id", self.segment_id))
        return [(n, v) for n, v in given if v is not None]

    def _none_possible(self, fields: Sequence[str]) -> bool:
        """Whether no row of a table with these ``kafka`` ``fields`` can be selected: ids required that the
        table has no field for."""
        return self.ids_required and any(n not in fields for n, _ in self._given())

    def _ids(self, fields: Sequence[str]) -> list[tuple[str, str]]:
        """The ids to match, of those among the ``kafka`` ``fields`` (a table made before them has none)."""
        return [(n, v) for n, v in self._given() if n in fields]

    def expression(self, schema: Schema) -> BooleanExpression:
        """The selection as an Iceberg filter on a table of ``schema`` (what planning prunes data files by)."""
        fields = _kafka_fields(schema)
        if self._none_possible(fields):
            return AlwaysFalse()
        expr = offset_range_filter(self.partition, self.first, self.last)
        for name, value in self._ids(fields):
            match = EqualTo(f"kafka.{name}", value)
            expr = And(expr, match if self.ids_required else Or(match, IsNull(f"kafka.{name}")))
        return expr

    def mask(self, rows: pa.Table) -> pa.Array:
        """True for each selected row of ``rows`` (the table's Arrow schema), false for the others."""
        kafka = rows.column("kafka")
        if self._none_possible(kafka.type.names):
            return pa.array([False] * rows.num_rows, pa.bool_())
        offsets = pc.struct_field(kafka, "offset")
        hit = pc.and_kleene(
            pc.equal(pc.struct_field(kafka, "partition"), self.partition),
            pc.and_kleene(pc.greater_equal(offsets, self.first), pc.less_equal(offsets, self.last)),
        )
        hit = pc.fill_null(hit, False)
        for name, value in self._ids(kafka.type.names):
            column = pc.struct_field(kafka, name)
            same = pc.fill_null(pc.equal(column, value), False)
            hit = pc.and_(hit, same if self.ids_required else pc.or_(pc.is_null(column), same))
        return hit

    def covers(self, f: DataFile, table: Table) -> bool:
        """Whether the file's bounds say every one of its rows is selected (then it goes without being read)."""
        schema = table.schema()
        partition = exact_bounds(f, schema, "partition")
        offsets = exact_bounds(f, schema, "offset")
        if partition is None or offsets is None or partition != (self.partition, self.partition):
            return False
        if not (self.first <= offsets[0] and offsets[1] <= self.last):  # type: ignore[operator]
            return False
        fields = _kafka_fields(schema)
        if self._none_possible(fields):
            return False
        ids = self._ids(fields)
        return all(exact_bounds(f, schema, name) == (value, value) for name, value in ids)


def _kafka_fields(schema: Schema) -> list[str]:
    return [f.name for f in schema.find_type("kafka").fields]  # type: ignore[attr-defined]
