"""A real HTTP proxy in front of an emulator that answers chosen requests with an error instead of forwarding
them, so a backend's retry meets a genuine failure on the wire (status, headers, body) and then a real answer."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

S3_INTERNAL_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>injected by the test proxy</Message></Error>"
)


@dataclass
class Proxy:
    endpoint: str
    seen: list[tuple[str, str, int]] = field(default_factory=list)
    """Every request that reached the proxy: (method, path, status answered)."""


@contextmanager
def fault_proxy(upstream: str, fail: Callable[[str, str], bool], times: int = 1) -> Iterator[Proxy]:
    """Forward to ``upstream``; the first ``times`` requests for which ``fail(method, path)`` holds get a 500."""
    target = urlsplit(upstream)
    proxy = Proxy("")
    budget = {"left": times}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                inject = budget["left"] > 0 and fail(self.command, self.path)
                if inject:
                    budget["left"] -= 1
            if inject:
                proxy.seen.append((self.command, self.path, 500))
                self.send_response(500)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(S3_INTERNAL_ERROR)))
                self.end_headers()
                self.wfile.write(S3_INTERNAL_ERROR)
                return
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                proxy.seen.append((self.command, self.path, answer.status))
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        proxy.endpoint = f"http://127.0.0.1:{server.server_port}"
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
