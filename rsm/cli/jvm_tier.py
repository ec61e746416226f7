"""The demo's JVM path: the segments are tiered by the broker-side shim in a real JVM, not by Python directly.

``java`` runs ``java/DemoBroker.java`` (a single source file, no build step) with the shim jar and Kafka's API
on the class path: a Kafka installation's ``libs/`` (``$KAFKA_HOME``) or, in a source checkout, the Kafka API
jars ``jvm-shim/build.sh`` compiled the shim against (listed in ``jvm-shim/build/main/kafka-api.classpath``).
The shim starts the Python sidecar, which runs the same manager.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from rsm.metadata import RemoteLogSegmentMetadata

DEMO_BROKER = Path(__file__).resolve().parent / "java" / "DemoBroker.java"
CHECKOUT_API = Path(__file__).resolve().parents[2] / "jvm-shim" / "build" / "main" / "kafka-api.classpath"
TIMEOUT_S = 300


def kafka_api_classpath() -> list[str] | None:
    """Where Kafka's API classes come from, or None when neither a Kafka installation nor a checkout's build of
    the shim (with its Kafka jars still in the Maven cache) is here."""
    home = os.environ.get("KAFKA_HOME")
    if home and (Path(home) / "libs").is_dir():
        return [str(Path(home) / "libs" / "*")]
    if CHECKOUT_API.is_file():
        jars = [p for p in CHECKOUT_API.read_text().strip().split(os.pathsep) if p]
        if jars and all(Path(p).is_file() for p in jars):
            return jars
    return None


def jvm_unavailable_reason() -> str | None:
    from rsm.jvm.launcher import PLUGIN_JAR

    if shutil.which("java") is None:
        return "no java on PATH"
    if not PLUGIN_JAR.is_file():
        return f"the shim jar {PLUGIN_JAR} is missing (jvm-shim/build.sh builds it)"
    if kafka_api_classpath() is None:
        return "no Kafka API classes: set KAFKA_HOME to a Kafka installation"
    return None


def _spec_line(seg: object, meta: RemoteLogSegmentMetadata, epoch_file: Path) -> str:
    tip = meta.topic_id_partition
    epochs = ",".join(f"{e}:{o}" for e, o in sorted(meta.segment_leader_epochs.items()))
    fields = [
        tip.topic_id,
        tip.topic,
        str(tip.partition),
        meta.remote_log_segment_id.id,
        str(meta.start_offset),
        str(meta.end_offset),
        str(meta.max_timestamp_ms),
        str(meta.segment_size_in_bytes),
        str(seg.log),  # type: ignore[attr-defined]
        str(seg.offset_index),  # type: ignore[attr-defined]
        str(seg.time_index),  # type: ignore[attr-defined]
        str(seg.txn_index) if seg.txn_index else "-",  # type: ignore[attr-defined]
        str(seg.producer_snapshot),  # type: ignore[attr-defined]
        str(epoch_file),
        epochs,
    ]
    return "\t".join(fields)


def tier_through_jvm(
    segments: Sequence[object], metas: Sequence[RemoteLogSegmentMetadata], configs: dict[str, str], workdir: Path
) -> list[bytes | None]:
    """Copy (and fetch back, byte-compared) every segment through the shim; the custom metadata of each."""
    from rsm.jvm.launcher import PLUGIN_JAR

    api = kafka_api_classpath()
    assert api is not None
    spec = workdir / "jvm-spec.tsv"
    lines = []
    for i, (seg, meta) in enumerate(zip(segments, metas, strict=True)):
        epoch_file = workdir / f"jvm-spec.epochs.{i}"
        epoch_file.write_bytes(seg.leader_epoch_bytes)  # type: ignore[attr-defined]
        lines.append(_spec_line(seg, meta, epoch_file))
    spec.write_text("\n".join(lines) + "\n")
    shim_configs = {"python.executable": sys.executable, **configs}
    cmd = [
        "java",
        "-Xmx256m",
        "-cp",
        os.pathsep.join([str(PLUGIN_JAR), *api]),
        str(DEMO_BROKER),
        str(spec),
        "--",
        *[f"{k}={v}" for k, v in shim_configs.items()],
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise click.ClickException(
            f"the JVM demo did not finish in {TIMEOUT_S} s; run with --transport python"
        ) from None
    copied = {}
    for line in r.stdout.splitlines():
        if line.startswith("COPIED "):
            _, seg_id, _size, custom = line.split(" ")
            copied[seg_id] = None if custom == "-" else bytes.fromhex(custom)
    if r.returncode != 0 or len(copied) != len(metas):
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-15:])
        raise click.ClickException(f"tiering through the JVM shim failed (exit {r.returncode}):\n{tail}")
    return [copied[m.remote_log_segment_id.id] for m in metas]
