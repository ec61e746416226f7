"""DuckDB over a topic's table: a connection with DuckDB's iceberg extension loaded from its PyPI package.

The ``iceberg`` extra installs ``duckdb-extension-iceberg``, ``duckdb-extension-avro`` and
``duckdb-extension-httpfs`` (for ``s3://`` paths); loading them from there, with DuckDB's automatic download off,
works without internet access. Query a table with ``iceberg_scan('<metadata file>')``.
"""

from __future__ import annotations

import glob
import os
from typing import Any

__all__ = ["duckdb_with_iceberg"]


def duckdb_with_iceberg() -> Any:
    """A new DuckDB connection with the iceberg extension (and the avro one it needs) loaded, never downloaded;
    httpfs too, for tables on S3, when its package is installed."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    modules: list[Any] = [duckdb_extension_avro, duckdb_extension_iceberg]
    try:
        import duckdb_extension_httpfs
    except ImportError:  # an install from before the iceberg extra held it: local tables only
        pass
    else:
        modules.append(duckdb_extension_httpfs)
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    for module in modules:
        folder = os.path.dirname(module.__file__ or "")
        [path] = glob.glob(os.path.join(folder, "extensions", "*", "*.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    return con
