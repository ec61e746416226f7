"""What ``pip install`` gives a broker host: a wheel built from this tree, installed into a fresh venv with
nothing else, must hold the shim jar (compiled by the build hook), name its folder with ``kts plugin-path``,
and the shim class must load from that folder in a real JVM. Without a JDK the build stops with a clear error,
unless the jar is there already: a wheel built from the sdist (which carries the jar) needs no JDK or Maven.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import jvm_testing as jt
import pytest

from rsm._version import __version__

REPO = jt.REPO
VENV_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
"""The environment of the fresh venv's commands: a PYTHONPATH naming this tree (where the wheel build left its
egg-info) would make pip take the package as installed and the venv's ``kts`` import this tree's ``rsm``."""


def _pip_wheel(out: Path, env: dict[str, str] | None = None, src: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(out), "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel installed (pip resolves its dependencies); returns its bin folder."""
    work = tmp_path_factory.mktemp("wheel")
    r = _pip_wheel(work / "dist")
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list((work / "dist").glob("kafka_tiered_storage-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "rsm/_jars/kafka-tiered-storage-shim.jar" in names
    assert "pyspark_kafka_tiered.py" in names  # Spark 4 registers `kafka-tiered` from it (docs/spark.md)
    for data in ("grafana-dashboard.json", "prometheus-alerts.yml", "prometheus-alerts.test.yml"):
        assert f"rsm/metrics/monitoring/{data}" in names  # the dashboard and alert rules ship as package data
    assert wheels[0].name.startswith(f"kafka_tiered_storage-{__version__}-")
    # the Spark reader's compiled record walk and the Iceberg fetch's record encoder, built by the optional
    # extensions (a compiler is on this machine)
    assert [n for n in names if n.startswith("rsm/kafka/_recordwalk") and n.endswith(".so")], names
    assert [n for n in names if n.startswith("rsm/kafka/_batchencode") and n.endswith(".so")], names
    venv.create(work / "venv", with_pip=True, clear=True)
    bin_dir = work / "venv" / "bin"
    r = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheels[0])],
        capture_output=True,
        text=True,
        env=VENV_ENV,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return bin_dir


