"""Schema registries for tests, both speaking the Confluent REST API: a small fake on http.server, and Apicurio
Registry (the real thing, its Confluent-compatible API at ``/apis/ccompat/v7``) started from the jar that
``make setup`` assembles (tests/support/apicurio/). ``register`` and the encoders work against either."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from processes import stop_process

SUPPORT = Path(__file__).resolve().parent
APICURIO_VERSION = "2.4.2.Final"  # tests/support/apicurio/pom.xml
APICURIO_JAR = Path(
    os.environ.get("KTS_APICURIO_JAR", str(Path.home() / ".cache/kafka-tiered-storage/apicurio/apicurio-registry.jar"))
)


def register(url: str, subject: str, schema: str, schema_type: str = "AVRO", references: Any = ()) -> int:
    """Register a schema version under ``subject`` (``POST /subjects/{subject}/versions``): its id."""
    body: dict[str, Any] = {"schema": schema}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    if references:
        body["references"] = list(references)
    req = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.loads(resp.read())["id"])


class FakeRegistry:
    """The Confluent REST shape in-process: register, schemas by id, subject versions."""

    def __init__(self) -> None:
        self.by_id: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[str] = []
        self.lock = threading.Lock()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                parts = self.path.strip("/").split("/")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
                    self._send(404, {"error_code": 404})
                    return
                with registry.lock:
                    same = (
                        i
                        for i, known in registry.by_id.items()
                        if known["schema"] == body["schema"] and known.get("schemaType") == body.get("schemaType")
                    )
                    sid = next(same, len(registry.by_id) + 1)
                    registry.by_id.setdefault(sid, body)
                    versions = registry.subjects.setdefault(parts[1], [])
                    if sid not in versions:
                        versions.append(sid)
                self._send(200, {"id": sid})

            def do_GET(self) -> None:  # noqa: N802
                registry.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                with registry.lock:
                    if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                        known = registry.by_id.get(int(parts[2]))
                        if known is not None:
                            self._send(200, known)
                            return
                    elif len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
                        versions = registry.subjects.get(parts[1])
                        if versions and len(parts) == 3:
                            self._send(200, list(range(1, len(versions) + 1)))
                            return
                        if versions and len(parts) == 4:
                            n = len(versions) if parts[3] == "latest" else int(parts[3])
                            if 1 <= n <= len(versions):
                                sid = versions[n - 1]
                                self._send(200, {"subject": parts[1], "version": n, "id": sid, **registry.by_id[sid]})
                                return
                self._send(404, {"error_code": 40403, "message": "not found"})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@contextmanager
def fake_registry() -> Iterator[FakeRegistry]:
    reg = FakeRegistry()
    reg.thread.start()
    try:
        yield reg
    finally:
        reg.server.shutdown()
        reg.server.server_close()
        reg.thread.join(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def apicurio_registry(log_dir: Path, timeout_s: float = 240) -> Iterator[str]:
    """Apicurio Registry with in-memory storage on 127.0.0.1: the URL of its Confluent-compatible API."""
    java = shutil.which("java")
    if java is None or not APICURIO_JAR.is_file():
        raise FileNotFoundError(f"no java or no {APICURIO_JAR} (make setup assembles it)")
    port = _free_port()
    log = (log_dir / "apicurio.log").open("wb")
    proc = subprocess.Popen(
        [
            java,
            "-Xmx384m",
            f"-Dquarkus.http.port={port}",
            "-Dquarkus.http.host=127.0.0.1",
            "-Dquarkus.profile=prod",
            "-Dregistry.storage.kind=mem",
            "-jar",
            str(APICURIO_JAR),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/apis/ccompat/v7"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Apicurio Registry exited with {proc.returncode}; see {log_dir / 'apicurio.log'}")
            try:
                with urllib.request.urlopen(f"{url}/subjects", timeout=5):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Apicurio Registry did not answer in {timeout_s} s") from None
                time.sleep(1)
        yield url
    finally:
        stop_process(proc, grace=30)
        log.close()
