"""A retention delete (``iceberg.mode.delete.rows.enabled``): the rows one deleted segment wrote leave its table.

The table is the one the segment's manifest names (the namespace in the configuration may have changed since).
The rows are those of the segment's partition and offset range that carry its ``kafka.topic_id`` and
``kafka.segment_id``: a superseded segment's delete leaves the rows of the segment that replaced it, and a topic
created again under the same name keeps the old topic's rows apart. Rows without those ids (null: written by
releases before rows carried them) are never deleted on behalf of a segment: their offsets alone cannot tell
which topic incarnation wrote them, and a topic created again under the same name reuses the offsets. They stay
for SQL readers, to delete with the engine's own ``DELETE ... WHERE kafka.topic_id IS NULL AND ...``.
"""

from __future__ import annotations

from rsm.iceberg.replace import Replacer
from rsm.iceberg.section import IcebergSection, section_identifier
from rsm.iceberg.selection import RowSelection

__all__ = ["delete_segment_rows", "segment_selection"]


def segment_selection(section: IcebergSection, topic_id: str, segment_id: str) -> RowSelection:
    """The rows the segment wrote (``section`` is its manifest's Iceberg section): those carrying its ids."""
    return RowSelection(
        section.partition, section.first_offset, section.last_offset, topic_id, segment_id, ids_required=True
    )


def delete_segment_rows(
    replacer: Replacer, section: IcebergSection, topic: str, topic_id: str, segment_id: str, what: str
) -> None:
    """Delete the rows the segment wrote from the table its manifest names (retried on conflict); a table that
    no longer exists, or holds none of them, is nothing to do."""
    properties = {
        "kafka.segment.id": segment_id,
        "kafka.partition": str(section.partition),
        "kafka.offsets": f"{section.first_offset}-{section.last_offset}",
        "kafka.deleted": "true",
    }
    replacer.replace(
        section_identifier(section.table, topic),
        segment_selection(section, topic_id, segment_id),
        [],
        properties,
        what,
        "deleting its rows from",
    )
