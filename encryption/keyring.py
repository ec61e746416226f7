"""RSA key-encryption keys (KEKs) on a key ring, wrapping per-segment data keys as Aiven does.

Wrapping is RSA-OAEP with SHA3-512 for both the OAEP hash and MGF1, empty label (BouncyCastle's
``OAEPWithSHA3-512AndMGF1Padding``). ``cryptography`` refuses SHA3 in OAEP, so pycryptodome does the RSA part.
The ring maps key-pair ids to key pairs; the *active* id wraps new keys, the others stay so that older
manifests remain readable until they are re-wrapped (see ``rsm.operator_tools.rotation``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from Crypto.Cipher import PKCS1_OAEP
from Crypto.Hash import SHA3_512
from Crypto.PublicKey import RSA
from Crypto.Signature.pss import MGF1

from encryption.errors import KeyPairError, KeyRingError
from encryption.keyservice import KeyPair, ServiceKeyPair, parse_scheme

MIN_MODULUS_BITS = 2 * 64 * 8 + 2 * 8 + 32 * 8  # OAEP-SHA3-512 overhead (130 B) + a 32-byte key


def _mgf(seed: bytes, length: int) -> bytes:
    return MGF1(seed, length, SHA3_512)


@dataclass(frozen=True)
class RsaKeyPair:
    key_id: str
    public_key: RSA.RsaKey
    private_key: RSA.RsaKey | None

    @staticmethod
    def from_pem(key_id: str, public_pem: bytes | str | None, private_pem: bytes | str | None) -> RsaKeyPair:
        if ":" in key_id or not key_id:
            raise KeyPairError(
                f"Invalid key pair id {key_id!r} in encryption.key.pairs: ids must be non-empty "
                f"and must not contain ':' (the manifest stores '<id>:<wrapped key>')"
            )
        try:
            private = RSA.import_key(private_pem) if private_pem else None
            public = RSA.import_key(public_pem) if public_pem else (private.public_key() if private else None)
        except (ValueError, IndexError, TypeError) as e:
            raise KeyPairError(
                f"Invalid PEM for key pair {key_id!r}: {e}. Public keys must be "
                f"'BEGIN PUBLIC KEY' (SubjectPublicKeyInfo), private keys 'BEGIN PRIVATE KEY' "
                f"(PKCS#8) or 'BEGIN RSA PRIVATE KEY'"
            ) from e
        if public is None:
            raise KeyPairError(f"Key pair {key_id!r} has neither a public nor a private key")
        if public.has_private():
            public = public.public_key()
        if private is not None and private.n != public.n:
            raise KeyPairError(f"Key pair {key_id!r}: the private key does not belong to the public key")
        if public.size_in_bits() < MIN_MODULUS_BITS:
            raise KeyPairError(
                f"Key pair {key_id!r} is {public.size_in_bits()}-bit RSA; wrapping a 32-byte "
                f"key with OAEP-SHA3-512 needs at least {MIN_MODULUS_BITS} bits (use 2048+)"
            )
        return RsaKeyPair(key_id, public, private)

    @property
    def provider(self) -> str:
        return "file"

    def describe(self) -> str:
        return f"key pair {self.key_id!r} (key files)"

    def check(self) -> None:
        """A file pair answers when it has a private key (the PEM was checked when it was loaded)."""
        if self.private_key is None:
            raise KeyRingError(f"key pair {self.key_id!r} has no private key configured")

    def is_current(self, scheme: str | None) -> bool:
        return scheme is None

    def wrap_field(self, data_key: bytes) -> str:
        """Aiven's ``<id>:<base64>``, byte for byte."""
        return f"{self.key_id}:{base64.b64encode(self.wrap(data_key)).decode('ascii')}"

    def unwrap_field(self, scheme: str | None, wrapped: bytes) -> bytes:
        if scheme is not None:
            raise KeyRingError(
                f"the data key of key pair {self.key_id!r} was wrapped by a key service ({scheme}), but the pair "
                f"is configured with key files: set encryption.key.pairs.{self.key_id}.provider"
            )
        return self.unwrap(wrapped)

    def wrap(self, data_key: bytes) -> bytes:
        return PKCS1_OAEP.new(self.public_key, hashAlgo=SHA3_512, mgfunc=_mgf).encrypt(data_key)

    def unwrap(self, wrapped: bytes) -> bytes:
        if self.private_key is None:
            raise KeyRingError(
                f"key pair {self.key_id!r} has no private key configured, so data keys it "
                f"wrapped cannot be read; set encryption.key.pairs.{self.key_id}.private.key.file"
            )
        try:
            return PKCS1_OAEP.new(self.private_key, hashAlgo=SHA3_512, mgfunc=_mgf).decrypt(wrapped)
        except ValueError:
            raise KeyRingError(
                f"cannot unwrap the data key with key pair {self.key_id!r}: the configured "
                f"private key is not the one the segment was written with"
            ) from None


