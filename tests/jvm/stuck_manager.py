"""A manager for the stand-in broker's stuck reader (tests/jvm/test_inprocess_shutdown.py): its index fetches of
topic ``stuck`` are still running when the broker's shutdown hook has finished, and fail just after JPype has
been told the JVM is going away, as a fetch from a store that stopped answering would.

``python.manager.class=stuck_manager:StuckManager`` with tests/jvm on the Python path."""

from __future__ import annotations

import time
from typing import Any

import jpype

from rsm import RemoteStorageManager
from rsm.errors import RemoteStorageException


class StuckManager(RemoteStorageManager):
    def fetch_index(self, meta: Any, index_type: Any) -> Any:
        if meta.topic_id_partition.topic != "stuck":
            return super().fetch_index(meta, index_type)
        print("STUCK-FETCH waiting", flush=True)
        while jpype.isJVMStarted():  # false once JPype's shutdown hook has told its native side
            time.sleep(0.0005)
        raise RemoteStorageException("the store did not answer before the JVM shut down")
