"""What the GCS backend needs of the JSON API besides its calls: credentials, and the reading of its answers
(errors, a resumable session's persisted bytes, a finalized object's size)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from backends.cloud import config_error

SCOPES = ["https://www.googleapis.com/auth/devstorage.read_write"]

BUCKET_NOT_FOUND = "bucketNotFound"
"""The code this backend gives a missing bucket. The JSON API answers a missing bucket and a missing object alike
(404, reason ``notFound``; fake-gcs-server says only "Not Found"): its message alone tells them apart ("The
specified bucket does not exist."), so that is read once, where an answer becomes a ``GcsHttpError``."""


class GcsHttpError(Exception):
    """A non-success answer of the JSON API on the paths we call directly; ``code`` is ``BUCKET_NOT_FOUND`` or ""."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        text = message.lower()
        self.code = BUCKET_NOT_FOUND if status == 404 and "bucket" in text and "object" not in text else ""
        super().__init__(f"HTTP {status}: {message[:500]}")


class IncompleteChunk(Exception):
    """The session persisted less of a chunk than was sent; the next attempt resends the rest."""


def error_from(response: Any) -> GcsHttpError:
    try:
        text = response.text
        message = json.loads(text).get("error", {}).get("message", text)
    except (ValueError, AttributeError):
        message = getattr(response, "text", "")
    return GcsHttpError(response.status_code, str(message))


def persisted_end(response: Any) -> int:
    """The number of bytes a 308 answer says the session holds (``Range: bytes=0-N`` or none)."""
    header = response.headers.get("Range")
    if not header:
        return 0
    return int(header.rsplit("-", 1)[1]) + 1


def object_size(response: Any) -> int | None:
    """``size`` of the object resource in a finalizing answer, if it parses."""
    try:
        return int(json.loads(response.text)["size"])
    except (ValueError, KeyError, TypeError):
        return None


def credentials(values: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The credentials and project of the parsed ``values``: inline JSON, a file, anonymous, or the
    Application Default Credentials."""
    import google.auth
    from google.auth.credentials import AnonymousCredentials
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    if values["gcs.credentials.json"]:
        try:
            info = json.loads(values["gcs.credentials.json"])
            return google.auth.load_credentials_from_dict(info, scopes=SCOPES)
        except (ValueError, GoogleAuthError) as e:
            raise config_error("gcs.credentials.json", f"not usable credentials JSON: {e}") from None
    if values["gcs.credentials.path"]:
        try:
            return google.auth.load_credentials_from_file(values["gcs.credentials.path"], scopes=SCOPES)
        except (OSError, ValueError, GoogleAuthError) as e:
            raise config_error("gcs.credentials.path", f"cannot load credentials: {e}") from None
    if values["gcs.credentials.default"] is False:
        return AnonymousCredentials(), None
    try:
        return google.auth.default(scopes=SCOPES)
    except DefaultCredentialsError as e:
        raise config_error(
            "gcs.credentials.default",
            f"no Application Default Credentials found ({e}); set gcs.credentials.json or "
            f"gcs.credentials.path, or gcs.credentials.default=false for anonymous access",
        ) from None
