"""How the sidecar process behaves under memory pressure: the OOM killer picks it before the broker, and glibc
hands large freed buffers back to the system at once."""

from __future__ import annotations

import logging

__all__ = ["MMAP_THRESHOLD", "OOM_SCORE_ADJ", "return_large_buffers", "set_oom_score_adj"]

log = logging.getLogger(__name__)

OOM_SCORE_ADJ = "/proc/self/oom_score_adj"


def set_oom_score_adj(value: int, path: str = OOM_SCORE_ADJ) -> bool:
    """Ask the kernel's OOM killer to pick this process before the broker (``jvm.sidecar.oom.score.adj``);
    False, with a warning, where it cannot be set (not Linux, or a lower value without the privilege)."""
    try:
        with open(path, "w") as f:
            f.write(str(value))
    except OSError as e:
        log.warning("jvm.sidecar.oom.score.adj=%d: cannot write %s (%s); the score stays as inherited", value, path, e)
        return False
    return True


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 1 << 20


def return_large_buffers() -> None:
    """Have glibc map every allocation of 1 MiB or more on its own, so that a freed chunk or part goes back to the
    system at once. Left to itself, glibc raises this threshold to the largest block freed so far, after which
    4-8 MiB buffers come from per-thread heaps that keep their peak: ten copier threads then hold far more than
    the buffers they use. Nothing happens on a C library without mallopt."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass
