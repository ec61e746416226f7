"""Key pairs held by a key service, each against its real server on 127.0.0.1: local-kms (AWS KMS API), OpenBao
(Vault Transit) and opencryptoki's software token (PKCS#11).

Copies wrap locally (the public key is fetched once), fetches unwrap through the service once per segment, the
faults (unreachable, access denied, key disabled or deleted) fail a fetch with a retriable exception naming the
pair, the provider, the key and the permission, and `kts keys rotate` moves a store between providers.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import TIP, encryption_configs
from key_services import (
    Server,
    free_port,
    kms_client,
    kms_rsa_key,
    pair_configs,
    pkcs11_rsa_key,
    transit_rsa_key,
    vault_client,
)
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from encryption.errors import KeyServiceError
from encryption.keyservice import CallEvent, DataKeyCache, ServiceKeyPair
from encryption.providers import AwsKms, Pkcs11, VaultTransit
from rsm.core.manifest import SegmentManifest
from rsm.core.object_keys import segment_keys
from rsm.errors import KeyServiceException, RetriableRemoteStorageException
from rsm.metrics.prometheus import SnapshotCollector
from rsm.operator_tools.rotation import rewrap_all

PROVIDERS = ("aws-kms", "vault-transit", "pkcs11")


def _service(provider: str, request: pytest.FixtureRequest, key: str | None = None) -> tuple[Any, str, Server | None]:
    """A client of a new key on ``provider``'s server: (service, key, server)."""
    if provider == "aws-kms":
        server = request.getfixturevalue("local_kms")
        key = key or kms_rsa_key(server)
        return AwsKms(key, "us-east-1", server.url, "x", "x", timeout_s=2), key, server
    if provider == "vault-transit":
        server = request.getfixturevalue("openbao")
        key = key or transit_rsa_key(server)
        return VaultTransit(key, server.url, "root", timeout_s=2), key, server
    request.getfixturevalue("pkcs11_token")
    from key_services import PKCS11_LIBRARY, PKCS11_TOKEN_LABEL, PKCS11_USER_PIN

    key = key or pkcs11_rsa_key()
    return Pkcs11(key, PKCS11_LIBRARY, PKCS11_TOKEN_LABEL, None, PKCS11_USER_PIN), key, None


def _pair(service: Any, events: list[CallEvent], cache_size: int = 100) -> ServiceKeyPair:
    return ServiceKeyPair("kms1", service, DataKeyCache(cache_size, 3600), events.append)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_copies_wrap_locally_and_fetches_unwrap_once(provider: str, request: pytest.FixtureRequest) -> None:
    service, key, _ = _service(provider, request)
    events: list[CallEvent] = []
    pair = _pair(service, events)
    fields = [pair.wrap_field(os.urandom(32)) for _ in range(5)]
    assert [e.operation for e in events] == ["get-public-key"], "copies after the first must not call the service"
    scheme = fields[0].split(":")[1]
    assert scheme.startswith(f"{provider};rsa-oaep-sha256;") and all(f.count(":") == 2 for f in fields)

    from encryption.keyring import RsaKeyRing

    ring = RsaKeyRing({"kms1": pair}, "kms1")
    data_key = os.urandom(32)
    field = ring.wrap(data_key)
    events.clear()
    assert ring.unwrap(field) == data_key
    assert ring.unwrap(field) == data_key  # the second read of the segment: from the cache
    assert [e.operation for e in events] == ["decrypt", "cache-hit"]
    assert all(e.provider == provider and not e.error for e in events)
    pair.check()


@pytest.mark.timeout(120)
def test_the_cache_is_bounded(request: pytest.FixtureRequest) -> None:
    kms_srv = request.getfixturevalue("local_kms")
    service = AwsKms(kms_rsa_key(kms_srv), "us-east-1", kms_srv.url, "x", "x")
    events: list[CallEvent] = []
    pair = _pair(service, events, cache_size=2)
    keys = [os.urandom(32) for _ in range(3)]
    from encryption.keyring import RsaKeyRing

    ring = RsaKeyRing({"kms1": pair}, "kms1")
    fields = [ring.wrap(k) for k in keys]
    for f, k in zip(fields, keys, strict=True):
        assert ring.unwrap(f) == k
    assert len(pair.cache) == 2
    events.clear()
    assert ring.unwrap(fields[0]) == keys[0]  # evicted: unwrapped by the service again
    assert [e.operation for e in events] == ["decrypt"]


