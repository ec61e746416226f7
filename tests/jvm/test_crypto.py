"""Envelope encryption: AES-256-GCM chunks and RSA-OAEP(SHA3-512) key wrapping, checked against the JDK."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from Crypto.PublicKey import RSA

from encryption.aes import IV_SIZE, OVERHEAD, ChunkCipher, DataKeyAndAad
from encryption.errors import DecryptionError, KeyPairError, KeyRingError
from encryption.keyring import RsaKeyPair, RsaKeyRing

JAVA_SRC = Path(__file__).parent / "java" / "AivenCryptoInterop.java"


@pytest.fixture(scope="module")
def rsa_key() -> RSA.RsaKey:
    return RSA.generate(2048)


def test_chunk_layout_iv_ciphertext_tag() -> None:
    cipher = ChunkCipher(DataKeyAndAad.generate())
    blob = cipher.encrypt(b"hello kafka")
    assert len(blob) == len(b"hello kafka") + OVERHEAD
    assert cipher.decrypt(blob) == b"hello kafka"
    assert cipher.encrypt(b"hello kafka")[:IV_SIZE] != blob[:IV_SIZE]  # fresh IV per chunk


def test_flipped_bit_and_wrong_key_fail() -> None:
    key = DataKeyAndAad.generate()
    blob = bytearray(ChunkCipher(key).encrypt(b"x" * 1000))
    blob[500] ^= 0x01
    with pytest.raises(DecryptionError, match="authentication failed"):
        ChunkCipher(key).decrypt(bytes(blob))
    good = ChunkCipher(key).encrypt(b"y")
    with pytest.raises(DecryptionError):
        ChunkCipher(DataKeyAndAad.generate()).decrypt(good)
    with pytest.raises(DecryptionError):  # same key, other segment's AAD
        ChunkCipher(DataKeyAndAad(key.data_key, os.urandom(32))).decrypt(good)
    with pytest.raises(DecryptionError, match="shorter than IV"):
        ChunkCipher(key).decrypt(b"short")


def test_key_ring_wraps_with_active_and_reads_old(rsa_key: RSA.RsaKey) -> None:
    other = RSA.generate(2048)
    old = RsaKeyPair.from_pem("old", rsa_key.public_key().export_key(), rsa_key.export_key(pkcs=8))
    new = RsaKeyPair.from_pem("new", other.public_key().export_key(), other.export_key(pkcs=8))
    ring_old = RsaKeyRing({"old": old}, "old")
    wrapped = ring_old.wrap(b"k" * 32)
    assert wrapped.startswith("old:")
    ring = RsaKeyRing({"old": old, "new": new}, "new")
    assert ring.unwrap(wrapped) == b"k" * 32
    assert ring.wrap(b"k" * 32).startswith("new:")
    with pytest.raises(KeyRingError, match="not on the key ring"):
        RsaKeyRing({"new": new}, "new").unwrap(wrapped)
    # same id, different key material: a precise error, not garbage bytes
    impostor = RsaKeyPair.from_pem("old", other.public_key().export_key(), other.export_key(pkcs=8))
    with pytest.raises(KeyRingError, match="not the one the segment was written with"):
        RsaKeyRing({"old": impostor}, "old").unwrap(wrapped)


def test_key_pair_validation(rsa_key: RSA.RsaKey) -> None:
    with pytest.raises(KeyPairError, match="must not contain ':'"):
        RsaKeyPair.from_pem("a:b", rsa_key.public_key().export_key(), None)
    with pytest.raises(KeyPairError, match="at least"):
        small = RSA.generate(1024)
        RsaKeyPair.from_pem("small", small.public_key().export_key(), None)
    with pytest.raises(KeyPairError, match="Invalid PEM"):
        RsaKeyPair.from_pem("bad", b"-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n", None)
    other = RSA.generate(2048)
    with pytest.raises(KeyPairError, match="does not belong"):
        RsaKeyPair.from_pem("mixed", rsa_key.public_key().export_key(), other.export_key(pkcs=8))


@pytest.fixture(scope="module")
def java_peer(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    javac = shutil.which("javac")
    assert javac, "javac (JDK 17) is required for the interop tests; .ci/run installs it"
    out = tmp_path_factory.mktemp("javapeer")
    subprocess.run([javac, "-d", str(out), str(JAVA_SRC)], check=True)
    return ["java", "-cp", str(out), "AivenCryptoInterop"]


def test_jdk_encrypted_chunk_decrypts_in_python(java_peer: list[str], rsa_key: RSA.RsaKey, tmp_path: Path) -> None:
    (tmp_path / "pub.der").write_bytes(rsa_key.public_key().export_key(format="DER"))
    plain = os.urandom(70_000)
    (tmp_path / "plain.bin").write_bytes(plain)
    subprocess.run(
        [*java_peer, "encrypt", str(tmp_path / "pub.der"), str(tmp_path / "plain.bin"), str(tmp_path)], check=True
    )
    pair = RsaKeyPair.from_pem("k", None, rsa_key.export_key(pkcs=8))
    dek = pair.unwrap((tmp_path / "wrapped.bin").read_bytes())
    cipher = ChunkCipher(DataKeyAndAad(dek, (tmp_path / "aad.bin").read_bytes()))
    assert cipher.decrypt((tmp_path / "chunk.bin").read_bytes()) == plain


def test_python_encrypted_chunk_decrypts_in_jdk(java_peer: list[str], rsa_key: RSA.RsaKey, tmp_path: Path) -> None:
    pair = RsaKeyPair.from_pem("k", rsa_key.public_key().export_key(), None)
    key = DataKeyAndAad.generate()
    plain = os.urandom(33_333)
    (tmp_path / "wrapped.bin").write_bytes(pair.wrap(key.data_key))
    (tmp_path / "aad.bin").write_bytes(key.aad)
    (tmp_path / "chunk.bin").write_bytes(ChunkCipher(key).encrypt(plain))
    (tmp_path / "priv.der").write_bytes(rsa_key.export_key(format="DER", pkcs=8))
    result = subprocess.run(
        [
            *java_peer,
            "decrypt",
            str(tmp_path / "priv.der"),
            str(tmp_path / "wrapped.bin"),
            str(tmp_path / "aad.bin"),
            str(tmp_path / "chunk.bin"),
        ],
        check=True,
        capture_output=True,
    )
    assert result.stdout == plain
