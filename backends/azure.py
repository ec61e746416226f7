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

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from backends.azure_client import make_service, request_id
from backends.azure_config import CONFIG_DEF
from backends.azure_transfers import AzureTransfers
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
    STORAGE_PREFIX,
    UPLOAD_BUFFER_MEMORY,
    config_error,
    describe_error,
    exclusive,
    parse_storage_config,
    require_container,
    retry_policy,
    upload_buffers,
)
from backends.configdef import ConfigException
from backends.retry import ErrorKind
from backends.streaming import BodyReadError, ResponseStream, check_answer_length

DELETE_BATCH = 256  # blob batch limit
BATCH_DELETE_MIN = 4
"""Fewer keys than this (the two or three objects of a segment) are deleted one request each: a blob batch costs
the SDK's own short-lived thread pool (see the module docstring), worth it only for the bulk deletes of gc."""
UNCOMMITTED_BLOCKS = "uncommitted-blocks"
"""``PendingUpload.kind`` of a blob that holds only staged, never committed blocks."""


class AzureBlobBackend(AzureTransfers):
    """Objects in one Azure blob container."""

    STORE = "Azure"

    def __init__(self) -> None:
        super().__init__()
        self.container = ""
        self.account = ""
        self.block_size = CONFIG_DEF.keys["azure.upload.block.size"].default
        self.concurrency = 4
        self.buffers = UploadBuffers(UPLOAD_BUFFER_MEMORY)
        self._sas_token = None
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
        self._service = make_service(values, self.block_size, self.concurrency)
        self.account = str(getattr(self._service, "account_name", "") or values["azure.account.name"] or "")
        self._container = self._service.get_container_client(self.container)

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
                return blob._client.blob.download(range=wanted, cls=keep, **request_id())  # noqa: SLF001 - see above
            except HttpResponseError as e:
                if e.status_code == 416 and start == 0 and end is None:
                    # an empty blob has no byte 0
                    return blob._client.blob.download(cls=keep, **request_id())  # noqa: SLF001
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
            downloader = blob.download_blob(max_concurrency=1, **request_id())
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
                    **request_id(),
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
            self._call("blob-delete", key, lambda: blob.delete_blob(**request_id()))
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
            lambda: list(self.container_client.delete_blobs(*keys, raise_on_any_failure=False, **request_id())),
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
            pages = self.container_client.list_blob_names(name_starts_with=prefix or None, **request_id()).by_page(
                continuation_token=token
            )
            names = list(next(pages))
            return names, pages.continuation_token

        return self._paginate("blob-list", prefix, page)

    def list_details(self, prefix: str) -> Iterator[ObjectInfo]:
        """``list`` with each blob's size and last modification (for garbage collection); committed blobs only."""

        def page(token: str | None) -> tuple[list[ObjectInfo], str | None]:
            pages = self.container_client.list_blobs(name_starts_with=prefix or None, **request_id()).by_page(
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
                name_starts_with=prefix or None, include=["uncommittedblobs"], **request_id()
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
            self._call("blob-delete-uncommitted", upload.key, lambda: blob.delete_blob(**request_id()))
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