def _assert_names_everything(e: BaseException, provider: str, key: str, permission_word: str) -> None:
    text = str(e)
    for part in ("'kms1'", provider, key, permission_word):
        assert part in text, (part, text)


@pytest.mark.timeout(120)
def test_aws_kms_faults(request: pytest.FixtureRequest) -> None:
    kms_srv = request.getfixturevalue("local_kms")
    key = kms_rsa_key(kms_srv)
    pair = _pair(AwsKms(key, "us-east-1", kms_srv.url, "x", "x", timeout_s=2), [])
    field = pair.wrap_field(os.urandom(32))
    wrapped = base64.b64decode(field.split(":")[2])
    scheme = field.split(":")[1]
    client = kms_client(kms_srv.url)
    client.disable_key(KeyId=key)
    with pytest.raises(KeyServiceError) as got:
        pair.unwrap_field(scheme, wrapped)
    assert got.value.retriable and "disabled" in str(got.value)
    _assert_names_everything(got.value, "aws-kms", key, "kms:Decrypt")
    pair.wrap_field(os.urandom(32))  # copies keep working: wrapping is local
    client.enable_key(KeyId=key)
    assert len(pair.unwrap_field(scheme, wrapped)) == 32
    client.schedule_key_deletion(KeyId=key, PendingWindowInDays=7)
    pair.cache._entries.clear()
    with pytest.raises(KeyServiceError) as got:
        pair.unwrap_field(scheme, wrapped)
    assert got.value.retriable and "pending deletion" in str(got.value)
    missing = _pair(AwsKms("11111111-2222-3333-4444-555555555555", "us-east-1", kms_srv.url, "x", "x"), [])
    with pytest.raises(KeyServiceError, match="does not exist"):
        missing.check()
    closed = free_port()  # nothing listens there: unreachable
    down = _pair(AwsKms(key, "us-east-1", f"http://127.0.0.1:{closed}", "x", "x", timeout_s=1), [])
    with pytest.raises(KeyServiceError) as got:
        down.unwrap_field(scheme, wrapped)
    assert got.value.retriable and "unreachable" in str(got.value)
    _assert_names_everything(got.value, "aws-kms", key, "kms:Decrypt")


@pytest.mark.timeout(120)
def test_vault_transit_faults(request: pytest.FixtureRequest) -> None:
    bao_srv = request.getfixturevalue("openbao")
    key = transit_rsa_key(bao_srv)
    root = vault_client(bao_srv.url)
    pair = _pair(VaultTransit(key, bao_srv.url, "root", timeout_s=2), [])
    field = pair.wrap_field(os.urandom(32))
    scheme, wrapped = field.split(":")[1], base64.b64decode(field.split(":")[2])
    assert scheme == "vault-transit;rsa-oaep-sha256;1"
    # A token whose policy reads the key but may not decrypt: access denied.
    root.sys.create_or_update_policy(
        name=f"read-{key}", policy=f'path "transit/keys/{key}" {{ capabilities = ["read"] }}'
    )
    token = root.auth.token.create(policies=[f"read-{key}"], ttl="10m")["auth"]["client_token"]
    denied = _pair(VaultTransit(key, bao_srv.url, token, timeout_s=2), [])
    with pytest.raises(KeyServiceError) as got:
        denied.unwrap_field(scheme, wrapped)
    assert got.value.retriable and "access denied" in str(got.value)
    _assert_names_everything(got.value, "vault-transit", key, f"transit/decrypt/{key}")
    # The key rotated in Transit: the pinned version (1) still unwraps; a new pair pins version 2.
    root.secrets.transit.rotate_key(name=key)
    assert len(pair.unwrap_field(scheme, wrapped)) == 32
    assert _pair(VaultTransit(key, bao_srv.url, "root"), []).wrap_field(b"k" * 32).split(":")[1].endswith(";2")
    # Deleted: retriable (the key may be restored from a backup), naming the key.
    root.secrets.transit.update_key_configuration(name=key, deletion_allowed=True)
    root.secrets.transit.delete_key(name=key)
    pair.cache._entries.clear()
    with pytest.raises(KeyServiceError) as got:
        pair.unwrap_field(scheme, wrapped)
    assert got.value.retriable
    _assert_names_everything(got.value, "vault-transit", key, "decrypt")
    down = _pair(VaultTransit(key, f"http://127.0.0.1:{free_port()}", "root", timeout_s=1), [])
    with pytest.raises(KeyServiceError, match="unreachable") as got:
        down.check()
    assert got.value.retriable


