"""Key services under faults, against their real servers: opencryptoki's software token and OpenBao.

A wrong PKCS#11 PIN is tried once (tokens lock the user PIN after a few failed logins: opencryptoki's after three),
every session the provider opens is closed when it fails, and a Vault token file rewritten by Vault Agent is read
again, so fetches go on after the old token is revoked.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import TIP
from key_services import PKCS11_LIBRARY, PKCS11_USER_PIN, pair_configs, pkcs11_rsa_key, transit_rsa_key, vault_client

REPO = Path(__file__).resolve().parents[2]

# Run in processes of their own: a PKCS#11 login belongs to the process, and the test process may be logged in
# already (a login with any PIN then succeeds without the token checking it).
_COMMON = f"""
import ctypes, json, pickle, sys
import pkcs11
from pkcs11 import TokenFlag

LIBRARY, LABEL = {PKCS11_LIBRARY!r}, sys.argv[1]

def flags():
    token = pkcs11.lib(LIBRARY).get_token(token_label=LABEL)
    return [f.name for f in (TokenFlag.USER_PIN_COUNT_LOW, TokenFlag.USER_PIN_FINAL_TRY, TokenFlag.USER_PIN_LOCKED)
            if token.flags & f]

def open_sessions():
    # Session handles of this process that the library still knows (it hands out small integers).
    class Info(ctypes.Structure):
        _fields_ = [("slot", ctypes.c_ulong), ("state", ctypes.c_ulong), ("flags", ctypes.c_ulong),
                    ("error", ctypes.c_ulong)]
    get = ctypes.CDLL(LIBRARY).C_GetSessionInfo
    get.argtypes = [ctypes.c_ulong, ctypes.POINTER(Info)]
    get.restype = ctypes.c_ulong
    info = Info()
    return sum(1 for handle in range(1, 4096) if get(handle, ctypes.byref(info)) == 0)
"""

# A good login with the right PIN: it resets the token's count of failed logins. Prints the flags after it.
_GOOD_LOGIN = (
    _COMMON
    + """
with pkcs11.lib(LIBRARY).get_token(token_label=LABEL).open(user_pin=sys.argv[2]):
    pass
print(json.dumps(flags()))
"""
)

# Fetches with the configuration of argv[2] (a JSON file), argv[4] times, stopping before the token could lock the
# PIN: after each fetch the token's flags are read, and a FINAL_TRY (one failed login away from the lock) ends it.
_FETCHES = (
    _COMMON
    + """
from rsm import RemoteStorageManager
from rsm.errors import RetriableRemoteStorageException
configs = json.loads(open(sys.argv[2]).read())
meta = pickle.loads(open(sys.argv[3], "rb").read())
expected = open(sys.argv[5], "rb").read()
m = RemoteStorageManager()
m.configure(configs)
out = {"refused": 0, "read": 0, "errors": [], "stopped_at": None, "retriable": []}
for i in range(int(sys.argv[4])):
    try:
        with m.fetch_log_segment(meta, 0) as f:
            assert f.read() == expected
        out["read"] += 1
    except Exception as e:
        out["refused"] += 1
        if type(e).__name__ not in out["errors"]:
            out["errors"].append(type(e).__name__)
            out["message"] = str(e)
        retriable = isinstance(e, RetriableRemoteStorageException)
        if retriable not in out["retriable"]:
            out["retriable"].append(retriable)
    if "USER_PIN_FINAL_TRY" in flags() or "USER_PIN_LOCKED" in flags():
        out["stopped_at"] = i
        break
