"""An HTTP/1.1 reverse proxy between the plugin and a real storage server (moto, SeaweedFS, fake-gcs-server,
Azurite): it breaks exchanges the way a flaky network does (the reliability and metrics tests), and it makes a
store on 127.0.0.1 answer like a remote one (the scale benchmarks: a fixed delay per request, a bandwidth cap).

Faults are chosen with a seeded RNG at a configured rate (or for the requests a ``match`` picks, at most ``limit``
times):

- ``slowdown``: answers the store's throttling error itself (the server never sees the request): S3 503 SlowDown,
  GCS 429 rateLimitExceeded, Azure 503 ServerBusy;
- ``server-error``: answers the store's 500 internal error itself;
- ``reset-upload``: forwards half of a request body, then resets the connection;
- ``reset-body``: forwards the response head and half of the body, then resets;
- ``stall``: forwards half of the body, then goes silent past the client's attempt timeout;
- ``truncate``: half of the body with the original Content-Length, then a clean close;
- ``truncate-length``: half of the body with Content-Length rewritten to match it, then a clean close;
- ``hold`` (asked for by name): keeps the request, never sent upstream, for ``stall_s``, then resets (a request in
  flight when its client is killed).

Distance is a :class:`Link`: every request waits ``delay_s`` before it goes upstream (a cloud store's first-byte
latency), and bodies are paced to ``bandwidth`` bytes/s per request (a store's per-connection throughput) and to
``shared_bandwidth`` bytes/s over all requests (the host's link). :class:`ProxyStats` counts requests by method
and object kind and the most that were in flight at once, which is how the tests check that a pool really bounds
its concurrency and that skipped manifests are never read.

Bodies are framed by Content-Length, chunked transfer-coding (Go's and Node's servers use it for JSON and XML
answers; the proxy de-chunks them and forwards a Content-Length body, as an HTTP/1.1 intermediary may) or the end
of the connection. Each request gets its own upstream connection (``Connection: close``), and a ``Location``
naming the upstream (a GCS resumable-upload session) is rewritten to the proxy, so every later request of the
session crosses it too. Everything runs on one asyncio loop in a daemon thread bound to 127.0.0.1; ``stop()``
closes it. ``python tests/support/faultproxy.py`` runs a latency-only proxy as a process of its own (so its event loop
does not share the measured process's GIL) and answers ``GET /__proxy/stats`` and ``POST /__proxy/reset`` itself.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

FAULTS = ("slowdown", "reset-upload", "reset-body", "stall", "truncate", "truncate-length")
"""What a rate-driven plan injects by default (``server-error`` is asked for by name)."""


def _xml_error(code: str, message: str) -> bytes:
    return (
        f"<?xml version='1.0' encoding='utf-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
    )


def _gcs_error(status: int, reason: str, message: str) -> bytes:
    return json.dumps({"error": {"code": status, "message": message, "errors": [{"reason": reason}]}}).encode()


# dialect -> fault -> (status line, extra headers, content type, body): each store's own way to say it
_ANSWERS: dict[str, dict[str, tuple[bytes, bytes, bytes, bytes]]] = {
    "s3": {
        "slowdown": (b"503 Slow Down", b"", b"application/xml", _xml_error("SlowDown", "Please reduce your rate.")),
        "server-error": (
            b"500 Internal Server Error",
            b"",
            b"application/xml",
            _xml_error("InternalError", "injected"),
        ),
    },
    "gcs": {
        "slowdown": (b"429 Too Many Requests", b"", b"application/json", _gcs_error(429, "rateLimitExceeded", "slow")),
        "server-error": (b"500 Internal Server Error", b"", b"application/json", _gcs_error(500, "backendError", "x")),
    },
    "azure": {
        "slowdown": (
            b"503 The server is busy.",
            b"x-ms-error-code: ServerBusy\r\n",
            b"application/xml",
            _xml_error("ServerBusy", "The server is busy."),
        ),
        "server-error": (
            b"500 Internal Server Error",
            b"x-ms-error-code: InternalError\r\n",
            b"application/xml",
            _xml_error("InternalError", "injected"),
        ),
    },
}
_ANSWERED = ("slowdown", "server-error")


@dataclass
class FaultPlan:
    """Which faults to inject and how often (per request), and how long a stall lasts.

    ``match(method, path)`` narrows the requests that may be faulted and ``limit`` caps how many are (``rate=1,
    faults=("server-error",), limit=1`` fails exactly the first matching request). ``seen`` records every request
    as (method, path, status): the status the server answered (even when the proxy then broke the body on its
    way to the client), the proxy's own answer, or ``"reset-upload"`` when the server never answered. A plan with
    ``record=False`` keeps ``seen`` empty (a benchmark's hundreds of thousands of requests need only the counts of
    :class:`ProxyStats`).
    """

    rate: float
    faults: tuple[str, ...] = FAULTS
    stall_s: float = 3.0
    seed: int = 12
    dialect: str = "s3"
    match: Callable[[str, str], bool] | None = None
    limit: int | None = None
    record: bool = True
    pick: Callable[[str, str], str | None] | None = None
    """When set, it alone chooses each request's fault (or None), for a test that breaks different requests in
    different ways at once; ``rate``, ``faults``, ``match`` and ``limit`` are then not used."""
    injected: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    seen: list[tuple[str, str, int | str]] = field(default_factory=list)


NO_FAULTS = 0.0
"""The rate of a plan that only carries traffic (a latency-only proxy)."""


@dataclass(frozen=True)
class Link:
    """The distance a proxy puts between client and server.

    ``delay_s`` is added to every request before it goes upstream (what a cloud store's first byte costs);
    ``bandwidth`` caps each request's body, both ways, in bytes/s (a store serves one connection at a bounded rate);
    ``shared_bandwidth`` caps all bodies together (the host's link). ``None``: no cap.
    """

    delay_s: float = 0.0
    bandwidth: float | None = None
    shared_bandwidth: float | None = None

    def __post_init__(self) -> None:
        if self.delay_s < 0:
            raise ValueError(f"delay_s must not be negative, got {self.delay_s}")
        for name in ("bandwidth", "shared_bandwidth"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive bytes per second (or None for no cap), got {value}")


def object_kind(path: str) -> str:
    """What a request path addresses, by the suffix of the segment object it names (query string ignored)."""
    name = path.split("?", 1)[0]
    for suffix, kind in ((".rsm-manifest", "manifest"), (".log", "log"), (".indexes", "indexes")):
        if name.endswith(suffix) or name.endswith(suffix.replace(".", "%2E")):
            return kind
    return "other"


class ProxyStats:
    """Counters of the traffic that crossed the proxy: requests by method and by ``method kind`` (``GET manifest``),
    body bytes each way, and the requests in flight (between a request's head arriving and its answer's last byte
    leaving, delay included) now and at most. Thread-safe: read from any thread while the proxy runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.by_method: Counter[str] = Counter()
            self.by_kind: Counter[str] = Counter()
            self.bytes_up = 0
            self.bytes_down = 0
            self.in_flight = 0
            self.max_in_flight = 0

    def started(self, method: str, path: str) -> None:
        with self._lock:
            self.by_method[method] += 1
            self.by_kind[f"{method} {object_kind(path)}"] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finished(self, up: int, down: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.bytes_up += up
            self.bytes_down += down

    def snapshot(self) -> dict[str, object]:
        """The counters as plain JSON-able values."""
        with self._lock:
            return {
                "requests": sum(self.by_method.values()),
                "by_method": dict(self.by_method),
                "by_kind": dict(self.by_kind),
                "bytes_up": self.bytes_up,
                "bytes_down": self.bytes_down,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
            }


class _Pacer:
    """Holds bodies to ``rate`` bytes/s: each piece reserves the next free slot on the (possibly shared) line."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._free_at = 0.0

    async def pace(self, nbytes: int) -> None:
        loop = asyncio.get_running_loop()
        start = max(loop.time(), self._free_at)
        self._free_at = start + nbytes / self._rate
        delay = self._free_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


PACE_PIECE = 64 * 1024
"""Paced bodies go out in pieces of this size, so a capped answer streams instead of arriving in one burst."""
CONTROL_PREFIX = "/__proxy/"
"""Paths a control-enabled proxy answers itself (no bucket or container name can start with an underscore)."""


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def _set_headers(head: bytes, drop: tuple[bytes, ...], add: list[bytes]) -> bytes:
    """``head`` without the headers named in ``drop`` (lower case), with the ``add`` lines appended."""
    lines = head.split(b"\r\n")
    kept = [lines[0]] + [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in drop]
    return b"\r\n".join(kept + add) + b"\r\n\r\n"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, de-chunked (trailers are read and dropped)."""
    parts = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _read_body(reader: asyncio.StreamReader, head: bytes, *, response: bool) -> bytes:
    if (_header(head, b"transfer-encoding") or b"").lower().endswith(b"chunked"):
        return await _read_chunked(reader)
    length = _header(head, b"content-length")
    if length is not None:
        return await reader.readexactly(int(length)) if int(length) else b""
    return await reader.read() if response else b""


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0): what a dropped connection looks like to the peer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """``FaultProxy(upstream, plan, link)`` with ``upstream`` a port or an ``http://127.0.0.1:port[/...]`` URL;
    ``url`` is what the plugin's endpoint should be (the upstream URL's path, e.g. Azurite's account, is kept).
    ``stats`` counts what crossed it; with ``control`` it answers ``GET /__proxy/stats`` (the counters as JSON)
    and ``POST /__proxy/reset`` itself, for a client in another process."""

    def __init__(
        self, upstream: int | str, plan: FaultPlan, link: Link | None = None, *, control: bool = False
    ) -> None:
        if isinstance(upstream, int):
            self.upstream_port, self._path = upstream, ""
        else:
            authority, _, path = upstream.removeprefix("http://").partition("/")
            self.upstream_port, self._path = int(authority.rsplit(":", 1)[1]), "/" + path if path else ""
        self.plan = plan
        self.link = link or Link()
        self.stats = ProxyStats()
        self._control = control
        self._shared_pacer = _Pacer(self.link.shared_bandwidth) if self.link.shared_bandwidth else None
        self._answers = _ANSWERS[plan.dialect]
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
        return f"http://127.0.0.1:{self.port}{self._path}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        async def shutdown() -> None:
            """Close the listener, then cancel every exchange and wait for them: an exchange cancelled mid-stall
            must run its ``finally`` (closing both sockets) before the loop goes, or its sockets linger until a
            garbage collection and read as leaked fds."""
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _pick(self, method: str, path: str, has_request_body: bool) -> str | None:
        with self._lock:
            self.plan.requests += 1
            if self.plan.pick is not None:
                fault = self.plan.pick(method, path)
                if fault is not None:
                    self.plan.injected[fault] += 1
                return fault
            if self.plan.match is not None and not self.plan.match(method, path):
                return None
            if self.plan.limit is not None and sum(self.plan.injected.values()) >= self.plan.limit:
                return None
            if self._rng.random() >= self.plan.rate:
                return None
            choices = [f for f in self.plan.faults if f != "reset-upload" or has_request_body]
            if not choices:
                return None
            fault = self._rng.choice(choices)
            self.plan.injected[fault] += 1
            return fault

    def _record(self, method: str, path: str, outcome: int | str) -> None:
        if self.plan.record:
            self.plan.seen.append((method, path, outcome))

    def _answer(self, fault: str) -> bytes:
        status, extra, content_type, body = self._answers[fault]
        return b"HTTP/1.1 %s\r\n%sContent-Type: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (
            status,
            extra,
            content_type,
            len(body),
            body,
        )

    def _control_answer(self, method: str, path: str) -> bytes:
        route = path.split("?", 1)[0][len(CONTROL_PREFIX) :]
        if method == "GET" and route == "stats":
            status, body = b"200 OK", json.dumps(self.stats.snapshot()).encode()
        elif method == "POST" and route == "reset":
            self.stats.reset()
            status, body = b"200 OK", b"{}"
        else:
            status, body = b"404 Not Found", json.dumps({"error": f"no control route {method} {path}"}).encode()
        return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            status,
            len(body),
            body,
        )

    async def _pace(self, pacer: _Pacer | None, nbytes: int) -> None:
        if pacer is not None:
            await pacer.pace(nbytes)
        if self._shared_pacer is not None:
            await self._shared_pacer.pace(nbytes)

    async def _send(self, writer: asyncio.StreamWriter, head: bytes, body: bytes | memoryview) -> None:
        """``head`` and ``body`` to the client, the body paced by the link's caps (at once without caps)."""
        if self.link.bandwidth is None and self._shared_pacer is None:
            writer.write(head + bytes(body))
            await writer.drain()
            return
        writer.write(head)
        pacer = _Pacer(self.link.bandwidth) if self.link.bandwidth else None
        view = memoryview(body)
        for at in range(0, len(view), PACE_PIECE):
            piece = view[at : at + PACE_PIECE]
            await self._pace(pacer, len(piece))
            writer.write(piece)
            await writer.drain()
        await writer.drain()

    def _rewrite_location(self, head: bytes) -> bytes:
        location = _header(head, b"location")
        upstream = b"//127.0.0.1:%d" % self.upstream_port
        if location is None or upstream not in location:
            return head
        moved = location.replace(upstream, b"//127.0.0.1:%d" % self.port)
        return _set_headers(head[:-4], (b"location",), [b"Location: " + moved])

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
        body = await _read_body(client_r, head, response=False)
        method, path = (part.decode("latin-1") for part in head.split(b" ", 2)[:2])
        keep_alive = (_header(head, b"connection") or b"").lower() != b"close"
        if self._control and path.startswith(CONTROL_PREFIX):
            client_w.write(self._control_answer(method, path))
            await client_w.drain()
            return keep_alive
        self.stats.started(method, path)
        received = 0
        try:
            if self.link.delay_s:
                await asyncio.sleep(self.link.delay_s)
            if body and (self.link.bandwidth or self._shared_pacer is not None):
                await self._pace(_Pacer(self.link.bandwidth) if self.link.bandwidth else None, len(body))
            answered, received = await self._forward(client_w, head, body, method, path)
            return keep_alive and answered
        finally:
            self.stats.finished(len(body), received)

    async def _forward(
        self, client_w: asyncio.StreamWriter, head: bytes, body: bytes, method: str, path: str
    ) -> tuple[bool, int]:
        """Send the request upstream and its answer back, breaking either as the plan says. Returns whether the
        exchange completed normally (the connection can serve another) and the answer's body size."""
        head = _set_headers(
            head[:-4],
            (b"expect", b"connection", b"transfer-encoding", b"content-length", b"keep-alive"),
            [b"Content-Length: %d" % len(body), b"Connection: close"] if body else [b"Connection: close"],
        )
        fault = self._pick(method, path, bool(body))
        if fault == "hold":
            self._record(method, path, fault)
            await asyncio.sleep(self.plan.stall_s)
            _reset(client_w)
            return False, 0
        if fault in _ANSWERED:
            self._record(method, path, int(self._answers[fault][0][:3]))
            client_w.write(self._answer(fault))
            await client_w.drain()
            return False, 0
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            if fault == "reset-upload":
                self._record(method, path, fault)
                up_w.write(head + body[: len(body) // 2])
                await up_w.drain()
                _reset(client_w)
                return False, 0
            up_w.write(head + body)
            await up_w.drain()
            resp_head = await up_r.readuntil(b"\r\n\r\n")
            while resp_head[9:10] == b"1":  # an interim 1xx answer: the real one follows
                resp_head = await up_r.readuntil(b"\r\n\r\n")
            status = resp_head[9:12]
            no_body = method == "HEAD" or status in (b"204", b"304")
            resp_body = b"" if no_body else await _read_body(up_r, resp_head, response=True)
            framing = [] if no_body else [b"Content-Length: %d" % len(resp_body)]
            resp_head = _set_headers(
                self._rewrite_location(resp_head)[:-4],
                (b"connection", b"keep-alive", b"transfer-encoding") + (() if no_body else (b"content-length",)),
                framing,
            )
            half = resp_body[: len(resp_body) // 2]
            self._record(method, path, int(status))
            if fault is None or not resp_body or not resp_head.startswith(b"HTTP/1.1 2"):
                await self._send(client_w, resp_head, resp_body)
                return True, len(resp_body)
            if fault == "truncate-length":
                client_w.write(_set_headers(resp_head[:-4], (b"content-length",), [b"Content-Length: %d" % len(half)]))
                client_w.write(half)
                await client_w.drain()
                return False, len(half)
            client_w.write(resp_head + half)
            await client_w.drain()
            if fault == "stall":
                await asyncio.sleep(self.plan.stall_s)
            if fault in ("reset-body", "stall"):
                _reset(client_w)
            return False, len(half)
        finally:
            up_w.transport.abort()


def main(argv: list[str] | None = None) -> int:
    """A latency-only proxy as a process of its own: prints ``listening <url>`` once it accepts, then serves until
    SIGTERM/SIGINT. Its counters are at ``GET <url>/__proxy/stats`` (``POST .../reset`` zeroes them)."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(prog="faultproxy.py", description=main.__doc__)
    parser.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT[/path] of the storage server")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="added to every request (default 20)")
    parser.add_argument("--bandwidth-mbps", type=float, default=None, help="cap per request, MB/s (default none)")
    parser.add_argument("--shared-mbps", type=float, default=None, help="cap over all requests, MB/s (default none)")
    parser.add_argument("--dialect", choices=sorted(_ANSWERS), default="s3")
    args = parser.parse_args(argv)

    def mbps(value: float | None) -> float | None:
        return None if value is None else value * 1e6

    link = Link(args.delay_ms / 1000, mbps(args.bandwidth_mbps), mbps(args.shared_mbps))
    plan = FaultPlan(NO_FAULTS, dialect=args.dialect, record=False)
    proxy = FaultProxy(args.upstream, plan, link, control=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"listening {proxy.url}", flush=True)
    stop.wait()
    proxy.stop()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
