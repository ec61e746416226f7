"""`kts gc --delete` removes only what is provably the plugin's, on every backend.

Another application's objects and unfinished uploads share the plugin's ``key.prefix`` (empty, as Aiven's default:
the whole bucket). Their names end with ``.log`` or ``.indexes``; none follows the plugin's key layout, so gc
lists none of them and deletes none, while the plugin's own leftovers (data without a manifest, a manifest
without data, an unfinished upload of one of its keys) go.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pytest
from emulators import EVERY_STORE, empty_store_config
from helpers import TIP

from backends.filesystem_files import TEMP_PREFIX
from rsm import RemoteStorageManager
from rsm.cli.main import main
from rsm.core.object_keys import Suffix, parse_object_key, segment_keys
from rsm.metadata import random_kafka_uuid

FOREIGN = {
    "logs/app.log": b"application log line\n",
    "backups/2026/db.indexes": b"a database backup's index",
    "orders-notes.log": b"notes",
    "orders-x/0/readme.log": b"readme",
    f"orders-{TIP.topic_id}/7/readme.log": b"not a segment",
    f"orders-{TIP.topic_id}/7/{0:020d}-notes.rsm-manifest": b"{}",
}
FOREIGN_UPLOADS = ["logs/big.log", "backups/2026/huge.indexes"]


def test_only_the_layout_parses() -> None:
    key = f"p/orders-{TIP.topic_id}/7/{1234:020d}-tqimKeZwStOEOwRzT3L5oQ.log"
    parsed = parse_object_key(key, "p/")
    assert parsed is not None and parsed.suffix is Suffix.LOG and parsed.start_offset == 1234
    assert parsed.keys.log == key and parsed.partition == 7 and parsed.topic == "orders"
    for foreign in FOREIGN:
        assert parse_object_key(foreign, "") is None, foreign
    assert parse_object_key(key, "q/") is None
    assert parse_object_key(key.replace(".log", ".txt"), "p/") is None
    assert parse_object_key(key.replace("/7/", "/07/"), "p/") is None
    assert parse_object_key(key.replace("0000000001234", "000000001234"), "p/") is None


BACKENDS = EVERY_STORE


def _store(flavour: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    return empty_store_config(flavour, request, tmp_path, "gc")


def _start_upload(backend: Any, key: str, root: Path | None, age: float = 0) -> None:
    """An upload of ``key`` that was started and never finished, as the store keeps it (a filesystem temp file
    dated ``age`` seconds back)."""
    name = type(backend).__name__
    if name == "S3Backend":
        started = backend.client.create_multipart_upload(Bucket=backend.bucket, Key=key)
        backend.client.upload_part(
            Bucket=backend.bucket, Key=key, UploadId=started["UploadId"], PartNumber=1, Body=b"x" * 1024
        )
    elif name == "AzureBlobBackend":
        backend.container_client.get_blob_client(key).stage_block("YmxvY2stMDAwMQ==", b"x" * 1024)
    elif name == "FileSystemBackend":
        assert root is not None
        directory, _, base = key.rpartition("/")
        (root / directory).mkdir(parents=True, exist_ok=True)
        temp = root / directory / f"{TEMP_PREFIX}{base}.abc123"
        temp.write_bytes(b"x" * 1024)
        os.utime(temp, (time.time() - age, time.time() - age))
    # GCS: an open resumable session cannot be listed by anyone, so there is nothing to start or to find.


def _pending(backend: Any) -> list[str]:
    lister = getattr(backend, "list_pending_uploads", None)
    return sorted(u.key for u in lister("")) if lister is not None else []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flavour", BACKENDS)
def test_gc_deletes_only_the_plugins_leftovers(
    flavour: str,
    request: pytest.FixtureRequest,
    segment_factory: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seg = segment_factory(target_bytes=64 * 1024, seed=3)
    configs = {"chunk.size": "16384", "key.prefix": "", **_store(flavour, request, tmp_path)}
    if flavour == "filesystem":
        configs["storage.fsync.enabled"] = "false"  # a key of the filesystem backend only: others refuse it
    root = Path(configs["storage.root"]) if flavour == "filesystem" else None
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        kept, no_manifest, no_data, no_log = (seg.to_metadata(TIP) for _ in range(4))
        for meta in (kept, no_manifest, no_data, no_log):
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
        m.backend.delete(segment_keys("", no_manifest).manifest)  # a copy that died before its manifest
        m.backend.delete_many([segment_keys("", no_data).log, segment_keys("", no_data).indexes])
        m.backend.delete(segment_keys("", no_log).log)  # a classic manifest beside its .indexes only: read, listed
        our_upload = f"orders-{TIP.topic_id}/7/{5:020d}-{random_kafka_uuid()}.log"
        _start_upload(m.backend, our_upload, root, age=120)
        for key, body in FOREIGN.items():
            m.backend.upload(key, io.BytesIO(body))
        for key in FOREIGN_UPLOADS:
            _start_upload(m.backend, key, root)
        foreign_pending = [k for k in _pending(m.backend) if k != our_upload]
        if flavour != "gcs-fake":
            assert our_upload in _pending(m.backend)
            assert sorted(foreign_pending) == sorted(FOREIGN_UPLOADS)
        before = set(m.backend.list(""))
    finally:
        m.close()
    # Uploads count as abandoned past the backend's upload deadline: the shortest each backend allows here.
    deadline = {"filesystem": "stale.upload.age.ms", "s3-moto": "s3.upload.timeout.ms"}
    deadline |= {"s3-seaweedfs": "s3.upload.timeout.ms", "azure-azurite": "azure.upload.timeout.ms"}
    broker = dict(configs)
    if flavour in deadline:
        broker[f"storage.{deadline[flavour]}"] = "60000" if flavour == "filesystem" else "1000"
    props = tmp_path / "plugin.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in broker.items()))
    time.sleep(1.1)  # object stores date objects to the second
    capsys.readouterr()

    assert main(["gc", "--config", str(props), "--older-than", "0s"]) == 0
    out = capsys.readouterr().out
    store_name = (
        configs.get("storage.root")
        or configs.get("storage.s3.bucket.name")
        or configs.get("storage.gcs.bucket.name")
        or configs["storage.azure.container.name"]
    )
    assert store_name in out and "key.prefix ''" in out, out
    for key in FOREIGN:
        assert key not in out, f"{key} of another application is listed:\n{out}"
    assert "manifest-without-data" in out and "orphan-object" in out
    assert segment_keys("", no_log).manifest in out

    assert main(["gc", "--config", str(props), "--older-than", "0s", "--delete"]) == 0
    out = capsys.readouterr().out
    assert "failed 0" in out, out

    m = RemoteStorageManager()
    m.configure(configs)
    try:
        listed = set(m.backend.list(""))
        after = {k for k in listed if not k.startswith("kts-quarantine/")}
        held = {k.split("/", 2)[2] for k in listed - after if not k.endswith(".kts-held.json")}
        assert held == before - after, "the quarantine holds exactly what gc removed"
        for key, body in FOREIGN.items():
            with m.backend.fetch(key) as f:
                assert f.read() == body, key
        assert sorted(k for k in _pending(m.backend)) == sorted(foreign_pending), "a foreign upload was aborted"
        assert after == set(FOREIGN) | set(segment_keys("", kept).all()), sorted(before - after)
        with m.fetch_log_segment(kept, 0) as f:
            assert f.read() == seg.log.read_bytes()
        assert our_upload not in _pending(m.backend)
        for meta in (no_manifest, no_data, no_log):
            assert not [k for k in after if meta.remote_log_segment_id.id in k]
    finally:
        m.close()
