"""Maintenance of the plugin's Iceberg tables, each step on its own: snapshot expiry, old metadata files,
manifest merging, compaction of small data files, removal of orphan files.

Only tables the plugin made are touched (``kafka.topic`` is set, by the writer, on every table it creates), and
only files under such a table's location. Every step is safe beside Kafka's copies and beside other engines'
maintenance (Spark's procedures): expiry only drops snapshots from the metadata (their files go later, as
orphans); compaction commits an overwrite that removes exactly the files it read, and gives up on a table that
changed under it; a file is an orphan only when no snapshot references it, of the current metadata file or of
one still in the metadata log, and it is older than the grace period, so a copy or a rewrite still in flight (its
files not yet committed) and a reader of an earlier version of the table are never hit.

One module a job: ``expiry`` (snapshots and metadata-log properties), ``manifests`` (manifest rewrite),
``compaction``, ``references`` and ``orphans`` (the orphan search and the quarantine), ``run`` (every step on
a table), ``namespace`` (the plugin's tables, for tools); ``step`` holds what they share.
"""
