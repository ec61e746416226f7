"""Build hook: every wheel and sdist carries the broker plugin jar, compiled from jvm-shim/ with a JDK and Maven,
and the compiled record walk of the Spark reader (``rsm.kafka._recordwalk``, C) and record encoder of Iceberg-mode
fetches (``rsm.kafka._batchencode``, C).

A broker host that pip-installs the package must find the jar under ``kts plugin-path``; the jar is a build
artefact (not in git), so building the distribution compiles it, unless the jar is already there and no newer
than its sources (an sdist carries the jar it was built with: a wheel built from it needs no JDK). A jar that is
present but older than its sources is used as it is where no JDK or Maven is on PATH, with a warning. With no
jar and no JDK or Maven, a wheel or sdist build stops with a message saying what to install. An editable install
(development, ``make setup``) only warns: the Makefile installs both and runs jvm-shim/build.sh afterwards.

The record walk is an optional extension: without a C compiler the build goes on without it, and the reader
uses its Python walks (same rows, several times slower; ``rsm.kafka.columnar`` logs that at DEBUG).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
SHIM = HERE / "jvm-shim"
BUILD_SCRIPT = SHIM / "build.sh"
JAR = HERE / "rsm" / "_jars" / "kafka-tiered-storage-shim.jar"


class ShimBuildError(RuntimeError):
    pass


def shim_sources() -> list[Path]:
    """What the plugin jar is built from: the shim's Java sources, the build files and the release version."""
    return [*(SHIM / "src").rglob("*.java"), SHIM / "pom.xml", BUILD_SCRIPT, HERE / "rsm" / "_version.py"]


def jar_is_current() -> bool:
    sources = [p for p in shim_sources() if p.is_file()]
    return JAR.is_file() and all(p.stat().st_mtime <= JAR.stat().st_mtime for p in sources)


def build_shim_jar() -> None:
    if jar_is_current():
        return
    missing = [tool for tool in ("java", "javac", "mvn", "bash") if shutil.which(tool) is None]
    if missing and JAR.is_file():
        print(
            f"warning: {JAR} is older than the shim's sources, but {', '.join(missing)} is not on PATH to build it "
            f"again: packaging the jar as it is",
            file=sys.stderr,
        )
        return
    if missing:
        raise ShimBuildError(
            f"building kafka-tiered-storage needs a JDK (11 or newer) and Maven to compile the broker plugin jar, "
            f"but {', '.join(missing)} is not on PATH: install them (e.g. apt-get install openjdk-17-jdk-headless "
            f"maven) and build again"
        )
    if not BUILD_SCRIPT.exists():
        raise ShimBuildError(f"{BUILD_SCRIPT} is missing: build from a full clone or from the sdist")
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ShimBuildError(f"jvm-shim/build.sh failed (exit {result.returncode}):\n{result.stderr}")
    if not jar_is_current():
        raise ShimBuildError(f"jvm-shim/build.sh succeeded but {JAR} is missing or older than its sources")


class BuildPyWithShim(build_py):
    def run(self) -> None:
        if getattr(self, "editable_mode", False):
            try:
                build_shim_jar()
            except ShimBuildError as e:
                self.warn(f"{e}\n(editable install continues; run jvm-shim/build.sh once a JDK and Maven are present)")
        else:
            build_shim_jar()
        super().run()


class SdistWithShim(sdist):
    def run(self) -> None:
        build_shim_jar()
        super().run()


RECORD_WALK = Extension("rsm.kafka._recordwalk", ["rsm/kafka/_recordwalk.c"], optional=True)
BATCH_ENCODE = Extension("rsm.kafka._batchencode", ["rsm/kafka/_batchencode.c"], optional=True)

setup(cmdclass={"build_py": BuildPyWithShim, "sdist": SdistWithShim}, ext_modules=[RECORD_WALK, BATCH_ENCODE])