@pytest.mark.timeout(120)
def test_pkcs11_faults(request: pytest.FixtureRequest) -> None:
    token_label = request.getfixturevalue("pkcs11_token")
    from key_services import PKCS11_LIBRARY

    key = pkcs11_rsa_key()
    pair = _pair(Pkcs11(key, PKCS11_LIBRARY, token_label, None, "12341234"), [])
    field = pair.wrap_field(os.urandom(32))
    scheme, wrapped = field.split(":")[1], base64.b64decode(field.split(":")[2])
    assert len(pair.unwrap_field(scheme, wrapped)) == 32
    # A wrong PIN, in a process of its own (a PKCS#11 login belongs to the process, and this one is logged in).
    probe = (
        "import sys; from encryption.providers import Pkcs11; from encryption.keyservice import *; "
        "from encryption.errors import KeyServiceError\n"
        f"pair = ServiceKeyPair('kms1', Pkcs11({key!r}, {PKCS11_LIBRARY!r}, {token_label!r}, None, '00000000'), "
        "DataKeyCache(1, 1))\n"
        "try:\n    pair.check()\nexcept KeyServiceError as e:\n    print(e.retriable, e)\n    sys.exit(0)\n"
        "sys.exit('no error')"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # Not retriable: tokens lock the PIN after a few failed logins (test_key_service_faults.py tries a thousand).
    assert done.stdout.startswith("False ") and "CKR_PIN_INCORRECT" in done.stdout, done.stdout
    _assert_names_everything(Exception(done.stdout), "pkcs11", key, "user PIN")
    gone = _pair(Pkcs11("no-such-label", PKCS11_LIBRARY, token_label, None, "12341234"), [])
    with pytest.raises(KeyServiceError, match="NoSuchKey"):
        gone.check()


def _store(tmp_path: Path) -> dict[str, str]:
    return {
        "chunk.size": "8192",
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp_path / "store"),
        "storage.fsync.enabled": "false",
    }


def _ring(pairs: dict[str, dict[str, str]], active: str) -> dict[str, str]:
    out = {"encryption.enabled": "true", "encryption.key.pair.id": active, "encryption.key.pairs": ",".join(pairs)}
    for configs in pairs.values():
        out |= configs
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_segment_round_trips_with_no_private_key_on_disk(
    provider: str, request: pytest.FixtureRequest, segment_factory: Any, tmp_path: Path
) -> None:
    from rsm import RemoteStorageManager

    _service_, key, server = _service(provider, request)
    seg = segment_factory(target_bytes=40 * 1024, seed=11)
    configs = {**_store(tmp_path), **_ring({"svc": pair_configs("svc", provider, key, server, tmp_path)}, "svc")}
    assert not [k for k in configs if "private" in k]
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        raw = (tmp_path / "store" / segment_keys("", meta).manifest).read_bytes()
        data_key = SegmentManifest.from_json_bytes(raw).encryption.data_key  # type: ignore[union-attr]
        assert data_key.startswith(f"svc:{provider};rsa-oaep-sha256;")
        assert data_key.count(":") != 1, "Aiven's plugin and older versions of ours must refuse this field"
        with m.fetch_log_segment(meta, 0) as f:
            assert f.read() == seg.log.read_bytes()
    finally:
        m.close()
    assert not list(tmp_path.rglob("*.pem"))


