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

import base64
import collections
import concurrent.futures
import configparser
import datetime
import email.utils
import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
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
    MIN_POOL_CONNECTIONS,
    UPLOAD_BUFFER_MEMORY,
    CloudBackend,
    common_keys,
    config_error,
    exclusive,
    parse_storage_config,
    require_container,
    retry_policy,
    upload_buffer_key,
    upload_buffers,
    upload_parts,
)
from backends.configdef import ConfigDef, ConfigKey, in_range, one_of
from backends.retry import Deadline, DeadlineExceeded, ErrorKind
from backends.streaming import BodyReadError, ResponseStream, blocks_after, check_answer_length, iter_blocks

log = logging.getLogger(__name__)

MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PART_SIZE = 2_147_483_639
COPY_SINGLE_LIMIT = 5 * 1024**3
"""The largest object one CopyObject copies (S3's limit); a larger one is copied part by part (UploadPartCopy)."""
COPY_PART_SIZE = 512 * 1024**2
"""The part size of a multipart copy (grown when the object needs more than ``MAX_PARTS`` parts of it)."""
MAX_PARTS = 10_000
MAX_COPY_PART_SIZE = 5 * 1024**3
DELETE_BATCH = 1000  # the DeleteObjects limit
STORAGE_CLASSES = (
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "OUTPOSTS",
    "GLACIER_IR",
    "SNOW",
    "EXPRESS_ONEZONE",
)

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "s3.bucket.name",
            "string",
            None,
            "S3 bucket holding the tiered objects (required). Directory buckets of S3 Express One Zone "
            "(names ending in --x-s3) work as well.",
            group="s3",
        ),
        ConfigKey(
            "s3.region",
            "string",
            None,
            "AWS region of the bucket. null: the SDK's default region chain (AWS_REGION, ~/.aws/config), "
            "falling back to us-east-1.",
            group="s3",
        ),
        ConfigKey(
            "s3.endpoint.url",
            "string",
            None,
            "Custom endpoint for S3-compatible stores, VPC endpoints and emulators, e.g. http://127.0.0.1:9000. "
            "null: the AWS endpoint of the region.",
            group="s3",
        ),
        ConfigKey(
            "s3.path.style.access.enabled",
            "boolean",
            None,
            "Address buckets as endpoint/bucket (true) instead of bucket.endpoint (false). null: SDK choice "
            "(virtual-hosted on AWS). Most S3-compatible stores need true.",
            group="s3",
        ),
        ConfigKey(
            "s3.storage.class",
            "string",
            "STANDARD",
            "Storage class of uploaded objects.",
            validator=one_of(*STORAGE_CLASSES),
            group="s3",
        ),
        ConfigKey(
            "s3.multipart.upload.part.size",
            "int",
            8 * 1024 * 1024,
            "Part size of multipart uploads, in bytes; objects up to this size go up in one PutObject. The "
            "parts of all uploads share s3.upload.buffer.memory.bytes. Smaller parts suit S3 Express One Zone.",
            validator=in_range(MIN_PART_SIZE, MAX_PART_SIZE),
            group="s3",
        ),
        ConfigKey(
            "s3.multipart.upload.concurrency",
            "int",
            4,
            "Parts sent in parallel (size of the upload thread pool, shared by all uploads).",
            validator=in_range(1, 64),
            group="s3",
        ),
        upload_buffer_key("s3", "s3", "s3.multipart.upload.part.size"),
        ConfigKey(
            "s3.legacy.md5.plugin.enabled",
            "boolean",
            False,
            "Send Content-MD5 with every upload request, for S3-compatible stores that still require it.",
            group="s3",
        ),
        *common_keys("s3", "s3"),
        ConfigKey(
            "aws.access.key.id",
            "password",
            None,
            "Static AWS access key id; set together with aws.secret.access.key. null: the default credential "
            "chain (environment, shared config/SSO, web identity, ECS/EC2 instance roles).",
            group="s3",
        ),
        ConfigKey(
            "aws.secret.access.key",
            "password",
            None,
            "Static AWS secret access key, set together with aws.access.key.id.",
            group="s3",
        ),
        ConfigKey(
            "aws.session.token",
            "password",
            None,
            "Session token for temporary static credentials (needs aws.access.key.id).",
            group="s3",
        ),
        ConfigKey(
            "aws.credentials.file",
            "string",
            None,
            "File with credentials, re-read when it changes (for rotated secrets): either AWS's INI format "
            "([default] aws_access_key_id=..., aws_secret_access_key=..., aws_session_token=...) or plain "
            "key=value lines with those names. Cannot be combined with aws.access.key.id.",
            group="s3",
        ),
        ConfigKey(
            "aws.checksum.check.enabled",
            "boolean",
            False,
            "Send CRC32 checksums with uploads and validate the checksums S3 returns on downloads (costs "
            "client CPU; TLS already protects data in transit).",
            group="s3",
        ),
        ConfigKey(
            "aws.certificate.check.enabled",
            "boolean",
            True,
            "Verify the TLS certificate of the endpoint. Only turn off for test setups with self-signed certificates.",
            group="s3",
        ),
    ]
)

