"""Chunks of a segment: the chunk index and its binary size codec, the per-chunk transform (zstd, then
AES-GCM from ``encryption``) and the pool of buffers chunks decode into. It may import ``encryption`` and
``backends``, nothing of ``rsm``; its failures (``chunking.errors``) are translated by the plugin."""
