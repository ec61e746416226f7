"""The key services of the key-provider tests, real servers on 127.0.0.1 started by .ci/key_services.py.

local-kms (AWS KMS API) and OpenBao (Vault Transit) run for the session; the PKCS#11 tests use opencryptoki's
software token (pkcsslotd), initialised once. No server is skipped: one that cannot start fails its fixture with
the reason (install them with `make setup`, which runs .ci/install_key_services.sh).

This module is a pytest plugin named in tests/conftest.py, so each fixture is registered once for the session.
Test modules import helpers from here, never a fixture: an imported fixture is registered again in that module
and starts a second server (tests/conftest.py refuses such a run).
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from processes import stop_process

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "key_services.py"
_spec = importlib.util.spec_from_file_location("ci_key_services", SCRIPT)
assert _spec is not None and _spec.loader is not None
ci = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci)

PKCS11_LIBRARY = ci.PKCS11_LIBRARY
PKCS11_TOKEN_LABEL = ci.PKCS11_TOKEN_LABEL
PKCS11_USER_PIN = ci.PKCS11_USER_PIN
AWS = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(proc: subprocess.Popen[bytes], port: int, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} before it listened on 127.0.0.1:{port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def running_local_kms(data: Path) -> Iterator[Server]:
    """local-kms answering on 127.0.0.1 with its database in ``data``; stopped, every process of it, on exit."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "local-kms", str(port), str(data)])
    try:
        _wait_port(proc, port, "local-kms")
        url = f"http://127.0.0.1:{port}"
        client = kms_client(url)
        deadline = time.monotonic() + 60
        while True:  # the bridge listens before local-kms inside its namespace answers
            try:
                client.list_keys()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield Server(url, proc)
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def local_kms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One local-kms for the session."""
    with running_local_kms(tmp_path_factory.mktemp("local-kms")) as server:
        yield server


def kms_client(url: str) -> Any:
    import boto3

    return boto3.session.Session().client("kms", endpoint_url=url, **AWS)


def kms_rsa_key(server: Server, spec: str = "RSA_2048") -> str:
    """A new RSA key for ENCRYPT_DECRYPT; its id."""
    meta = kms_client(server.url).create_key(KeySpec=spec, KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]
    return str(meta["KeyId"])


@contextlib.contextmanager
def running_openbao() -> Iterator[Server]:
    """OpenBao's dev server on 127.0.0.1 with Transit enabled; stopped on exit."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "openbao", str(port)])
    try:
        _wait_port(proc, port, "OpenBao")
        url = f"http://127.0.0.1:{port}"
        client = vault_client(url)
        deadline = time.monotonic() + 30
        while not client.sys.is_initialized() or client.sys.is_sealed():
            if time.monotonic() > deadline:
                pytest.fail("OpenBao did not unseal")
            time.sleep(0.1)
        client.sys.enable_secrets_engine("transit", path="transit")
        yield Server(url, proc)
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def openbao() -> Iterator[Server]:
    """One OpenBao for the session."""
    with running_openbao() as server:
        yield server


def vault_client(url: str, token: str = "root") -> Any:
    import hvac

    return hvac.Client(url=url, token=token)


def transit_rsa_key(server: Server, key_type: str = "rsa-2048") -> str:
    name = f"kek-{uuid.uuid4().hex[:8]}"
    vault_client(server.url).secrets.transit.create_key(name=name, key_type=key_type)
    return name


@pytest.fixture(scope="session")
def pkcs11_token() -> str:
    """The initialised soft token's label (the test PINs are in .ci/key_services.py)."""
    done = subprocess.run([sys.executable, str(SCRIPT), "pkcs11-token"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"the opencryptoki soft token is not ready: {done.stdout} {done.stderr}")
    return PKCS11_TOKEN_LABEL


def pkcs11_rsa_key(bits: int = 2048) -> str:
    """A new RSA key pair on the soft token (the private half sensitive, never extractable); its label."""
    import pkcs11
    from pkcs11 import Attribute, KeyType

    label = f"kek-{uuid.uuid4().hex[:8]}"
    token = pkcs11.lib(PKCS11_LIBRARY).get_token(token_label=PKCS11_TOKEN_LABEL)
    try:
        opened = token.open(rw=True, user_pin=PKCS11_USER_PIN)
    except pkcs11.exceptions.UserAlreadyLoggedIn:  # this process's provider sessions logged in already
        opened = token.open(rw=True)
    with opened as session:
        session.generate_keypair(
            KeyType.RSA,
            bits,
            label=label,
            store=True,
            public_template={Attribute.ENCRYPT: True, Attribute.WRAP: True},
            private_template={
                Attribute.DECRYPT: True,
                Attribute.UNWRAP: True,
                Attribute.SENSITIVE: True,
                Attribute.EXTRACTABLE: False,
            },
        )
    return label


def pair_configs(key_id: str, provider: str, key: str, server: Server | None, tmp: Path) -> dict[str, str]:
    """``encryption.key.pairs.<id>.*`` of a pair held by ``provider`` (secrets in files, none of them a key)."""
    base = f"encryption.key.pairs.{key_id}."
    out = {base + "provider": provider, base + "key.id": key}
    if provider == "aws-kms":
        assert server is not None
        out |= {
            base + "aws.endpoint.url": server.url,
            base + "aws.region": "us-east-1",
            base + "aws.access.key.id": "x",
            base + "aws.secret.access.key": "x",
        }
    elif provider == "vault-transit":
        assert server is not None
        token = tmp / f"{key_id}-vault-token"
        token.write_text("root\n")
        out |= {base + "vault.url": server.url, base + "vault.token.file": str(token)}
    elif provider == "pkcs11":
        pin = tmp / f"{key_id}-pin"
        pin.write_text(PKCS11_USER_PIN + "\n")
        out |= {
            base + "pkcs11.library": PKCS11_LIBRARY,
            base + "pkcs11.token.label": PKCS11_TOKEN_LABEL,
            base + "pkcs11.pin.file": str(pin),
        }
    return out
