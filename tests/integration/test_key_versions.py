"""The Transit key version runbook of docs/operations.md, run as written against OpenBao.

The commands are read from the documentation's block (``vault`` run as OpenBao's ``bao``, the example key and
configuration file replaced by the test's): segments written under version 1, the key rotated, new segments under
version 2, ``kts keys rotate`` re-wrapping the old ones, ``min_decryption_version`` raised, version 1 trimmed, and
every segment still read byte for byte.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import TIP
from key_services import pair_configs, transit_rsa_key, vault_client

from rsm.core.manifest import SegmentManifest
from rsm.core.object_keys import segment_keys

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operations.md"
DOC_KEY = "kafka-tiered"
DOC_CONFIG = "/etc/kafka/server.properties"


def runbook() -> list[list[str]]:
    """The commands of the first bash block under the documentation's Transit rotation paragraph."""
    text = DOC.read_text()
    start = text.index("**Vault or OpenBao Transit: a new version of the same key.**")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block is not None, "the Transit rotation paragraph lost its command block"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def _data_key(store: Path, meta: Any) -> str:
    raw = (store / segment_keys("", meta).manifest).read_bytes()
    return SegmentManifest.from_json_bytes(raw).encryption.data_key  # type: ignore[union-attr]


@pytest.mark.timeout(600)
def test_the_transit_version_runbook(request: pytest.FixtureRequest, segment_factory: Any, tmp_path: Path) -> None:
    server = request.getfixturevalue("openbao")
    from rsm import RemoteStorageManager

    key = transit_rsa_key(server)
    store = tmp_path / "store"
    store.mkdir()
    configs = {
        "chunk.size": "8192",
        "storage.backend.class": "filesystem",
        "storage.root": str(store),
        "storage.fsync.enabled": "false",
        "encryption.enabled": "true",
        "encryption.key.pair.id": "vault1",
        "encryption.key.pairs": "vault1",
        # The broker refreshes its pinned public key at the first copy after this (the default is 5 minutes).
        "encryption.key.service.public.key.refresh.ms": "1",
        **pair_configs("vault1", "vault-transit", key, server, tmp_path),
    }
    props = tmp_path / "server.properties"
    props.write_text(
        "remote.log.storage.system.enable=true\n" + "".join(f"rsm.config.{k}={v}\n" for k, v in configs.items())
    )
    seg = segment_factory(target_bytes=30 * 1024, seed=41)
    expected = seg.log.read_bytes()
    broker = RemoteStorageManager()
    broker.configure(configs)
    old = [seg.to_metadata(TIP) for _ in range(3)]
    new = [seg.to_metadata(TIP) for _ in range(2)]
    try:
        for meta in old:
            broker.copy_log_segment_data(meta, seg.to_log_segment_data())
        assert all(_data_key(store, m).split(":")[1].endswith(";1") for m in old)
        v1_field = _data_key(store, old[0])

        env = {**os.environ, "VAULT_ADDR": server.url, "BAO_ADDR": server.url, "VAULT_TOKEN": "root",
               "BAO_TOKEN": "root"}  # fmt: skip
        bin_dir = Path(sys.executable).parent
        outputs: list[str] = []
        for argv in runbook():
            argv = [a.replace(DOC_KEY, key).replace(DOC_CONFIG, str(props)) for a in argv]
            tool = {"vault": bin_dir / "bao", "kts": bin_dir / "kts"}[argv[0]]
            done = subprocess.run([str(tool), *argv[1:]], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
            outputs.append(done.stdout)
            if argv[:3] == ["vault", "write", "-f"] and argv[3].endswith("/rotate"):
                # The brokers go on copying: past the refresh time, new segments are wrapped under version 2.
                for meta in new:
                    broker.copy_log_segment_data(meta, seg.to_log_segment_data())
                assert all(_data_key(store, m).split(":")[1].endswith(";2") for m in new)

        commands = [" ".join(a[:3]) for a in runbook()]
        assert commands == [
            "vault write -f",
            "kts keys --config",
            "kts keys rotate",
            "kts keys rotate",
            "kts keys --config",
            "vault write transit/keys/kafka-tiered/config",
            "kts verify --config",
            "vault write transit/keys/kafka-tiered/trim",
        ], commands
        status, dry, real, usage = outputs[1], outputs[2], outputs[3], outputs[4]
        assert re.search(rf"\* vault1\tvault-transit\t{key}\tv2\tanswers", status), status
        assert "would re-wrap 3 onto vault1 (from: vault1 v1=3)" in dry and "already current 2" in dry, dry
        assert "re-wrapped 3 onto vault1 (from: vault1 v1=3)" in real and "failed 0" in real, real
        assert "segments vault1 v2\t5" in usage and " v1" not in usage, usage
        assert all(_data_key(store, m).split(":")[1].endswith(";2") for m in old + new)
    finally:
        broker.close()

    # Version 1 is gone from Transit: the old field cannot be unwrapped any more.
    data = vault_client(server.url).secrets.transit.read_key(name=key)["data"]
    assert sorted(data["keys"]) == ["2"] and data["min_decryption_version"] == 2, data
    import hvac.exceptions

    with pytest.raises(hvac.exceptions.InvalidRequest):
        vault_client(server.url).secrets.transit.decrypt_data(name=key, ciphertext="vault:v1:" + v1_field.split(":")[2])
    # A broker started now (nothing cached) reads every segment, byte for byte.
    reader = RemoteStorageManager()
    reader.configure(configs)
    try:
        for meta in old + new:
            with reader.fetch_log_segment(meta, 0) as f:
                assert f.read() == expected
    finally:
        reader.close()
