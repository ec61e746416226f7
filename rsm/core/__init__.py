"""The plugin itself: ``RemoteStorageManager`` and what it is made of.

Holds the manager (``manager``: the KIP-405 calls, each handed to a collaborator), what writes and removes a
segment's objects (``segment_objects``, with the copy pipeline of ``copy_pipeline``), the ``SegmentFormat``
protocol with the formats plugged in (``segment_format``) and the classic format (``classic_format``), the
manifest store with its cache (``manifest_store``), the thread pools (``pools``), the configuration declarations,
the manifest and object-key formats, custom metadata, the catalog of tiered segments and the compression
heuristic. It imports nothing of ``rsm.iceberg``: ``rsm.formats`` plugs Iceberg mode in. It may import
``rsm.fetch``, ``rsm.kafka``, ``rsm.errors``, ``rsm.metadata``, ``rsm.metrics`` and the lower layers
(``chunking``, ``encryption``, ``backends``), never ``rsm.jvm``, ``rsm.spark``, ``rsm.formats`` or ``rsm.cli``.
"""
