"""Key pairs whose private half stays in a key service (AWS KMS, Vault/OpenBao Transit, a PKCS#11 token).

A copy wraps the segment's data key here, with the pair's RSA public key (RSA-OAEP, SHA-256 for the hash and for
MGF1): the public key is fetched from the service once, then kept, pinned by the service's key id and version, so
copies make no call to the service. A fetch unwraps through the service, which never hands out the private key;
unwrapped data keys stay in a bounded in-memory cache (never on disk), so a segment costs one call.

The data key field of such a segment is ``<pair id>:<provider>;rsa-oaep-sha256;<version>:<base64>``: two colons,
where Aiven's plugin and older versions of ours accept exactly one, so they refuse the manifest instead of trying a
wrong key (docs/format.md).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from encryption.errors import KeyPairError, KeyRingError, KeyServiceError

log = logging.getLogger(__name__)

SCHEME = "rsa-oaep-sha256"
_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
MIN_SERVICE_BITS = 2048


class KeyPair(Protocol):
    """The seam between the key ring and a pair's keys: wrap locally, unwrap (maybe through a service)."""

    key_id: str

    @property
    def provider(self) -> str: ...

    def wrap_field(self, data_key: bytes) -> str:
        """The manifest's ``dataKey`` for ``data_key`` (``<id>:...``)."""
        ...

    def unwrap_field(self, scheme: str | None, wrapped: bytes) -> bytes: ...

    def describe(self) -> str: ...

    def check(self) -> None:
        """Raise ``KeyServiceError`` unless the pair's keys answer (for ``kts config check --connect``)."""
        ...

    def is_current(self, scheme: str | None) -> bool:
        """Whether a data key field with ``scheme`` (None: key files) is wrapped as this pair wraps now."""
        ...


class KeyService(Protocol):
    """One provider's client for one key: what ``ServiceKeyPair`` needs of it."""

    provider: str
    key: str
    """The service's name for the key (a KMS key id or ARN, a Transit key name, a PKCS#11 label)."""
    permission: str
    """What the plugin's identity must be allowed, for error messages (``kms:Decrypt on <arn>``...)."""

    def public_key(self) -> tuple[bytes, str]:
        """The key's public half (DER SubjectPublicKeyInfo) and the version it belongs to."""
        ...

    def decrypt(self, wrapped: bytes, version: str) -> bytes:
        """RSA-OAEP-SHA-256 decrypt by the service; ``KeyServiceError`` on any failure."""
        ...


@dataclass(frozen=True)
class CallEvent:
    """One call to a key service, or a cache hit (``operation`` "cache-hit", no call): for metrics."""

    provider: str
    pair_id: str
    operation: str
    seconds: float
    error: bool


Observer = Callable[[CallEvent], None]


class DataKeyCache:
    """Unwrapped data keys by (pair id, wrapped key): at most ``size`` entries, each for ``ttl_s`` seconds.

    A key past its time is dropped by a sweeper thread even when no call comes (every ``sweep_s`` seconds, by
    default a tenth of the TTL, between 1 and 60 seconds), and its bytes are overwritten with zeros. The sweeper
    runs only while the cache holds keys, and ends with the cache. ``clock`` is for tests."""

    def __init__(
        self, size: int, ttl_s: float, clock: Callable[[], float] = time.monotonic, sweep_s: float | None = None
    ) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self.sweep_s = sweep_s if sweep_s is not None else min(60.0, max(1.0, ttl_s / 10))
        self._clock = clock
        self._entries: OrderedDict[tuple[str, bytes], tuple[float, bytearray]] = OrderedDict()
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

    def get(self, key: tuple[str, bytes]) -> bytes | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            if hit[0] <= self._clock():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return bytes(hit[1])

    def put(self, key: tuple[str, bytes], data_key: bytes) -> None:
        if self.size <= 0:
            return
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (self._clock() + self.ttl_s, bytearray(data_key))
            while len(self._entries) > self.size:
                self._drop(next(iter(self._entries)))
            if self._sweeper is None or not self._sweeper.is_alive():
                self._sweeper = threading.Thread(
                    target=_sweep_loop, args=(weakref.ref(self), self.sweep_s), name="kts-data-key-sweeper", daemon=True
                )
                self._sweeper.start()

    def _drop(self, key: tuple[str, bytes]) -> None:
        """Remove one entry and zero its bytes (the lock is held)."""
        _deadline, data_key = self._entries.pop(key)
        data_key[:] = bytes(len(data_key))

    def sweep(self) -> int:
        """Drop every key past its time; how many were dropped."""
        with self._lock:
            now = self._clock()
            expired = [k for k, (deadline, _) in self._entries.items() if deadline <= now]
            for k in expired:
                self._drop(k)
            return len(expired)

    def clear(self) -> None:
        with self._lock:
            for k in list(self._entries):
                self._drop(k)

    def __len__(self) -> int:
        return len(self._entries)


