"""`kts gc --delete` moves what it removes into the quarantine, on every store, and the operator's commands around
it work as documented: the bytes held are the bytes removed; `kts gc restore` brings them back byte for byte and
never overwrites a live object; `kts gc purge` removes; another application's object under the prefix is never
touched; an item lacking one of its rule's signals is kept; expired holds are purged by the next `--delete`; a
read-only `kts gc` (and `kts gc quarantine`) creates nothing.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from emulators import EVERY_STORE, empty_store_config
from helpers import TIP

from rsm import RemoteStorageManager
from rsm.cli.main import main
from rsm.core.object_keys import segment_keys
from rsm.metadata import random_kafka_uuid

PREFIX = "tiered/"
FOREIGN = {f"{PREFIX}orders-notes.log": b"someone else's log", f"{PREFIX}backups/db.indexes": b"a backup's index"}


def _fetch(manager: RemoteStorageManager, key: str) -> bytes:
    with manager.backend.fetch(key) as f:
        return f.read()


def _start_upload(backend: Any, key: str) -> bool:
    """An unfinished upload of ``key`` where the store can list one (S3, Azure, the filesystem); False on GCS."""
    name = type(backend).__name__
    if name == "S3Backend":
        started = backend.client.create_multipart_upload(Bucket=backend.bucket, Key=key)
        backend.client.upload_part(
            Bucket=backend.bucket, Key=key, UploadId=started["UploadId"], PartNumber=1, Body=b"x" * 1024
        )
        return True
    if name == "AzureBlobBackend":
        backend.container_client.get_blob_client(key).stage_block("YmxvY2stMDAwMQ==", b"x" * 1024)
        return True
    if name == "FileSystemBackend":
        from backends.filesystem_files import TEMP_PREFIX

        directory, _, base = key.rpartition("/")
        (Path(backend.root) / directory).mkdir(parents=True, exist_ok=True)
        (Path(backend.root) / directory / f"{TEMP_PREFIX}{base}.abc123").write_bytes(b"x" * 1024)
        return True
    return False


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flavour", EVERY_STORE)
def test_delete_holds_restore_puts_back_purge_removes(
    flavour: str,
    request: pytest.FixtureRequest,
    segment_factory: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seg = segment_factory(target_bytes=64 * 1024, seed=5)
    configs = {"chunk.size": "16384", "key.prefix": PREFIX, **empty_store_config(flavour, request, tmp_path, "gcq")}
    m = RemoteStorageManager()
    m.configure(configs)
    kept, crashed = seg.to_metadata(TIP), seg.to_metadata(TIP)
    crashed_keys = segment_keys(PREFIX, crashed)
    try:
        for meta in (kept, crashed):
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
        m.backend.delete(crashed_keys.manifest)  # a copy that died before its manifest
        originals = {k: _fetch(m, k) for k in (crashed_keys.log, crashed_keys.indexes)}
        for key, body in FOREIGN.items():
            m.backend.upload(key, io.BytesIO(body))
        # a fresh upload of the plugin's layout: older than --older-than, not older than the upload deadline
        fresh_upload = f"{PREFIX}orders-{TIP.topic_id}/7/{5:020d}-{random_kafka_uuid()}.log"
        # moto dates every multipart upload in 2010 (a fixed Initiated): there an upload is never fresh
        has_uploads = _start_upload(m.backend, fresh_upload) and flavour != "s3-moto"
        before = set(m.backend.list(""))
    finally:
        m.close()
    props = tmp_path / "plugin.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in configs.items()))
    cfg = ["--config", str(props)]
    time.sleep(1.1)  # object stores date objects to the second
    capsys.readouterr()

    # read-only commands create nothing
    assert main(["gc", *cfg, "--older-than", "0s"]) == 0
    assert main(["gc", "quarantine", *cfg]) == 0
    assert "0 objects, 0 bytes" in capsys.readouterr().out

    assert main(["gc", *cfg, "--older-than", "0s", "--delete"]) == 0
    out = capsys.readouterr().out
    run = re.search(r"run (\d{8}T\d{6}Z-[0-9a-f]{4})", out)
    assert run is not None, out
    run_id = run.group(1)
    assert "moved 2 objects" in out and "failed 0" in out, out
    if has_uploads:
        assert re.search(r"skipped \S+ \S+: .* lacks the signal\(s\) upload-deadline", out.replace("\n", " ")), out

    m = RemoteStorageManager()
    m.configure(configs)
    try:
        listed = set(m.backend.list(""))
        quarantined = {k for k in listed if k.startswith(f"{PREFIX}kts-quarantine/")}
        assert listed - quarantined == before - set(originals), "exactly the crashed copy's objects left"
        for key, body in FOREIGN.items():
            assert _fetch(m, key) == body
        for key, body in originals.items():
            location = f"{PREFIX}kts-quarantine/{run_id}/{key[len(PREFIX) :]}"
            assert location in quarantined and location + ".kts-held.json" in quarantined
            assert _fetch(m, location) == body, "the held bytes are the removed bytes"
        assert not [k for k in quarantined if any(f[len(PREFIX) :] in k for f in FOREIGN)]

        assert main(["ls", *cfg]) == 0
        held_bytes = sum(len(b) for b in originals.values())
        assert f"quarantine: 2 objects, {held_bytes:,} bytes held" in capsys.readouterr().out

        assert main(["gc", *cfg, "quarantine", "--run", run_id]) == 0  # --config given to kts gc itself
        out = capsys.readouterr().out
        assert crashed_keys.log in out and crashed_keys.indexes in out and "orphan-object" in out

        # a live object now has one of the names: restore refuses it and puts the other back byte for byte
        m.backend.upload(crashed_keys.indexes, io.BytesIO(b"a new life"))
        assert main(["gc", "restore", *cfg, "--run", run_id]) == 1
        out, err = capsys.readouterr()
        assert f"restored {crashed_keys.log}" in out and f"REFUSED {crashed_keys.indexes}" in err, out + err
        assert _fetch(m, crashed_keys.log) == originals[crashed_keys.log]
        assert _fetch(m, crashed_keys.indexes) == b"a new life"

        assert main(["gc", "restore", *cfg, "--key", crashed_keys.log]) == 1  # nothing held under it now
        assert "nothing in the quarantine" in capsys.readouterr().err
        assert main(["gc", "restore", *cfg]) == 2  # a scope is required
        assert main(["gc", *cfg, "--delete", "purge", "--run", run_id]) == 2  # --delete means nothing to purge
        assert "do not apply to kts gc purge" in capsys.readouterr().err

        assert main(["gc", "purge", *cfg, "--run", run_id, "--yes"]) == 0
        assert f"purged 1 objects, {len(originals[crashed_keys.indexes]):,} bytes" in capsys.readouterr().out
        assert not [k for k in m.backend.list(f"{PREFIX}kts-quarantine/")]

        # held again (the restored .log and the new .indexes are orphans still), then purged as expired by the
        # next --delete once the retention is shorter than their time in the quarantine
        assert main(["gc", *cfg, "--older-than", "0s", "--delete"]) == 0
        out = capsys.readouterr().out
        assert "moved 2 objects" in out and "purged 0 objects" in out, out
        assert main(["gc", *cfg, "--set", "gc.quarantine.ms=0", "--older-than", "0s", "--delete"]) == 0
        out = capsys.readouterr().out
        assert "moved 0 objects" in out and "purged 2 objects" in out, out
        assert not set(originals) & set(m.backend.list(PREFIX))
        assert not [k for k in m.backend.list(f"{PREFIX}kts-quarantine/")]
    finally:
        m.close()
