"""Aiven's tiered-storage plugin, built from its source by ``jvm-shim/aiven/build.sh`` (cached after the first build).

``python tests/support/aiven_plugin.py`` builds it if needed and prints the jar's path; the compatibility tests
and the broker benchmark call :func:`aiven_plugin`. Where GitHub is out of reach, set ``KTS_AIVEN_GIT`` to a
clone of Aiven-Open/tiered-storage-for-apache-kafka that has the pinned tag.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "jvm-shim" / "aiven" / "build.sh"
RSM_CLASS = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
FILESYSTEM_STORAGE = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
S3_STORAGE = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"


@dataclass(frozen=True)
class AivenPlugin:
    """Where the built plugin lives: its jar, the jars it ships with, and the Kafka jars it was compiled against."""

    directory: Path
    jar: Path
    libs: tuple[Path, ...]
    kafka_api: tuple[Path, ...]

    def broker_class_path(self) -> str:
        """The value of the broker's ``remote.log.storage.manager.class.path``."""
        return ":".join(str(p) for p in (self.jar, *self.libs))

    def classpath(self) -> str:
        """The plugin with Kafka's API jars, for a JVM that is not a broker."""
        return ":".join(str(p) for p in (self.jar, *self.libs, *self.kafka_api))


@cache
def aiven_plugin() -> AivenPlugin:
    """Builds the plugin unless it is cached, and says where it is; a failed build raises with the script's log."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    directory = Path(done.stdout.strip().splitlines()[-1])
    jars = sorted(directory.glob("tiered-storage-for-apache-kafka-*.jar"))
    if len(jars) != 1:
        raise RuntimeError(f"{directory} should hold one tiered-storage-for-apache-kafka-*.jar, holds {jars}")
    kafka_api = (directory / "kafka-api.classpath").read_text().strip().split(":")
    return AivenPlugin(
        directory=directory,
        jar=jars[0],
        libs=tuple(sorted((directory / "lib").glob("*.jar"))),
        kafka_api=tuple(Path(p) for p in kafka_api if p),
    )


if __name__ == "__main__":
    try:
        print(aiven_plugin().jar)
    except RuntimeError as e:
        sys.exit(str(e))
