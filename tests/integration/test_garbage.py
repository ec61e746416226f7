"""Crashes leave nothing unaccounted for: kill -9 mid-copy (filesystem, S3 and Azure), then garbage collection.

After the kill no segment is visible as complete, ``find_garbage`` lists what the dead copy left (temp files,
objects without a manifest, open multipart uploads, Azure blobs of uncommitted blocks), ``delete_garbage`` removes
it all (what can be undone into the quarantine), and a retry of the same segment id reads back exactly.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from emulators import FIXTURE_FOR, StoreServer
from helpers import TIP

from backends.azure import UNCOMMITTED_BLOCKS, AzureBlobBackend
from backends.filesystem import FileSystemBackend
from backends.filesystem_files import TEMP_PREFIX
from backends.s3 import S3Backend
from rsm import RemoteStorageManager
from rsm.operator_tools.garbage import MULTIPART_UPLOAD, ORPHAN_OBJECT, TEMP_FILE, find_garbage
from rsm.operator_tools.garbage_removal import delete_garbage, quarantine_of

SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _kill_mid_copy(configs: dict[str, Any], seg: Any, meta: Any, tmp_path: Path, started: Callable[[], bool]) -> None:
    job = tmp_path / "crash-job.pickle"
    job.write_bytes(pickle.dumps({"configs": configs, "meta": meta, "data": seg.to_log_segment_data()}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, str(SUPPORT / "crash_child.py"), str(job)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not started():
            assert child.poll() is None, "the copy finished before it could be killed"
            assert time.monotonic() < deadline, "the copy never started"
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def _temp_bytes(root: Path) -> int:
    """Bytes in temp files right now (files come and go while the copy runs)."""
    total = 0
    for p in _files(root):
        if p.name.startswith(TEMP_PREFIX):
            try:
                total += p.stat().st_size
            except FileNotFoundError:
                pass
    return total


def _read_back(configs: dict[str, Any], seg: Any, meta: Any) -> None:
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        assert m.catalog().segments() == []
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        with m.fetch_log_segment(meta, 0) as f:
            assert f.read() == seg.log.read_bytes()
    finally:
        m.close()


def test_kill_mid_copy_on_the_filesystem(segment_factory: Any, tmp_path: Path) -> None:
    seg = segment_factory(target_bytes=40 * 1024 * 1024, seed=8, value_style="random")
    store = tmp_path / "store"
    configs = {
        "chunk.size": "65536",
        "storage.backend.class": "filesystem",
        "storage.root": str(store),
        "storage.fsync.interval.bytes": str(1024 * 1024),
    }
    meta = seg.to_metadata(TIP)
    _kill_mid_copy(
        configs,
        seg,
        meta,
        tmp_path,
        lambda: _temp_bytes(store) > 2**21,
    )
    leftovers = _files(store)
    leftover_bytes = sum(p.stat().st_size for p in leftovers)
    assert leftovers and not [p for p in leftovers if p.name.endswith(".rsm-manifest")]

    m = RemoteStorageManager()
    m.configure(configs)
    try:
        assert list(m.backend.list("")) == [k for k in m.backend.list("") if not k.endswith(".rsm-manifest")]
        assert m.catalog().segments() == []
        assert find_garbage(m, older_than_seconds=3600) == [], "a fresh upload must be left alone"
        # within the upload deadline a temp file is listed, yet kept: its upload may still be running
        items = find_garbage(m, older_than_seconds=0)
        assert TEMP_FILE in {i.kind for i in items}
        report = delete_garbage(m, items)
        assert {i.kind for i, why in report.skipped} == {TEMP_FILE} and "upload-deadline" in report.skipped[0][1]
        # the copy was killed: no upload runs, whatever its age
        items = find_garbage(m, older_than_seconds=0, upload_deadline_s=0)
        assert {i.kind for i in items} == {TEMP_FILE}, "the orphan objects are in the quarantine already"
        progressed: list[Any] = []
        report = delete_garbage(m, items, progress=progressed.append)
        assert report.failed == [] and len(report.deleted) == len(items) == len(progressed)
        held = quarantine_of(m).held()
        assert sum(h.size for h in held) + report.bytes_freed == leftover_bytes > 0
        assert not [p for p in _files(store) if "kts-quarantine" not in p.parts], "orphan bytes remain after gc"
        assert quarantine_of(m).purge(held).bytes_freed == sum(h.size for h in held)
    finally:
        m.close()
    assert _files(store) == [], "orphan bytes remain after the quarantine's purge"
    _read_back(configs, seg, meta)


def test_stale_temp_files_are_swept_at_configure(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "t-1" / "0").mkdir(parents=True)
    old = store / "t-1" / "0" / f"{TEMP_PREFIX}x.log.abc123"
    fresh = store / "t-1" / "0" / f"{TEMP_PREFIX}y.log.def456"
    old.write_bytes(b"x" * 1000)
    fresh.write_bytes(b"y" * 10)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    b = FileSystemBackend()
    b.configure({"root": str(store)})
    assert not old.exists() and fresh.exists()
    assert [u.key for u in b.list_pending_uploads("")] == ["t-1/0/y.log"]
    assert list(b.list("")) == []


def test_orphan_is_skipped_once_its_manifest_appears(tmp_path: Path) -> None:
    m = RemoteStorageManager()
    m.configure({"chunk.size": "1024", "storage.root": str(tmp_path)})
    try:
        import io

        path = f"t-{TIP.topic_id}/0/{0:020d}-tqimKeZwStOEOwRzT3L5oQ"
        m.backend.upload(f"{path}.log", io.BytesIO(b"12345"))
        items = find_garbage(m, 0)
        assert [(i.kind, i.key, i.size) for i in items] == [(ORPHAN_OBJECT, f"{path}.log", 5)]
        m.backend.upload(f"{path}.indexes", io.BytesIO(b"678"))  # the slow copy completes
        m.backend.upload(f"{path}.rsm-manifest", io.BytesIO(b"{}"))
        report = delete_garbage(m, items)
        assert report.deleted == [] and len(report.skipped) == 1
        assert find_garbage(m, 0) == []
    finally:
        m.close()


def _part_sent(direct: Any, prefix: str) -> bool:
    """The dead copy has stored part of its upload: an S3 multipart upload with a part, or an Azure blob with a
    staged block (Azure lists a blob with uncommitted blocks only once a block is staged)."""
    uploads = list(direct.list_pending_uploads(prefix))
    if not uploads or not isinstance(direct, S3Backend):
        return bool(uploads)
    parts = direct.client.list_parts(Bucket=direct.bucket, Key=uploads[0].key, UploadId=uploads[0].upload_id)
    return bool(parts.get("Parts"))


# flavour -> (backend, the settings that make a 24 MiB segment a many-part upload sent one part at a time, kind)
UNFINISHED = {
    "s3-moto": (
        S3Backend,
        {"s3.multipart.upload.part.size": str(5 * 1024 * 1024), "s3.multipart.upload.concurrency": "1"},
        MULTIPART_UPLOAD,
    ),
    "azure-azurite": (
        AzureBlobBackend,
        {"azure.upload.block.size": str(1024 * 1024), "azure.upload.concurrency": "1"},
        UNCOMMITTED_BLOCKS,
    ),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flavour", list(UNFINISHED))
def test_kill_mid_multipart_copy(
    flavour: str,
    request: pytest.FixtureRequest,
    segment_factory: Any,
    tmp_path: Path,
) -> None:
    """kill -9 while a copy's upload is half sent: S3 keeps the multipart upload open, Azure keeps the staged
    blocks of a blob never committed. Garbage collection lists and removes either."""
    server: StoreServer = request.getfixturevalue(FIXTURE_FOR[flavour])
    backend_class, settings, kind = UNFINISHED[flavour]
    seg = segment_factory(target_bytes=24 * 1024 * 1024, seed=9, value_style="random")
    prefix = f"crash-{flavour}/"
    configs = {
        "chunk.size": "1048576",
        "key.prefix": prefix,
        "storage.backend.class": server.backend,
        **{f"storage.{k}": v for k, v in server.config(**settings).items()},
    }
    direct = backend_class()
    direct.configure(server.config())
    meta = seg.to_metadata(TIP)
    try:
        _kill_mid_copy(configs, seg, meta, tmp_path, lambda: _part_sent(direct, prefix))
        assert not [k for k in direct.list(prefix) if k.endswith(".rsm-manifest")]
        m = RemoteStorageManager()
        m.configure(configs)
        try:
            items = find_garbage(m, 0, upload_deadline_s=0)  # the copy was killed: no upload runs
            assert kind in {i.kind for i in items}
            report = delete_garbage(m, items)
            assert report.failed == [] and report.skipped == []
            assert list(direct.list_pending_uploads(prefix)) == []
            assert [k for k in direct.list(prefix) if not k.startswith(prefix + "kts-quarantine/")] == []
            quarantine_of(m).purge(quarantine_of(m).held())
            assert list(direct.list(prefix)) == []
        finally:
            m.close()
        _read_back(configs, seg, meta)
    finally:
        direct.delete_many(list(direct.list(prefix)))
        direct.close()


def test_a_manifest_without_data_waits_for_its_youngest_object(tmp_path: Path) -> None:
    """An old manifest beside a .log written a moment ago (a retry of the same segment id) is not garbage yet:
    the item is dated by its youngest object, since every object of it goes with it."""
    import io

    m = RemoteStorageManager()
    m.configure({"chunk.size": "1024", "storage.root": str(tmp_path)})
    try:
        path = f"t-{TIP.topic_id}/0/{0:020d}-tqimKeZwStOEOwRzT3L5oQ"
        m.backend.upload(f"{path}.rsm-manifest", io.BytesIO(b"{}"))
        m.backend.upload(f"{path}.log", io.BytesIO(b"12345"))
        two_hours_ago = time.time() - 7200
        os.utime(tmp_path / f"{path}.rsm-manifest", (two_hours_ago, two_hours_ago))
        assert find_garbage(m, 3600) == []
        os.utime(tmp_path / f"{path}.log", (two_hours_ago, two_hours_ago))
        items = find_garbage(m, 3600)
        assert [(i.kind, i.key) for i in items] == [("manifest-without-data", f"{path}.rsm-manifest")]
        report = delete_garbage(m, items)
        assert [(h.original, h.size) for h in report.held] == [(f"{path}.rsm-manifest", 2), (f"{path}.log", 5)]
    finally:
        m.close()
