"""The read path below the manager: lazy segment streams with bounded read-ahead over pooled chunk buffers.

The manager hands this package a chunk loader; nothing here knows about manifests, keys or configuration.
It may import ``rsm.errors``, ``rsm.metadata`` and the lower layers, never ``rsm.core`` or anything above.
"""
