"""The Iceberg part of a segment's manifest: which table holds the segment's rows and in which data files.

A manifest with this section is an Iceberg-mode segment: its ``.log`` object does not exist. A fetch finds the
rows through the table's current snapshot by partition and offsets (``rsm.iceberg.fetch_plan``): a compaction
may move them into other files and snapshot expiry delete the files listed here. The file list is what the copy
wrote; a fetch reads it only while the catalog does not answer and the files are still there. Plain JSON, no
pyiceberg: ``rsm.core.manifest`` parses it wherever the plugin runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int(obj: Any, name: str, lo: int = 0, hi: int = _INT64[1]) -> int:
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"iceberg.{name} must be an integer in [{lo}, {hi}], got {str(v)[:40]!r}")
    return v


def _str(obj: Any, name: str) -> str:
    v = obj[name]
    if not isinstance(v, str) or not v:
        raise ValueError(f"iceberg.{name} must be a non-empty string")
    return v


@dataclass(frozen=True)
class DataFileRef:
    """One Parquet data file the copy wrote with rows of the segment (only rows of this segment)."""

    path: str
    rows: int
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows, "size": self.size}

    @staticmethod
    def from_json(obj: Any) -> DataFileRef:
        if not isinstance(obj, dict):
            raise TypeError("iceberg.files entries must be JSON objects")
        return DataFileRef(_str(obj, "path"), _int(obj, "rows"), _int(obj, "size"))


@dataclass(frozen=True)
class IcebergSection:
    """Where an Iceberg-mode segment's rows are: ``table`` (namespace.name), the commit that added them, the
    data files it wrote, and the segment's offset and batch-position ranges."""

    table: str
    snapshot_id: int
    partition: int
    first_offset: int
    last_offset: int
    rows: int
    batches: int
    segment_size: int
    files: tuple[DataFileRef, ...]

    @property
    def kind(self) -> str:
        """The manifest key this section is stored under."""
        return "iceberg"

    @property
    def stored_size(self) -> int:
        """The bytes of the data files the copy wrote."""
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "iceberg",
            "table": self.table,
            "snapshotId": self.snapshot_id,
            "partition": self.partition,
            "firstOffset": self.first_offset,
            "lastOffset": self.last_offset,
            "rows": self.rows,
            "batches": self.batches,
            "segmentSize": self.segment_size,
            "files": [f.to_json() for f in self.files],
        }

    @staticmethod
    def from_json(obj: Any) -> IcebergSection:
        """Raises ``KeyError``/``TypeError``/``ValueError`` on a malformed section; the caller names the manifest."""
        if not isinstance(obj, dict):
            raise TypeError("iceberg must be a JSON object")
        if obj.get("format") != "iceberg":
            raise ValueError(f"iceberg.format {str(obj.get('format'))[:40]!r} is unknown (expected 'iceberg')")
        files = obj["files"]
        if not isinstance(files, list):
            raise TypeError("iceberg.files must be a list")
        return IcebergSection(
            table=_str(obj, "table"),
            snapshot_id=_int(obj, "snapshotId", *_INT64),
            partition=_int(obj, "partition", 0, (1 << 31) - 1),
            first_offset=_int(obj, "firstOffset"),
            last_offset=_int(obj, "lastOffset"),
            rows=_int(obj, "rows"),
            batches=_int(obj, "batches"),
            segment_size=_int(obj, "segmentSize", 0, (1 << 31) - 1),
            files=tuple(DataFileRef.from_json(f) for f in files),
        )


def section_identifier(table: str, topic: str) -> tuple[str, str]:
    """The (namespace, name) of ``table``, the ``namespace.name`` a manifest section records. A topic's name may
    hold dots: when ``table`` ends with ``.<topic>`` the rest is the namespace; otherwise the last dot splits."""
    suffix = "." + topic
    if table.endswith(suffix) and len(table) > len(suffix):
        return table[: -len(suffix)], topic
    namespace, _, name = table.rpartition(".")
    if not namespace or not name:
        raise ValueError(f"table {table!r} of the segment's manifest is not namespace.name")
    return namespace, name
