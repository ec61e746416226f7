"""Iceberg-mode copies share iceberg.mode.write.concurrency slots: however many copier threads write segments at
once, no more batches of rows than that are built and written at a time (real manager, SQLite catalog, files)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from iceberg_testing import iceberg_config, iter_rows, load_table, new_tip, order_records, segment_of

import rsm.iceberg.table_writer as table_writer
from rsm import RemoteStorageManager

RECORDS = 3000  # about 190 KB of records: three batches of 64 KiB each


@pytest.mark.parametrize("slots", [1, 2])
def test_concurrent_copies_write_at_most_the_slots_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: int
) -> None:
    cfg = iceberg_config(
        tmp_path,
        **{
            "iceberg.mode.maintenance.enabled": "false",
            "iceberg.mode.write.batch.bytes": str(1 << 16),
            "iceberg.mode.write.concurrency": str(slots),
        },
    )
    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "files": 0}
    real_add = table_writer.StreamingDataFiles.add
    real_close = table_writer.StreamingDataFiles.close

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        try:
            time.sleep(0.05)  # long enough for the other copies to arrive while these rows are written
            return real_add(self, *args, **kwargs)
        finally:
            with lock:
                state["now"] -= 1

    def closed(self: Any) -> Any:
        files = real_close(self)
        with lock:
            state["files"] += len(files)
        return files

    monkeypatch.setattr(table_writer.StreamingDataFiles, "add", counted)
    monkeypatch.setattr(table_writer.StreamingDataFiles, "close", closed)
    segments = [segment_of(tmp_path / f"seg-{p}", order_records(0, RECORDS)) for p in range(4)]
    with RemoteStorageManager() as m:
        m.configure(dict(cfg))
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            copies = [
                pool.submit(
                    m.copy_log_segment_data, files.to_metadata(new_tip(partition=p)), files.to_log_segment_data()
                )
                for p, files in enumerate(segments)
            ]
            for copy in copies:
                copy.result()
    assert state["files"] >= 4 * 2, state  # each segment took more than one batch (a data file each)
    assert state["peak"] == slots, state
    rows = list(iter_rows(load_table(cfg)))
    assert len(rows) == 4 * RECORDS
    assert sorted({(r["kafka"]["partition"], r["kafka"]["offset"]) for r in rows}) == [
        (p, o) for p in range(4) for o in range(RECORDS)
    ]
