"""The PySpark data source that reads tiered segments directly (``spark.read.format("kafka-tiered")``).

- :mod:`rsm.spark.options`: the read's options (plugin keys, ``config.file``, topics, bounds), secrets redacted;
  :mod:`rsm.spark.option_values` parses the values of the reader's own options;
- :mod:`rsm.spark.planning`: segments from manifests, slices cut at batch starts; which segments it reads
  (:mod:`rsm.spark.selection`) and the overlap rule (:mod:`rsm.spark.overlaps`);
- :mod:`rsm.spark.reader`: reading a slice into columns and Arrow, and ``TieredReader`` for use without Spark;
  :mod:`rsm.spark.arrow_batches` builds the Arrow batches;
- :mod:`rsm.spark.datasource`: the PySpark classes and ``register(spark)`` (imports pyspark); Spark 4 registers
  the source without it through the top-level ``pyspark_kafka_tiered``;
- :mod:`rsm.spark.example`: the demo's job.

Importing this package does not import pyspark. It may import ``rsm.core`` and everything below it, never
``rsm.jvm`` or ``rsm.cli``.
"""
