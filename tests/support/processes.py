"""Stopping a server process the tests or benchmarks started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0, group: bool = False) -> int:
    """SIGTERM ``proc`` and wait ``grace`` seconds for it to exit, then SIGKILL it; returns its exit code. A
    process that has exited already is only reaped. ``group``: signal the process group ``proc`` leads (a
    server started with ``start_new_session=True``), so its children stop with it."""

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)

    if proc.poll() is None:
        send(signal.SIGTERM)
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        return proc.wait(30)
