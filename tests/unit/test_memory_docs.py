"""The guides' memory blocks come from the code of `kts config check`, and their examples are the guides' own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rsm.cli import memory_budget as mb
from rsm.cli import memory_docs as md

REPO = Path(__file__).resolve().parents[2]
KTS = str(Path(sys.executable).parent / "kts")
GUIDES = ("README.md", "docs/operations.md", "docs/kubernetes.md")


def readme_plugin_keys() -> dict[str, str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Run it on a broker", 1)[1]
    block = re.search(r"```properties\n(.*?)```", section, re.S)
    assert block, "the README's broker section has no properties block"
    lines = [line.split("=", 1) for line in block.group(1).splitlines() if line.startswith("rsm.config.")]
    return {k.removeprefix("rsm.config."): v for k, v in lines if k != "rsm.config.python.executable"}


def test_the_readme_example_is_the_one_sized() -> None:
    assert readme_plugin_keys() == md.README_S3


def kafka_yaml() -> tuple[dict[str, str], dict[str, str], dict]:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy/strimzi/kafka.yaml").read_text()) if d]
    kafka = next(d for d in docs if d["kind"] == "Kafka")["spec"]["kafka"]
    pool = next(d for d in docs if d["kind"] == "KafkaNodePool")["spec"]
    plugin = {k: str(v) for k, v in kafka["tieredStorage"]["remoteStorageManager"]["config"].items()}
    broker = {k: str(v) for k, v in kafka["config"].items()}
    return plugin, broker, pool


def test_the_strimzi_example_is_the_one_sized() -> None:
    plugin, broker, pool = kafka_yaml()
    sized = mb.memory_budget(plugin, broker, cpus=md.HOST_CPUS)
    example = md.budget_of(md.STRIMZI_PLUGIN, md.STRIMZI_BROKER)
    assert sized is not None
    assert [(t.label, t.size) for t in sized.terms] == [(t.label, t.size) for t in example.terms]
    assert int(pool["jvmOptions"]["-Xmx"].removesuffix("m")) * mb.MIB == md.STRIMZI_HEAP
    assert pool["resources"]["limits"]["memory"] == f"{md.STRIMZI_LIMIT // md.GIB}Gi"
    assert md.STRIMZI_HEAP + md.BROKER_OFF_HEAP + (example.total or 0) <= md.STRIMZI_LIMIT


@pytest.mark.parametrize("guide", GUIDES)
def test_each_guide_holds_the_current_blocks(guide: str) -> None:
    result = subprocess.run([KTS, "memory-docs", "--check", str(REPO / guide)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_operations_and_kubernetes_show_the_same_formula() -> None:
    formula = md.formula_markdown()
    for guide in ("docs/operations.md", "docs/kubernetes.md"):
        assert formula in (REPO / guide).read_text()


def test_the_blocks_follow_the_budget_code(monkeypatch: pytest.MonkeyPatch) -> None:
    before = md.memory_tables()
    monkeypatch.setattr(mb, "PYTHON_BASELINE", mb.PYTHON_BASELINE + 64 * mb.MIB)
    after = md.memory_tables()
    assert all(before[m] != after[m] for m in before)


def test_a_stale_block_fails_the_check(tmp_path: Path) -> None:
    guide = tmp_path / "operations.md"
    text = (REPO / "docs/operations.md").read_text()
    guide.write_text(text.replace("| 180 MiB |", "| 1,250 MiB |", 1))
    result = subprocess.run([KTS, "memory-docs", "--check", str(guide)], capture_output=True, text=True)
    assert result.returncode == 1
    assert "memory-formula" in result.stderr and "kts memory-docs --write" in result.stderr


def test_a_file_without_markers_is_an_error(tmp_path: Path) -> None:
    guide = tmp_path / "other.md"
    guide.write_text("# nothing generated here\n")
    for mode in ("--check", "--write"):
        result = subprocess.run([KTS, "memory-docs", mode, str(guide)], capture_output=True, text=True)
        assert result.returncode == 1
        assert "none of the memory blocks' markers" in result.stderr
    assert guide.read_text() == "# nothing generated here\n"
