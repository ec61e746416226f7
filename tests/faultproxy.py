"""A fault-injecting HTTP/1.1 proxy for the reliability tests: it sits between the plugin and a real S3 server.

It understands just enough HTTP (request and response heads, Content-Length framing) to break an exchange at
the places a flaky network breaks it, at a configured rate, chosen with a seeded RNG:

- ``slowdown``: answers 503 SlowDown itself (the server never sees the request);
- ``reset-upload``: forwards half of a request body, then resets the connection;
- ``reset-body``: forwards the response head and half of the body, then resets;
- ``stall``: forwards half of the body, then goes silent past the client's attempt timeout;
- ``truncate``: half of the body with the original Content-Length, then a clean close;
- ``truncate-length``: half of the body with Content-Length rewritten to match it, then a clean close.

Everything runs on one asyncio loop in a daemon thread bound to 127.0.0.1, and ``stop()`` closes it.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

FAULTS = ("slowdown", "reset-upload", "reset-body", "stall", "truncate", "truncate-length")
_SLOWDOWN = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
)
_SLOWDOWN_BODY = (
    b"<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
)


@dataclass
class FaultPlan:
    """Which faults to inject and how often (per request), and how long a stall lasts."""

    rate: float
    faults: tuple[str, ...] = FAULTS
    stall_s: float = 3.0
    seed: int = 12
    only_paths_containing: bytes | None = None  # fault only requests whose request line contains this
    limit: int | None = None  # inject at most this many faults in all
    injected: Counter[str] = field(default_factory=Counter)
    requests: int = 0


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def _replace_length(head: bytes, length: int) -> bytes:
    lines = [
        b"Content-Length: %d" % length if line.lower().startswith(b"content-length:") else line
        for line in head.split(b"\r\n")
    ]
    return b"\r\n".join(lines)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0): what a dropped connection looks like to the peer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """``FaultProxy(upstream_port, plan)``; ``url`` is what the plugin's endpoint should be."""

    def __init__(self, upstream_port: int, plan: FaultPlan) -> None:
        self.upstream_port = upstream_port
        self.plan = plan
        self._rng = random.Random(plan.seed)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _pick(self, request_line: bytes, has_request_body: bool) -> str | None:
        with self._lock:
            self.plan.requests += 1
            if self._rng.random() >= self.plan.rate:
                return None
            wanted = self.plan.only_paths_containing
            if wanted is not None and wanted not in request_line:
                return None
            if self.plan.limit is not None and sum(self.plan.injected.values()) >= self.plan.limit:
                return None
            choices = [f for f in self.plan.faults if f != "reset-upload" or has_request_body]
            fault = self._rng.choice(choices)
            self.plan.injected[fault] += 1
            return fault

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            while await self._exchange(client_r, client_w):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            client_w.transport.abort()

    async def _exchange(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> bool:
        """One request and its response; False when the client connection is over."""
        try:
            head = await client_r.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        if (_header(head, b"expect") or b"").lower() == b"100-continue":
            client_w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await client_w.drain()
            head = b"\r\n".join(line for line in head.split(b"\r\n") if not line.lower().startswith(b"expect:"))
        length = int(_header(head, b"content-length") or 0)
        body = await client_r.readexactly(length) if length else b""
        is_head = head.startswith(b"HEAD ")
        fault = self._pick(head.split(b"\r\n", 1)[0], bool(body))
        if fault == "slowdown":
            client_w.write(_SLOWDOWN % (len(_SLOWDOWN_BODY), _SLOWDOWN_BODY))
            await client_w.drain()
            return False
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            if fault == "reset-upload":
                up_w.write(head + body[: len(body) // 2])
                await up_w.drain()
                _reset(client_w)
                return False
            up_w.write(head + body)
            await up_w.drain()
            resp_head = await up_r.readuntil(b"\r\n\r\n")
            status = resp_head[9:12]
            no_body = is_head or status in (b"204", b"304")
            resp_len = 0 if no_body else int(_header(resp_head, b"content-length") or 0)
            resp_body = await up_r.readexactly(resp_len) if resp_len else b""
            half = resp_body[: len(resp_body) // 2]
            if fault is None or not resp_body or not resp_head.startswith(b"HTTP/1.1 2"):
                client_w.write(resp_head + resp_body)
                await client_w.drain()
                return _header(resp_head, b"connection") != b"close"
            if fault == "truncate-length":
                client_w.write(_replace_length(resp_head, len(half)) + half)
                await client_w.drain()
                return False
            client_w.write(resp_head + half)
            await client_w.drain()
            if fault == "stall":
                await asyncio.sleep(self.plan.stall_s)
            if fault in ("reset-body", "stall"):
                _reset(client_w)
            return False
        finally:
            up_w.transport.abort()
