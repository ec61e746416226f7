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


def large_segment_data(work: Path):  # type: ignore[no-untyped-def]
    """The LogSegmentData of the segment ``write_large_segment`` wrote under ``work/segment`` (read, not rewritten:
    a fresh 1 GiB of dirty pages being flushed during a timed copy would measure the disk, not the plugin)."""
    from rsm.metadata import LogSegmentData

    d = work / "segment"
    snapshot = next(d.glob("*.snapshot"))
    return LogSegmentData(
        d / "00000000000000000000.log",
        d / "00000000000000000000.index",
        d / "00000000000000000000.timeindex",
        None,
        snapshot,
        b"0\n1\n0 0\n",
    )


def bench_metadata(size: int, segment_id: str = "tqimKeZwStOEOwRzT3L5oQ"):  # type: ignore[no-untyped-def]
    """The broker's metadata of the benchmark segment (topic ``bench``, partition 0)."""
    from rsm.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    tip = TopicIdPartition("MWJ6FHTfRYy67jzwZdeqSQ", "bench", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, segment_id), 0, 0, 0, 0, 0, size, {0: 0})
