"""Spark 4 finds ``spark.read.format("kafka-tiered")`` through this module; no ``register(spark)`` needed.

At a session's first data-source lookup, Spark (``pyspark.sql.worker.lookup_data_sources``) runs a Python worker
that imports every top-level module whose name starts with ``pyspark_`` and registers each one's
``DefaultSource`` (a ``pyspark.sql.datasource.DataSource`` subclass) under ``DefaultSource.name()``. This module
exists only to be found that way; the data source itself lives in :mod:`rsm.spark.datasource`.

Spark imports every ``pyspark_*`` module in that one worker, and when any import raises it skips the lookup of
*all* Python data sources (a WARNING in the driver log), so a broken install of ours would make other packages'
sources vanish too. Hence this import never raises once pyspark itself is importable: when our source cannot be
imported, ``DefaultSource`` is :class:`KafkaTieredUnavailable`, still named ``kafka-tiered``, whose use fails
with the reason and what to install.

The registered source is the one without filter pushdown: the lookup cannot see the session's conf, and PySpark
refuses a reader with ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is true (its default is
false). Filters are still applied, by Spark on the rows; ``rsm.spark.datasource.register(spark)`` replaces it
with the pushdown variant when that conf is on.
"""

from __future__ import annotations

from typing import Any, NoReturn

from pyspark.sql.datasource import DataSource, DataSourceReader

__all__ = ["DefaultSource", "KafkaTieredUnavailable"]

FORMAT = "kafka-tiered"  # rsm.spark.datasource.FORMAT, repeated: the stand-in must not depend on that import


class KafkaTieredUnavailable(DataSource):
    """The ``kafka-tiered`` name when :mod:`rsm.spark.datasource` could not be imported.

    Registering a stand-in (rather than nothing) turns Spark's bare "data source not found" into the real
    reason, told to whoever reads the format, while every other Python data source keeps working.
    """

    #: Why the real source could not be imported (set below, at import time).
    reason: str = ""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _fail(self) -> NoReturn:
        raise ImportError(
            f"the {FORMAT} data source cannot be loaded in this Python ({self.reason}); install "
            f"'kafka-tiered-storage[spark]' in the Python that Spark runs (PYSPARK_PYTHON, on every node)"
        )

    def schema(self) -> str:
        self._fail()

    def reader(self, schema: Any) -> DataSourceReader:
        self._fail()


DefaultSource: type[DataSource]
try:
    from rsm.spark.datasource import KafkaTieredDataSource

    DefaultSource = KafkaTieredDataSource
except Exception as e:  # any failure raised here would hide every other Python data source from Spark
    KafkaTieredUnavailable.reason = f"{type(e).__name__}: {e}"
    DefaultSource = KafkaTieredUnavailable
