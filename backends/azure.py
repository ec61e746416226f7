"""Azure Blob Storage via azure-storage-blob.

Uploads stream: a source that fits in one ``azure.upload.block.size`` block goes up in a single Put Blob;
anything larger is staged block by block (in parallel on a bounded thread pool, at most
``azure.upload.concurrency`` blocks in flight) and made visible at once by Put Block List. Staged blocks
are invisible until that commit, so a failed upload never shows a partial blob (and never disturbs an
existing blob under the key); uncommitted blocks are discarded by the service after a week, and garbage
collection lists and deletes the blobs that hold nothing else (``list_pending_uploads``).

Block ids carry a random per-upload tag, so two uploads racing on one key never commit each other's
blocks. SDK retries are off (``retry_total=0``): ``backends.retry`` applies the same policy as for S3/GCS.

Every request carries a random client request id of ours (``x-ms-client-request-id``, still one per attempt).
Left to itself the SDK makes a time-based UUID for it, and where Debian's uuid-runtime is installed (podman
brings it) libuuid then opens /var/lib/libuuid/clock.txt once in each thread that asks and never closes it when
the thread ends: every thread that ever sent a request would leave a descriptor behind. For the same reason
the few objects of one segment are deleted one by one, not in a blob batch: the SDK prepares a batch's parts
on a thread pool it creates for that one call, whose threads each make a time-based UUID.
"""

from __future__ import annotations

import base64
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from backends.base import (
    InvalidRange,
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
    STORAGE_PREFIX,
    UPLOAD_BUFFER_MEMORY,
    CloudBackend,
    common_keys,
    config_error,
    describe_error,
    exclusive,
    parse_storage_config,
    require_container,
    retry_policy,
    upload_buffer_key,
    upload_buffers,
    upload_parts,
)
from backends.configdef import ConfigDef, ConfigException, ConfigKey, in_range
from backends.retry import Deadline, DeadlineExceeded, ErrorKind
from backends.streaming import BodyReadError, ResponseStream, blocks_after, check_answer_length, iter_blocks

MIN_BLOCK_SIZE = 100 * 1024
MAX_BLOCK_SIZE = 4000 * 1024 * 1024
DELETE_BATCH = 256  # blob batch limit
BATCH_DELETE_MIN = 4
"""Fewer keys than this (the two or three objects of a segment) are deleted one request each: a blob batch costs
the SDK's own short-lived thread pool (see the module docstring), worth it only for the bulk deletes of gc."""
UNCOMMITTED_BLOCKS = "uncommitted-blocks"
"""``PendingUpload.kind`` of a blob that holds only staged, never committed blocks."""

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "azure.container.name",
            "string",
            None,
            "Blob container holding the tiered objects (required).",
            group="azure",
        ),
        ConfigKey(
            "azure.account.name",
            "string",
            None,
            "Storage account name. Required unless azure.connection.string is set or azure.endpoint.url "
            "already names the account.",
            group="azure",
        ),
        ConfigKey(
            "azure.account.key",
            "password",
            None,
            "Shared key of the storage account. Without a key or SAS token, DefaultAzureCredential "
            "(managed identity, workload identity, environment) is used, which needs the azure-identity "
            "package.",
            group="azure",
        ),
        ConfigKey(
            "azure.sas.token",
            "password",
            None,
            "Shared access signature granting read, write, delete and list on the container. Mutually "
            "exclusive with azure.account.key.",
            group="azure",
        ),
        ConfigKey(
            "azure.connection.string",
            "password",
            None,
            "Full connection string (AccountName/AccountKey or SharedAccessSignature plus endpoints). "
            "Cannot be combined with azure.account.name, azure.account.key, azure.sas.token or "
            "azure.endpoint.url.",
            group="azure",
        ),
        ConfigKey(
            "azure.endpoint.url",
            "string",
            None,
            "Blob service URL, e.g. http://127.0.0.1:10000/devstoreaccount1 for Azurite. null: "
            "https://<account>.blob.core.windows.net.",
            group="azure",
        ),
        ConfigKey(
            "azure.upload.block.size",
            "int",
            8 * 1024 * 1024,
            "Block size of staged uploads, in bytes; blobs up to this size go up in one Put Blob. The blocks of "
            "all uploads share azure.upload.buffer.memory.bytes.",
            validator=in_range(MIN_BLOCK_SIZE, MAX_BLOCK_SIZE),
            group="azure",
        ),
        ConfigKey(
            "azure.upload.concurrency",
            "int",
            4,
            "Blocks staged in parallel (size of the upload thread pool, shared by all uploads).",
            validator=in_range(1, 64),
            group="azure",
        ),
        upload_buffer_key("azure", "azure", "azure.upload.block.size"),
        ConfigKey(
            "azure.download.chunk.size",
            "int",
            4 * 1024 * 1024,
            "No longer used: a download is one ranged GET read off the connection as the caller reads, so memory "
            "follows the caller's reads, and a broken body resumes under azure.retry.*. Still accepted so "
            "existing configurations parse.",
            validator=in_range(64 * 1024, None),
            group="azure",
        ),
        ConfigKey(
            "azure.api.version",
            "string",
            None,
            "Pin the storage REST API version the SDK sends (for emulators or stacks that lag behind the "
            "SDK, e.g. 2025-11-05 for Azurite 3.35 without --skipApiVersionCheck). null: SDK default.",
            group="azure",
        ),
        *common_keys("azure", "azure"),
    ]
)


