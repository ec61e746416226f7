"""The PySpark data source that reads tiered segments directly (``spark.read.format("kafka-tiered")``).

It may import ``rsm.core`` and everything below it, never ``rsm.jvm`` or ``rsm.cli``.
"""
