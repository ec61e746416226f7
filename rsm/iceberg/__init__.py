"""Iceberg mode: a topic's tiered segments stored once, as rows of the topic's Iceberg table, served to Kafka
consumers as record batches and read by Spark, DuckDB and pyiceberg as a table.

Modules (only ``config``, ``section``, ``logs`` and ``value_hook``'s names import nothing heavy; the rest need
the ``iceberg`` extra: pyiceberg and pyarrow):

- ``config``: the ``iceberg.mode.*`` keys and ``IcebergConfig``;
- ``section``: the Iceberg part of a segment's manifest (data files, offset and position range, snapshot);
- ``schema``: the table's Iceberg schema, partition spec (``day(kafka.timestamp)``) and Arrow row schema;
- ``rows``: a segment file turned into Arrow rows (one per record, control records included);
- ``batches``: rows turned back into Kafka v2 batches (same offsets, fields and codec; CRC-32C);
- ``catalog``: the pyiceberg catalog and FileIO from the configuration and the storage backend;
- ``table_writer``: one segment -> data files -> one commit, and a segment's retention delete (the facade over:)
- ``tables``: a topic's table, created with its properties, new columns added on load;
- ``data_files``: Arrow rows -> Parquet data files with the ``kafka`` bounds pyiceberg leaves out;
- ``replace``: one commit replacing selected rows with new files (retried on conflict, read back when unknown);
- ``deletes``: which rows a retention delete takes (the segment's own), from which table (its manifest's);
- ``segment_fetch``: a fetch from a batch position, reading the segment's data files;
- ``row_groups``: which row groups of those files may hold the batches wanted, from their statistics;
- ``segment_stream``: the fetch's batches as the byte stream the broker reads;
- ``duckdb_reader``: a DuckDB connection with the iceberg extension loaded offline;
- ``value_hook``: the hook that fills the optional ``value`` struct (``ValueColumn``);
- ``file_bounds``: what each manifest lists (locations and bounds), read once each: whether live files may hold
  an offset range, and what the orphan search keeps;
- ``values``: value parsing (Avro, JSON Schema, schema registry) for the hook;
- ``logs``: pyiceberg's warning about a metadata file already deleted dropped (installed on import).
"""

from rsm.iceberg.logs import install as _install_log_filter

_install_log_filter()
