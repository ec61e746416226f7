"""The sidecar's start-up check: does the container have the shared memory and the memory it is configured to use?

Run by ``rsm.jvm.sidecar`` before the shared region is made and before ``configure()``, and (``check_in_process``)
by the in-process transport before its ``configure()``. A ``/dev/shm`` (or ``jvm.sidecar.shared.memory.dir``) with
less free space than ``jvm.sidecar.shared.memory.bytes``, or a container memory limit (cgroup v1 or v2) that the
broker's heap, the sidecar as it stands and what the sidecar is configured to hold cannot fit in, stops the
start with a ``ConfigException`` naming the setting to raise or lower. The broker's ``configure()`` then fails
with that message, instead of the kernel's OOM killer ending the broker later under load.

What is counted is the floor the configuration certainly uses: the shared region, and what the manager says its
configuration holds (``memory_floor(config)`` of the manager class, if it has one: for ours, the chunk cache's
memory and one fetch stream's read-ahead). Passing the check does not promise that a heavier load fits.
docs/kubernetes.md has the whole container memory formula.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.configdef import ConfigException

SHM_DIR = Path("/dev/shm")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned long; anything this large is no limit.
_UNLIMITED = 1 << 60
_XMX = re.compile(r"^-Xmx(\d+)([kKmMgGtT]?)$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
SHARED_KEY = "jvm.sidecar.shared.memory.bytes"
SHARED_DIR_KEY = "jvm.sidecar.shared.memory.dir"
INPROCESS_KEY = "jvm.inprocess.buffer.memory.bytes"


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class MemoryLimit:
    """The container's memory limit and what its processes use now, from the cgroup files named by ``source``."""

    limit: int
    usage: int
    source: str


@dataclass(frozen=True)
class Needs:
    """What the configuration makes the sidecar hold: the shared region, and the manager's parts by key."""

    shared: int
    parts: tuple[tuple[str, int], ...] = ()

    @property
    def total(self) -> int:
        return self.shared + sum(n for _, n in self.parts)


def shared_region_bytes(config: Mapping[str, Any], shared_bytes: int) -> int:
    """The shared region as it will be cut: whole chunks of ``chunk.size``, none when fewer than two fit."""
    try:
        chunk = max(int(config.get("chunk.size", 0)), 0)
    except (TypeError, ValueError):
        chunk = 0
    buffers = shared_bytes // chunk if chunk else 0
    return buffers * chunk if buffers >= 2 else 0


def needs_of(config: Mapping[str, Any], shared_bytes: int, manager_class: Any = None) -> Needs:
    """The shared region plus what ``manager_class.memory_floor(config)`` reports (nothing for a manager
    without it)."""
    floor = getattr(manager_class, "memory_floor", None)
    parts = tuple((str(k), max(int(n), 0)) for k, n in floor(config)) if callable(floor) else ()
    return Needs(shared_region_bytes(config, shared_bytes), parts)