def _sweep_loop(ref: weakref.ReferenceType[DataKeyCache], every_s: float) -> None:
    """The sweeper: drops expired keys every ``every_s`` seconds; ends when the cache is empty or gone."""
    while True:
        time.sleep(every_s)
        cache = ref()
        if cache is None:
            return
        cache.sweep()
        with cache._lock:
            if not cache._entries:
                cache._sweeper = None
                return
        del cache


def _newer(version: str, than: str) -> bool:
    """Whether key version ``version`` is after ``than`` (numbers compared as numbers; other versions never)."""
    return version.isdigit() and than.isdigit() and int(version) > int(than)


def scheme_of(provider: str, version: str) -> str:
    return f"{provider};{SCHEME};{version}"


def parse_scheme(scheme: str) -> tuple[str, str]:
    """``(provider, version)`` of a data key field's scheme part; ``KeyRingError`` when it is not one of ours."""
    parts = scheme.split(";")
    if len(parts) != 3 or parts[1] != SCHEME or not parts[0] or not parts[2]:
        raise KeyRingError(
            f"unknown data key scheme {scheme[:60]!r}: expected '<provider>;{SCHEME};<version>' (a newer plugin "
            f"wrote this segment?)"
        )
    return parts[0], parts[2]


class ServiceKeyPair:
    """A key pair held by a key service: wraps locally with its pinned public key, unwraps through the service.

    The pinned public key is fetched again once it is ``refresh_s`` seconds old, and at once when a segment shows
    a newer key version than the pinned one (another broker saw the key rotate first); while the service does not
    answer, the pinned key keeps wrapping. ``clock`` is for tests."""

    def __init__(
        self,
        key_id: str,
        service: KeyService,
        cache: DataKeyCache,
        observer: Observer | None = None,
        refresh_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key_id = key_id
        self.service = service
        self.cache = cache
        self.observer = observer
        self.refresh_s = refresh_s
        self._clock = clock
        self._public: tuple[rsa.RSAPublicKey, str] | None = None
        self._pinned_at = 0.0
        self._refreshed_for: str | None = None
        self._lock = threading.Lock()

    @property
    def provider(self) -> str:
        return self.service.provider

    def describe(self) -> str:
        return f"key pair {self.key_id!r} ({self.service.provider} key {self.service.key})"

    def _observe(self, operation: str, started: float, error: bool) -> None:
        if self.observer is not None:
            self.observer(CallEvent(self.service.provider, self.key_id, operation, time.monotonic() - started, error))

    def _call(self, operation: str, fn: Callable[[], bytes | tuple[bytes, str]]) -> bytes | tuple[bytes, str]:
        started = time.monotonic()
        try:
            result = fn()
        except KeyServiceError as e:
            self._observe(operation, started, True)
            raise type(e)(
                f"{self.describe()}: {e} (the plugin's identity needs {self.service.permission})",
                retriable=e.retriable,
            ) from None
        self._observe(operation, started, False)
        return result

    def _fetch_public(self) -> tuple[rsa.RSAPublicKey, str]:
        der, version = self._call("get-public-key", self.service.public_key)  # type: ignore[misc]
        try:
            key = serialization.load_der_public_key(der)
        except ValueError as e:
            raise KeyPairError(f"{self.describe()}: the service's public key is not DER ({e})") from None
        if not isinstance(key, rsa.RSAPublicKey) or key.key_size < MIN_SERVICE_BITS:
            raise KeyPairError(
                f"{self.describe()}: the service's key is not RSA of {MIN_SERVICE_BITS} bits or more; "
                f"create an RSA_2048/3072/4096 key for encryption (ENCRYPT_DECRYPT)"
            )
        if ";" in version or ":" in version:
            raise KeyPairError(f"{self.describe()}: key version {version!r} holds ';' or ':'")
        return key, version

    def public_key(self) -> tuple[rsa.RSAPublicKey, str]:
        """The pinned public key and its version: fetched on first use, again once ``refresh_s`` old."""
        with self._lock:
            now = self._clock()
            if self._public is None:
                self._public = self._fetch_public()
                self._pinned_at = now
            elif now - self._pinned_at >= self.refresh_s:
                self._pinned_at = now  # one attempt per period, even when the service does not answer
                try:
                    self._public = self._fetch_public()
                except (KeyServiceError, KeyPairError) as e:
                    pinned = self._public[1]
                    log.warning("%s: keeping the pinned public key (version %s): %s", self.describe(), pinned, e)
            return self._public

    def refresh(self) -> str:
        """Fetch the public key now (key rotation reads the latest version); the version pinned."""
        with self._lock:
            self._public = self._fetch_public()
            self._pinned_at = self._clock()
            return self._public[1]

    def _saw_version(self, version: str) -> None:
        """A segment wrapped under ``version``: if it is newer than the pinned one, refresh at the next wrap (once
        per version, so a segment under a version the service does not serve costs one call, not one a copy)."""
        with self._lock:
            pinned = self._public
            if pinned is not None and _newer(version, pinned[1]) and version != self._refreshed_for:
                self._refreshed_for = version
                self._pinned_at = self._clock() - self.refresh_s

    def is_current(self, scheme: str | None) -> bool:
        """Whether a data key field's scheme is this pair's provider under the pinned (latest known) version."""
        if scheme is None:
            return False
        provider, version = parse_scheme(scheme)
        return provider == self.provider and version == self.public_key()[1]

    def wrap_field(self, data_key: bytes) -> str:
        import base64

        key, version = self.public_key()
        wrapped = key.encrypt(data_key, _OAEP)
        return f"{self.key_id}:{scheme_of(self.provider, version)}:{base64.b64encode(wrapped).decode('ascii')}"

    def unwrap_field(self, scheme: str | None, wrapped: bytes) -> bytes:
        if scheme is None:
            raise KeyRingError(
                f"{self.describe()} is held by {self.provider}, but this data key was wrapped with a key file "
                f"(no scheme in dataKey): configure pair {self.key_id!r} with provider=file and its private key"
            )
        provider, version = parse_scheme(scheme)
        if provider != self.provider:
            raise KeyRingError(
                f"the data key was wrapped by {provider} but {self.describe()} is configured; set "
                f"encryption.key.pairs.{self.key_id}.provider={provider}"
            )
        self._saw_version(version)
        cached = self.cache.get((self.key_id, wrapped))
        if cached is not None:
            self._observe("cache-hit", time.monotonic(), False)
            return cached
        data_key = self._call("decrypt", lambda: self.service.decrypt(wrapped, version))
        assert isinstance(data_key, bytes)
        self.cache.put((self.key_id, wrapped), data_key)
        return data_key

    def check(self) -> None:
        """Fetch the public key (fresh) and unwrap a key wrapped with it: the service answers and holds the key."""
        import os

        self.refresh()
        key, version = self.public_key()
        probe = os.urandom(32)
        wrapped = key.encrypt(probe, _OAEP)
        got = self._call("decrypt", lambda: self.service.decrypt(wrapped, version))
        if got != probe:
            raise KeyServiceError(
                f"{self.describe()}: the service unwrapped a test key to other bytes; its private key is not the "
                f"one of the public key it serves",
                retriable=False,
            )
