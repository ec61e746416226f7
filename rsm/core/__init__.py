"""The plugin itself: ``RemoteStorageManager`` and what it is made of.

Holds the manager (``manager``: the KIP-405 calls, each handed to a collaborator), what writes and removes a
segment's objects (``segment_objects``, with the copy pipeline of ``copy_pipeline``), the manifest store with its
cache (``manifest_store``), the thread pools (``pools``), the configuration declarations, the manifest and
object-key formats, custom metadata, the catalog of tiered segments, the compression heuristic, key rotation and
garbage collection. It may import ``rsm.fetch``, ``rsm.kafka``, ``rsm.errors``, ``rsm.metadata``, ``rsm.metrics``
and the lower layers (``chunking``, ``encryption``, ``backends``), never ``rsm.jvm``, ``rsm.spark`` or ``rsm.cli``.
"""
