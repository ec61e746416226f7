"""AES-256-GCM chunk encryption in Aiven's layout: ``IV(12) || ciphertext || tag(16)``.

One data encryption key (DEK) and one 32-byte AAD per segment; every chunk and every index gets a fresh
random IV. A wrong key, a wrong AAD or a single flipped bit fails the GCM tag check, which we turn into
``DecryptionError`` so a caller can never receive unauthenticated bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from encryption.errors import DecryptionError

IV_SIZE = 12
TAG_SIZE = 16
OVERHEAD = IV_SIZE + TAG_SIZE
KEY_SIZE = 32
AAD_SIZE = 32
_HAS_DECRYPT_INTO = hasattr(AESGCM, "decrypt_into")


@dataclass(frozen=True)
class DataKeyAndAad:
    """The per-segment secret (``data_key``) and the per-segment associated data (``aad``)."""

    data_key: bytes
    aad: bytes

    @staticmethod
    def generate() -> DataKeyAndAad:
        return DataKeyAndAad(os.urandom(KEY_SIZE), os.urandom(AAD_SIZE))

    def __repr__(self) -> str:  # never print key material
        return "DataKeyAndAad(<hidden>)"


class ChunkCipher:
    """Encrypts and decrypts chunks of one segment; thread-safe (AESGCM holds no per-call state)."""

    def __init__(self, key: DataKeyAndAad) -> None:
        if len(key.data_key) != KEY_SIZE:
            raise ValueError(f"AES-256 data key must be {KEY_SIZE} bytes, got {len(key.data_key)}")
        self._aead = AESGCM(key.data_key)
        self._aad = key.aad

    def encrypt(self, plaintext: bytes | memoryview) -> bytes:
        iv = os.urandom(IV_SIZE)
        return iv + self._aead.encrypt(iv, plaintext, self._aad)

    def decrypt(self, blob: bytes | memoryview, what: str = "chunk") -> bytes:
        mv = self._checked(blob, what)
        try:
            return self._aead.decrypt(mv[:IV_SIZE], mv[IV_SIZE:], self._aad)
        except InvalidTag:
            raise self._failed(what) from None

    def decrypt_into(self, blob: bytes | memoryview, out: memoryview, what: str = "chunk") -> None:
        """Decrypt into ``out``, which must be exactly ``plaintext_size(len(blob))`` bytes: the read path decrypts
        into memory it reuses instead of a new ``bytes`` per chunk. When the tag does not match, ``out`` holds
        unauthenticated bytes: the caller must not use them (it gets ``DecryptionError``)."""
        mv = self._checked(blob, what)
        if len(out) != len(mv) - OVERHEAD:
            raise DecryptionError(f"encrypted {what} holds {len(mv) - OVERHEAD} bytes, not the {len(out)} expected")
        if not _HAS_DECRYPT_INTO:  # an older cryptography without decrypt_into: one more copy
            out[:] = self.decrypt(mv, what)
            return
        try:
            self._aead.decrypt_into(mv[:IV_SIZE], mv[IV_SIZE:], self._aad, out)
        except InvalidTag:
            raise self._failed(what) from None

    @staticmethod
    def _checked(blob: bytes | memoryview, what: str) -> memoryview:
        if len(blob) < OVERHEAD:
            raise DecryptionError(f"encrypted {what} is {len(blob)} bytes, shorter than IV+tag ({OVERHEAD})")
        return memoryview(blob)

    @staticmethod
    def _failed(what: str) -> DecryptionError:
        return DecryptionError(
            f"AES-GCM authentication failed for {what}: the stored bytes are corrupt or were written with a "
            f"different data key/AAD"
        )


def plaintext_size(stored_size: int) -> int:
    """The bytes an encrypted blob of ``stored_size`` decrypts to."""
    return stored_size - OVERHEAD
