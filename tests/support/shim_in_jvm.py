"""The shim in this process's JVM (JPype), loaded as a broker loads it: for tests that read its MBeans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jvm_testing as jt
import pytest

jpype = pytest.importorskip("jpype")


@pytest.fixture(scope="module")
def jvm() -> None:
    jt.ensure_built()
    if not jpype.isJVMStarted():
        jpype.startJVM(classpath=jt.classpath_list(), convertStrings=False)
    try:
        jpype.JClass(jt.SHIM_CLASS)
    except Exception:
        pytest.skip("a JVM without the shim jars was already started in this process")


def shim(cfg: dict[str, str]) -> Any:
    """Instantiated exactly as Kafka does: by name, no-arg constructor, then configure(Map)."""
    m = jpype.JClass("java.util.HashMap")()
    for k, v in cfg.items():
        m.put(k, v)
    rsm = jpype.JClass("java.lang.Class").forName(jt.SHIM_CLASS).getDeclaredConstructor().newInstance()
    rsm.configure(m)
    return rsm


def java_data(seg: jt.SpecSegment) -> Any:
    paths = jpype.JClass("java.nio.file.Paths")
    optional = jpype.JClass("java.util.Optional")

    def p(path: Path) -> Any:
        return paths.get(str(path), jpype.JArray(jpype.JString)([]))

    txn = optional.of(p(seg.txn_index)) if seg.txn_index is not None else optional.empty()
    epochs = jpype.JClass("java.nio.ByteBuffer").wrap(jpype.JArray(jpype.JByte)(seg.leader_epoch_bytes))
    return jpype.JClass("org.apache.kafka.server.log.remote.storage.LogSegmentData")(
        p(seg.log), p(seg.offset_index), p(seg.time_index), txn, p(seg.producer_snapshot), epochs
    )
