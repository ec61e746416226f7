"""Run by an earlier release of this plugin (its packages first on PYTHONPATH; see old_release.py): fetches the
segments of a request file and writes each one's log (``log.N``) and indexes (``<IndexType>.N``) to a directory.

    python old_release_reader.py REQUEST.json OUTDIR

It uses only the public API every release has (``rsm.RemoteStorageManager``, ``rsm.metadata``). A failure prints
``FAILED <class>: <message>`` to stderr and exits with 3; an index the release says is absent is skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import rsm
from rsm import IndexType, RemoteResourceNotFoundException, RemoteStorageManager
from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition


def main(request_file: str, out_dir: str) -> int:
    request = json.loads(Path(request_file).read_text())
    out = Path(out_dir)
    (out / "release").write_text(rsm.__file__)
    m = RemoteStorageManager()
    try:
        m.configure(request["config"])
        for i, s in enumerate(request["segments"]):
            tip = TopicIdPartition(s["topic_id"], s["topic"], s["partition"])
            custom = s["custom_metadata"]
            meta = RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tip, s["segment_id"]),
                s["start_offset"],
                s["end_offset"],
                s["max_timestamp_ms"],
                0,
                0,
                s["size"],
                {int(k): v for k, v in s["leader_epochs"].items()},
                bytes.fromhex(custom) if custom is not None else None,
            )
            with m.fetch_log_segment(meta, 0) as f:
                (out / f"log.{i}").write_bytes(f.read())
            for index in IndexType:
                try:
                    with m.fetch_index(meta, index) as f:
                        (out / f"{index.value}.{i}").write_bytes(f.read())
                except RemoteResourceNotFoundException:
                    pass
    except Exception as e:  # noqa: BLE001 - every failure is reported to the test, which checks its kind
        cause: BaseException | None = e
        while cause is not None:
            print(f"FAILED {type(cause).__name__}: {cause}", file=sys.stderr)
            cause = cause.__cause__
        return 3
    finally:
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
