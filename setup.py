"""Build hook: every wheel and sdist carries the broker plugin jar, compiled from jvm-shim/ with the JDK, and the
compiled record walk of the Spark reader (``rsm.kafka._recordwalk``, C).

A broker host that pip-installs the package must find the jar under ``kts plugin-path``; the jar is a build
artefact (not in git), so building the distribution compiles it. Without a JDK a wheel or sdist build stops
with a message saying what to install. An editable install (development, ``make setup``) only warns: the
Makefile installs the JDK and runs jvm-shim/build.sh itself afterwards.

The record walk is an optional extension: without a C compiler the build goes on without it, and the reader
uses its Python walks (same rows, several times slower; ``rsm.kafka.columnar`` logs that at DEBUG).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "jvm-shim" / "build.sh"
JAR = HERE / "rsm" / "_jars" / "kafka-tiered-storage-shim.jar"


class ShimBuildError(RuntimeError):
    pass


def build_shim_jar() -> None:
    missing = [tool for tool in ("javac", "jar", "bash") if shutil.which(tool) is None]
    if missing:
        raise ShimBuildError(
            f"building kafka-tiered-storage needs a JDK 17+ to compile the broker plugin jar, but "
            f"{', '.join(missing)} is not on PATH: install one (e.g. apt-get install openjdk-17-jdk-headless) "
            f"and build again"
        )
    if not BUILD_SCRIPT.exists():
        raise ShimBuildError(f"{BUILD_SCRIPT} is missing: build from a full clone or from the sdist")
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ShimBuildError(f"jvm-shim/build.sh failed (exit {result.returncode}):\n{result.stderr}")


class BuildPyWithShim(build_py):
    def run(self) -> None:
        if getattr(self, "editable_mode", False):
            try:
                build_shim_jar()
            except ShimBuildError as e:
                self.warn(f"{e}\n(editable install continues; run jvm-shim/build.sh once a JDK is present)")
        else:
            build_shim_jar()
        super().run()


class SdistWithShim(sdist):
    def run(self) -> None:
        build_shim_jar()
        super().run()


RECORD_WALK = Extension("rsm.kafka._recordwalk", ["rsm/kafka/_recordwalk.c"], optional=True)

setup(cmdclass={"build_py": BuildPyWithShim, "sdist": SdistWithShim}, ext_modules=[RECORD_WALK])
