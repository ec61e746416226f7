"""The servers shared by the session: stopped whole (no process outlives its fixture), and one Spark with
Iceberg's runtime for every script."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from iceberg_testing import SPARK_SESSION, run_iceberg_spark
from key_services import running_local_kms
from processes import stop_process


def processes_with_env(entry: str) -> list[int]:
    """The pids of this machine's processes whose environment holds ``entry`` (``NAME=value``)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if entry.encode() in environ.split(b"\0"):
            out.append(int(proc.name))
    return out


def test_stopping_local_kms_leaves_no_process(tmp_path: Path) -> None:
    data = tmp_path / "kms"
    marker = f"KMS_DATA_PATH={data / 'db'}"  # set on the local-kms process alone, by .ci/key_services.py
    with running_local_kms(data) as server:
        assert server.proc.poll() is None
        running = processes_with_env(marker)
        assert running, "the local-kms server itself is not among this machine's processes"
    # The fixture waits for its wrapper; the server inside the namespace goes with it. 10 s covers the kernel
    # reaping the namespace on a loaded machine (it takes milliseconds when idle).
    deadline = time.monotonic() + 10
    while (left := [pid for pid in running if Path(f"/proc/{pid}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"local-kms processes {left} outlived the fixture that started them"


PROBE = (
    SPARK_SESSION
    + """
import os
print(json.dumps({"pid": os.getpid(), "jvm": spark.sparkContext.applicationId,
                  "probe": spark.conf.get("spark.kts.probe", None)}))
spark.stop()
"""
)


@pytest.mark.timeout(1200)  # the first script starts the JVM with Iceberg's runtime: minutes on a loaded machine
def test_stop_process_kills_a_server_that_ignores_sigterm_after_the_grace() -> None:
    """A server that stops on SIGTERM exits with -SIGTERM; one that ignores it is killed once the grace is over,
    and one that has exited already is only reaped."""
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stop_process(polite, grace=30) == -signal.SIGTERM
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"  # its handler is in place
    started = time.monotonic()
    assert stop_process(stubborn, grace=0.5) == -signal.SIGKILL
    assert time.monotonic() - started < 30  # killed after the 0.5 s grace, not after its 60 s sleep (29.5 s spare)
    stubborn.stdout.close()
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    done.wait(30)
    assert stop_process(done) == 3


def test_iceberg_spark_scripts_share_one_spark_and_keep_their_own_settings() -> None:
    first = json.loads(run_iceberg_spark(PROBE, json.dumps({"spark.kts.probe": "one"})).splitlines()[-1])
    second = json.loads(run_iceberg_spark(PROBE, "{}").splitlines()[-1])
    assert first["probe"] == "one" and second["probe"] is None  # a script's settings stay in its session
    assert (first["pid"], first["jvm"]) == (second["pid"], second["jvm"])  # one Spark, which a script's stop() left
