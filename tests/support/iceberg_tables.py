"""A real SQLite catalog in a temporary folder and rows of the topic table's schema built directly, for the unit
tests of the table writer's parts (no segment file, no plugin)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from rsm.iceberg.schema import KAFKA_FIELDS, arrow_schema, kafka_arrow_type
from rsm.iceberg.tables import load_or_create

DAY_MS = 86_400_000
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def sql_catalog(tmp: Path) -> SqlCatalog:
    """pyiceberg's SQL catalog on a SQLite file, its warehouse a local folder, namespace ``kafka`` made."""
    (tmp / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp / 'catalog.db'}", warehouse=f"file://{tmp / 'warehouse'}")
    catalog.create_namespace_if_not_exists("kafka")
    return catalog


def topic_table(catalog: SqlCatalog, topic: str = "orders") -> Table:
    return load_or_create(catalog, ("kafka", topic), topic, None, 1 << 20, 3)


def kafka_rows(
    partition: int,
    offsets: Sequence[int],
    topic_id: str | None,
    segment_id: str | None,
    day: int = 0,
    fields: Sequence[str] | None = None,
) -> pa.Table:
    """Rows of ``partition`` at ``offsets`` written by (``topic_id``, ``segment_id``), all on day ``day`` after
    ``T0_MS``; ``value_raw`` is ``b"<segment_id>:<offset>"``. Only the ``kafka`` ``fields`` given (default all);
    the batch fields are null."""
    n = len(offsets)
    names = [name for name, _, _ in KAFKA_FIELDS if fields is None or name in fields]
    k = kafka_arrow_type()
    given = {
        "partition": [partition] * n,
        "offset": list(offsets),
        "timestamp": [(T0_MS + day * DAY_MS + i) * 1000 for i in range(n)],
        "segment_id": [segment_id] * n,
        "topic_id": [topic_id] * n,
    }
    kafka_type = pa.struct([k.field(name) for name in names])
    kafka = pa.StructArray.from_arrays(
        [pa.array(given.get(name, [None] * n), type=kafka_type.field(name).type) for name in names],
        fields=list(kafka_type),
    )
    schema = arrow_schema()
    return pa.Table.from_arrays(
        [
            kafka,
            pa.array([[]] * n, type=schema.field("headers").type),
            pa.array([None] * n, type=pa.binary()),
            pa.array([f"{segment_id}:{o}".encode() for o in offsets], type=pa.binary()),
        ],
        schema=pa.schema([pa.field("kafka", kafka_type), *list(schema)[1:]]),
    )


def table_rows(table: Table) -> list[tuple[int, int, str | None, str | None]]:
    """(partition, offset, topic_id, segment_id) of every row of the table's current snapshot, sorted."""
    kafka = table.refresh().scan().to_arrow().column("kafka").to_pylist()
    rows = [(r["partition"], r["offset"], r.get("topic_id"), r.get("segment_id")) for r in kafka]
    return sorted(rows, key=lambda r: (r[0], r[1], r[2] or "", r[3] or ""))
