"""The data key cache of key-service pairs and the pinned public key, with injected clocks.

A data key past its TTL is dropped (and its bytes zeroed) by the sweeper even when no call comes; the pinned public
key is fetched again once it is old, or when a segment shows a newer key version.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from encryption.errors import KeyServiceError
from encryption.keyservice import DataKeyCache, ServiceKeyPair

# How long the tests wait for the sweeper thread, which runs every 0.01 s here: a hundred times its period, as the
# machine is shared by several test runs.
SWEEPER_WAIT_S = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + SWEEPER_WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {SWEEPER_WAIT_S} s")
        time.sleep(0.005)


def test_an_expired_key_is_dropped_and_zeroed_without_any_call() -> None:
    clock = Clock()
    cache = DataKeyCache(10, ttl_s=60, clock=clock, sweep_s=0.01)
    cache.put(("p", b"w1"), b"\x01" * 32)
    cache.put(("p", b"w2"), b"\x02" * 32)
    held = [entry[1] for entry in cache._entries.values()]  # the cache's own buffers
    clock.now += 30
    cache.put(("p", b"w3"), b"\x03" * 32)  # expires 30 s after the first two
    assert cache.get(("p", b"w1")) == b"\x01" * 32
    clock.now += 31  # the first two are past their TTL; nothing calls get() from here on
    _wait_for(lambda: len(cache) == 1, "the sweeper dropped the two expired keys")
    assert all(buf == bytearray(32) for buf in held), "an expired key's bytes must be overwritten"
    assert cache.get(("p", b"w3")) == b"\x03" * 32
    clock.now += 30
    _wait_for(lambda: len(cache) == 0, "the sweeper dropped the last key")
    _wait_for(lambda: cache._sweeper is None, "the sweeper ended with the cache empty")


def test_the_sweeper_ends_with_the_cache() -> None:
    cache = DataKeyCache(10, ttl_s=3600, sweep_s=0.01)
    cache.put(("p", b"w"), os.urandom(32))
    thread = cache._sweeper
    assert thread is not None and thread.is_alive()
    ref = weakref.ref(cache)
    del cache
    # The sweeper holds the cache only while it sweeps (a moment every 0.01 s).
    _wait_for(lambda: gc.collect() >= 0 and ref() is None, "the sweeper thread let the cache go")
    thread.join(SWEEPER_WAIT_S)
    assert not thread.is_alive()


def test_replacing_and_evicting_zero_the_old_bytes() -> None:
    cache = DataKeyCache(1, ttl_s=3600, sweep_s=3600)
    cache.put(("p", b"a"), b"\x05" * 32)
    first = cache._entries[("p", b"a")][1]
    cache.put(("p", b"b"), b"\x06" * 32)  # over the size: "a" evicted
    assert first == bytearray(32) and cache.get(("p", b"a")) is None
    cache.clear()
    assert len(cache) == 0


class RotatingService:
    """A key service whose key gains versions: each version its own RSA key pair."""

    provider = "vault-transit"
    key = "kek"
    permission = "read"

    def __init__(self) -> None:
        self.keys = [rsa.generate_private_key(public_exponent=65537, key_size=2048)]
        self.calls = 0
        self.down = False

    def rotate(self) -> None:
        self.keys.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def public_key(self) -> tuple[bytes, str]:
        self.calls += 1
        if self.down:
            raise KeyServiceError("unreachable")
        der = (
            self.keys[-1]
            .public_key()
            .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return der, str(len(self.keys))

    def decrypt(self, wrapped: bytes, version: str) -> bytes:
        from encryption.keyservice import _OAEP

        return self.keys[int(version) - 1].decrypt(wrapped, _OAEP)


def _version(field: str) -> str:
    return field.split(":")[1].split(";")[2]


def test_the_pinned_public_key_is_refreshed_when_old() -> None:
    clock, service = Clock(), RotatingService()
    pair = ServiceKeyPair("v", service, DataKeyCache(10, 60), refresh_s=300, clock=clock)
    assert _version(pair.wrap_field(os.urandom(32))) == "1"
    service.rotate()
    clock.now += 299
    assert _version(pair.wrap_field(os.urandom(32))) == "1" and service.calls == 1  # pinned: no call
    clock.now += 1
    assert _version(pair.wrap_field(os.urandom(32))) == "2" and service.calls == 2
    service.down = True
    service.rotate()
    clock.now += 300
    assert _version(pair.wrap_field(os.urandom(32))) == "2", "a service away keeps the pinned key wrapping"
    assert _version(pair.wrap_field(os.urandom(32))) == "2" and service.calls == 3, "one attempt per period"


def test_a_segment_under_a_newer_version_refreshes_the_pinned_key_at_once() -> None:
    clock, service = Clock(), RotatingService()
    pair = ServiceKeyPair("v", service, DataKeyCache(10, 60), refresh_s=3600, clock=clock)
    other_broker = ServiceKeyPair("v", service, DataKeyCache(10, 60), refresh_s=3600, clock=clock)
    assert _version(pair.wrap_field(os.urandom(32))) == "1"
    service.rotate()
    data_key = os.urandom(32)
    newer = other_broker.wrap_field(data_key)  # started after the rotation: pins version 2
    assert _version(newer) == "2"
    import base64

    scheme, wrapped = newer.split(":")[1], base64.b64decode(newer.split(":")[2])
    assert pair.unwrap_field(scheme, wrapped) == data_key
    assert _version(pair.wrap_field(os.urandom(32))) == "2"
    assert pair.is_current(scheme) and not pair.is_current("vault-transit;rsa-oaep-sha256;1")
    # A segment naming a version the service does not serve (yet) costs one refresh, not one per copy.
    calls = service.calls
    pair.cache.put(("v", b"odd"), data_key)
    for _ in range(3):
        assert pair.unwrap_field("vault-transit;rsa-oaep-sha256;9", b"odd") == data_key
        pair.wrap_field(os.urandom(32))
    assert service.calls == calls + 1


def test_threads_share_one_refresh() -> None:
    clock, service = Clock(), RotatingService()
    pair = ServiceKeyPair("v", service, DataKeyCache(10, 60), refresh_s=300, clock=clock)
    pair.wrap_field(os.urandom(32))
    clock.now += 300
    threads = [threading.Thread(target=pair.wrap_field, args=(os.urandom(32),)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert service.calls == 2
