"""The sidecar transport's parts alone, in a real JVM and with no sidecar: ``SidecarPartsCheck`` (jvm-shim/test-src)
parses next-segment frames, keeps and cancels streams over real Unix sockets whose far end it plays, and asks the
connection pool of a supervisor that is not running for a connection."""

from __future__ import annotations

import shutil
import subprocess

import jvm_testing as jt
import pytest

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")


def test_the_transport_parts_work_alone() -> None:
    jt.ensure_built()
    r = subprocess.run(
        ["java", "-cp", jt.test_classpath(), "io.kts.shim.SidecarPartsCheck"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n") == ["ok next-segment-frames", "ok kept-streams", "ok pool-without-sidecar", ""]
