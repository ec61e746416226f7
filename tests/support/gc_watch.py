"""``kts gc --watch`` run in a thread and scraped, for the system tests of ``kts gc --bootstrap-server``."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable

import jvm_testing as jt

from rsm.cli.gc_cluster import watch_loop


def watch_metrics(
    config: str,
    bootstrap: str,
    command_config: str | None = None,
    rounds: int = 3,
    confirm_after: float = 300.0,
    until: Callable[[dict[str, float]], bool] | None = None,
) -> dict[str, float]:
    """The ``kts_gc*`` samples of ``kts gc --watch``'s endpoint, scraped once its first check completed, or once
    ``until`` holds for them (``rounds`` checks a second apart, then the watch ends and is joined)."""
    port = jt.free_ports(1)[0]
    args = (config, (), 2.0, bootstrap, command_config, 1.0, port, rounds, confirm_after)
    watcher = threading.Thread(target=watch_loop, args=args, daemon=True)
    watcher.start()
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                text = ""
            values = {
                name: float(value)
                for name, value in (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("kts_gc"))
            }
            if values.get("kts_gc_cluster_last_success_timestamp_seconds", 0) > 0 and (until is None or until(values)):
                return values
            assert watcher.is_alive(), f"kts gc --watch ended before the samples wanted were served: {values}"
            time.sleep(0.3)
        raise AssertionError("kts gc --watch served no completed check")
    finally:
        watcher.join(120)
