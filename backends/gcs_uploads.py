"""The GCS backend's uploads: one media upload, or a resumable session sent a chunk at a time that resends what
the session did not persist and is cancelled on failure."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, BinaryIO

from backends.base import StorageBackendException
from backends.buffers import UploadBuffers
from backends.cloud import CloudBackend
from backends.gcs_client import IncompleteChunk, error_from, object_size, persisted_end
from backends.retry import Deadline, DeadlineExceeded
from backends.streaming import iter_blocks

log = logging.getLogger(__name__)


class GcsUploads(CloudBackend):
    """Uploads of ``backends.gcs.GcsBackend``, which configures the attributes below and the session."""

    bucket: str
    endpoint: str
    chunk_size: int
    buffers: UploadBuffers
    _timeout: tuple[float, float]

    @property
    def session(self) -> Any:
        """The SDK's authorized HTTP session."""
        raise NotImplementedError

    def _upload_url(self, upload_type: str, key: str) -> str:
        raise NotImplementedError

    def _object_url(self, key: str, kind: str = "") -> str:
        raise NotImplementedError

    # --- upload -----------------------------------------------------------------------------------
    def upload(self, key: str, data: BinaryIO) -> int:
        deadline = self._upload_deadline()
        what = f"GCS upload of key {key!r} to bucket {self.bucket!r}"
        blocks = iter_blocks(data, self.chunk_size, self.buffers, deadline, what)
        first, last = next(blocks)
        if last:
            try:
                self._media_upload(key, first, deadline)
            finally:
                self.buffers.release(len(first))
            return len(first)
        head = [(first, False)]
        del first  # only the chunk being sent may hold it
        return self._resumable_upload(key, head, blocks, deadline)

    def _media_upload(self, key: str, block: bytes, deadline: Deadline) -> None:
        def attempt() -> None:
            response = self.session.post(
                self._upload_url("media", key),
                data=block,
                timeout=self._timeout,
                headers={"Content-Type": "application/octet-stream"},
            )
            if response.status_code not in (200, 201):
                raise error_from(response)

        self._call("object-upload", key, attempt, deadline=deadline, key_read=False)
        self.instrumentation.bytes_uploaded(len(block))

    def _resumable_upload(
        self, key: str, head: list[tuple[bytes, bool]], rest: Iterator[tuple[bytes, bool]], deadline: Deadline
    ) -> int:
        """Send the chunk in ``head`` (reserved in the upload buffers, like each of ``rest``), then ``rest``;
        each chunk's reservation goes back once it is sent."""

        def blocks() -> Iterator[tuple[bytes, bool]]:
            yield head.pop()
            yield from rest

        def initiate() -> str:
            response = self.session.post(
                self._upload_url("resumable", key),
                json={"name": key},
                timeout=self._timeout,
                headers={"X-Upload-Content-Type": "application/octet-stream"},
            )
            if response.status_code not in (200, 201) or "Location" not in response.headers:
                raise error_from(response)
            return str(response.headers["Location"])

        try:
            session_uri = self._call("resumable-upload-initiate", key, initiate, deadline=deadline, key_read=False)
        except BaseException:
            self.buffers.release(len(head.pop()[0]))
            raise
        offset = 0
        try:
            for block, last in blocks():
                try:
                    deadline.check(f"GCS resumable upload of key {key!r} to bucket {self.bucket!r}")
                    self._send_chunk(key, session_uri, offset, block, last, deadline)
                finally:
                    self.buffers.release(len(block))
                offset += len(block)
                del block  # not held while the next chunk is read
        except BaseException as e:
            self._cancel(key, session_uri)
            if isinstance(e, DeadlineExceeded):
                raise self._map_error("resumable upload", key, e) from e
            raise  # our mapped errors, and the source's own exceptions, unchanged
        return offset

    def _send_chunk(self, key: str, uri: str, offset: int, block: bytes, last: bool, deadline: Deadline) -> None:
        """PUT one chunk; after a failed attempt, ask the session what it holds and send only the rest."""
        total = offset + len(block) if last else None
        size_s = "*" if total is None else str(total)
        state = {"held": 0, "ask_first": False, "done": False}

        def attempt() -> None:
            if state["ask_first"]:
                response = self.session.put(
                    uri,
                    data=b"",
                    timeout=self._timeout,
                    allow_redirects=False,
                    headers={"Content-Range": f"bytes */{size_s}"},
                )
                if response.status_code in (200, 201):
                    if not last or object_size(response) != total:
                        self._discard_truncated(key, response)
                        raise StorageBackendException(
                            f"GCS resumable upload of key {key!r} to bucket {self.bucket!r} failed: the server "
                            f"finalized the session on a status query at {object_size(response)} bytes "
                            f"(fake-gcs-server does this; real GCS does not); the truncated object was removed"
                        )
                    state["done"] = True
                    return
                if response.status_code != 308:
                    raise self._session_error(key, response)
                state["held"] = min(max(persisted_end(response) - offset, 0), len(block))
            state["ask_first"] = True
            held = int(state["held"])
            body = block if held == 0 else block[held:]
            if not body and not last:
                return
            start = offset + held
            content_range = f"bytes {start}-{start + len(body) - 1}/{size_s}" if body else f"bytes */{size_s}"
            response = self.session.put(
                uri, data=body, timeout=self._timeout, allow_redirects=False, headers={"Content-Range": content_range}
            )
            if response.status_code in (200, 201):
                if not last:
                    raise StorageBackendException(f"GCS finalized the upload of {key!r} before its last chunk")
                state["done"] = True
                return
            if response.status_code != 308:
                raise self._session_error(key, response)
            if last or persisted_end(response) < offset + len(block):
                raise IncompleteChunk(f"session holds {persisted_end(response)} of {offset + len(block)} bytes")
            state["ask_first"] = False

        self._call("resumable-chunk-upload", key, attempt, deadline=deadline, key_read=False)
        self.instrumentation.bytes_uploaded(len(block))

    def _session_error(self, key: str, response: Any) -> Exception:
        """A 404 on a session URI means the session is gone (expired, cancelled, or completed by an earlier
        attempt whose answer was lost), never that the bucket is missing; only a new upload can go on."""
        if response.status_code == 404:
            return StorageBackendException(
                f"GCS resumable upload of key {key!r} to bucket {self.bucket!r} failed: the upload session is gone "
                f"(HTTP 404: expired, cancelled, or completed by an attempt whose answer was lost); the copy must "
                f"upload the object again"
            )
        return error_from(response)

    def _discard_truncated(self, key: str, response: Any) -> None:
        """Delete an object a broken server committed early, but only that generation of it."""
        try:
            generation = json.loads(response.text).get("generation")
            url = self._object_url(key) + (f"?ifGenerationMatch={generation}" if generation else "")
            self.session.delete(url, timeout=self._timeout)
        except Exception:  # noqa: BLE001 - best effort; the upload fails either way
            pass

    def _cancel(self, key: str, uri: str) -> None:
        """Cancel the session, retried like every call (GCS answers a cancel with 499). GCS has no call that lists
        open sessions, so a session this leaves open cannot be found later; it holds no object and GCS discards
        it after a week, which the warning says."""

        def attempt() -> None:
            response = self.session.delete(uri, timeout=self._timeout)
            if response.status_code not in (200, 204, 404, 410, 499):
                raise error_from(response)

        try:
            self._call("resumable-upload-cancel", key, attempt, key_read=False)
        except StorageBackendException as e:
            log.warning(
                "could not cancel the resumable upload session of key %r in %s (%s); it holds no object and GCS "
                "discards it after a week",
                key,
                self._where(),
                e,
            )
