"""A latency-true test store: a real S3/GCS/Azure server on 127.0.0.1 behind a proxy that answers like a remote one.

The emulators answer in well under a millisecond, so anything linear in requests looks free against them. Here
every request through :attr:`LatencyStore.plugin_config` waits a fixed delay (default 20 ms, a cloud store's
first-byte latency) in ``tests/support/faultproxy.py`` running as a process of its own, optionally with a
bandwidth cap per request and over the whole link. :attr:`LatencyStore.direct_config` talks to the server
without the proxy, for filling the bucket (``segment_generator``) at local speed. :meth:`LatencyStore.stats`
reads the proxy's counters: requests by method and object kind (``GET manifest``...), bytes, and the most
requests in flight at once.

    with latency_store(Path("work"), delay_ms=20) as store:
        generate(store.direct_config(), GeneratorSpec(...))
        manager.configure({**store.plugin_config(), ...})
        before = store.stats(); ...; used = store.stats().minus(before)

SeaweedFS is the default server: it is a Go binary that answers a thousand small GETs a second here, where moto
(Python) is held to about 500 by its own GIL. Its data directory lives under ``workdir``, so a bucket filled once
is found again by the next run (``segment_generator`` skips what is already there).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsm.cli.emulators import STARTERS, StoreServer

SUPPORT = Path(__file__).resolve().parent.parent / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from processes import stop_process  # noqa: E402 - tests/support is on sys.path

FAULT_PROXY = SUPPORT / "faultproxy.py"
"""The proxy, run as a script: it is a test tool and not part of the package."""

DEFAULT_DELAY_MS = 20.0
DEFAULT_SERVER = "s3-seaweedfs"
_ENDPOINT_KEY = {"s3": "s3.endpoint.url", "gcs": "gcs.endpoint.url", "azure": "azure.endpoint.url"}


@dataclass(frozen=True)
class ProxyCounts:
    """The proxy's counters at one moment (``ProxyStats.snapshot()`` of the proxy process)."""

    requests: int = 0
    by_method: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    bytes_down: int = 0
    bytes_up: int = 0
    max_in_flight: int = 0

    def minus(self, before: ProxyCounts) -> ProxyCounts:
        """What happened since ``before`` (``max_in_flight`` is the proxy's high-water mark since its last reset)."""

        def diff(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
            return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)}

        return ProxyCounts(
            self.requests - before.requests,
            diff(self.by_method, before.by_method),
            diff(self.by_kind, before.by_kind),
            self.bytes_down - before.bytes_down,
            self.bytes_up - before.bytes_up,
            self.max_in_flight,
        )

    def get(self, kind: str) -> int:
        """GETs of one object kind: ``manifest``, ``log``, ``indexes`` or ``other`` (listings)."""
        return self.by_kind.get(f"GET {kind}", 0)


@dataclass
class LatencyStore:
    """A running server and the proxy in front of it; see the module docstring."""

    server: StoreServer
    proxy_url: str
    delay_ms: float
    process: subprocess.Popen[str] = field(repr=False)

    def _storage(self, endpoint: str) -> dict[str, str]:
        configs = self.server.config(**{_ENDPOINT_KEY[self.server.backend]: endpoint})
        return {
            "storage.backend.class": self.server.backend,
            **{f"storage.{k}": str(v) for k, v in configs.items()},
        }

    def plugin_config(self) -> dict[str, str]:
        """The plugin's ``storage.*`` keys pointing at the proxy (every request pays the delay)."""
        return self._storage(self.proxy_url)

    def direct_config(self) -> dict[str, str]:
        """The same keys pointing at the server itself (no delay): for filling the bucket."""
        return self._storage(self.server.endpoint)

    def _control(self, method: str, route: str) -> dict[str, Any]:
        base = self.proxy_url.split("/", 3)
        url = "/".join(base[:3]) + "/__proxy/" + route
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def stats(self) -> ProxyCounts:
        got = self._control("GET", "stats")
        return ProxyCounts(
            got["requests"], got["by_method"], got["by_kind"], got["bytes_down"], got["bytes_up"], got["max_in_flight"]
        )

    def reset(self) -> None:
        """Zero the counters (and the in-flight high-water mark)."""
        self._control("POST", "reset")


@contextlib.contextmanager
def latency_store(
    workdir: Path,
    *,
    server: str = DEFAULT_SERVER,
    delay_ms: float = DEFAULT_DELAY_MS,
    bandwidth_mbps: float | None = None,
    shared_mbps: float | None = None,
) -> Iterator[LatencyStore]:
    """Start ``server`` (a name of ``rsm.cli.emulators.STARTERS``) under ``workdir`` and the proxy in front of it;
    both stop when the block ends. Bandwidths are in MB/s (10^6 bytes), per request and over all requests."""
    store = STARTERS[server](workdir / server)
    proc: subprocess.Popen[str] | None = None
    try:
        argv = [
            sys.executable,
            str(FAULT_PROXY),
            "--upstream",
            store.endpoint,
            "--delay-ms",
            str(delay_ms),
            "--dialect",
            store.backend,
        ]
        if bandwidth_mbps is not None:
            argv += ["--bandwidth-mbps", str(bandwidth_mbps)]
        if shared_mbps is not None:
            argv += ["--shared-mbps", str(shared_mbps)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"the latency proxy did not start (exit code {proc.poll()}): {line!r}")
        yield LatencyStore(store, line.split(" ", 1)[1], delay_ms, proc)
    finally:
        if proc is not None:
            stop_process(proc)
        store.stop()
