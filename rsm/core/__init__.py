"""The plugin itself: ``RemoteStorageManager`` and what it is made of.

Holds the manager (copy, fetch, delete), its configuration declarations, the manifest and object-key formats,
custom metadata, the copy pipeline, the compression heuristic and key rotation. It may import ``rsm.fetch``,
``rsm.kafka``, ``rsm.errors``, ``rsm.metadata`` and the lower layers (``chunking``, ``encryption``,
``backends``), never ``rsm.jvm``, ``rsm.spark`` or ``rsm.cli``.
"""
