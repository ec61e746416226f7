"""Values for generated test segments: JSON log lines like a service's logs, random bytes or short strings.

The demo, the tests and the benchmarks use them so that compression ratios mean something (machine-limits §2.1).
"""

from __future__ import annotations

import random
import time
from typing import Literal

__all__ = ["DEFAULT_BASE_TIMESTAMP_MS", "ValueStyle", "json_log_value", "make_headers", "make_value"]

ValueStyle = Literal["json-log", "random", "short"]

#: 2023-11-14T22:13:20Z; fixed so that segments are reproducible from the seed.
DEFAULT_BASE_TIMESTAMP_MS = 1_700_000_000_000

_SERVICES = (
    "checkout-service",
    "payment-gateway",
    "inventory-api",
    "search-frontend",
    "auth-service",
    "shipping-worker",
    "recommendation-engine",
    "cart-service",
)
_LEVELS = ("INFO", "INFO", "INFO", "INFO", "INFO", "INFO", "WARN", "WARN", "ERROR", "DEBUG")
_PATHS = (
    "/api/v1/orders",
    "/api/v1/cart/items",
    "/api/v2/search",
    "/api/v1/users/me",
    "/api/v1/payments/authorize",
    "/api/v1/inventory/reserve",
    "/healthz",
)
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) Chrome/124.0",
    "Mozilla/5.0 (iPhone; iOS 17_4) Mobile",
    "okhttp/4.12.0",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
)
_MESSAGES = (
    "request completed",
    "cache miss, fetched from origin",
    "upstream timeout, retrying",
    "user session refreshed",
    "payment authorized",
    "inventory reserved for order",
)
_STATUSES = (200, 200, 200, 200, 201, 204, 304, 400, 404, 500, 503)


def json_log_value(rng: random.Random, timestamp_ms: int) -> bytes:
    """A ~360-byte JSON log line: repeated vocabulary plus random ids, like machine-limits §2.1 (zstd ~4x)."""
    secs, ms = divmod(timestamp_ms, 1000)
    t = time.gmtime(secs)
    r = rng.getrandbits
    return (
        f'{{"ts":"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.'
        f'{ms:03d}Z","level":"{rng.choice(_LEVELS)}","service":"{rng.choice(_SERVICES)}",'
        f'"host":"ip-10-0-{r(4)}-{r(6)}","path":"{rng.choice(_PATHS)}",'
        f'"status":{rng.choice(_STATUSES)},"latency_ms":{r(16) / 100:.2f},"trace_id":"{r(64):016x}",'
        f'"span_id":"{r(32):08x}","request_id":"{r(128):032x}","ip":"{r(8)}.{r(8)}.{r(8)}.{r(8)}",'
        f'"ua":"{rng.choice(_AGENTS)}","amount":{r(20) / 100:.2f},"message":"{rng.choice(_MESSAGES)}"}}'
    ).encode()


def make_value(style: str, rng: random.Random, timestamp_ms: int) -> bytes:
    if style == "json-log":
        return json_log_value(rng, timestamp_ms)
    if style == "random":
        return rng.randbytes(360)
    if style == "short":
        return f"v-{rng.getrandbits(32):08x}".encode()
    raise ValueError(f"unknown value_style {style!r}; expected json-log, random or short")


def make_headers(style: str, rng: random.Random) -> list[tuple[str, bytes | None]]:
    """Roughly one record in eight carries headers, one of them null-valued, to exercise header decoding."""
    if style != "json-log" or rng.random() >= 0.125:
        return []
    return [("traceparent", f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01".encode()), ("retry", None)]
