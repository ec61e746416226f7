"""Google Cloud Storage via google-cloud-storage and its authorized HTTP session.

Uploads stream: a source that fits in one ``gcs.resumable.upload.chunk.size`` chunk goes up in a single
media upload; anything larger uses a resumable upload session, sending one chunk at a time (only one chunk
is held in memory) and, when a chunk fails, asking the session how much it persisted and resending the
rest. GCS creates the object only when the final chunk arrives, so a failed upload never leaves a partial
object under the key; the session is cancelled on failure.

The data paths (media/resumable upload, download) speak the JSON API directly over the SDK's authorized
session rather than through ``Blob`` methods: ``Blob.upload_from_file`` needs a seekable source to recover a
resumable session, and ``Blob.download_*`` buffers the whole range or issues one request per chunk, while
the manager needs a lazily read stream over one ranged GET. Listing and deletion use the SDK. SDK retries
are disabled everywhere; ``backends.retry`` applies the same policy as for the other stores.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from backends.base import KeyNotFound, ObjectInfo, PreconditionFailed, StorageBackendException, VersionedObject
from backends.buffers import UploadBuffers
from backends.cloud import (
    MIN_POOL_CONNECTIONS,
    UPLOAD_BUFFER_MEMORY,
    exclusive,
    parse_storage_config,
    require_container,
    retry_policy,
    upload_buffers,
)
from backends.gcs_client import BUCKET_NOT_FOUND, GcsHttpError, IncompleteChunk, error_from
from backends.gcs_client import credentials as load_credentials
from backends.gcs_config import CONFIG_DEF, DEFAULT_ENDPOINT
from backends.gcs_uploads import GcsUploads
from backends.retry import DeadlineExceeded, ErrorKind
from backends.streaming import BodyReadError, ResponseStream, check_answer_length


class GcsBackend(GcsUploads):
    """Objects in one GCS bucket."""

    STORE = "GCS"

    def __init__(self) -> None:
        super().__init__()
        self.bucket = ""
        self.endpoint = DEFAULT_ENDPOINT
        self.chunk_size = CONFIG_DEF.keys["gcs.resumable.upload.chunk.size"].default
        self.delete_concurrency = 8
        self.buffers = UploadBuffers(UPLOAD_BUFFER_MEMORY)
        self._timeout: tuple[float, float] = (60.0, 60.0)
        self._session: Any = None
        self._client: Any = None

    # --- configuration ----------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, Any]) -> None:
        values = parse_storage_config(CONFIG_DEF, configs)
        self.close()  # a re-configure must not leak the previous client and pool
        require_container(values, "gcs.bucket.name", "GCS", "bucket")
        exclusive(
            values,
            ["gcs.credentials.default", "gcs.credentials.json", "gcs.credentials.path"],
            "choose one way to obtain GCS credentials",
        )
        credentials, project = load_credentials(values)
        self.bucket = values["gcs.bucket.name"]
        self.endpoint = (values["gcs.endpoint.url"] or DEFAULT_ENDPOINT).rstrip("/")
        self.chunk_size = values["gcs.resumable.upload.chunk.size"]
        self.delete_concurrency = values["gcs.delete.concurrency"]
        self.buffers = upload_buffers(values, "gcs", "gcs.resumable.upload.chunk.size")
        self._policy = retry_policy(values, "gcs")
        self._upload_timeout_s = values["gcs.upload.timeout.ms"] / 1000
        attempt_s = values["gcs.api.call.attempt.timeout"] / 1000
        self._timeout = (attempt_s, attempt_s)

        import requests.adapters
        from google.auth.transport.requests import AuthorizedSession
        from google.cloud import storage

        session = AuthorizedSession(credentials)
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=2, pool_maxsize=max(MIN_POOL_CONNECTIONS, self.delete_concurrency), max_retries=0
        )
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        self._session = session
        self._client = storage.Client(
            project=project or "kts-no-project",
            credentials=credentials,
            _http=session,
            client_options={"api_endpoint": self.endpoint},
        )

    def _where(self) -> str:
        return f"GCS bucket {self.bucket!r}"

    @property
    def session(self) -> Any:
        if self._session is None:
            raise StorageBackendException("GCS backend used before configure()")
        return self._session

    def _object_url(self, key: str, kind: str = "") -> str:
        return (
            f"{self.endpoint}{kind}/storage/v1/b/{urllib.parse.quote(self.bucket, safe='')}/o/"
            f"{urllib.parse.quote(key, safe='')}"
        )

    def _upload_url(self, upload_type: str, key: str) -> str:
        query = urllib.parse.urlencode({"uploadType": upload_type, "name": key})
        return f"{self.endpoint}/upload/storage/v1/b/{urllib.parse.quote(self.bucket, safe='')}/o?{query}"

    # --- error classification ---------------------------------------------------------------------
    CONTAINER_MISSING = frozenset({BUCKET_NOT_FOUND})

    def _error_code(self, e: BaseException) -> str:
        return e.code if isinstance(e, GcsHttpError) else ""

    def _classify_error(self, e: BaseException) -> ErrorKind:
        import requests.exceptions
        import urllib3.exceptions
        from google.api_core import exceptions as api_exceptions
        from google.auth import exceptions as auth_exceptions

        status: int | None = None
        if isinstance(e, GcsHttpError):
            status = e.status
        elif isinstance(e, api_exceptions.GoogleAPICallError):
            status = int(e.code or 0)
        if status is not None:
            if status == 404:
                return ErrorKind.NOT_FOUND
            if status == 416:
                return ErrorKind.INVALID_RANGE
            if status == 429:
                return ErrorKind.THROTTLING
            if status == 408:
                return ErrorKind.TIMEOUT
            if status >= 500:
                return ErrorKind.SERVER
            return ErrorKind.OTHER
        if isinstance(e, (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
            return ErrorKind.TIMEOUT
        if isinstance(
            e,
            (
                requests.exceptions.ConnectionError,
                requests.exceptions.ChunkedEncodingError,
                urllib3.exceptions.HTTPError,
                auth_exceptions.TransportError,
                IncompleteChunk,
                OSError,
            ),
        ):
            return ErrorKind.IO
        return ErrorKind.OTHER

    # --- copies inside the store (backends.base.CopiesObjects) --------------------------------------------
    def copy_object(self, source_key: str, target_key: str) -> None:
        """The JSON API's rewrite, called again with its rewrite token until GCS says it is done (one call within
        a location and storage class; large cross-location copies take several), under the backend's upload
        deadline. GCS writes the target only when the rewrite is done, so a copy that fails leaves none."""
        deadline = self._upload_deadline()
        if source_key == target_key:  # the object is its own copy already; only its existence is asked
            self._call("object-metadata", source_key, lambda: self._metadata(source_key), deadline=deadline)
            return
        url = (
            self._object_url(source_key)
            + f"/rewriteTo/b/{urllib.parse.quote(self.bucket, safe='')}/o/{urllib.parse.quote(target_key, safe='')}"
        )

        def attempt(token: str | None) -> dict[str, Any]:
            response = self.session.post(
                url, params={"rewriteToken": token} if token else None, json={}, timeout=self._timeout
            )
            if response.status_code != 200:
                raise error_from(response)
            return dict(response.json())

        token: str | None = None
        while True:
            try:
                deadline.check(f"GCS rewrite of key {source_key!r} to {target_key!r} in bucket {self.bucket!r}")
            except DeadlineExceeded as e:
                raise self._map_error("object-rewrite", source_key, e) from e
            answer = self._call("object-rewrite", source_key, lambda tok=token: attempt(tok), deadline=deadline)
            if answer.get("done"):
                return
            token = answer.get("rewriteToken") or None
            if token is None:
                raise StorageBackendException(
                    f"GCS object-rewrite of key {source_key!r} to {target_key!r} in {self._where()} failed: the "
                    f"answer says it is not done and gives no rewrite token to go on with: {answer}"
                )

    def _metadata(self, key: str) -> dict[str, Any]:
        response = self.session.get(self._object_url(key) + "?fields=name,size", timeout=self._timeout)
        if response.status_code != 200:
            raise error_from(response)
        return dict(response.json())

    # --- read -------------------------------------------------------------------------------------
    def _fetch_once(self, key: str, start: int, end: int | None) -> BinaryIO:
        self._check_range(key, start, end)
        headers = {"Accept-Encoding": "identity"}
        if start != 0 or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"
        url = self._object_url(key, "/download") + "?alt=media"

        def attempt() -> Any:
            response = self.session.get(url, headers=headers, stream=True, timeout=self._timeout)
            if response.status_code not in (200, 206):
                try:
                    raise error_from(response)
                finally:
                    response.close()
            return response

        response = self._call("object-get", key, attempt, start=start, end=end)
        length = response.headers.get("Content-Length")
        stored = None
        if response.headers.get("X-Goog-Stored-Content-Encoding", "identity") == "identity":
            stored = response.headers.get("X-Goog-Stored-Content-Length")  # real GCS says it; fake-gcs does not
        try:
            check_answer_length(
                f"GCS object-get of key {key!r} in {self._where()}",
                length,
                response.headers.get("Content-Range"),
                stored,
            )
        except BodyReadError:
            response.close()
            raise
        raw = response.raw

        def read(n: int) -> bytes:
            return raw.read(None if n < 0 else n) or b""

        return ResponseStream(
            read,
            response.close,
            self._stream_error("object-get", key),  # type: ignore[return-value]
            self.instrumentation,
            length=int(length) if length and length.isdigit() else None,
        )

    # --- conditional replacement (backends.base.ConditionalWrites) -----------------------------------
    def fetch_versioned(self, key: str, max_bytes: int) -> VersionedObject:
        """The object's generation from its metadata, then that generation's bytes (a newer one in between
        makes the read fail as not found, never mix two)."""

        def get(url: str) -> Any:
            response = self.session.get(url, timeout=self._timeout, headers={"Accept-Encoding": "identity"})
            if response.status_code != 200:
                raise error_from(response)
            return response

        meta = self._call("object-metadata", key, lambda: get(self._object_url(key) + "?fields=generation"))
        generation = str(meta.json()["generation"])
        url = (
            self._object_url(key, "/download")
            + "?"
            + urllib.parse.urlencode({"alt": "media", "generation": generation})
        )
        body = self._call("object-get", key, lambda: get(url))
        return VersionedObject(body.content[: max_bytes + 1], generation)

    def replace_if_unchanged(self, key: str, data: bytes, version: str) -> None:
        """A multipart upload with ifGenerationMatch: GCS answers 412 when the object's generation changed, and
        when it was deleted (no live generation matches), and writes nothing. (Multipart, not a media upload:
        fake-gcs-server checks the precondition only there; real GCS checks it on both.)"""
        query = urllib.parse.urlencode({"uploadType": "multipart", "ifGenerationMatch": version})
        url = f"{self.endpoint}/upload/storage/v1/b/{urllib.parse.quote(self.bucket, safe='')}/o?{query}"
        boundary = uuid.uuid4().hex
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps({"name": key}).encode(),
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )

        def attempt() -> None:
            response = self.session.post(
                url,
                data=body,
                timeout=self._timeout,
                headers={"Content-Type": f"multipart/related; boundary={boundary}"},
            )
            if response.status_code in (404, 412):
                raise PreconditionFailed(key, self._where(), f"HTTP {response.status_code}")
            if response.status_code not in (200, 201):
                raise error_from(response)

        self._call("object-upload-if-generation", key, attempt, deadline=self._upload_deadline(), key_read=False)
        self.instrumentation.bytes_uploaded(len(data))

    # --- delete / list ----------------------------------------------------------------------------
    def delete(self, key: str) -> None:
        blob = self._client.bucket(self.bucket).blob(key)
        try:
            self._call("object-delete", key, lambda: blob.delete(timeout=self._timeout, retry=None))
        except KeyNotFound:
            pass

    def delete_many(self, keys: Iterable[str]) -> None:
        unique = list(dict.fromkeys(keys))
        if not unique:
            return
        for future in [
            self._worker_pool(self.delete_concurrency, "kts-gcs-delete").submit(self.delete, key) for key in unique
        ]:
            future.result()

    def _blob_page(self, prefix: str, token: str | None, fields: str) -> tuple[list[Any], str | None]:
        """One page of the blobs under ``prefix`` with the given fields, and the next page's token."""
        iterator = self._client.list_blobs(
            self.bucket, prefix=prefix, page_token=token, retry=None, timeout=self._timeout, fields=fields
        )
        return list(next(iterator.pages)), iterator.next_page_token

    def list(self, prefix: str) -> Iterator[str]:
        def page(token: str | None) -> tuple[list[str], str | None]:
            blobs, following = self._blob_page(prefix, token, "items(name),nextPageToken")
            return [blob.name for blob in blobs], following

        return self._paginate("object-list", prefix, page)

    def list_details(self, prefix: str) -> Iterator[ObjectInfo]:
        """``list`` with each object's size and last update (for garbage collection)."""

        def page(token: str | None) -> tuple[list[ObjectInfo], str | None]:
            blobs, following = self._blob_page(prefix, token, "items(name,size,updated),nextPageToken")
            infos = [
                ObjectInfo(blob.name, int(blob.size or 0), blob.updated.timestamp() if blob.updated else time.time())
                for blob in blobs
            ]
            return infos, following

        return self._paginate("object-list", prefix, page)  # type: ignore[arg-type]

    def close(self) -> None:
        self._close_worker_pool()
        if self._session is not None:
            self._session.close()
            self._session = None
        self._client = None

    def __repr__(self) -> str:
        return f"GcsBackend(bucket={self.bucket!r}, endpoint={self.endpoint!r})"