def _request_id() -> dict[str, str]:
    """The ``client_request_id`` of one request: random, so that the SDK never makes a time-based one."""
    return {"client_request_id": str(uuid.uuid4())}


class AzureBlobBackend(CloudBackend):
    """Objects in one Azure blob container."""

    STORE = "Azure"

    def __init__(self) -> None:
        super().__init__()
        self.container = ""
        self.account = ""
        self.block_size = CONFIG_DEF.keys["azure.upload.block.size"].default
        self.concurrency = 4
        self.buffers = UploadBuffers(UPLOAD_BUFFER_MEMORY)
        self._sas_token: str | None = None
        self._service: Any = None
        self._container: Any = None

    # --- configuration ----------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, Any]) -> None:
        values = parse_storage_config(CONFIG_DEF, configs)
        self.close()  # a re-configure must not leak the previous client and pool
        require_container(values, "azure.container.name", "Azure", "container")
        conn = values["azure.connection.string"]
        if conn:
            clashing = [
                STORAGE_PREFIX + k
                for k in ("azure.account.name", "azure.account.key", "azure.sas.token", "azure.endpoint.url")
                if values[k]
            ]
            if clashing:
                raise config_error(
                    "azure.connection.string",
                    f"cannot be combined with {', '.join(clashing)} (the connection string "
                    f"already carries the account, credentials and endpoint)",
                )
        else:
            exclusive(values, ["azure.account.key", "azure.sas.token"], "use an account key or a SAS token")
            if not values["azure.account.name"] and not values["azure.endpoint.url"]:
                raise ConfigException(
                    "Missing required configuration 'storage.azure.account.name' for the Azure backend: set it "
                    "(with storage.azure.account.key or storage.azure.sas.token), or set "
                    "storage.azure.connection.string"
                )
            if values["azure.account.key"] and not values["azure.account.name"]:
                raise config_error("azure.account.key", "needs storage.azure.account.name")
        self.container = values["azure.container.name"]
        self.block_size = values["azure.upload.block.size"]
        self.concurrency = values["azure.upload.concurrency"]
        self.buffers = upload_buffers(values, "azure", "azure.upload.block.size")
        self._policy = retry_policy(values, "azure")
        self._upload_timeout_s = values["azure.upload.timeout.ms"] / 1000
        self._sas_token = (values["azure.sas.token"] or "").lstrip("?") or None
        self._service = self._make_service(values)
        self.account = str(getattr(self._service, "account_name", "") or values["azure.account.name"] or "")
        self._container = self._service.get_container_client(self.container)

    def _make_service(self, values: Mapping[str, Any]) -> Any:
        import requests
        import requests.adapters
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import BlobServiceClient

        attempt_s = values["azure.api.call.attempt.timeout"] / 1000
        # Our own pool so that `concurrency` parallel block uploads never exceed (and thrash) the default 10.
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(
            pool_maxsize=max(MIN_POOL_CONNECTIONS, self.concurrency + 4), max_retries=0
        )
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        kwargs: dict[str, Any] = {
            # The SDK sets its 256 KiB read block only on transports it builds itself; without it a body is
            # read in 4 KiB pieces (about 3x slower downloads).
            "transport": RequestsTransport(
                session=session,
                session_owner=True,
                connection_timeout=attempt_s,
                read_timeout=attempt_s,
                connection_data_block_size=256 * 1024,
            ),
            "retry_total": 0,
            "max_single_put_size": self.block_size,
            "max_block_size": self.block_size,
            "connection_timeout": attempt_s,
            "read_timeout": attempt_s,
        }
        if values["azure.api.version"]:
            kwargs["api_version"] = values["azure.api.version"]
        try:
            if values["azure.connection.string"]:
                return BlobServiceClient.from_connection_string(values["azure.connection.string"], **kwargs)
            account = values["azure.account.name"]
            url = values["azure.endpoint.url"] or f"https://{account}.blob.core.windows.net"
            return BlobServiceClient(account_url=url.rstrip("/"), credential=self._credential(values), **kwargs)
        except ValueError as e:  # malformed connection string or URL
            key = "azure.connection.string" if values["azure.connection.string"] else "azure.endpoint.url"
            raise config_error(key, str(e)) from None

    @staticmethod
    def _credential(values: Mapping[str, Any]) -> Any:
        from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential

        if values["azure.account.key"]:
            return AzureNamedKeyCredential(values["azure.account.name"], values["azure.account.key"])
        if values["azure.sas.token"]:
            return AzureSasCredential(values["azure.sas.token"].lstrip("?"))
        try:
            from azure.identity import DefaultAzureCredential  # type: ignore[import-not-found]
        except ImportError:
            raise ConfigException(
                "Invalid configuration: no credentials for the Azure backend. Set storage.azure.account.key, "
                "storage.azure.sas.token or storage.azure.connection.string, or install azure-identity to use "
                "DefaultAzureCredential (managed identity)"
            ) from None
        return DefaultAzureCredential()

    def _where(self) -> str:
        return f"Azure container {self.container!r}" + (f" of account {self.account!r}" if self.account else "")

    @property
    def container_client(self) -> Any:
        if self._container is None:
            raise StorageBackendException("Azure backend used before configure()")
        return self._container

    # --- error classification ---------------------------------------------------------------------
    def _describe(self, e: BaseException) -> str:
        """``HTTP 404 ContainerNotFound: The specified container does not exist.`` without the XML dump."""
        from azure.core import exceptions as az

        if isinstance(e, az.HttpResponseError) and e.status_code is not None:
            message = str(getattr(e, "reason", "") or "")
            text = str(e.message or "").strip().splitlines()
            if text:
                message = text[0]
            notes = getattr(e, "__notes__", None) or []
            return f"HTTP {e.status_code} {self._error_code(e)}: {message}".strip() + (
                f" [{'; '.join(notes)}]" if notes else ""
            )
        return describe_error(e)

    CONTAINER_MISSING = frozenset({"ContainerNotFound"})

    def _error_code(self, e: BaseException) -> str:
        """The storage error code (``BlobNotFound``, ``ServerBusy``...): the SDK's high-level calls set
        ``error_code``; the raw Get Blob call leaves it in the ``x-ms-error-code`` header of the answer."""
        code = getattr(e, "error_code", None)
        if not code and getattr(e, "response", None) is not None:
            code = e.response.headers.get("x-ms-error-code")  # type: ignore[attr-defined]
        return str(code or "")

    def _classify_error(self, e: BaseException) -> ErrorKind:
        import urllib3.exceptions
        from azure.core import exceptions as az

        if isinstance(e, az.HttpResponseError) and e.status_code is not None:
            status = int(e.status_code)
            code = self._error_code(e)
            if status == 404:
                return ErrorKind.NOT_FOUND
            if status == 416 or code == "InvalidRange":
                return ErrorKind.INVALID_RANGE
            if status == 429 or code == "ServerBusy":
                return ErrorKind.THROTTLING
            if status == 408 or code == "OperationTimedOut":
                return ErrorKind.TIMEOUT
            if status >= 500:
                return ErrorKind.SERVER
            return ErrorKind.OTHER
        if isinstance(e, az.HttpResponseError):
            # No status: the SDK wraps a body that broke while streaming ("Unable to stream download": a reset
            # or read timeout surfacing as requests' ChunkedEncodingError). Nothing was answered, so it is a
            # transport failure whatever the wrapped error says, and a new GET may succeed.
            inner = e.inner_exception
            kind = self._classify(inner) if isinstance(inner, BaseException) and inner is not e else ErrorKind.IO
            return ErrorKind.IO if kind is ErrorKind.OTHER else kind
        if isinstance(
            e,
            (
                az.ServiceRequestTimeoutError,
                az.ServiceResponseTimeoutError,
                TimeoutError,
                urllib3.exceptions.TimeoutError,
            ),
        ):
            return ErrorKind.TIMEOUT
        if isinstance(
            e,
            (
                az.ServiceRequestError,
                az.ServiceResponseError,
                az.IncompleteReadError,
                OSError,
                urllib3.exceptions.HTTPError,
            ),
        ):
            return ErrorKind.IO  # urllib3's own errors come from reading a body off the connection
        return ErrorKind.OTHER

    # --- upload -----------------------------------------------------------------------------------
    def upload(self, key: str, data: BinaryIO) -> int:
        deadline = self._upload_deadline()
        what = f"Azure upload of key {key!r} to {self._where()}"
        blocks = iter_blocks(data, self.block_size, self.buffers, deadline, what)
        first, last = next(blocks)
        if last:
            try:
                blob = self.container_client.get_blob_client(key)
                self._call(
                    "blob-upload",
                    key,
                    lambda block=first: blob.upload_blob(
                        block, length=len(block), overwrite=True, max_concurrency=1, **_request_id()
                    ),
                    deadline=deadline,
                    key_read=False,
                )
            finally:
                self.buffers.release(len(first))
            self.instrumentation.bytes_uploaded(len(first))
            return len(first)
        head = [first]
        del first  # only the block being staged may hold it
        try:
            blob = self.container_client.get_blob_client(key)
        except BaseException:
            self.buffers.release(len(head.pop()))
            raise
        return self._staged_upload(key, blob, blocks_after(head, blocks), deadline)

    def _staged_upload(self, key: str, blob: Any, blocks: Iterator[bytes], deadline: Deadline) -> int:
        tag = uuid.uuid4().hex[:16]
        total = 0

        def count(n: int) -> None:
            nonlocal total
            total += n

        def stage(number: int, block: bytes) -> str:
            block_id = base64.b64encode(f"{tag}-{number:06d}".encode()).decode()
            self._call(
                "block-upload",
                key,
                lambda: blob.stage_block(block_id, block, length=len(block), **_request_id()),
                deadline=deadline,
                key_read=False,
            )
            self.instrumentation.bytes_uploaded(len(block))
            return block_id

        from azure.storage.blob import BlobBlock

        try:
            ids = upload_parts(
                self._worker_pool(self.concurrency, "kts-azure-block"),
                blocks,
                stage,
                concurrency=self.concurrency,
                deadline=deadline,
                what=f"Azure staged upload of key {key!r} to {self._where()}",
                on_bytes=count,
                buffers=self.buffers,
            )
            self._call(
                "block-list-upload",
                key,
                lambda: blob.commit_block_list([BlobBlock(block_id=i) for i in ids], **_request_id()),
                deadline=deadline,
                key_read=False,
            )
        except DeadlineExceeded as e:
            raise self._map_error("staged upload", key, e) from e
        return total

    # --- copies inside the store (backends.base.CopiesObjects) --------------------------------------------
    def copy_object(self, source_key: str, target_key: str) -> None:
        """Copy Blob from the source's URL: the service copies the blob, within an account usually before it
        answers, else in the background, whose status is then polled (backing off from 50 ms to 2 s) until it is
        ``success``, under the backend's upload deadline. A copy that fails, is aborted, or outlives the
        deadline (aborted here then) raises, and the blob it left under the target is deleted."""
        deadline = self._upload_deadline()
        source = self.container_client.get_blob_client(source_key)
        if source_key == target_key:  # the blob is its own copy already; only its existence is asked
            self._call(
                "blob-properties", source_key, lambda: source.get_blob_properties(**_request_id()), deadline=deadline
            )
            return
        target = self.container_client.get_blob_client(target_key)
        url = self._copy_source_url(source.url)
        started = self._call(
            "blob-copy", source_key, lambda: target.start_copy_from_url(url, **_request_id()), deadline=deadline
        )
        copy_id, status, etag = started.get("copy_id"), started.get("copy_status"), started.get("etag")
        detail = ""
        pause = 0.05
        try:
            while status == "pending":
                deadline.check(f"Azure copy of key {source_key!r} to {target_key!r} in {self._where()}")
                remaining = deadline.remaining()
                time.sleep(pause if remaining is None else max(0.0, min(pause, remaining)))
                pause = min(pause * 2, 2.0)
                properties = self._copy_properties(source_key, target_key, target)
                if properties.copy.id != copy_id:
                    raise StorageBackendException(
                        f"Azure blob-copy of key {source_key!r} to {target_key!r} in {self._where()} failed: the "
                        f"target was replaced while the copy was pending (copy id {properties.copy.id!r}, not "
                        f"{copy_id!r}); copy it again"
                    )
                status, etag = properties.copy.status, properties.etag
                detail = str(properties.copy.status_description or "")
        except DeadlineExceeded as e:
            left = self._abort_copy(target_key, target, str(copy_id)) or self._discard_copy_target(
                target_key, target, None
            )
            error = self._map_error("blob-copy", source_key, e)
            if left:
                error.add_note(left)
            raise error from e
        if status != "success":
            left = self._discard_copy_target(target_key, target, etag)
            raise StorageBackendException(
                f"Azure blob-copy of key {source_key!r} to {target_key!r} in {self._where()} failed: the copy "
                f"ended {status!r}{(' (' + detail + ')') if detail else ''}; "
                + (left or "nothing is left under the target")
            )

    def _copy_source_url(self, url: str) -> str:
        """The source blob's URL as Copy Blob needs it: with this backend's SAS token when it authenticates with
        one (a shared key authorizes a source in its own account by itself)."""
        if not self._sas_token or "sig=" in urllib.parse.urlsplit(url).query:
            return url
        return f"{url}{'&' if '?' in url else '?'}{self._sas_token}"

    def _copy_properties(self, source_key: str, target_key: str, target: Any) -> Any:
        try:
            return self._call("blob-properties", target_key, lambda: target.get_blob_properties(**_request_id()))
        except KeyNotFound:
            raise StorageBackendException(
                f"Azure blob-copy of key {source_key!r} to {target_key!r} in {self._where()} failed: the target "
                f"was deleted while the copy was pending; copy it again"
            ) from None

    def _abort_copy(self, target_key: str, target: Any, copy_id: str) -> str | None:
        """Stop a pending copy (it leaves an empty blob under the target); one that ended meanwhile is no error.
        Returns what could not be done, for the caller's error."""
        from azure.core.exceptions import HttpResponseError

        try:
            self._call("blob-copy-abort", target_key, lambda: target.abort_copy(copy_id, **_request_id()))
        except KeyNotFound:
            pass
        except StorageBackendException as e:
            if not isinstance(e.__cause__, HttpResponseError) or e.__cause__.status_code != 409:
                return f"the pending copy {copy_id} to key {target_key!r} could not be aborted ({e}): delete the blob"
        return None

    def _discard_copy_target(self, target_key: str, target: Any, etag: str | None) -> str | None:
        """Delete what a failed copy left under the target: only that blob (its ETag, when known). Returns what
        could not be done, for the caller's error."""
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        condition: dict[str, Any] = {"etag": etag, "match_condition": MatchConditions.IfNotModified} if etag else {}
        try:
            self._call("blob-delete", target_key, lambda: target.delete_blob(**condition, **_request_id()))
        except KeyNotFound:
            pass
        except StorageBackendException as e:
            # 412: the target was written again since; that blob is not the copy's to delete
            if not isinstance(e.__cause__, HttpResponseError) or e.__cause__.status_code != 412:
                return f"the blob the copy left under key {target_key!r} could not be deleted ({e}): delete it"
        return None

    # --- read -------------------------------------------------------------------------------------
    def _fetch_once(self, key: str, start: int, end: int | None) -> BinaryIO:
        """One ranged Get Blob whose body is read straight off the connection.

        ``download_blob`` is not used: its downloader retries a broken body itself, three times with fixed
        1-second sleeps and whatever ``retry_total`` says, then raises a status-less ``HttpResponseError``. Here a
        broken body is a ``BodyReadError``, resumed by ``CloudBackend.fetch`` under this backend's retry policy
        like on S3 and GCS. The request always carries a range (``bytes=0-`` for a whole blob), so the answer's
        Content-Range tells whether its Content-Length was cut in transit.
        """
        self._check_range(key, start, end)
        blob = self.container_client.get_blob_client(key)
        wanted = f"bytes={start}-{'' if end is None else end}"

        def keep(pipeline_response: Any, _body: Any, _headers: Any) -> Any:
            return pipeline_response.http_response

        def attempt() -> Any:
            from azure.core.exceptions import HttpResponseError

            try:
                return blob._client.blob.download(range=wanted, cls=keep, **_request_id())  # noqa: SLF001 - see above
            except HttpResponseError as e:
                if e.status_code == 416 and start == 0 and end is None:
                    # an empty blob has no byte 0
                    return blob._client.blob.download(cls=keep, **_request_id())  # noqa: SLF001
                raise

        response = self._call("blob-get", key, attempt, start=start, end=end)
        raw = response.internal_response.raw
        headers = response.headers
        length, content_range = headers.get("Content-Length"), headers.get("Content-Range")
        try:
            check_answer_length(f"Azure blob-get of key {key!r} in {self._where()}", length, content_range)
        except BodyReadError:
            response.close()
            raise
        if length == "0" and (start != 0 or end is not None):
            response.close()  # Azure answers 416 here; Azurite answers 206 "bytes 5-4/5" for a start at the size
            raise InvalidRange(key, start, end)

        def read(n: int) -> bytes:
            return raw.read(None if n < 0 else n) or b""

        return ResponseStream(
            read,
            response.close,
            self._stream_error("blob-get", key),  # type: ignore[return-value]
            self.instrumentation,
            length=int(length) if length and length.isdigit() else None,
        )

    # --- conditional replacement (backends.base.ConditionalWrites) -----------------------------------
    def fetch_versioned(self, key: str, max_bytes: int) -> VersionedObject:
        blob = self.container_client.get_blob_client(key)

        def attempt() -> VersionedObject:
            downloader = blob.download_blob(max_concurrency=1, **_request_id())
            return VersionedObject(downloader.readall()[: max_bytes + 1], str(downloader.properties.etag))

        return self._call("blob-get", key, attempt)

    def replace_if_unchanged(self, key: str, data: bytes, version: str) -> None:
        """A Put Blob with If-Match on the ETag that was read: Azure answers 412 when the blob changed and 404
        when it was deleted, and writes nothing either way."""
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        blob = self.container_client.get_blob_client(key)

        def attempt() -> None:
            try:
                blob.upload_blob(
                    data,
                    length=len(data),
                    overwrite=True,
                    max_concurrency=1,
                    etag=version,
                    match_condition=MatchConditions.IfNotModified,
                    **_request_id(),
                )
            except HttpResponseError as e:
                if e.status_code in (404, 409, 412):
                    raise PreconditionFailed(key, self._where(), f"HTTP {e.status_code}") from e
                raise

        self._call("blob-upload-if-match", key, attempt, deadline=self._upload_deadline(), key_read=False)
        self.instrumentation.bytes_uploaded(len(data))

    # --- delete / list ----------------------------------------------------------------------------
    def delete(self, key: str) -> None:
        blob = self.container_client.get_blob_client(key)
        try:
            self._call("blob-delete", key, lambda: blob.delete_blob(**_request_id()))
        except KeyNotFound:
            pass

    def delete_many(self, keys: Iterable[str]) -> None:
        batch: list[str] = []
        for key in dict.fromkeys(keys):
            batch.append(key)
            if len(batch) == DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        if len(keys) < BATCH_DELETE_MIN:
            for key in keys:
                self.delete(key)
            return
        label = f"{keys[0]!r} and {len(keys) - 1} more"
        responses = self._call(
            "blob-batch-delete",
            label,
            lambda: list(self.container_client.delete_blobs(*keys, raise_on_any_failure=False, **_request_id())),
            key_read=False,
        )
        failed = [(k, r.status_code) for k, r in zip(keys, responses, strict=False) if r.status_code not in (202, 404)]
        if failed:
            shown = ", ".join(f"{k!r}: HTTP {s}" for k, s in failed[:5])
            raise StorageBackendException(
                f"Azure blob-batch-delete in {self._where()} failed for {len(failed)} of {len(keys)} keys: {shown}"
            )

    def list(self, prefix: str) -> Iterator[str]:
        def page(token: str | None) -> tuple[list[str], str | None]:
            pages = self.container_client.list_blob_names(name_starts_with=prefix or None, **_request_id()).by_page(
                continuation_token=token
            )
            names = list(next(pages))
            return names, pages.continuation_token

        return self._paginate("blob-list", prefix, page)

    def list_details(self, prefix: str) -> Iterator[ObjectInfo]:
        """``list`` with each blob's size and last modification (for garbage collection); committed blobs only."""

        def page(token: str | None) -> tuple[list[ObjectInfo], str | None]:
            pages = self.container_client.list_blobs(name_starts_with=prefix or None, **_request_id()).by_page(
                continuation_token=token
            )
            infos = [ObjectInfo(b.name, int(b.size or 0), b.last_modified.timestamp()) for b in next(pages)]
            return infos, pages.continuation_token

        return self._paginate("blob-list", prefix, page)  # type: ignore[arg-type]

    def list_pending_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        """Blobs under ``prefix`` that hold only uncommitted blocks: a staged upload whose Put Block List never
        came (a killed copy, or one whose staging failed). They are invisible to reads and listings, yet billed
        until the service discards them a week later. ``upload_id`` is the blob's ETag (informational)."""
        committed = set(self.list(prefix))

        def page(token: str | None) -> tuple[list[PendingUpload], str | None]:
            pages = self.container_client.list_blobs(
                name_starts_with=prefix or None, include=["uncommittedblobs"], **_request_id()
            ).by_page(continuation_token=token)
            uploads = [
                PendingUpload(
                    UNCOMMITTED_BLOCKS,
                    b.name,
                    str(b.etag or ""),
                    (b.creation_time or b.last_modified).timestamp(),
                )
                for b in next(pages)
                if b.name not in committed
            ]
            return uploads, pages.continuation_token

        return self._paginate("blob-list-uncommitted", prefix, page)  # type: ignore[arg-type]

    def abort_pending_upload(self, upload: PendingUpload) -> None:
        """Delete a blob found by ``list_pending_uploads`` unless it has been committed since (a slow copy
        finished): then it is an object, no longer a pending upload. (A conditional delete on the listed ETag
        would close the remaining window, but Azurite does not match ETags of uncommitted blobs; the grace
        period of garbage collection, longer than any copy, is what keeps a live upload out of the list.)"""
        if any(k == upload.key for k in self.list(upload.key)):
            return
        blob = self.container_client.get_blob_client(upload.key)
        try:
            self._call("blob-delete-uncommitted", upload.key, lambda: blob.delete_blob(**_request_id()))
        except KeyNotFound:  # discarded by the service already
            pass

    def close(self) -> None:
        self._close_worker_pool()
        if self._service is not None:
            self._service.close()
            self._service = None
            self._container = None

    def __repr__(self) -> str:
        return f"AzureBlobBackend(container={self.container!r}, account={self.account!r})"