_THROTTLING_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "TooManyRequests",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "BandwidthLimitExceeded",
    "EC2ThrottledException",
}
_TIMEOUT_CODES = {"RequestTimeout", "RequestTimeoutException", "RequestTimeTooSkewed"}


def read_credentials_file(path: str) -> dict[str, str]:
    """``access_key``/``secret_key``/``token`` from an AWS INI file or key=value lines."""
    text = Path(path).read_text()
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text if text.lstrip().startswith("[") else "[default]\n" + text)
    except configparser.Error as e:
        raise StorageBackendException(f"cannot parse AWS credentials file {path}: {e}") from e
    section = (
        parser["default"]
        if parser.has_section("default")
        else (parser[parser.sections()[0]] if parser.sections() else None)
    )
    if section is None:
        raise StorageBackendException(f"AWS credentials file {path} has no credentials")

    def pick(*names: str) -> str | None:
        for n in names:
            if section.get(n):
                return section.get(n)
        return None

    access = pick("aws_access_key_id", "accessKey", "access_key_id")
    secret = pick("aws_secret_access_key", "secretKey", "secret_access_key")
    if not access or not secret:
        raise StorageBackendException(f"AWS credentials file {path} lacks aws_access_key_id/aws_secret_access_key")
    out = {"access_key": access, "secret_key": secret}
    token = pick("aws_session_token", "sessionToken", "session_token")
    if token:
        out["token"] = token
    return out


def _file_credential_provider(path: str) -> Any:
    """A botocore provider whose credentials re-read ``path`` about once a minute (rotation without restart)."""
    from botocore.credentials import CredentialProvider, RefreshableCredentials

    def fetch() -> dict[str, Any]:
        creds = read_credentials_file(path)
        # botocore refreshes 15 min before expiry; a 16 min expiry makes it re-read every minute or so.
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=16)
        return {
            "access_key": creds["access_key"],
            "secret_key": creds["secret_key"],
            "token": creds.get("token"),
            "expiry_time": expiry.isoformat(),
        }

    class FileProvider(CredentialProvider):  # type: ignore[misc]
        METHOD = "kts-credentials-file"
        CANONICAL_NAME = "kts-credentials-file"

        def load(self) -> Any:
            return RefreshableCredentials.create_from_metadata(fetch(), refresh_using=fetch, method=self.METHOD)

    return FileProvider()


def _timestamp(value: Any) -> datetime.datetime:
    """botocore's timestamp parser, with the two forms S3 sends parsed by the standard library: ISO 8601 (every
    listed object's LastModified) and RFC 822 (every GET's Last-Modified header). botocore's own (dateutil) spends
    about 60 us a value: a third of the CPU of listing 1,000 keys, a tenth of a small GET's."""
    if isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            try:
                parsed = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)  # type: ignore[no-any-return]