@pytest.mark.timeout(240)
def test_fetch_fails_retriably_while_the_key_is_disabled_and_copies_go_on(
    request: pytest.FixtureRequest, segment_factory: Any, tmp_path: Path
) -> None:
    kms_srv = request.getfixturevalue("local_kms")
    from rsm import RemoteStorageManager

    key = kms_rsa_key(kms_srv)
    seg = segment_factory(target_bytes=20 * 1024, seed=12)
    configs = {**_store(tmp_path), **_ring({"svc": pair_configs("svc", "aws-kms", key, kms_srv, tmp_path)}, "svc")}
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        first = seg.to_metadata(TIP)
        m.copy_log_segment_data(first, seg.to_log_segment_data())
        kms_client(kms_srv.url).disable_key(KeyId=key)
        second = seg.to_metadata(TIP)
        m.copy_log_segment_data(second, seg.to_log_segment_data())  # wrapping is local
        with pytest.raises(KeyServiceException) as got:
            m.fetch_log_segment(second, 0).read()
        assert isinstance(got.value, RetriableRemoteStorageException)
        for part in ("'svc'", "aws-kms", key, "kms:Decrypt", second.describe()):
            assert part in str(got.value), (part, str(got.value))
        kms_client(kms_srv.url).enable_key(KeyId=key)
        with m.fetch_log_segment(second, 0) as f:
            assert f.read() == seg.log.read_bytes()
    finally:
        m.close()