def shm_free(directory: Path = SHM_DIR) -> int | None:
    """Bytes free on ``directory`` (the shared region's tmpfs), or None where there is no such folder."""
    if not directory.is_dir():
        return None
    fs = os.statvfs(directory)
    return fs.f_bavail * fs.f_frsize


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def memory_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> MemoryLimit | None:
    """This process's memory cgroup limit and usage (v2 ``memory.max``/``memory.current`` or v1
    ``memory.limit_in_bytes``/``memory.usage_in_bytes``), or None when there is no limit or no cgroup to read."""
    paths: list[tuple[Path, str, str]] = []
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":
            paths.append((root / rel, "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            paths.append((root / "memory" / rel, "memory.limit_in_bytes", "memory.usage_in_bytes"))
    # inside a container the cgroup namespace's root is the container's own cgroup
    paths += [
        (root, "memory.max", "memory.current"),
        (root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
    ]
    for folder, limit_name, usage_name in paths:
        limit_file = folder / limit_name
        if not limit_file.is_file():
            continue
        limit = _read_int(limit_file)
        if limit is None or limit >= _UNLIMITED:
            return None
        usage = _read_int(folder / usage_name) or 0
        return MemoryLimit(limit, usage, str(limit_file))
    return None


def heap_max(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The ``-Xmx`` of the broker's JVM (the last one on its command line), or None when it cannot be read."""
    if pid <= 0:
        return None
    try:
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    found = None
    for arg in args:
        m = _XMX.match(arg.decode(errors="replace"))
        if m:
            found = int(m.group(1)) * _UNITS[m.group(2).lower()]
    return found


def own_rss(status: Path = Path("/proc/self/status")) -> int:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def problems(
    needs: Needs,
    shm: int | None,
    limit: MemoryLimit | None,
    heap: int | None,
    rss: int,
    shared_bytes: int,
    shm_dir: Path = SHM_DIR,
    region_key: str = SHARED_KEY,
) -> list[str]:
    """What does not fit, each naming the setting to change; empty when everything fits. ``shm`` is the free
    space of ``shm_dir``, where the region is a file (None: not a file, as the in-process transport's);
    ``rss`` is what this process holds beside the broker's heap (0 where it is the broker itself)."""
    found = []
    if needs.shared and shm is not None and shm < needs.shared:
        found.append(
            f"{shm_dir} has {mib(shm)} free but {region_key}={shared_bytes} needs {mib(needs.shared)}: give the "
            f"container a larger {shm_dir} (Kubernetes: an emptyDir with medium: Memory and a sizeLimit of at least "
            f"{mib(needs.shared)} mounted at {shm_dir}, or at a folder named by {SHARED_DIR_KEY}; podman/docker: "
            f"--shm-size) or lower {region_key} (0 turns shared memory off)"
        )
    if limit is not None:
        # what is in use now, or what the broker's heap and this process will hold, whichever is larger
        held = max(limit.usage, (heap or 0) + rss)
        left = limit.limit - held
        if needs.total > left:
            where = f" on {shm_dir}" if shm is not None else ""
            parts = [f"{region_key} {mib(needs.shared)}{where}"] + [f"{k} {mib(n)}" for k, n in needs.parts]
            biggest = max(needs.parts, key=lambda p: p[1])[0].split()[0] if needs.parts else None
            lower = f"{region_key} or {biggest}" if biggest else region_key
            heap_text = f"the broker's heap (-Xmx {mib(heap)}) and " if heap else ""
            now = f"in use now {mib(limit.usage)}, this sidecar {mib(rss)}" if rss else f"in use now {mib(limit.usage)}"
            who = "the sidecar" if rss else "the plugin in the broker's process"
            found.append(
                f"the container's memory limit is {mib(limit.limit)} ({limit.source}); {heap_text}the processes "
                f"as they stand ({now}) leave {mib(max(left, 0))}, but {who} is configured to hold "
                f"{mib(needs.total)} ({', '.join(parts)}): raise the container's memory limit (Kubernetes: "
                f"resources.limits.memory; podman/docker: --memory) to at least {mib(held + needs.total)}, or lower "
                f"{lower}"
            )
    return found


def check(
    config: Mapping[str, Any],
    shared_bytes: int,
    parent_pid: int = 0,
    manager_class: Any = None,
    shm_dir: Path = SHM_DIR,
) -> None:
    """Raise ``ConfigException`` when this container cannot give the sidecar what ``config`` asks for."""
    needs = needs_of(config, shared_bytes, manager_class)
    found = problems(needs, shm_free(shm_dir), memory_limit(), heap_max(parent_pid), own_rss(), shared_bytes, shm_dir)
    if found:
        raise ConfigException("the sidecar does not fit in this container: " + "; and ".join(found))


def check_in_process(
    config: Mapping[str, Any],
    buffer_bytes: int,
    manager_class: Any = None,
    cgroup_root: Path = CGROUP_ROOT,
    proc_cgroup: Path = Path("/proc/self/cgroup"),
) -> None:
    """The same check for the in-process transport, run in the broker's own JVM before ``configure()``: its chunk
    buffers (``jvm.inprocess.buffer.memory.bytes``, no file) and what the manager holds, against the container's
    memory limit beside this JVM's heap. Raises ``ConfigException`` naming what to change."""
    needs = needs_of(config, buffer_bytes, manager_class)
    found = problems(
        needs, None, memory_limit(cgroup_root, proc_cgroup), heap_max(os.getpid()), 0, buffer_bytes,
        region_key=INPROCESS_KEY,
    )  # fmt: skip
    if found:
        raise ConfigException("the plugin does not fit in this container: " + "; and ".join(found))