class S3Backend(CloudBackend):
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
        self._client = self._make_client(values)

    def _make_client(self, values: Mapping[str, Any]) -> Any:
        import boto3
        import botocore.session
        from botocore.config import Config
        from botocore.credentials import CredentialResolver

        core = botocore.session.Session()
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_timestamp)
        if values["aws.credentials.file"]:
            core.register_component(
                "credential_provider", CredentialResolver([_file_credential_provider(values["aws.credentials.file"])])
            )
        session = boto3.session.Session(botocore_session=core)
        region = values["s3.region"] or session.region_name or "us-east-1"
        path_style = values["s3.path.style.access.enabled"]
        addressing = "auto" if path_style is None else ("path" if path_style else "virtual")
        attempt_s = values["s3.api.call.attempt.timeout"] / 1000
        checksum_mode = "when_supported" if self.checksums else "when_required"
        config = Config(
            region_name=region,
            connect_timeout=attempt_s,
            read_timeout=attempt_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
            # Broker threads (remote log readers, copiers), prefetch and part uploads share one client: a pool
            # below their count drops connections and reconnects (TLS) under load; AWS's Java SDK keeps 50.
            max_pool_connections=max(MIN_POOL_CONNECTIONS, 2 * self.concurrency + 2),
            s3={"addressing_style": addressing},
            request_checksum_calculation=checksum_mode,
            response_checksum_validation=checksum_mode,
            user_agent_extra="kafka-tiered-storage",
            tcp_keepalive=True,
        )
        kwargs: dict[str, Any] = {}
        if values["aws.access.key.id"]:
            kwargs = {
                "aws_access_key_id": values["aws.access.key.id"],
                "aws_secret_access_key": values["aws.secret.access.key"],
                "aws_session_token": values["aws.session.token"],
            }
        return session.client(
            "s3",
            endpoint_url=values["s3.endpoint.url"],
            config=config,
            verify=values["aws.certificate.check.enabled"],
            **kwargs,
        )

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
        from botocore.exceptions import ClientError

        return str(e.response.get("Error", {}).get("Code", "")) if isinstance(e, ClientError) else ""

    def _classify_error(self, e: BaseException) -> ErrorKind:
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            ConnectTimeoutError,
            HTTPClientError,
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        if isinstance(e, ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in ("NoSuchKey", "NotFound", "NoSuchUpload") or (code == "404" and status == 404):
                return ErrorKind.NOT_FOUND
            if code == "InvalidRange" or status == 416:
                return ErrorKind.INVALID_RANGE
            if code in _THROTTLING_CODES or status == 429:
                return ErrorKind.THROTTLING
            if code in _TIMEOUT_CODES:
                return ErrorKind.TIMEOUT
            if status >= 500 or code in ("InternalError", "ServiceUnavailable"):
                return ErrorKind.SERVER
            return ErrorKind.OTHER
        if isinstance(e, (ReadTimeoutError, ConnectTimeoutError, TimeoutError)):
            return ErrorKind.TIMEOUT
        if isinstance(e, (ConnectionError, HTTPClientError, IncompleteReadError, ResponseStreamingError, OSError)):
            return ErrorKind.IO
        return ErrorKind.OTHER

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
            self._call(
                "complete-multipart-upload",
                key,
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                ),
                deadline=deadline,
                key_read=False,
            )
        except BaseException as e:
            if head:  # failed before its first part was taken
                self.buffers.release(len(head.pop()))
            self._abort(key, upload_id)
            if isinstance(e, DeadlineExceeded):
                raise self._map_error("multipart upload", key, e) from e
            raise  # our mapped errors, and the source's own exceptions, unchanged
        return total

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
            self._call(
                "complete-multipart-upload",
                target_key,
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=target_key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                ),
                deadline=deadline,
                key_read=False,
            )
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
