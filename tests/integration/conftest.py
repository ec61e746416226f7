"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One ``local[2]`` SparkSession with the ``kafka-tiered`` source registered, for every Spark test."""
    pytest.importorskip("pyspark", reason="pyspark comes with the [spark] extra")
    from pyspark.sql import SparkSession

    from rsm.spark.datasource import register

    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors import rsm from this venv
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kts-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()
