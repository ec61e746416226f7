"""The shim's drain of a cancelled stream (``Conn.drain``) in a real JVM: ``ConnDrainCheck`` (jvm-shim/test-src)
plays the sidecar on a real Unix socket and sends what follows a cancel when the stream had gone on into the next
segment, including a next-segment frame bigger than the shim's read buffer, in steps."""

from __future__ import annotations

import shutil
import subprocess

import jvm_testing as jt
import pytest

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")


def test_drain_skips_a_next_segment_frame_and_stops_at_the_end_frame() -> None:
    jt.ensure_built()
    r = subprocess.run(
        ["java", "-cp", jt.test_classpath(), "io.kts.shim.ConnDrainCheck"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # 614,448 bytes in 64 KiB writes: drain answers "pending" nine times, then "drained" on the tenth
    assert r.stdout.split("\n") == ["ok big-frame-in-steps 10", "ok header-split", "ok impossible-size", ""]