def test_plugin_path_of_the_installed_wheel_loads_in_a_jvm(installed: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [str(installed / "kts"), "plugin-path"], capture_output=True, text=True, cwd=tmp_path, env=VENV_ENV
    )
    assert r.returncode == 0, r.stderr
    folder = Path(r.stdout.strip())
    assert str(folder).startswith(str(installed.parent)), folder  # the venv's copy, not this source tree
    jar = folder / "kafka-tiered-storage-shim.jar"
    assert jar.is_file()
    manifest = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF").decode()
    assert f"Implementation-Version: {__version__}" in manifest
    r = subprocess.run([str(installed / "kts"), "--version"], capture_output=True, text=True, env=VENV_ENV)
    assert r.stdout.strip() == f"kts {__version__}"
    probe_walk = "import rsm.kafka.record_columns as c; print(c.COMPILED_WALK, c.RecordBuilder.__module__)"
    r = subprocess.run(
        [str(installed / "python"), "-c", probe_walk], capture_output=True, text=True, cwd=tmp_path, env=VENV_ENV
    )
    assert r.stdout.split() == ["True", "rsm.kafka._recordwalk"], r.stderr
    probe_encoder = "import rsm.kafka.batch_encoder as b; print(b.encode_records.__module__)"
    r = subprocess.run(
        [str(installed / "python"), "-c", probe_encoder], capture_output=True, text=True, cwd=tmp_path, env=VENV_ENV
    )
    assert r.stdout.split() == ["rsm.kafka._batchencode"], r.stderr

    # Load the shim by reflection the way a broker does: the plugin folder in its own class loader, Kafka's API
    # (Kafka 3.6's own jars) from the parent.
    jt.ensure_built()
    probe = tmp_path / "LoadShim.java"
    probe.write_text(
        textwrap.dedent(
            """
            import java.io.File;
            import java.net.URL;
            import java.net.URLClassLoader;
            import java.util.ArrayList;
            import java.util.List;

            public class LoadShim {
                public static void main(String[] args) throws Exception {
                    List<URL> urls = new ArrayList<>();
                    for (File f : new File(args[0]).listFiles()) {
                        if (f.getName().endsWith(".jar")) urls.add(f.toURI().toURL());
                    }
                    ClassLoader loader = new URLClassLoader(urls.toArray(new URL[0]), LoadShim.class.getClassLoader());
                    Class<?> shim = Class.forName(args[1], true, loader);
                    Class<?> api = Class.forName(
                        "org.apache.kafka.server.log.remote.storage.RemoteStorageManager", false, loader);
                    Object instance = shim.getDeclaredConstructor().newInstance();
                    System.out.println("loaded " + shim.getName() + " from "
                        + shim.getProtectionDomain().getCodeSource().getLocation()
                        + " rsm=" + api.isInstance(instance)
                        + " version=" + shim.getPackage().getImplementationVersion());
                }
            }
            """
        )
    )
    r = subprocess.run(
        ["java", "-cp", os.pathsep.join(map(str, jt.kafka_api_jars())), str(probe), str(folder), jt.SHIM_CLASS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"loaded {jt.SHIM_CLASS} from file:{jar}" in r.stdout
    assert f"rsm=true version={__version__}" in r.stdout


def test_the_installed_wheel_lists_sparks_door_where_sparks_lookup_looks(installed: Path, tmp_path: Path) -> None:
    # Spark 4's lookup (pyspark.sql.worker.lookup_data_sources) imports the pyspark_* names that
    # pkgutil.iter_modules() lists; an installed wheel must be listed there, unlike an editable install's import
    # hook. Only listed here: this venv has no pyspark; tests/integration/test_spark_lookup.py runs the lookup.
    probe = "import pkgutil; print(sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')))"
    r = subprocess.run(
        [str(installed / "python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=VENV_ENV
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['pyspark_kafka_tiered']"
    r = subprocess.run(
        [str(installed / "python"), "-c", "import pyspark_kafka_tiered"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=VENV_ENV,
    )
    assert "No module named 'pyspark'" in r.stderr  # without the [spark] extra it needs pyspark, as Spark has


def path_without_jdk_or_maven(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has Python, bash and the usual tools, but no java, javac, jar or mvn."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "sed", "find", "sort", "mkdir", "rm", "mv", "dirname", "uname", "cat"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{bin_dir}")
    for tool in ("java", "javac", "jar", "mvn"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    return env


def test_building_without_a_jdk_fails_clearly(tmp_path: Path) -> None:
    env = path_without_jdk_or_maven(tmp_path)
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "node_modules", ".ci", "*.jar"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode != 0
    assert "needs a JDK (11 or newer) and Maven to compile the broker plugin jar" in r.stdout + r.stderr
    assert not list(tmp_path.rglob("*.whl"))


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    r = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta as b; print(b.build_sdist({str(out)!r}))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out / r.stdout.strip().splitlines()[-1]


def unpack(sdist: Path, into: Path) -> Path:
    import tarfile

    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
        return into / tar.getnames()[0].split("/")[0]


@pytest.mark.timeout(900)  # a full Maven build of the jar in the unpacked sdist
def test_sdist_carries_the_shim_sources_and_a_wheel_built_from_it_has_the_jar(sdist: Path, tmp_path: Path) -> None:
    import tarfile

    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    root = names[0].split("/")[0]
    assert f"{root}/jvm-shim/build.sh" in names and f"{root}/setup.py" in names
    assert f"{root}/jvm-shim/pom.xml" in names and f"{root}/jvm-shim/kafka-releases.txt" in names
    assert f"{root}/jvm-shim/.mvn/jvm.config" in names  # Maven's JVM options for the build
    assert any(n.endswith("PythonRemoteStorageManager.java") for n in names)
    assert not [n for n in names if "/jvm-shim/build/" in n or "/org/apache/kafka/" in n]
    assert f"{root}/rsm/_jars/kafka-tiered-storage-shim.jar" in names  # the sdist build ran Maven too
    assert f"{root}/rsm/cli/java/DemoBroker.java" in names
    assert f"{root}/rsm/kafka/_recordwalk.c" in names and f"{root}/rsm/kafka/_batchencode.c" in names
    assert f"{root}/pyspark_kafka_tiered.py" in names
    # a wheel built from the sdist alone compiles the jar again (the sdist's jar removed first)
    src = unpack(sdist, tmp_path / "unpacked")
    (src / "rsm/_jars/kafka-tiered-storage-shim.jar").unlink()
    r = _pip_wheel(tmp_path / "dist", src=src)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next((tmp_path / "dist").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "rsm/_jars/kafka-tiered-storage-shim.jar" in names and "rsm/cli/java/DemoBroker.java" in names
    assert [n for n in names if n.startswith("rsm/kafka/_recordwalk") and n.endswith(".so")], names


def _extra_requirements(extra: str) -> list[str]:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"][extra]]


def _closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` pull in, through the installed packages' own metadata."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in md.requires(req.name) or []]
        except md.PackageNotFoundError:
            pass
    return seen


def _module_distributions() -> dict[str, str]:
    """Each installed module file (``azure/identity/__init__.py``) -> the distribution that installed it."""
    import importlib.metadata as md

    out = {}
    for dist in md.distributions():
        for f in dist.files or []:
            if f.suffix == ".py":
                out[str(f)] = dist.metadata["Name"].lower().replace("_", "-")
    return out


@pytest.mark.parametrize("backend,extra", [("s3", "s3"), ("gcs", "gcs"), ("azure", "azure")])
def test_each_backends_extra_brings_every_module_it_imports(backend: str, extra: str) -> None:
    """Every module a backend imports, lazily too (``azure.identity`` for DefaultAzureCredential), comes from a
    distribution its extra pulls in, so ``pip install kafka-tiered-storage[azure]`` can use every documented
    credential."""
    import ast
    import importlib.util

    tree = ast.parse((REPO / "backends" / f"{backend}.py").read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module and not n.level:
            found = (
                importlib.util.find_spec(n.module) if n.module.split(".")[0] not in sys.stdlib_module_names else None
            )
            if found is not None and found.origin is None:  # a namespace package (google.cloud): its modules
                modules |= {f"{n.module}.{a.name}" for a in n.names}
            else:
                modules.add(n.module)
    third_party = {
        m for m in modules if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ("backends",)
    }
    assert third_party, "the backend imports its client library"
    files = _module_distributions()
    pulled = _closure(_extra_requirements(extra))
    missing = {}
    for module in sorted(third_party):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{module} is not installed here (make setup installs [all])"
        origin = Path(spec.origin)
        dist = next((d for f, d in files.items() if origin.as_posix().endswith("/" + f)), None)
        assert dist is not None, f"no installed distribution owns {origin}"
        if dist not in pulled:
            missing[module] = dist
    assert not missing, f"the [{extra}] extra does not bring {missing}"


def test_a_wheel_from_the_sdist_needs_no_jdk_or_maven(sdist: Path, tmp_path: Path) -> None:
    """The sdist's jar is no older than its sources: the wheel packages it as it is, with no java, javac or mvn."""
    src = unpack(sdist, tmp_path / "unpacked")
    jar = src / "rsm/_jars/kafka-tiered-storage-shim.jar"
    r = _pip_wheel(tmp_path / "dist", env=path_without_jdk_or_maven(tmp_path), src=src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "older than the shim's sources" not in r.stdout + r.stderr
    wheel = next((tmp_path / "dist").glob("*.whl"))
    assert zipfile.ZipFile(wheel).read("rsm/_jars/kafka-tiered-storage-shim.jar") == jar.read_bytes()


def test_a_stale_jar_without_a_jdk_is_packaged_with_a_warning(sdist: Path, tmp_path: Path) -> None:
    src = unpack(sdist, tmp_path / "unpacked")
    jar = src / "rsm/_jars/kafka-tiered-storage-shim.jar"
    java = next((src / "jvm-shim" / "src").rglob("Settings.java"))
    os.utime(java, (jar.stat().st_mtime + 10, jar.stat().st_mtime + 10))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(tmp_path / "dist"), "-v"],
        capture_output=True,
        text=True,
        env=path_without_jdk_or_maven(tmp_path),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is older than the shim's sources, but java, javac, mvn is not on PATH" in r.stdout + r.stderr
    wheel = next((tmp_path / "dist").glob("*.whl"))
    assert zipfile.ZipFile(wheel).read("rsm/_jars/kafka-tiered-storage-shim.jar") == jar.read_bytes()
