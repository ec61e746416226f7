"""Child process of the crash tests: configure a manager and copy one segment, to be killed with SIGKILL mid-way."""

from __future__ import annotations

import pickle
import sys


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        job = pickle.load(f)
    from rsm import RemoteStorageManager

    m = RemoteStorageManager()
    m.configure(job["configs"])
    m.copy_log_segment_data(job["meta"], job["data"])
    m.close()


if __name__ == "__main__":
    main()