@pytest.mark.timeout(300)
def test_rotate_from_files_to_aws_kms_to_vault_transit_and_back(
    request: pytest.FixtureRequest, segment_factory: Any, key_pairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    kms_srv, bao_srv = request.getfixturevalue("local_kms"), request.getfixturevalue("openbao")
    from rsm import RemoteStorageManager

    seg = segment_factory(target_bytes=20 * 1024, seed=13)
    file_pair = {k: v for k, v in encryption_configs(key_pairs).items() if k.startswith("encryption.key.pairs.")}
    file_pair2 = {
        k: v
        for k, v in encryption_configs(key_pairs, "kek2", ("kek2",)).items()
        if k.startswith("encryption.key.pairs.")
    }
    kms = pair_configs("kms1", "aws-kms", kms_rsa_key(kms_srv), kms_srv, tmp_path)
    vault = pair_configs("vault1", "vault-transit", transit_rsa_key(bao_srv), bao_srv, tmp_path)
    stages: list[tuple[str, dict[str, dict[str, str]]]] = [
        ("kek1", {"kek1": file_pair}),
        ("kms1", {"kek1": file_pair, "kms1": kms}),
        ("vault1", {"kms1": kms, "vault1": vault}),
        ("kek2", {"vault1": vault, "kek2": file_pair2}),  # and back to key files, which Aiven's plugin reads
    ]
    metas = [seg.to_metadata(TIP) for _ in range(3)]

    def manager(active: str, pairs: dict[str, dict[str, str]]) -> Any:
        m = RemoteStorageManager()
        m.configure({**_store(tmp_path), **_ring(pairs, active)})
        return m

    first = manager(*stages[0])
    for meta in metas:
        first.copy_log_segment_data(meta, seg.to_log_segment_data())
    first.close()
    for active, pairs in stages[1:]:
        m = manager(active, pairs)
        try:
            report = rewrap_all(m)
            assert report.failed == {} and sum(report.rewrapped.values()) == 3, report
            again = rewrap_all(m)  # resumable: a second run finds everything current
            assert again.already_current == 3 and not again.rewrapped
            for meta in metas:
                assert m.fetch_manifest(meta).encryption.key_pair_id == active  # type: ignore[union-attr]
                with m.fetch_log_segment(meta, 0) as f:
                    assert f.read() == seg.log.read_bytes()
        finally:
            m.close()


def _key_service_beans(manager: Any) -> dict[str, dict[str, float]]:
    return {
        dict(tags)["provider"]: values
        for _domain, type_, tags, values in manager.metrics_registry.beans()
        if type_ == "key-service-metrics"
    }


@pytest.mark.timeout(240)
def test_one_unwrap_per_segment_read_is_counted_per_provider(
    request: pytest.FixtureRequest, segment_factory: Any, tmp_path: Path
) -> None:
    from rsm import RemoteStorageManager

    kms_srv = request.getfixturevalue("local_kms")
    seg = segment_factory(target_bytes=40 * 1024, seed=14)
    pair = pair_configs("svc", "aws-kms", kms_rsa_key(kms_srv), kms_srv, tmp_path)
    m = RemoteStorageManager()
    m.configure({**_store(tmp_path), **_ring({"svc": pair}, "svc"), "fetch.manifest.cache.size": "0"})
    try:
        assert "calls-total" in _key_service_beans(m)["aws-kms"]  # declared before the first call
        metas = [seg.to_metadata(TIP) for _ in range(3)]
        for meta in metas:
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
        # the public key, once (fetched in the background at configure(), or by the first copy): copies wrap locally
        assert _key_service_beans(m)["aws-kms"]["calls-total"] == 1
        for _ in range(2):
            for meta in metas:
                for position in (0, 8192, 16384):  # several fetches of each segment
                    with m.fetch_log_segment(meta, position) as f:
                        assert f.read() == seg.log.read_bytes()[position:]
        beans = _key_service_beans(m)["aws-kms"]
        assert beans["calls-total"] == 1 + len(metas), beans  # one unwrap per segment, the rest from the cache
        assert beans["cache-hits-total"] > 0 and beans["call-errors-total"] == 0, beans
        assert beans["call-time-max"] > 0
        # The alert rule reads these series under the names the sidecar's Prometheus endpoint gives them.
        registry = CollectorRegistry()
        registry.register(SnapshotCollector(m.metrics_snapshot))
        text = generate_latest(registry).decode()
        rules = yaml.safe_load((Path(__file__).parents[2] / "rsm/metrics/monitoring/prometheus-alerts.yml").read_text())
        expr = next(r["expr"] for g in rules["groups"] for r in g["rules"] if r["alert"] == "KtsKeyServiceErrors")
        for name in set(re.findall(r"\b(kts_[a-z0-9_]+)\b", expr)):
            assert f'{name}{{provider="aws-kms"}}' in text, (name, text[:2000])
    finally:
        m.close()


def _broker_file(tmp_path: Path, pairs: dict[str, dict[str, str]], active: str) -> Path:
    props = {
        "remote.log.storage.system.enable": "true",
        **{f"rsm.config.{k}": v for k, v in {**_store(tmp_path), **_ring(pairs, active)}.items()},
    }
    (tmp_path / "store").mkdir(exist_ok=True)
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


@pytest.mark.timeout(240)
def test_kts_keys_and_config_check_connect_ask_each_service(
    request: pytest.FixtureRequest, key_pairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    kms_srv, bao_srv = request.getfixturevalue("local_kms"), request.getfixturevalue("openbao")
    kms_key = kms_rsa_key(kms_srv)
    file_pair = {k: v for k, v in encryption_configs(key_pairs).items() if k.startswith("encryption.key.pairs.")}
    pairs = {
        "kek1": file_pair,
        "kms1": pair_configs("kms1", "aws-kms", kms_key, kms_srv, tmp_path),
        "vault1": pair_configs("vault1", "vault-transit", "no-such-key", bao_srv, tmp_path),
    }
    props = _broker_file(tmp_path, pairs, "kms1")
    kts = str(Path(sys.executable).parent / "kts")
    done = subprocess.run([kts, "keys", "--config", str(props)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {line.lstrip("* ").split()[0]: line for line in done.stdout.splitlines()}
    assert lines["kms1"].startswith("* kms1") and "aws-kms" in lines["kms1"] and lines["kms1"].endswith("answers")
    assert "vault-transit" in lines["vault1"] and "DOES NOT ANSWER" in lines["vault1"]
    assert "file" in lines["kek1"]
    assert "no-such-key" in done.stderr and "vault-transit" in done.stderr
    done = subprocess.run(
        [kts, "config", "check", "--connect", str(props)], capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert f"key pair kms1: aws-kms key {kms_key} answers and holds the key" in out, out
    assert "--connect: key pair vault1:" in out and "no-such-key" in out, out
    assert done.returncode == 1