out["flags"] = flags()
out["open_sessions"] = open_sessions()
m.close()
print(json.dumps(out))
"""
)


def _run(script: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _store(tmp_path: Path) -> dict[str, str]:
    return {
        "chunk.size": "8192",
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp_path / "store"),
        "storage.fsync.enabled": "false",
    }


def _ring(key_id: str, pair: dict[str, str]) -> dict[str, str]:
    return {"encryption.enabled": "true", "encryption.key.pair.id": key_id, "encryption.key.pairs": key_id, **pair}


@pytest.mark.timeout(600)
def test_a_wrong_pin_is_tried_once_and_the_token_stays_usable(
    request: pytest.FixtureRequest, segment_factory: Any, tmp_path: Path
) -> None:
    label = request.getfixturevalue("pkcs11_token")
    from rsm import RemoteStorageManager

    assert _run(_GOOD_LOGIN, label, PKCS11_USER_PIN) == [], "the token's failed-login count must start at zero"
    key = pkcs11_rsa_key()
    seg = segment_factory(target_bytes=20 * 1024, seed=31)
    configs = {**_store(tmp_path), **_ring("hsm", pair_configs("hsm", "pkcs11", key, None, tmp_path))}
    m = RemoteStorageManager()
    m.configure(configs)
    meta = seg.to_metadata(TIP)
    try:
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
    finally:
        m.close()
    (tmp_path / "meta.pickle").write_bytes(pickle.dumps(meta))
    wrong = tmp_path / "wrong-pin"
    wrong.write_text("00000000\n")
    bad = {**configs, "encryption.key.pairs.hsm.pkcs11.pin.file": str(wrong)}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "good.json").write_text(json.dumps(configs))

    out = _run(_FETCHES, label, str(tmp_path / "bad.json"), str(tmp_path / "meta.pickle"), "1000", str(seg.log))
    assert out["stopped_at"] is None, f"the token was one failed login away from locking the PIN: {out}"
    assert out["refused"] == 1000 and out["read"] == 0, out
    # One failed login since the last good one: opencryptoki sets COUNT_LOW after one, FINAL_TRY after two.
    assert out["flags"] == ["USER_PIN_COUNT_LOW"], out
    assert out["errors"] == ["KeyRingException"] and out["retriable"] == [False], out
    for part in ("CKR_PIN_INCORRECT", f"'{label}'", "'hsm'", "pin.file", "configure the plugin again"):
        assert part in out["message"], (part, out["message"])
    assert out["open_sessions"] == 0, f"the session of the refused login stayed open: {out}"

    # The right PIN: the token is not locked, reads work and the good login resets the count.
    out = _run(_FETCHES, label, str(tmp_path / "good.json"), str(tmp_path / "meta.pickle"), "3", str(seg.log))
    assert out["read"] == 3 and out["refused"] == 0 and out["flags"] == [], out
    assert out["open_sessions"] == 1, out  # the provider's one session, until close


_FAILING_CALLS = (
    _COMMON
    + """
from encryption.errors import KeyServiceError
from encryption.keyservice import DataKeyCache, ServiceKeyPair
from encryption.providers import Pkcs11
pair = ServiceKeyPair("hsm", Pkcs11("no-such-label", LIBRARY, LABEL, None, sys.argv[2]), DataKeyCache(0, 1))
failed = 0
for _ in range(50):
    try:
        pair.check()
    except KeyServiceError as e:
        assert "NoSuchKey" in str(e), e
        failed += 1
print(json.dumps({"failed": failed, "open_sessions": open_sessions(), "flags": flags()}))
"""
)


@pytest.mark.timeout(300)
def test_every_session_that_fails_is_closed(request: pytest.FixtureRequest) -> None:
    label = request.getfixturevalue("pkcs11_token")
    out = _run(_FAILING_CALLS, label, PKCS11_USER_PIN)
    assert out["failed"] == 50 and out["flags"] == [], out
    assert out["open_sessions"] == 0, f"50 failed calls left sessions open: {out}"


def _token(root: Any, key: str) -> str:
    policy = (
        f'path "transit/keys/{key}" {{ capabilities = ["read"] }}\n'
        f'path "transit/decrypt/{key}" {{ capabilities = ["update"] }}'
    )
    root.sys.create_or_update_policy(name=f"kts-{key}", policy=policy)
    return str(root.auth.token.create(policies=[f"kts-{key}"], ttl="10m")["auth"]["client_token"])


@pytest.mark.timeout(300)
def test_a_token_file_rewritten_by_vault_agent_is_read_again(
    request: pytest.FixtureRequest, segment_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = request.getfixturevalue("openbao")
    from rsm import RemoteStorageManager

    key = transit_rsa_key(server)
    root = vault_client(server.url)
    token_file = tmp_path / "agent-token"
    first = _token(root, key)
    token_file.write_text(first + "\n")
    pair = pair_configs("vault", "vault-transit", key, server, tmp_path)
    pair["encryption.key.pairs.vault.vault.token.file"] = str(token_file)
    seg = segment_factory(target_bytes=20 * 1024, seed=32)
    m = RemoteStorageManager()
    m.configure({**_store(tmp_path), **_ring("vault", pair)})
    try:
        metas = [seg.to_metadata(TIP) for _ in range(3)]
        for meta in metas:
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
        with m.fetch_log_segment(metas[0], 0) as f:
            assert f.read() == seg.log.read_bytes()

        # Vault Agent renews: a new token in the file, the old one revoked.
        second = _token(root, key)
        token_file.write_text(second + "\n")
        root.auth.token.revoke(first)
        with m.fetch_log_segment(metas[1], 0) as f:  # another segment: its data key is not cached
            assert f.read() == seg.log.read_bytes()

        # Again, with the file's size and times kept (a clock too coarse to tell): the 403 makes it read again.
        third = _token(root, key)
        assert len(third) == len(second)
        stat = token_file.stat()
        with open(token_file, "r+") as f:  # in place: same inode
            f.write(third + "\n")
        os.utime(token_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        root.auth.token.revoke(second)
        with caplog.at_level(logging.INFO, logger="encryption.providers"):
            with m.fetch_log_segment(metas[2], 0) as f:
                assert f.read() == seg.log.read_bytes()
        assert any("retrying with the new one" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        m.close()
