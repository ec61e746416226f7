"""The house rules: import-linter's contracts (pyproject.toml) hold, and they catch a lower layer importing a
higher one (proved on a copy of the tree with one bad import added)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
    for name in ("rsm", "backends", "chunking", "encryption"):
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
        ("rsm/core/segment_objects.py", "import rsm.iceberg.mode", "names no format but its own"),
        ("rsm/core/manager.py", "import rsm.formats.iceberg", "Layers"),
        ("rsm/iceberg/mode.py", "import rsm.formats", "Layers"),
        ("rsm/jvm/seams.py", "import rsm.jvm.sidecar", "The transports:"),
        ("rsm/jvm/sidecar_streams.py", "import rsm.core.manager", "serve any manager"),
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


# Spark's door, pyspark_kafka_tiered.py, is a top-level module (Spark's lookup lists only those), and import-linter
# takes packages only; so its two rules are checked here, on the imports the module's syntax tree names.
DOOR = ROOT / "pyspark_kafka_tiered.py"
DOOR_MAY_IMPORT = ("__future__", "typing", "pyspark", "rsm.spark")


def imported_modules(source: str) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in ``source`` names (relative imports as written)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def door_breaches(source: str) -> set[str]:
    """The imports of the door that reach past Spark's and our data source's modules (rsm.cli, rsm.jvm, ...)."""
    allowed = DOOR_MAY_IMPORT
    return {m for m in imported_modules(source) if not any(m == a or m.startswith(a + ".") for a in allowed)}


def test_sparks_door_reaches_only_the_data_source() -> None:
    assert door_breaches(DOOR.read_text()) == set()
    assert "rsm.spark.datasource" in imported_modules(DOOR.read_text())
    # The check itself catches a door that reaches the operator's side.
    assert door_breaches(DOOR.read_text() + "\nimport rsm.cli.main\n") == {"rsm.cli.main"}


def test_nothing_of_ours_imports_sparks_door() -> None:
    """The door stays a door: a module of ours importing it would make Spark's lookup a dependency of ours."""
    users = [
        str(path.relative_to(ROOT))
        for name in ("rsm", "backends", "chunking", "encryption")
        for path in sorted((ROOT / name).rglob("*.py"))
        if "pyspark_kafka_tiered" in {m.split(".")[0] for m in imported_modules(path.read_text())}
    ]
    assert users == []
    assert "pyspark_kafka_tiered" in imported_modules("from pyspark_kafka_tiered import DefaultSource\n")
