"""The S3 backend's uploads and copies: one ``PutObject`` or a parallel multipart upload, one ``CopyObject`` or a
parallel multipart copy of ranges, each aborted on failure so that no parts are left behind."""

from __future__ import annotations

import base64
import collections
import concurrent.futures
import hashlib
import logging
from collections.abc import Iterator
from typing import Any, BinaryIO

from backends.base import StorageBackendException
from backends.buffers import UploadBuffers
from backends.cloud import CloudBackend, upload_parts
from backends.retry import Deadline, DeadlineExceeded
from backends.s3_config import MAX_COPY_PART_SIZE, MAX_PARTS, MIN_PART_SIZE
from backends.streaming import blocks_after, iter_blocks

log = logging.getLogger(__name__)


class S3Transfers(CloudBackend):
    """Uploads and copies of ``backends.s3.S3Backend``, which configures the attributes below and the client."""

    bucket: str
    part_size: int
    concurrency: int
    buffers: UploadBuffers
    storage_class: str | None
    md5: bool
    checksums: bool
    copy_single_limit: int
    copy_part_size: int

    @property
    def client(self) -> Any:
        """The boto3 client."""
        raise NotImplementedError

    # --- upload -----------------------------------------------------------------------------------
    def _extra(self) -> dict[str, Any]:
        return {"StorageClass": self.storage_class} if self.storage_class else {}

    @staticmethod
    def _md5(block: bytes) -> str:
        return base64.b64encode(hashlib.md5(block, usedforsecurity=False).digest()).decode()

    def upload(self, key: str, data: BinaryIO) -> int:
        deadline = self._upload_deadline()
        what = f"S3 upload of key {key!r} to bucket {self.bucket!r}"
        blocks = iter_blocks(data, self.part_size, self.buffers, deadline, what)
        first, last = next(blocks)
        if last:
            try:
                self._put_object(key, first, deadline)
            finally:
                self.buffers.release(len(first))
            return len(first)
        head = [first]
        del first  # only the part being sent may hold it
        return self._multipart(key, head, blocks, deadline)

    def _put_object(self, key: str, block: bytes, deadline: Deadline) -> None:
        extra = self._extra()
        if self.md5:
            extra["ContentMD5"] = self._md5(block)
        self._call(
            "put-object",
            key,
            lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=block, **extra),
            deadline=deadline,
            key_read=False,
        )
        self.instrumentation.bytes_uploaded(len(block))

    def _create_multipart(self, key: str, deadline: Deadline) -> str:
        """A new multipart upload of ``key`` (with CRC32 part checksums when they are on): its upload id."""
        extra = self._extra()
        if self.checksums:
            extra["ChecksumAlgorithm"] = "CRC32"
        created = self._call(
            "create-multipart-upload",
            key,
            lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=key, **extra),
            deadline=deadline,
            key_read=False,
        )
        upload_id: str = created["UploadId"]
        return upload_id

    def _multipart(self, key: str, head: list[bytes], rest: Iterator[tuple[bytes, bool]], deadline: Deadline) -> int:
        try:
            upload_id = self._create_multipart(key, deadline)
        except BaseException:
            self.buffers.release(len(head.pop()))
            raise
        total = 0

        def count(n: int) -> None:
            nonlocal total
            total += n

        def send(number: int, block: bytes) -> dict[str, Any]:
            part_extra: dict[str, Any] = {"ContentMD5": self._md5(block)} if self.md5 else {}
            if self.checksums:
                part_extra["ChecksumAlgorithm"] = "CRC32"
            answer = self._call(
                "upload-part",
                key,
                lambda: self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=block, **part_extra
                ),
                deadline=deadline,
                key_read=False,
            )
            self.instrumentation.bytes_uploaded(len(block))
            part = {"PartNumber": number, "ETag": answer["ETag"]}
            if answer.get("ChecksumCRC32"):
                part["ChecksumCRC32"] = answer["ChecksumCRC32"]
            return part

        try:
            parts = upload_parts(
                self._worker_pool(self.concurrency, "kts-s3-part"),
                blocks_after(head, rest),
                send,
                concurrency=self.concurrency,
                deadline=deadline,
                what=f"S3 multipart upload of key {key!r} to bucket {self.bucket!r}",
                on_bytes=count,
                buffers=self.buffers,
            )
            self._complete_multipart(key, upload_id, parts, deadline)
        except BaseException as e:
            if head:  # failed before its first part was taken
                self.buffers.release(len(head.pop()))
            self._abort(key, upload_id)
            if isinstance(e, DeadlineExceeded):
                raise self._map_error("multipart upload", key, e) from e
            raise  # our mapped errors, and the source's own exceptions, unchanged
        return total

    def _complete_multipart(self, key: str, upload_id: str, parts: list[dict[str, Any]], deadline: Deadline) -> None:
        """Join the uploaded ``parts`` into the object ``key``."""
        self._call(
            "complete-multipart-upload",
            key,
            lambda: self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            ),
            deadline=deadline,
            key_read=False,
        )

    def _abort(self, key: str, upload_id: str) -> None:
        """Retried like every call; if it still fails, the parts stay invisible (never an object) and the warning
        says how to free them: garbage collection (``find_garbage``) or the bucket's lifecycle rule."""
        try:
            self._call(
                "abort-multipart-upload",
                key,
                lambda: self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
            )
        except StorageBackendException as e:
            log.warning(
                "could not abort the multipart upload %s of key %r in %s (%s); its parts stay billed until garbage "
                "collection or the bucket's AbortIncompleteMultipartUpload lifecycle rule removes them",
                upload_id,
                key,
                self._where(),
                e,
            )

    # --- copies inside the store (backends.base.CopiesObjects) --------------------------------------------
    def copy_object(self, source_key: str, target_key: str) -> None:
        """CopyObject up to ``copy_single_limit`` bytes; above it a multipart upload whose parts are ranges of the
        source (UploadPartCopy, ``copy_part_size`` each, in parallel), aborted when any part fails so nothing is
        left behind. The target becomes visible only when the copy completes, under the backend's upload
        deadline. A source that is gone, before or during the copy, raises ``KeyNotFound`` naming it."""
        deadline = self._upload_deadline()
        head = self._call(
            "head-object",
            source_key,
            lambda: self.client.head_object(Bucket=self.bucket, Key=source_key),
            deadline=deadline,
        )
        if source_key == target_key:
            return  # S3 refuses a copy onto itself that changes nothing; the object is its own copy already
        size = int(head.get("ContentLength", 0))
        if size <= self.copy_single_limit:
            extra = self._extra()
            if self.checksums:
                extra["ChecksumAlgorithm"] = "CRC32"
            self._call(
                "copy-object",
                source_key,
                lambda: self.client.copy_object(
                    Bucket=self.bucket,
                    Key=target_key,
                    CopySource={"Bucket": self.bucket, "Key": source_key},
                    **extra,
                ),
                deadline=deadline,
            )
            return
        self._multipart_copy(source_key, target_key, size, str(head["ETag"]), deadline)

    def _copy_ranges(self, size: int) -> list[tuple[int, int]]:
        """The inclusive byte ranges of a multipart copy of ``size`` bytes."""
        part = max(self.copy_part_size, MIN_PART_SIZE, -(-size // MAX_PARTS))
        part = min(part, MAX_COPY_PART_SIZE)
        return [(start, min(start + part, size) - 1) for start in range(0, size, part)]

    def _multipart_copy(self, source_key: str, target_key: str, size: int, etag: str, deadline: Deadline) -> None:
        """Every part copies from the version of the source that was sized (CopySourceIfMatch its ETag): a
        source replaced meanwhile fails the copy instead of mixing two versions."""
        upload_id = self._create_multipart(target_key, deadline)
        source = {"Bucket": self.bucket, "Key": source_key}
        what = f"S3 multipart copy of key {source_key!r} to {target_key!r} in bucket {self.bucket!r}"

        def copy_part(number: int, first: int, last: int) -> dict[str, Any]:
            from botocore.exceptions import ClientError

            def attempt() -> Any:
                try:
                    return self.client.upload_part_copy(
                        Bucket=self.bucket,
                        Key=target_key,
                        UploadId=upload_id,
                        PartNumber=number,
                        CopySource=source,
                        CopySourceRange=f"bytes={first}-{last}",
                        CopySourceIfMatch=etag,
                    )
                except ClientError as e:
                    code = self._error_code(e)
                    if code == "NoSuchUpload":  # not the source that is missing: the upload of the copy
                        raise StorageBackendException(
                            f"{what} failed: its multipart upload {upload_id} was aborted meanwhile (by kts gc or "
                            f"a lifecycle rule?); copy it again"
                        ) from e
                    if code == "PreconditionFailed":
                        raise StorageBackendException(
                            f"{what} failed: the source was replaced during the copy (its ETag is no longer "
                            f"{etag}); nothing was copied, copy it again"
                        ) from e
                    raise

            answer = self._call("upload-part-copy", source_key, attempt, deadline=deadline)
            result = answer.get("CopyPartResult", {})
            part = {"PartNumber": number, "ETag": result["ETag"]}
            if result.get("ChecksumCRC32"):
                part["ChecksumCRC32"] = result["ChecksumCRC32"]
            return part

        def settle(future: concurrent.futures.Future[dict[str, Any]]) -> dict[str, Any]:
            remaining = deadline.remaining()
            try:
                return future.result(timeout=None if remaining is None else max(remaining, 0.0))
            except concurrent.futures.TimeoutError:
                raise DeadlineExceeded(f"{what}: deadline of {deadline.seconds:.1f} s exceeded") from None

        # At most `concurrency` parts in the pool at once: uploads share it, and must not wait behind a long copy.
        pool = self._worker_pool(self.concurrency, "kts-s3-part")
        in_flight: collections.deque[concurrent.futures.Future[dict[str, Any]]] = collections.deque()
        try:
            parts = []
            for number, (first, last) in enumerate(self._copy_ranges(size), start=1):
                if len(in_flight) >= self.concurrency:
                    parts.append(settle(in_flight[0]))  # popped once settled: a part still running stays waited for
                    in_flight.popleft()
                in_flight.append(pool.submit(copy_part, number, first, last))
            while in_flight:
                parts.append(settle(in_flight[0]))
                in_flight.popleft()
            self._complete_multipart(target_key, upload_id, parts, deadline)
        except BaseException as e:
            for future in in_flight:
                future.cancel()
            running = [f for f in in_flight if not f.done()]
            if running:
                concurrent.futures.wait(running, timeout=30)
            self._abort(target_key, upload_id)
            if isinstance(e, DeadlineExceeded):
                raise self._map_error("multipart copy", source_key, e) from e
            raise
