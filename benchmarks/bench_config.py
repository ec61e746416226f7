"""Configuration pieces the benchmarks share."""

from __future__ import annotations

from pathlib import Path


def encryption_config(work: Path) -> dict[str, str]:
    """zstd + AES-256-GCM with a fresh 2048-bit RSA key pair written under ``work/keys`` (reused when present)."""
    from Crypto.PublicKey import RSA

    keys = work / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    if not (keys / "priv.pem").exists():
        k = RSA.generate(2048)
        (keys / "priv.pem").write_bytes(k.export_key(pkcs=8))
        (keys / "pub.pem").write_bytes(k.public_key().export_key())
    return {
        "compression.enabled": "true",
        "encryption.enabled": "true",
        "encryption.key.pair.id": "b",
        "encryption.key.pairs": "b",
        "encryption.key.pairs.b.public.key.file": str(keys / "pub.pem"),
        "encryption.key.pairs.b.private.key.file": str(keys / "priv.pem"),
    }
