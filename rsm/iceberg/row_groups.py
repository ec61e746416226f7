"""Which row groups of a segment's data files may hold its batches at or after a position, from the row groups'
statistics (``kafka.partition``, ``kafka.offset``, ``kafka.segment_id``, ``kafka.batch_byte_offset``), in offset
order: what a fetch (``rsm.iceberg.segment_fetch``) reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from rsm.iceberg.fetch_plan import SegmentRows

PARTITION_PATH = "kafka.partition"
OFFSET_PATH = "kafka.offset"
POSITION_PATH = "kafka.batch_byte_offset"
SEGMENT_ID_PATH = "kafka.segment_id"
NO_LOW = -(1 << 63)


@dataclass(frozen=True)
class RowGroup:
    """A row group to read: where it is, and whether every row of it is the segment's."""

    #: Lowest offset the row group may hold (what orders row groups).
    low: int
    file: int
    #: The row group's index in its file; -1: the whole file, read through pyiceberg (it has delete files).
    index: int
    #: Every row is the segment's own (no filter needed).
    own: bool


def selecting_columns(meta: pq.FileMetaData) -> dict[str, int]:
    """The indexes of the columns that select a segment's rows in a data file, by path."""
    wanted = (PARTITION_PATH, OFFSET_PATH, POSITION_PATH, SEGMENT_ID_PATH)
    return {p: i for i in range(meta.num_columns) if (p := meta.schema.column(i).path) in wanted}


def _bounds(rg: Any, column: int | None) -> tuple[Any, Any, bool] | None:
    """(min, max, has nulls) of a row group's column; None when the statistics do not say."""
    if column is None:
        return None
    stats = rg.column(column).statistics
    if stats is None or not stats.has_min_max:
        return None
    return stats.min, stats.max, not stats.has_null_count or stats.null_count > 0


def plan_row_groups(footers: list[pq.FileMetaData], rows: SegmentRows, start: int, end: int | None) -> list[RowGroup]:
    """The row groups that may hold the segment's batches at positions ``start..end``, in offset order."""
    out: list[RowGroup] = []
    for f_index, meta in enumerate(footers):
        cols = selecting_columns(meta)
        for index in range(meta.num_row_groups):
            rg = meta.row_group(index)
            if rg.num_rows == 0:
                continue
            part = _bounds(rg, cols.get(PARTITION_PATH))
            offs = _bounds(rg, cols.get(OFFSET_PATH))
            pos = _bounds(rg, cols.get(POSITION_PATH))
            sid = _bounds(rg, cols.get(SEGMENT_ID_PATH))
            if part is not None and not part[0] <= rows.partition <= part[1]:
                continue
            if offs is not None and (offs[1] < rows.first_offset or offs[0] > rows.last_offset):
                continue
            if pos is not None and (pos[1] < start or (end is not None and pos[0] > end)):
                continue
            if (
                rows.segment_id is not None
                and sid is not None
                and not sid[2]
                and not str(sid[0]) <= rows.segment_id <= str(sid[1])
            ):
                continue
            own = (
                part is not None
                and not part[2]
                and part[0] == part[1] == rows.partition
                and offs is not None
                and not offs[2]
                and offs[0] >= rows.first_offset
                and offs[1] <= rows.last_offset
                and (rows.segment_id is None or (sid is not None and sid[0] == sid[1] == rows.segment_id))
            )
            out.append(RowGroup(int(offs[0]) if offs is not None else NO_LOW, f_index, index, own))
    out.sort(key=lambda g: (g.low, g.file, g.index))
    return out