class KeyRing(Protocol):
    """Wraps new data keys with the active KEK and unwraps stored ones by id."""

    @property
    def active_key_id(self) -> str: ...

    def wrap(self, data_key: bytes) -> str: ...

    def unwrap(self, data_key_field: str) -> bytes: ...


class RsaKeyRing:
    """The key ring of ``encryption.key.pairs``; data keys are stored as ``<id>:<base64 RSA ciphertext>`` (key files,
    Aiven's field) or ``<id>:<provider>;<scheme>;<version>:<base64>`` (a key service, see ``encryption.keyservice``).
    """

    def __init__(self, pairs: Mapping[str, KeyPair], active_key_id: str) -> None:
        if active_key_id not in pairs:
            raise KeyPairError(
                f"Invalid value {active_key_id!r} for configuration encryption.key.pair.id: "
                f"it must be one of encryption.key.pairs ({', '.join(pairs) or 'empty'})"
            )
        self._pairs = dict(pairs)
        self._active = active_key_id

    @property
    def active_key_id(self) -> str:
        return self._active

    @property
    def key_ids(self) -> list[str]:
        return list(self._pairs)

    @property
    def pairs(self) -> dict[str, KeyPair]:
        return dict(self._pairs)

    def wrap(self, data_key: bytes) -> str:
        return self._pairs[self._active].wrap_field(data_key)

    @staticmethod
    def parse(data_key_field: str) -> tuple[str, str | None, bytes]:
        """``(pair id, scheme or None for key files, wrapped key)`` of a manifest's ``dataKey``."""
        parts = data_key_field.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise KeyRingError(
                f"malformed dataKey {data_key_field[:40]!r}...: expected '<keyPairId>:<base64>' or "
                f"'<keyPairId>:<provider>;<scheme>;<version>:<base64>'"
            )
        key_id, b64 = parts[0], parts[-1]
        try:
            wrapped = base64.b64decode(b64, validate=True)
        except ValueError as e:  # binascii.Error, or a character outside ASCII
            raise KeyRingError(f"malformed dataKey for key pair {key_id!r}: bad base64 ({e})") from None
        return key_id, (parts[1] if len(parts) == 3 else None), wrapped

    @staticmethod
    def split(data_key_field: str) -> tuple[str, bytes]:
        key_id, _scheme, wrapped = RsaKeyRing.parse(data_key_field)
        return key_id, wrapped

    @staticmethod
    def wrapped_under(data_key_field: str) -> tuple[str, str | None]:
        """``(pair id, key version)`` that wrapped a manifest's ``dataKey``; the version is None for key files."""
        key_id, scheme, _wrapped = RsaKeyRing.parse(data_key_field)
        return key_id, (parse_scheme(scheme)[1] if scheme is not None else None)

    def is_current(self, data_key_field: str) -> bool:
        """Whether ``data_key_field`` is wrapped as the active pair wraps now: by that pair and, for a key service,
        under the key version it pins (an older version of the same key is not current: rotation re-wraps it)."""
        key_id, scheme, _wrapped = self.parse(data_key_field)
        return key_id == self._active and self._pairs[key_id].is_current(scheme)

    def refresh_active(self) -> str | None:
        """Ask the active pair's key service for its latest public key now; its version (None for key files)."""
        pair = self._pairs[self._active]
        return pair.refresh() if isinstance(pair, ServiceKeyPair) else None

    def unwrap(self, data_key_field: str) -> bytes:
        key_id, scheme, wrapped = self.parse(data_key_field)
        pair = self._pairs.get(key_id)
        if pair is None:
            raise KeyRingError(
                f"the data key was wrapped with key pair {key_id!r}, which is not on the key ring "
                f"({', '.join(self._pairs)}); add it to encryption.key.pairs with its private key"
            )
        return pair.unwrap_field(scheme, wrapped)
