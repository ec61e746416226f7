"""The sidecar hands freed buffers of 1 MiB and more back to the system
(rsm.jvm.process_memory.return_large_buffers): after glibc has freed an 8 MiB block, 3 MiB blocks freed between
live ones leave no holes in its heaps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from rsm.jvm.process_memory import return_large_buffers

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

if sys.argv[1] == "on":
    return_large_buffers()
first = b"x" * (8 << 20)
del first  # left alone, glibc now serves blocks under 8 MiB from its heap
base = rss()
blocks = [b"y" * (3 << 20) for _ in range(8)]
kept = blocks[1::2]  # every other block is freed: a hole in the heap cannot go back to the system
del blocks
print(rss() - base)
"""
MIB = 1 << 20


def _grown(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, cwd=REPO, timeout=120
    )
    return int(out.stdout)


def test_freed_large_blocks_go_back_to_the_system() -> None:
    live = 4 * 3 * MIB
    on, off = _grown("on"), _grown("off")
    # Measured 12.0 MiB on and 23.8 MiB off, the same in each run at load 20 (glibc's heap is deterministic
    # here): 2 MiB over the live blocks is room for the interpreter's own pages, and the heap that kept the
    # freed blocks is 10 MiB over it.
    assert on <= live + 2 * MIB, f"{on / MIB:.1f} MiB resident for {live / MIB:.0f} MiB of live blocks"
    assert off >= live + 6 * MIB, f"without it glibc kept {off / MIB:.1f} MiB: the probe no longer shows holes"


def test_the_in_process_broker_hands_large_buffers_back_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The in-process transport's decoded chunks live in the broker's own process: the launcher sets glibc up the
    same way before the JVM starts (a stand-in for JPype stops the launch there)."""
    import types

    from rsm.jvm import launcher, process_memory

    calls: list[str] = []
    monkeypatch.setattr(process_memory, "return_large_buffers", lambda: calls.append("return_large_buffers"))
    jpype = types.ModuleType("jpype")

    def start_jvm(*args: object, **kwargs: object) -> None:
        calls.append("startJVM")
        raise RuntimeError("the launch stops here")

    jpype.startJVM = start_jvm  # type: ignore[attr-defined]
    jpype.getDefaultJVMPath = lambda: "/no/jvm"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jpype", jpype)
    launch = launcher.BrokerLaunch(tmp_path, [f"-Dkafka.logs.dir={tmp_path / 'logs'}"], [])
    with pytest.raises(RuntimeError, match="the launch stops here"):
        launcher.run(launch)
    assert calls == ["return_large_buffers", "startJVM"]
