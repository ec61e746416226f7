"""Backend overhead benchmark: our backends next to a bare SDK loop, against the local emulators.

For every cloud backend this starts its emulator (tests/support/emulators.py), then times the same requests two
ways in the same run, interleaved rep by rep so host noise hits both alike:

- ``ours``: ``backend.upload`` / ``backend.fetch`` of the S3, GCS and Azure backends
- ``sdk``:  the plain SDK call doing the same request (``put_object``, ``upload_from_string``,
  ``upload_blob``, ranged ``get_object`` / ``download_as_bytes`` / ``download_blob``), same client settings

Cases (4 MiB random objects):

- ``put seq`` / ``get seq``: one object at a time (single PUT; ranged GET of the whole 4 MiB)
- ``put 4thr`` / ``get 4thr``: 4 threads sharing one backend / one SDK client
- ``put parts``: one multi-part object with parts sent in parallel where the store allows it (S3: 20 MiB in
  4 x 5 MiB parts, since S3's minimum part is 5 MiB; Azure: 4 MiB in 4 x 1 MiB staged blocks; GCS: 4 MiB in
  4 x 1 MiB resumable chunks, which GCS only accepts sequentially). The SDK side is the same request sequence
  hand-written against the client (create/upload_part/complete, stage_block/commit, resumable upload).

Prints MB/s (10^6 B/s) per side and ours/sdk; the target is >= 0.9. Client and server share the machine's
cores, so absolute numbers say little; the ratio is the point. Runs in about 1-2 minutes.

    .venv/bin/python benchmarks/bench_backends.py [--reps 5] [--objects 8] [--only s3-moto,gcs-fake]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

import emulators  # noqa: E402

from backends.azure import AzureBlobBackend  # noqa: E402
from backends.base import read_exactly  # noqa: E402
from backends.gcs import GcsBackend  # noqa: E402
from backends.s3 import S3Backend  # noqa: E402

MiB = 1024 * 1024
OBJ = 4 * MiB
THREADS = 4
Op = Callable[[str, bytes], None]
Get = Callable[[str], bytes]


class Side:
    """One way of doing the requests: ``put(key, data)``, ``get(key)`` (ranged, whole object), ``put_parts``."""

    def __init__(self, put: Op, get: Get, put_parts: Op) -> None:
        self.put = put
        self.get = get
        self.put_parts = put_parts


# --- S3 -------------------------------------------------------------------------------------------


def s3_sides(server: emulators.StoreServer) -> tuple[Side, Side, int, Callable[[], None]]:
    import boto3
    from botocore.config import Config

    conf = server.config(**{"s3.multipart.upload.part.size": str(64 * MiB)})
    ours = S3Backend()
    ours.configure(conf)
    parts_backend = S3Backend()
    parts_backend.configure(
        server.config(**{"s3.multipart.upload.part.size": str(5 * MiB), "s3.multipart.upload.concurrency": "4"})
    )
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=conf["aws.access.key.id"],
        aws_secret_access_key=conf["aws.secret.access.key"],
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1},
            max_pool_connections=10,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )
    bucket = server.bucket
    pool = concurrent.futures.ThreadPoolExecutor(4)

    def sdk_put(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=key, Body=data)

    def sdk_get(key: str) -> bytes:
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{OBJ - 1}")["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    def sdk_put_parts(key: str, data: bytes) -> None:
        uid = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        pieces = [data[i : i + 5 * MiB] for i in range(0, len(data), 5 * MiB)]
        futures = [
            pool.submit(client.upload_part, Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=p)
            for n, p in enumerate(pieces, 1)
        ]
        parts = [{"PartNumber": n, "ETag": f.result()["ETag"]} for n, f in enumerate(futures, 1)]
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": parts})

    def close() -> None:
        ours.close()
        parts_backend.close()
        pool.shutdown()

    return (
        Side(
            lambda k, d: ours_put(ours, k, d), lambda k: ours_get(ours, k), lambda k, d: ours_put(parts_backend, k, d)
        ),
        Side(sdk_put, sdk_get, sdk_put_parts),
        20 * MiB,
        close,
    )


# --- GCS ------------------------------------------------------------------------------------------


def gcs_sides(server: emulators.StoreServer) -> tuple[Side, Side, int, Callable[[], None]]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    ours = GcsBackend()
    ours.configure(server.config(**{"gcs.resumable.upload.chunk.size": str(64 * MiB)}))
    parts_backend = GcsBackend()
    parts_backend.configure(server.config(**{"gcs.resumable.upload.chunk.size": str(MiB)}))
    client = storage.Client(
        project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": server.endpoint}
    )
    bucket = client.bucket(server.bucket)

    def sdk_put(key: str, data: bytes) -> None:
        bucket.blob(key).upload_from_string(data, retry=None)

    def sdk_get(key: str) -> bytes:
        return bytes(bucket.blob(key).download_as_bytes(start=0, end=OBJ - 1, retry=None, checksum=None))

    def sdk_put_parts(key: str, data: bytes) -> None:
        bucket.blob(key, chunk_size=MiB).upload_from_file(io.BytesIO(data), size=None, retry=None)

    def close() -> None:
        ours.close()
        parts_backend.close()

    return (
        Side(
            lambda k, d: ours_put(ours, k, d), lambda k: ours_get(ours, k), lambda k, d: ours_put(parts_backend, k, d)
        ),
        Side(sdk_put, sdk_get, sdk_put_parts),
        OBJ,
        close,
    )


# --- Azure ----------------------------------------------------------------------------------------


def azure_sides(server: emulators.StoreServer) -> tuple[Side, Side, int, Callable[[], None]]:
    import base64

    from azure.storage.blob import BlobBlock, BlobServiceClient

    ours = AzureBlobBackend()
    ours.configure(server.config(**{"azure.upload.block.size": str(64 * MiB)}))
    parts_backend = AzureBlobBackend()
    parts_backend.configure(server.config(**{"azure.upload.block.size": str(MiB), "azure.upload.concurrency": "4"}))
    service = BlobServiceClient.from_connection_string(
        emulators.azurite_connection_string(server.endpoint),
        retry_total=0,
        max_single_put_size=64 * MiB,
        max_single_get_size=4 * MiB,
        max_chunk_get_size=4 * MiB,
    )
    container = service.get_container_client(server.bucket)
    pool = concurrent.futures.ThreadPoolExecutor(4)

    def sdk_put(key: str, data: bytes) -> None:
        container.get_blob_client(key).upload_blob(data, overwrite=True, length=len(data))

    def sdk_get(key: str) -> bytes:
        return bytes(container.get_blob_client(key).download_blob(offset=0, length=OBJ, max_concurrency=1).readall())

    def sdk_put_parts(key: str, data: bytes) -> None:
        blob = container.get_blob_client(key)
        tag = uuid.uuid4().hex[:8]
        ids = [base64.b64encode(f"{tag}-{n:05d}".encode()).decode() for n in range(len(data) // MiB)]
        futures = [
            pool.submit(blob.stage_block, block_id, data[n * MiB : (n + 1) * MiB], length=MiB)
            for n, block_id in enumerate(ids)
        ]
        for f in futures:
            f.result()
        blob.commit_block_list([BlobBlock(block_id=i) for i in ids])

    def close() -> None:
        ours.close()
        parts_backend.close()
        service.close()
        pool.shutdown()

    return (
        Side(
            lambda k, d: ours_put(ours, k, d), lambda k: ours_get(ours, k), lambda k, d: ours_put(parts_backend, k, d)
        ),
        Side(sdk_put, sdk_get, sdk_put_parts),
        OBJ,
        close,
    )


def ours_put(backend: Any, key: str, data: bytes) -> None:
    backend.upload(key, io.BytesIO(data))


def ours_get(backend: Any, key: str) -> bytes:
    with backend.fetch(key, 0, OBJ - 1) as stream:
        return read_exactly(stream, OBJ)


SIDES = {"s3": s3_sides, "gcs": gcs_sides, "azure": azure_sides}


# --- timing -----------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_case(
    side: Side,
    case: str,
    keys: list[str],
    blobs: list[bytes],
    parts_blob: bytes,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> float:
    """MB/s of one rep of ``case`` on ``side``."""
    if case == "put seq":
        secs = timed(lambda: [side.put(k, b) for k, b in zip(keys, blobs, strict=True)])
        return len(keys) * OBJ / secs / 1e6
    if case == "get seq":
        secs = timed(lambda: [side.get(k) for k in keys])
        return len(keys) * OBJ / secs / 1e6
    if case == "put 4thr":
        secs = timed(lambda: list(pool.map(side.put, keys, blobs)))
        return len(keys) * OBJ / secs / 1e6
    if case == "get 4thr":
        secs = timed(lambda: list(pool.map(side.get, keys)))
        return len(keys) * OBJ / secs / 1e6
    if case == "put parts":
        n = max(2, len(keys) // 4)
        secs = timed(lambda: [side.put_parts(f"{keys[0]}-parts-{i}", parts_blob) for i in range(n)])
        return n * len(parts_blob) / secs / 1e6
    raise ValueError(case)


CASES = ["put seq", "get seq", "put 4thr", "get 4thr", "put parts"]


def bench_flavour(name: str, reps: int, objects: int, workdir: Path) -> list[tuple[str, str, float, float]]:
    rows = []
    with emulators.running(name, workdir / name) as server:
        ours, sdk, parts_size, close = SIDES[server.backend](server)
        try:
            prefix = f"bench-{uuid.uuid4().hex[:8]}/"
            keys = [f"{prefix}{i:03d}" for i in range(objects)]
            blobs = [os.urandom(OBJ) for _ in range(objects)]
            parts_blob = os.urandom(parts_size)
            with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
                for k, b in zip(keys, blobs, strict=True):  # warm-up: connections, objects for the GETs
                    sdk.put(k, b)
                    ours.get(k)
                for case in CASES:
                    got: dict[str, list[float]] = {"ours": [], "sdk": []}
                    for rep in range(reps):
                        order = [("ours", ours), ("sdk", sdk)] if rep % 2 == 0 else [("sdk", sdk), ("ours", ours)]
                        for label, side in order:
                            got[label].append(run_case(side, case, keys, blobs, parts_blob, pool))
                    rows.append((name, case, statistics.median(got["ours"]), statistics.median(got["sdk"])))
                    print(
                        f"  {name:14s} {case:10s} ours {rows[-1][2]:7.1f}  sdk {rows[-1][3]:7.1f}  "
                        f"ratio {rows[-1][2] / rows[-1][3]:.2f}",
                        flush=True,
                    )
        finally:
            close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions per case (median is kept)")
    parser.add_argument("--objects", type=int, default=8, help="4 MiB objects per repetition")
    parser.add_argument("--only", default="", help="comma-separated subset of " + ",".join(emulators.STARTERS))
    args = parser.parse_args()
    flavours = [f for f in emulators.STARTERS if not args.only or f in args.only.split(",")]
    started = time.monotonic()
    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="kts-bench-") as tmp:
        for name in flavours:
            print(f"{name}: starting emulator", flush=True)
            rows += bench_flavour(name, args.reps, args.objects, Path(tmp))
    print()
    print("| backend | case | ours MB/s | bare SDK MB/s | ours/sdk |")
    print("|---|---|---|---|---|")
    for name, case, o, s in rows:
        print(f"| {name} | {case} | {o:.1f} | {s:.1f} | {o / s:.2f} |")
    ratios = [o / s for _, _, o, s in rows]
    print(
        f"\nmedian ratio {statistics.median(ratios):.2f}, min {min(ratios):.2f} "
        f"({time.monotonic() - started:.0f} s total)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
