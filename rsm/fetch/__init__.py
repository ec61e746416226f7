"""The read path below the manager: how a broker's reopened fetches become few remote reads.

Holds the lazy segment stream with bounded read-ahead (``stream``), the chunk cache with its memory tier of
decoded chunks, coalesced ranged GETs and single flight (``chunk_cache``), the persistent disk tier of stored
(still compressed and encrypted) chunks (``disk_store``), prefetch that runs on into the next segment
(``prefetch``), the token-bucket rate limits of uploads and fetches (``rate_limit``) and the timed LRU of the
manifest and index caches (``lru``).

The manager hands this package loaders, segment sources and its settings as plain values; nothing here parses a
manifest or reads configuration. It may import ``rsm.errors``, ``rsm.metadata`` and the lower layers (backends,
chunking, encryption), never ``rsm.core`` or anything above.
"""
