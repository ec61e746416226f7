"""Stopping a server process the tests or benchmarks started."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> int:
    """SIGTERM ``proc`` and wait ``grace`` seconds for it to exit, then SIGKILL it; returns its exit code. A
    process that has exited already is only reaped."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)
