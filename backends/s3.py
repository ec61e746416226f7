"""Amazon S3 (and S3-compatible stores: MinIO, SeaweedFS, Ceph RGW, S3 Express One Zone) via boto3.

Uploads stream: the source is cut into ``s3.multipart.upload.part.size`` parts. A source that fits in one
part goes up in a single ``PutObject``; anything larger becomes a multipart upload whose parts are sent in
parallel on a bounded thread pool (``s3.multipart.upload.concurrency``). The parts of all uploads share one
byte budget (``s3.upload.buffer.memory.bytes``), so copier threads uploading at once hold at most that between
them. S3 makes an object visible only at ``PutObject`` / ``CompleteMultipartUpload``, so a
failed upload never leaves a partial object under the key; on failure the multipart upload is aborted so
its parts stop costing storage.

botocore's own retries are switched off (``total_max_attempts=1``): ``backends.retry`` retries every call
the same way on every store and counts each failed attempt, and the overall upload deadline bounds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from backends.base import (
    KeyNotFound,
    ObjectInfo,
    PendingUpload,
    PreconditionFailed,
    StorageBackendException,
    VersionedObject,
)
from backends.buffers import UploadBuffers
from backends.cloud import (
    UPLOAD_BUFFER_MEMORY,
    config_error,
    exclusive,
    parse_storage_config,
    require_container,
    retry_policy,
    upload_buffers,
)
from backends.retry import ErrorKind
from backends.s3_client import classify_error, error_code, make_client, read_credentials_file
from backends.s3_config import CONFIG_DEF, COPY_PART_SIZE, COPY_SINGLE_LIMIT, DELETE_BATCH
from backends.s3_transfers import S3Transfers
from backends.streaming import BodyReadError, ResponseStream, check_answer_length


class S3Backend(S3Transfers):
    """Objects in one S3 bucket; keys are used as given (the manager adds ``key.prefix``)."""

    STORE = "S3"

    def __init__(self) -> None:
        super().__init__()
        self.bucket = ""
        self.part_size = CONFIG_DEF.keys["s3.multipart.upload.part.size"].default
        self.concurrency = 4
        self.buffers = UploadBuffers(UPLOAD_BUFFER_MEMORY)
        self.storage_class: str | None = None
        self.md5 = False
        self.checksums = False
        self.copy_single_limit = COPY_SINGLE_LIMIT
        self.copy_part_size = COPY_PART_SIZE
        self._client: Any = None

    # --- configuration ----------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, Any]) -> None:
        values = parse_storage_config(CONFIG_DEF, configs)
        self.close()  # a re-configure must not leak the previous client and pool
        require_container(values, "s3.bucket.name", "S3", "bucket")
        access, secret = values["aws.access.key.id"], values["aws.secret.access.key"]
        if bool(access) != bool(secret):
            missing = "aws.secret.access.key" if access else "aws.access.key.id"
            raise config_error(missing, "aws.access.key.id and aws.secret.access.key must be set together")
        if values["aws.session.token"] and not access:
            raise config_error("aws.session.token", "needs aws.access.key.id and aws.secret.access.key")
        exclusive(
            values, ["aws.access.key.id", "aws.credentials.file"], "use static keys or a credentials file, not both"
        )
        cred_file = values["aws.credentials.file"]
        if cred_file:
            try:
                read_credentials_file(cred_file)
            except (OSError, StorageBackendException) as e:
                raise config_error("aws.credentials.file", f"cannot read credentials from {cred_file!r}: {e}") from e

        self.bucket = values["s3.bucket.name"]
        self.part_size = values["s3.multipart.upload.part.size"]
        self.concurrency = values["s3.multipart.upload.concurrency"]
        self.buffers = upload_buffers(values, "s3", "s3.multipart.upload.part.size")
        storage_class = values["s3.storage.class"].upper()
        self.storage_class = None if storage_class == "STANDARD" else storage_class
        self.md5 = values["s3.legacy.md5.plugin.enabled"]
        self.checksums = values["aws.checksum.check.enabled"]
        self._policy = retry_policy(values, "s3")
        self._upload_timeout_s = values["s3.upload.timeout.ms"] / 1000
        self._client = make_client(values, self.concurrency, self.checksums)

    @property
    def client(self) -> Any:
        """The boto3 client (for tests and tools that need a call the protocol does not have)."""
        if self._client is None:
            raise StorageBackendException("S3 backend used before configure()")
        return self._client

    def _where(self) -> str:
        return f"S3 bucket {self.bucket!r}"

    # --- error classification ---------------------------------------------------------------------
    CONTAINER_MISSING = frozenset({"NoSuchBucket"})

    def _error_code(self, e: BaseException) -> str:
        return error_code(e)

    def _classify_error(self, e: BaseException) -> ErrorKind:
        return classify_error(e)

    # --- garbage collection (optional backend methods, see backends.base.GarbageCapable) ---------------
    def list_details(self, prefix: str) -> Iterator[ObjectInfo]:
        def page(token: str | None) -> tuple[list[ObjectInfo], str | None]:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            result = self.client.list_objects_v2(**kwargs)
            infos = [
                ObjectInfo(item["Key"], int(item.get("Size", 0)), item["LastModified"].timestamp())
                for item in result.get("Contents", [])
            ]
            return infos, result.get("NextContinuationToken") if result.get("IsTruncated") else None

        return self._paginate("list-objects", prefix, page)  # type: ignore[arg-type]

    def list_pending_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        """Open multipart uploads under ``prefix`` (what a killed or failed copy left)."""

        def page(token: str | None) -> tuple[list[PendingUpload], str | None]:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                key_marker, _, upload_marker = token.partition("\n")
                kwargs["KeyMarker"] = key_marker
                kwargs["UploadIdMarker"] = upload_marker
            result = self.client.list_multipart_uploads(**kwargs)
            uploads = [
                PendingUpload("multipart-upload", u["Key"], u["UploadId"], u["Initiated"].timestamp())
                for u in result.get("Uploads", [])
            ]
            following = None
            if result.get("IsTruncated"):
                following = f"{result.get('NextKeyMarker', '')}\n{result.get('NextUploadIdMarker', '')}"
            return uploads, following

        return self._paginate("list-multipart-uploads", prefix, page)  # type: ignore[arg-type]

    def abort_pending_upload(self, upload: PendingUpload) -> None:
        try:
            self._call(
                "abort-multipart-upload",
                upload.key,
                lambda: self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=upload.key, UploadId=upload.upload_id
                ),
            )
        except KeyNotFound:  # NoSuchUpload: already completed or aborted
            pass

    # --- read -------------------------------------------------------------------------------------
    def _fetch_once(self, key: str, start: int, end: int | None) -> BinaryIO:
        self._check_range(key, start, end)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start != 0 or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end}"
        answer = self._call("get-object", key, lambda: self.client.get_object(**kwargs), start=start, end=end)
        body = answer["Body"]
        length = answer.get("ContentLength")
        try:
            check_answer_length(f"S3 get-object of key {key!r}", length, answer.get("ContentRange"))
        except BodyReadError:
            body.close()
            raise

        def read(n: int) -> bytes:
            return body.read(None if n < 0 else n)

        return ResponseStream(
            read,
            body.close,
            self._stream_error("get-object", key),  # type: ignore[return-value]
            self.instrumentation,
            length=int(length) if length is not None else None,
        )

    # --- conditional replacement (backends.base.ConditionalWrites) -----------------------------------
    def fetch_versioned(self, key: str, max_bytes: int) -> VersionedObject:
        def attempt() -> VersionedObject:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
            with answer["Body"] as body:
                return VersionedObject(body.read(max_bytes + 1), str(answer["ETag"]))

        return self._call("get-object", key, attempt)

    def replace_if_unchanged(self, key: str, data: bytes, version: str) -> None:
        """A PUT with If-Match on the ETag that was read: S3 answers 412 when the object changed and 404 when it
        was deleted, and writes nothing either way."""
        from botocore.exceptions import ClientError

        extra = self._extra()
        if self.md5:
            extra["ContentMD5"] = self._md5(data)

        def attempt() -> None:
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfMatch=version, **extra)
            except ClientError as e:
                code = self._error_code(e)
                status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
                if status in (404, 409, 412) or code in (
                    "PreconditionFailed",
                    "NoSuchKey",
                    "ConditionalRequestConflict",
                ):
                    raise PreconditionFailed(key, self._where(), code or f"HTTP {status}") from e
                raise

        self._call("put-object-if-match", key, attempt, deadline=self._upload_deadline(), key_read=False)
        self.instrumentation.bytes_uploaded(len(data))

    # --- delete / list ----------------------------------------------------------------------------
    def delete(self, key: str) -> None:
        try:
            self._call("delete-object", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=key))
        except KeyNotFound:
            pass

    def delete_many(self, keys: Iterable[str]) -> None:
        batch: list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        request = {"Objects": [{"Key": k} for k in keys], "Quiet": True}
        label = f"{keys[0]!r} and {len(keys) - 1} more" if len(keys) > 1 else repr(keys[0])
        answer = self._call(
            "delete-objects",
            label,
            lambda: self.client.delete_objects(Bucket=self.bucket, Delete=request),
            key_read=False,
        )
        errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            shown = ", ".join(f"{e.get('Key')!r}: {e.get('Code')} {e.get('Message', '')}".strip() for e in errors[:5])
            raise StorageBackendException(
                f"S3 delete-objects in {self._where()} failed for {len(errors)} of {len(keys)} keys: {shown}"
            )

    def list(self, prefix: str) -> Iterator[str]:
        return self._list_names(prefix, {}, "Contents", "Key")

    def list_after(self, prefix: str, start_after: str) -> Iterator[str]:
        """Keys under ``prefix`` sorting after ``start_after`` (S3's StartAfter): one partition's segments from
        an offset on, without the pages before it."""
        return self._list_names(prefix, {"StartAfter": start_after}, "Contents", "Key")

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """The "directories" right under ``prefix`` (S3's CommonPrefixes with delimiter "/")."""
        return self._list_names(prefix, {"Delimiter": "/"}, "CommonPrefixes", "Prefix")

    def _list_names(self, prefix: str, extra: dict[str, Any], group: str, field: str) -> Iterator[str]:
        """``field`` of every entry of ``group`` in a ListObjectsV2 listing of ``prefix`` with ``extra`` arguments."""

        def page(token: str | None) -> tuple[list[str], str | None]:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, **extra}
            if token:
                kwargs["ContinuationToken"] = token
            result = self.client.list_objects_v2(**kwargs)
            names = [item[field] for item in result.get(group, [])]
            return names, result.get("NextContinuationToken") if result.get("IsTruncated") else None

        return self._paginate("list-objects", prefix, page)

    def close(self) -> None:
        self._close_worker_pool()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __repr__(self) -> str:
        return f"S3Backend(bucket={self.bucket!r})"
