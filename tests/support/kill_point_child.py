"""Child process of the kill-point tests: copy (or delete) one Iceberg-mode segment and SIGKILL itself at one
named point of it, so every point of a copy is hit deterministically (not at a random delay).

A point wraps one function: the process kills itself right before the function's first call, or right after
that call returns. A run that never reaches its point exits with ``NOT_REACHED``, which the test reports.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any

NOT_REACHED = 3

# point: (module, attribute path, "before" or "after", which call: the first whose arguments pass the test)
POINTS: dict[str, tuple[str, str, str, Callable[..., bool] | None]] = {
    # a copy: rows -> data files -> manifests -> metadata file -> catalog swap; then .indexes, then its manifest
    "before-any-data-file": ("rsm.iceberg.data_files", "StreamingDataFiles.add", "before", None),
    "mid-data-file": ("pyarrow.parquet", "ParquetWriter.write", "after", None),
    "after-data-files": ("rsm.iceberg.replace", "Replacer.replace", "before", None),
    "after-manifests-and-list": ("pyiceberg.table", "Transaction.commit_transaction", "before", None),
    "after-metadata-file": ("pyiceberg.catalog.sql", "SqlCatalog._write_metadata", "after", None),
    "after-catalog-commit": ("pyiceberg.catalog.sql", "SqlCatalog.commit_table", "after", None),
    "mid-indexes-upload": (
        "backends.filesystem",
        "FileSystemBackend._write_all",
        "after",
        lambda _self, _out, _data, key: key.endswith(".indexes"),
    ),
    "after-indexes-upload": ("rsm.core.segment_objects", "SegmentObjects._upload_indexes", "after", None),
    "after-segment-manifest": ("rsm.core.segment_objects", "SegmentObjects.copy", "after", None),
    # a retention delete with iceberg.mode.delete.rows.enabled (of rows sharing a file with others)
    "delete-after-rewritten-file": ("rsm.iceberg.replace", "stale_files", "after", None),
    "delete-after-manifests-and-list": ("pyiceberg.table", "Transaction.commit_transaction", "before", None),
    "delete-after-metadata-file": ("pyiceberg.catalog.sql", "SqlCatalog._write_metadata", "after", None),
    "delete-after-catalog-commit": ("pyiceberg.catalog.sql", "SqlCatalog.commit_table", "after", None),
    "delete-after-segment-manifest": (
        "backends.filesystem",
        "FileSystemBackend.delete",
        "after",
        lambda _self, key, *a, **k: key.endswith(".rsm-manifest"),
    ),
}


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    """Wrap the function of ``point`` so that the process dies there."""
    module_name, path, when, matches = POINTS[point]
    owner: Any = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = inspect.getattr_static(owner, name)  # a base class's function is wrapped on ``owner``
    is_static = isinstance(original, staticmethod)
    func = original.__func__ if is_static else original

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if matches is not None and not matches(*args, **kwargs):
            return func(*args, **kwargs)
        if when == "before":
            _die()
        result = func(*args, **kwargs)
        _die()
        return result

    setattr(owner, name, staticmethod(wrapped) if is_static else wrapped)


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        job = pickle.load(f)
    arm(job["point"])
    from rsm import RemoteStorageManager

    m = RemoteStorageManager()
    m.configure(job["configs"])
    if job["op"] == "copy":
        m.copy_log_segment_data(job["meta"], job["data"])
    else:
        m.delete_log_segment_data(job["meta"])
    m.close()
    sys.exit(NOT_REACHED)


if __name__ == "__main__":
    main()
