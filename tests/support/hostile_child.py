"""Child process of the hostile-manifest tests: fetches every case under an address-space limit and reports,
as JSON on stdout, the exception class of each case and the process's peak RSS.

Run in its own process so that a manifest that made the plugin allocate gigabytes fails the limit here instead
of taking the test runner down, and so that the peak RSS measured is that of the hostile fetches alone.
"""

from __future__ import annotations

import json
import pickle
import resource
import sys
from typing import Any


def _peak_rss_bytes() -> int:
    """This process's own high-water RSS (VmHWM). Not ``ru_maxrss``: Linux carries the parent's peak over into
    it across the fork and exec that started us, so it would report the test runner's memory, not ours."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM line in /proc/self/status")


def main() -> None:
    limit_bytes = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    with open(sys.argv[1], "rb") as f:
        job: dict[str, Any] = pickle.load(f)

    from rsm import IndexType, RemoteStorageManager

    results: dict[str, str] = {}
    m = RemoteStorageManager()
    m.configure(job["configs"])
    try:
        for name, meta, operation in job["cases"]:
            try:
                if operation == "log":
                    with m.fetch_log_segment(meta, 0) as s:
                        s.read(1024)
                    with m.fetch_log_segment(meta, meta.segment_size_in_bytes // 2 + 12345) as s:
                        s.read()
                else:
                    m.fetch_index(meta, IndexType[operation]).read()
                results[name] = "no error"
            except BaseException as e:  # noqa: BLE001 - the class of whatever escapes is the result
                results[name] = f"{type(e).__module__}.{type(e).__name__}: {str(e)[:300]}"
    finally:
        m.close()
    print(json.dumps({"results": results, "peak_rss_bytes": _peak_rss_bytes()}))


if __name__ == "__main__":
    main()
