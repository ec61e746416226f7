"""Earlier releases of this plugin, checked out from this repository's history, for the rollback tests.

:func:`old_release` extracts a release's Python packages (``git archive`` of its pinned commit) into
``~/.cache/kafka-tiered-storage/releases/`` once, and builds its compiled record walk there when a C compiler is
at hand (the release falls back to pure Python without it). :func:`read_with` runs ``old_release_reader.py``
under that checkout in a subprocess: the release's own code fetches the segments a test copied with today's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rsm.metadata import RemoteLogSegmentMetadata

REPO = Path(__file__).resolve().parents[2]
READER = Path(__file__).with_name("old_release_reader.py")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kafka-tiered-storage" / "releases"

# Each release as the newest commit that carried it: 0.1.0 up to the version bump to 0.2.0, 0.2.0 up to the
# first commit that opened an "Unreleased" section in CHANGELOG.md.
RELEASES = {
    "0.1.0": "5328f295c8a0f0b546a345e93b0169310b2eed4e",
    "0.2.0": "242e51d80acf4cd61e0784137f27b709cb83d706",
}
PACKAGES = ("rsm", "backends", "chunking", "encryption", "setup.py", "pyproject.toml", "MANIFEST.in")


@dataclass(frozen=True)
class Fetched:
    """What the release's reader did: its exit code, its stderr, and where it wrote what it fetched."""

    returncode: int
    stderr: str
    out: Path


def old_release(version: str) -> Path:
    """The directory holding release ``version``'s packages (put it first on PYTHONPATH)."""
    commit = RELEASES[version]
    target = CACHE / f"{version}-{commit[:12]}"
    if (target / ".complete").exists():
        return target
    have = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"], check=False)
    if have.returncode != 0:
        raise RuntimeError(
            f"release {version} (commit {commit}) is not in {REPO}'s history: fetch the whole history "
            "(git fetch --unshallow) and run again"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=CACHE, prefix=f".{version}-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, *PACKAGES], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True)
        # The compiled walk is optional in every release (pure Python without it): a failed build is no error.
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=work,
            capture_output=True,
            check=False,
        )
        (work / ".complete").write_text(commit + "\n")
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def read_with(version: str, config: dict[str, str], segments: list[RemoteLogSegmentMetadata], out: Path) -> Fetched:
    """Fetch ``segments`` (log and every index) with release ``version`` configured by ``config``."""
    out.mkdir(parents=True, exist_ok=True)
    request = {
        "config": config,
        "segments": [
            {
                "topic_id": m.topic_id_partition.topic_id,
                "topic": m.topic_id_partition.topic,
                "partition": m.topic_id_partition.partition,
                "segment_id": m.remote_log_segment_id.id,
                "start_offset": m.start_offset,
                "end_offset": m.end_offset,
                "max_timestamp_ms": m.max_timestamp_ms,
                "size": m.segment_size_in_bytes,
                "leader_epochs": {str(k): v for k, v in m.segment_leader_epochs.items()},
                "custom_metadata": m.custom_metadata.hex() if m.custom_metadata is not None else None,
            }
            for m in segments
        ],
    }
    (out / "request.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(old_release(version))
    done = subprocess.run(
        [sys.executable, str(READER), str(out / "request.json"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=out,
        timeout=600,
        check=False,
    )
    return Fetched(done.returncode, done.stderr, out)


if __name__ == "__main__":
    for v in sys.argv[1:] or RELEASES:
        print(v, old_release(v))
