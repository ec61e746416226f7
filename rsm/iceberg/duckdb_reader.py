"""DuckDB over a topic's table: a connection with DuckDB's iceberg extension loaded from its PyPI package.

The ``iceberg`` extra installs ``duckdb-extension-iceberg`` and ``duckdb-extension-avro``; loading them from
there, with DuckDB's automatic download off, works without internet access. Query a table with
``iceberg_scan('<metadata file>')``.
"""

from __future__ import annotations

import glob
import os
from typing import Any

__all__ = ["duckdb_with_iceberg"]


def duckdb_with_iceberg() -> Any:
    """A new DuckDB connection with the iceberg extension (and the avro one it needs) loaded, never downloaded."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    for module in (duckdb_extension_avro, duckdb_extension_iceberg):
        folder = os.path.dirname(module.__file__ or "")
        [path] = glob.glob(os.path.join(folder, "extensions", "*", "*.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    return con
