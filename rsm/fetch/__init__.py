"""The read path below the manager: how a broker's reopened fetches become few remote reads.

Holds the segment reader that opens lazy streams and plans their chunk loads (``segment_reader``, over the
``stream`` it returns), the index reader with the index cache (``index_reader``), the finder of a partition's next
segment with its listing cache (``next_segment``), the chunk cache with its memory tier of decoded chunks,
coalesced ranged GETs and single flight (``chunk_cache``), the persistent disk tier of stored (still compressed
and encrypted) chunks (``disk_store``), prefetch that runs on into the next segment (``prefetch``), the token-bucket
rate limits of uploads and fetches (``rate_limit``) and the timed LRU of the caches (``lru``).

Nothing here parses a manifest or reads configuration. What this package needs of the plugin it states as
protocols the plugin implements: ``source.SegmentSources`` (a segment's ``SegmentSource``, built from its
manifest) and ``next_segment.PartitionListing`` (what is tiered in a partition); what a transport may give it,
``chunk_cache.ChunkBufferSupply``. It may import ``rsm.errors``, ``rsm.metadata``, ``rsm.metrics`` and the lower
layers (backends, chunking, encryption), never ``rsm.core`` or anything above.
"""
