"""The sidecar's shared-memory region: fetched chunks are decoded straight into memory the broker JVM has mapped.

Over the socket every fetched byte is copied three more times (into the kernel, out of it, and from the JDK's
direct buffer into the broker's array). With the region, the manager's chunk loads land in a file on
``/dev/shm`` that the shim maps read-only; the sidecar sends only "offset, length" and the shim copies from
the mapping into the broker's array: the same single copy a Python caller makes with ``readinto``.

Lifecycle: the sidecar hands the manager a ``SharedRegionBuffers`` before ``configure()``; the manager asks it for
buffers of its chunk size as it builds its read path, and that is when the region is made: a file on tmpfs,
owner-only, its name unique with the sidecar's pid. The sidecar announces the path in its READY line; the shim
maps it and deletes the name, so nothing is left on ``/dev/shm`` while both run. A sidecar that dies before the
shim mapped it leaves a file behind; the next sidecar removes files whose pid is gone.

The whole region is allocated and mapped in here at start (``posix_fallocate``, ``MAP_POPULATE``), not as
fetches first write each page: a first write costs a page allocation and a fault per 4 KiB, ten times the
decode of a compressible chunk, and it would land on a broker fetch. (The shim maps it without touching it:
the pages exist already, so the broker's first read of one costs only a minor fault, and the kernel maps its
neighbours along with it. Touching them in the JVM would not change what stays resident either: pages of a
file on tmpfs stay in memory while any mapping of the file is left, touched or not.)
Allocating up front also means a ``/dev/shm`` too small for the region (64 MiB in a default Docker container)
shrinks it at start, with a warning, instead of killing the sidecar with SIGBUS on the first fetch that writes
past the free space.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import secrets
from pathlib import Path

from chunking.buffer_pool import ChunkBufferPool
from rsm.fetch.chunk_cache import SuppliedBuffers

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"^kts-sidecar-(\d+)-[0-9a-f]+\.shm$")


class SharedRegion:
    """One mapping of ``buffers`` chunk buffers of ``buffer_size`` bytes, backed by a file on tmpfs."""

    def __init__(self, path: Path, buffer_size: int, buffers: int) -> None:
        self.path = path
        self.size = buffer_size * buffers
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            os.posix_fallocate(fd, 0, self.size)  # ENOSPC now, not SIGBUS at the first write past the free space
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._map = mmap.mmap(fd, self.size, flags, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        self.pool = ChunkBufferPool(buffer_size, max_idle=8, region=memoryview(self._map))

    @classmethod
    def create(cls, total_bytes: int, buffer_size: int, directory: Path = SHM_DIR) -> SharedRegion | None:
        """A region of at most ``total_bytes``, or None when it is disabled, too small or not possible here."""
        buffers = total_bytes // buffer_size if buffer_size > 0 else 0
        if buffers < 2:
            if total_bytes:
                log.warning(
                    "shared memory disabled: jvm.sidecar.shared.memory.bytes=%d holds fewer than two chunks of "
                    "%d bytes; fetched bytes go over the socket",
                    total_bytes,
                    buffer_size,
                )
            return None
        if not directory.is_dir():
            log.warning("shared memory disabled: %s does not exist; fetched bytes go over the socket", directory)
            return None
        remove_stale(directory)
        fs = os.statvfs(directory)
        free = fs.f_bavail * fs.f_frsize
        fits = free // buffer_size
        if fits < buffers:
            advice = f"enlarge {directory} (docker run --shm-size=...) or lower jvm.sidecar.shared.memory.bytes"
            if fits < 2:
                log.warning(
                    "shared memory disabled: %s has %d bytes free, fewer than two chunks of %d bytes; fetched bytes "
                    "go over the socket (%s)",
                    directory,
                    free,
                    buffer_size,
                    advice,
                )
                return None
            log.warning(
                "shared memory shrunk to %d chunks: jvm.sidecar.shared.memory.bytes=%d does not fit in the %d bytes "
                "free on %s (%s)",
                fits,
                total_bytes,
                free,
                directory,
                advice,
            )
            buffers = fits
        path = directory / f"kts-sidecar-{os.getpid()}-{secrets.token_hex(6)}.shm"
        try:
            return cls(path, buffer_size, buffers)
        except OSError as e:
            log.warning("shared memory disabled: cannot create %s: %s; fetched bytes go over the socket", path, e)
            return None

    def unlink(self) -> None:
        """Remove the name (the shim normally did already; mappings stay valid)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def remove_stale(directory: Path = SHM_DIR) -> int:
    """Delete region files left by sidecars that no longer run (killed before the shim mapped them)."""
    removed = 0
    for entry in directory.glob("kts-sidecar-*.shm"):
        m = _NAME.match(entry.name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            entry.unlink()
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


class SharedRegionBuffers:
    """The sidecar's ``ChunkBufferSupply``: a region of at most ``total_bytes`` (``jvm.sidecar.shared.memory.bytes``),
    made when the manager asks for buffers, since only then is their size (``chunk.size``) known. None is made for
    0 bytes, or when the region is not possible here (``SharedRegion.create`` says why); the manager then decodes
    into its own heap buffers. ``region`` is the one made, if any.

    The manager's memory tier keeps decoded chunks in the buffers they were decoded into: it may keep at most half
    of ``total_bytes``, leaving the rest to fetches in flight, which would otherwise fall back to copies over the
    socket."""

    def __init__(self, total_bytes: int, directory: Path = SHM_DIR) -> None:
        self.total_bytes = total_bytes
        self.directory = directory
        self.region: SharedRegion | None = None

    def chunk_buffers(self, buffer_size: int) -> SuppliedBuffers | None:
        if not self.total_bytes:
            return None
        self.discard()  # a manager configured again: the region of its first read path is not used any more
        self.region = SharedRegion.create(self.total_bytes, buffer_size, self.directory)
        if self.region is None:
            return None
        log.info(
            "shared memory: %d buffers of %d bytes in %s (the shim maps it and removes the name)",
            self.region.pool.region_buffers,
            buffer_size,
            self.region.path,
        )
        return SuppliedBuffers(self.region.pool, max_cached_bytes=self.total_bytes // 2)

    def discard(self) -> None:
        """Remove the region's name (a sidecar whose manager failed to configure does not announce it)."""
        if self.region is not None:
            self.region.unlink()
            self.region = None
