"""Key pairs held by a key service in a real Kafka 4.x broker (the shim's sidecar, filesystem store): the broker
tiers a topic and serves it back record by record with each provider, and never has a private key in its
configuration or on its disk; `kts keys rotate` moves the store from file keys to aws-kms and then to
vault-transit while the broker serves it.

The services are the real servers of tests/support/key_services.py (local-kms, OpenBao, opencryptoki).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jvm_testing as jt
import kafka_dist as kd
import pytest
from Crypto.PublicKey import RSA
from key_services import kms_rsa_key, pair_configs, pkcs11_rsa_key, transit_rsa_key

TOPIC = "keys"
RECORDS = 4000  # about 2 MiB: one or two closed segments
SEGMENT_BYTES = 1024 * 1024


def record(i: int) -> bytes:
    return f"record-{i:06d}-".encode() + bytes([97 + i % 26]) * (i * 37 % 1000)


def _ring(pairs: dict[str, dict[str, str]], active: str) -> dict[str, str]:
    out = {"encryption.enabled": "true", "encryption.key.pair.id": active, "encryption.key.pairs": ",".join(pairs)}
    for configs in pairs.values():
        out |= configs
    return out


def _tier(broker: Any, values: list[bytes]) -> None:
    kd.create_topic(
        broker,
        TOPIC,
        {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1"},
    )
    kd.produce(broker.bootstrap, TOPIC, values)
    local = broker.data / f"{TOPIC}-0"
    kd.wait_while_running(lambda: kd.tiered_locally(local), 300, "every closed segment is tiered", broker)


def _read_back(broker: Any, values: list[bytes]) -> None:
    got = kd.consume(broker.bootstrap, TOPIC, len(values))
    assert [o for o, _ in got] == list(range(len(values)))
    for offset, value in got:
        assert value == values[offset], f"record {offset} came back different"


def _no_private_key(broker: Any, plugin: str, tmp_path: Path) -> None:
    assert "private" not in plugin, plugin
    assert "private" not in (broker.work / "server.properties").read_text()
    pems = [p for p in tmp_path.rglob("*.pem") if b"PRIVATE KEY" in p.read_bytes()]
    assert pems == [], pems


@pytest.mark.timeout(900)
@pytest.mark.parametrize("provider", ["aws-kms", "vault-transit", "pkcs11"])
def test_a_broker_tiers_and_serves_with_a_key_service(
    provider: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    jt.ensure_built()
    if provider == "aws-kms":
        server = request.getfixturevalue("local_kms")
        key = kms_rsa_key(server)
    elif provider == "vault-transit":
        server = request.getfixturevalue("openbao")
        key = transit_rsa_key(server)
    else:
        request.getfixturevalue("pkcs11_token")
        server, key = None, pkcs11_rsa_key()
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    extra = _ring({"svc": pair_configs("svc", provider, key, server, secrets)}, "svc")
    plugin = kd.plugin_properties(tmp_path / "remote", "sidecar", **extra)
    values = [record(i) for i in range(RECORDS)]
    with kd.running_broker(kd.NEWEST_4X, tmp_path / "broker", plugin) as broker:
        _tier(broker, values)
        manifests = list((tmp_path / "remote").rglob("*.rsm-manifest"))
        assert manifests and all(f'"dataKey":"svc:{provider};'.encode() in m.read_bytes() for m in manifests)
        _read_back(broker, values)
        _no_private_key(broker, plugin, tmp_path)


@pytest.mark.timeout(1200)
def test_kts_keys_rotate_moves_a_served_store_from_files_to_aws_kms_to_vault_transit(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    jt.ensure_built()
    kms_srv, bao_srv = request.getfixturevalue("local_kms"), request.getfixturevalue("openbao")
    # The file pair's private key lives only with the operator's tool (another host in production): the broker has
    # its public key, so it can wrap, and reads only what the rotation moved onto a key service.
    operator = tmp_path / "operator"
    operator.mkdir()
    key = RSA.generate(2048)
    (operator / "kek1-private.pem").write_bytes(key.export_key(pkcs=8))
    broker_side = tmp_path / "broker-keys"
    broker_side.mkdir()
    (broker_side / "kek1-public.pem").write_bytes(key.public_key().export_key())
    public_only = {"encryption.key.pairs.kek1.public.key.file": str(broker_side / "kek1-public.pem")}
    kms = pair_configs("kms1", "aws-kms", kms_rsa_key(kms_srv), kms_srv, broker_side)
    vault = pair_configs("vault1", "vault-transit", transit_rsa_key(bao_srv), bao_srv, broker_side)
    ring = {"kek1": public_only, "kms1": kms, "vault1": vault}
    # Every fetch reads its manifest again, so each read below goes through the service the manifest names now.
    extra = {**_ring(ring, "kek1"), "fetch.manifest.cache.size": "0"}
    store = tmp_path / "remote"
    plugin = kd.plugin_properties(store, "sidecar", **extra)
    tool = tmp_path / "tool.properties"
    tool_ring = _ring(
        {**ring, "kek1": {"encryption.key.pairs.kek1.private.key.file": str(operator / "kek1-private.pem")}}, "kek1"
    )
    tool.write_text(
        "".join(
            f"rsm.config.{k}={v}\n"
            for k, v in {
                "storage.backend.class": "filesystem",
                "storage.root": str(store),
                "chunk.size": "65536",
                **tool_ring,
            }.items()
        )
    )
    kts = str(Path(sys.executable).parent / "kts")
    values = [record(i) for i in range(RECORDS)]
    with kd.running_broker(kd.NEWEST_4X, tmp_path / "broker", plugin) as broker:
        _tier(broker, values)
        manifests = list(store.rglob("*.rsm-manifest"))
        assert manifests and all(b'"dataKey":"kek1:' in m.read_bytes() for m in manifests)
        for target in ("kms1", "vault1"):
            done = subprocess.run(
                [kts, "keys", "rotate", "--config", str(tool), "--to", target],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0 and "failed 0" in done.stdout, done.stdout + done.stderr
            assert all(f'"dataKey":"{target}:'.encode() in m.read_bytes() for m in manifests)
            _read_back(broker, values)
        _no_private_key(broker, plugin, tmp_path / "broker-keys")
        _no_private_key(broker, plugin, tmp_path / "broker")
