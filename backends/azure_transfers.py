"""The Azure backend's uploads and copies: one Put Blob or blocks staged in parallel and committed at once, and
Copy Blob polled to its end, whose leftover blob is deleted when it fails."""

from __future__ import annotations

import base64
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from backends.azure_client import request_id
from backends.base import KeyNotFound, StorageBackendException
from backends.buffers import UploadBuffers
from backends.cloud import CloudBackend, upload_parts
from backends.retry import Deadline, DeadlineExceeded
from backends.streaming import blocks_after, iter_blocks


class AzureTransfers(CloudBackend):
    """Uploads and copies of ``backends.azure.AzureBlobBackend``, which configures the attributes below and the
    container client."""

    block_size: int
    concurrency: int
    buffers: UploadBuffers
    _sas_token: str | None

    @property
    def container_client(self) -> Any:
        """The azure-storage-blob container client."""
        raise NotImplementedError

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
                        block, length=len(block), overwrite=True, max_concurrency=1, **request_id()
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
                lambda: blob.stage_block(block_id, block, length=len(block), **request_id()),
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
                lambda: blob.commit_block_list([BlobBlock(block_id=i) for i in ids], **request_id()),
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
                "blob-properties", source_key, lambda: source.get_blob_properties(**request_id()), deadline=deadline
            )
            return
        target = self.container_client.get_blob_client(target_key)
        url = self._copy_source_url(source.url)
        started = self._call(
            "blob-copy", source_key, lambda: target.start_copy_from_url(url, **request_id()), deadline=deadline
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
            return self._call("blob-properties", target_key, lambda: target.get_blob_properties(**request_id()))
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
            self._call("blob-copy-abort", target_key, lambda: target.abort_copy(copy_id, **request_id()))
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
            self._call("blob-delete", target_key, lambda: target.delete_blob(**condition, **request_id()))
        except KeyNotFound:
            pass
        except StorageBackendException as e:
            # 412: the target was written again since; that blob is not the copy's to delete
            if not isinstance(e.__cause__, HttpResponseError) or e.__cause__.status_code != 412:
                return f"the blob the copy left under key {target_key!r} could not be deleted ({e}): delete it"
        return None
