"""The house rules: import-linter's contracts (pyproject.toml) hold, and they catch a lower layer importing a
higher one (proved on a copy of the tree with one bad import added)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_contracts_hold() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("house")
    for name in ("rsm", "backends", "chunking", "encryption", "pyspark_kafka_tiered"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "_jars"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.mark.parametrize(
    "module, bad_import, contract",
    [
        ("backends/base.py", "from rsm.core import manager", "Layers"),
        ("backends/filesystem.py", "import rsm", "import nothing of rsm"),
        ("chunking/transform.py", "import backends.registry", "Layers"),
        ("backends/s3.py", "import chunking.chunk_index", "Object stores"),
        ("encryption/aes.py", "import chunking.errors", "Layers"),
        ("rsm/core/manifest.py", "import rsm.cli.main", "Layers"),
        ("rsm/core/manager.py", "import rsm.jvm.sidecar", "Layers"),
        ("rsm/fetch/stream.py", "import rsm.core.manager", "Layers"),
        ("rsm/kafka/records.py", "import rsm.fetch.stream", "Layers"),
        ("rsm/jvm/sidecar.py", "import rsm.spark", "Layers"),
        ("rsm/fetch/chunk_cache.py", "import rsm.fetch.segment_reader", "The read path"),
        ("rsm/fetch/prefetch.py", "import rsm.fetch.next_segment", "The read path"),
        ("rsm/core/manifest_store.py", "import rsm.core.manager", "The plugin:"),
        ("rsm/jvm/seams.py", "import rsm.jvm.sidecar", "The transports:"),
        ("rsm/jvm/sidecar_streams.py", "import rsm.core.manager", "serve any manager"),
        ("pyspark_kafka_tiered/__init__.py", "import rsm.cli.main", "Spark's door"),
        ("rsm/spark/example.py", "import pyspark_kafka_tiered", "Nothing of ours imports Spark's door"),
    ],
)
def test_contracts_catch_an_upward_import(tree_copy: Path, module: str, bad_import: str, contract: str) -> None:
    path = tree_copy / module
    original = path.read_text()
    path.write_text(original + f"\n{bad_import}  # injected by the test\n")
    try:
        result = _lint(tree_copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line or contract in line]
    assert any(contract in line for line in broken), result.stdout
