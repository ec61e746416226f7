"""Hostile manifests: every one gives a ``CorruptDataException`` (or ``KeyRingException``) naming the object,
and a fetch's peak memory stays bounded whatever sizes the manifest claims.

Each manifest is one a plugin could never have written, crafted from a real copy: sizes of gigabytes, chunk
counts of 10^8, JSON nested past the recursion limit, non-finite or enormous numbers, a data key of the wrong
length wrapped with the (public) key. The fetches run in a child process under an address-space limit, which
reports the exception class of each case and its peak RSS.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from helpers import TIP, encryption_configs
from reliability_table import record_row

from chunking.size_codec import encode_chunk_sizes
from encryption.keyring import RsaKeyPair, RsaKeyRing
from rsm import CorruptDataException, IndexType, KeyRingException, RemoteStorageManager
from rsm.core.manifest import SegmentManifest
from rsm.core.object_keys import segment_keys
from rsm.metadata import RemoteLogSegmentMetadata

SUPPORT = Path(__file__).resolve().parents[1] / "support"

# The child's address-space limit and the peak RSS it may reach: a few chunks and the interpreter, far below the
# gigabytes the unbounded code allocated for these manifests. Measured 88 MiB of peak RSS at load 20.
CHILD_ADDRESS_SPACE = 1536 * 1024 * 1024
PEAK_RSS_LIMIT = 400 * 1024 * 1024
# The child's time limit catches a fetch that hangs, nothing else: it needs about 9 s of CPU (a 40 kB segment),
# far below 600 s even at load 20. The test's own limit leaves room for it.
CHILD_TIMEOUT_S = 600

Mutation = Callable[[dict[str, Any]], Any]


def _set_chunk_index(**fields: Any) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        doc["chunkIndex"].update(fields)
        doc["remoteLogSegmentMetadata"].pop("integrity", None)

    return apply


def _set_index(name: str, **fields: Any) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        doc["segmentIndexes"][name].update(fields)

    return apply


def _variable_sizes(count: int, size: int) -> str:
    raw = encode_chunk_sizes([size] * count)
    return base64.b64encode(zstandard.ZstdCompressor(write_content_size=True).compress(raw)).decode()


def _integrity(value: Any) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        doc["remoteLogSegmentMetadata"]["integrity"] = value

    return apply


# name -> (mutation of the manifest JSON, or raw bytes; the operation: "log" or an index type name)
PLAIN_CASES: dict[str, tuple[Mutation | bytes, str]] = {
    "fixed 1-byte chunks of a 1e8-byte file": (
        _set_chunk_index(
            originalChunkSize=1, originalFileSize=100_000_000, transformedChunkSize=1, finalTransformedChunkSize=1
        ),
        "log",
    ),
    "4 GiB chunk size": (_set_chunk_index(originalChunkSize=4 * 2**30, transformedChunkSize=4 * 2**30), "log"),
    "chunk size 65536.7": (_set_chunk_index(originalChunkSize=65536.7), "log"),
    "file size 2^40": (_set_chunk_index(originalFileSize=2**40), "log"),
    "negative file size": (_set_chunk_index(originalFileSize=-5), "log"),
    "variable index at the decoded cap": (
        _set_chunk_index(
            type="variable",
            originalChunkSize=1,
            originalFileSize=2**31 - 1,
            transformedChunks=_variable_sizes(2**20, 1),
        ),
        "log",
    ),
    "variable index of 2^20 chunks": (
        _set_chunk_index(
            type="variable", originalChunkSize=1, originalFileSize=2**20, transformedChunks=_variable_sizes(2**20, 1)
        ),
        "log",
    ),
    "index size 3 GiB": (_set_index("offset", size=3 * 2**30), "OFFSET"),
    "index size 2^40": (_set_index("offset", size=2**40), "OFFSET"),
    "index size 1.9 GiB (within the cap, past the object)": (_set_index("offset", size=1900 * 2**20), "OFFSET"),
    "negative index size": (_set_index("timestamp", size=-3), "TIMESTAMP"),
    "index position Infinity": (b"", "OFFSET"),  # raw bytes filled in below
    "100,000-digit integer": (b"", "log"),
    "JSON nested 100,000 deep": (b'{"version":"1","chunkIndex":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "log"),
    "integrity of an unknown algorithm": (_integrity({"algorithm": "md5", "chunks": ""}), "log"),
    "integrity chunks not a string": (_integrity({"algorithm": "crc32c", "chunks": 7}), "log"),
    "integrity not an object": (_integrity([1, 2]), "log"),
}


def _craft(original: bytes, name: str, mutation: Mutation | bytes) -> bytes:
    if name == "index position Infinity":
        return original.replace(b'"offset":{"position":0', b'"offset":{"position":Infinity', 1)
    if name == "100,000-digit integer":
        doc = json.loads(original)
        text = json.dumps(doc).replace('"originalFileSize": ', '"originalFileSize": ' + "9" * 100_000 + "0 * ", 1)
        return text.replace("0 * ", "", 1).replace(f"{doc['chunkIndex']['originalFileSize']},", ",", 1).encode()
    if isinstance(mutation, bytes):
        return mutation
    doc = json.loads(original)
    mutation(doc)
    return json.dumps(doc).encode()


def _run_child(configs: dict[str, str], cases: list[tuple[str, RemoteLogSegmentMetadata, str]], tmp: Path) -> Any:
    job = tmp / "job.pickle"
    job.write_bytes(pickle.dumps({"configs": configs, "cases": cases}))
    env = dict(os.environ, MALLOC_ARENA_MAX="2", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(SUPPORT / "hostile_child.py"), str(job), str(CHILD_ADDRESS_SPACE)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(CHILD_TIMEOUT_S + 300)
def test_hostile_manifests_are_corrupt_data_with_bounded_memory(segment_factory: Any, tmp_path: Path) -> None:
    # The 1-byte-chunk cases read the object one byte a chunk until it ends, so their CPU grows with the segment:
    # a few chunks of 16 KiB are enough; the sizes the manifests claim do not depend on it.
    seg = segment_factory(target_bytes=40_000, seed=21)
    configs = {
        "chunk.size": "16384",
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp_path / "store"),
        "storage.fsync.enabled": "false",
        # the chunk cache's memory tier may hold its configured bytes whatever the manifests say; keep that budget
        # small so the peak measured is what one hostile fetch allocates
        "fetch.chunk.cache.size": str(8 * 1024 * 1024),
    }
    writer = RemoteStorageManager()
    writer.configure(configs)
    cases = []
    for i, (name, (mutation, operation)) in enumerate(PLAIN_CASES.items()):
        meta = seg.to_metadata(TIP, f"hostile{i:04d}xxxxxxxxxxxxxx"[:22])
        writer.copy_log_segment_data(meta, seg.to_log_segment_data())
        path = tmp_path / "store" / segment_keys("", meta).manifest
        path.write_bytes(_craft(path.read_bytes(), name, mutation))
        cases.append((name, meta, operation))
    writer.close()

    report = _run_child(configs, cases, tmp_path)
    wrong = {
        name: outcome
        for name, outcome in report["results"].items()
        if not outcome.startswith("rsm.errors.CorruptDataException: manifest ")
        and not outcome.startswith("rsm.errors.CorruptDataException: chunk ")
        and not outcome.startswith("rsm.errors.CorruptDataException: OFFSET index")
    }
    assert wrong == {}, wrong
    for name, outcome in report["results"].items():
        assert "hostile" in outcome or "chunk " in outcome, f"{name}: the message must name the object: {outcome}"
    assert report["peak_rss_bytes"] < PEAK_RSS_LIMIT, report["peak_rss_bytes"]
    record_row(
        {
            "scenario": "hostile manifests (child process, 1.5 GiB address-space limit)",
            "faults": {"hostile manifest classes": len(PLAIN_CASES)},
            "operations": f"{len(PLAIN_CASES)} fetches",
            "outcome": "every one CorruptDataException naming the manifest or chunk",
            "bytes_verified": 0,
            "wrong_bytes": 0,
            "peak_rss_mib": report["peak_rss_bytes"] // 2**20,
        }
    )


def test_manifest_parser_refuses_each_hostile_class() -> None:
    """In-process checks of the parser alone: each hostile value is refused with the manifest's name."""
    good = {
        "version": "1",
        "chunkIndex": {
            "type": "fixed",
            "originalChunkSize": 100,
            "originalFileSize": 250,
            "transformedChunkSize": 100,
            "finalTransformedChunkSize": 50,
        },
        "segmentIndexes": {
            n: {"position": 0, "size": 0} for n in ("offset", "timestamp", "producerSnapshot", "leaderEpoch")
        },
        "compression": False,
    }
    parsed = SegmentManifest.from_json_bytes(json.dumps(good).encode(), "manifest m1")
    assert [c.transformed_position for c in parsed.chunk_index.chunks()] == [0, 100, 200]
    hostile = [
        json.dumps(good).replace('"originalChunkSize": 100', '"originalChunkSize": 65536.7'),
        json.dumps(good).replace('"originalChunkSize": 100', '"originalChunkSize": Infinity'),
        json.dumps(good).replace('"originalChunkSize": 100', '"originalChunkSize": NaN'),
        json.dumps(good).replace('"originalChunkSize": 100', '"originalChunkSize": true'),
        json.dumps(good).replace('"originalChunkSize": 100', '"originalChunkSize": ' + "1" * 100_000),
        json.dumps(good).replace('"offset": {"position": 0, "size": 0}', '"offset": {"position": 0, "size": -1}'),
        "[" * 200_000,
        json.dumps({**good, "remoteLogSegmentMetadata": {"integrity": {"algorithm": "crc32c", "chunks": "AAAA"}}}),
        json.dumps({**good, "remoteLogSegmentMetadata": "x"}),
    ]
    for text in hostile:
        with pytest.raises(CorruptDataException, match="manifest m1"):
            SegmentManifest.from_json_bytes(text.encode(), "manifest m1")


def test_data_key_of_the_wrong_length_is_a_key_ring_error(
    segment_factory: Any, key_pairs: Any, make_manager: Any, tmp_path: Path
) -> None:
    """Anyone holding the public key can wrap a 16-byte key; reading it must not leak a ValueError."""
    seg = segment_factory(target_bytes=200_000, seed=21)
    m = make_manager(encryption_configs(key_pairs))
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    path = tmp_path / "store" / segment_keys("", meta).manifest
    doc = json.loads(path.read_bytes())
    pub, _ = key_pairs["kek1"]
    ring = RsaKeyRing({"kek1": RsaKeyPair.from_pem("kek1", pub.read_bytes(), None)}, "kek1")
    doc["encryption"]["dataKey"] = ring.wrap(b"\x00" * 16)
    path.write_bytes(json.dumps(doc).encode())
    reader = make_manager(encryption_configs(key_pairs))
    with pytest.raises(KeyRingException, match="invalid AES key"):
        reader.fetch_log_segment(meta, 0)
    with pytest.raises(KeyRingException, match=meta.remote_log_segment_id.id):
        reader.fetch_index(meta, IndexType.OFFSET)
