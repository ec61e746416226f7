"""How the S3 backend talks to boto3: its client (credentials, timeouts, pool, checksums), the timestamp parser it
installs, and the classification of botocore's errors."""

from __future__ import annotations

import configparser
import datetime
import email.utils
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.base import StorageBackendException
from backends.cloud import MIN_POOL_CONNECTIONS
from backends.retry import ErrorKind

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


def parse_timestamp(value: Any) -> datetime.datetime:
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


def make_client(values: Mapping[str, Any], concurrency: int, checksums: bool) -> Any:
    """The boto3 S3 client for the parsed ``values``: a pool for ``concurrency`` part uploads besides the broker's
    threads, and checksums on every request and answer when ``checksums``."""
    import boto3
    import botocore.session
    from botocore.config import Config
    from botocore.credentials import CredentialResolver

    core = botocore.session.Session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    if values["aws.credentials.file"]:
        core.register_component(
            "credential_provider", CredentialResolver([_file_credential_provider(values["aws.credentials.file"])])
        )
    session = boto3.session.Session(botocore_session=core)
    region = values["s3.region"] or session.region_name or "us-east-1"
    path_style = values["s3.path.style.access.enabled"]
    addressing = "auto" if path_style is None else ("path" if path_style else "virtual")
    attempt_s = values["s3.api.call.attempt.timeout"] / 1000
    checksum_mode = "when_supported" if checksums else "when_required"
    config = Config(
        region_name=region,
        connect_timeout=attempt_s,
        read_timeout=attempt_s,
        retries={"total_max_attempts": 1, "mode": "standard"},
        # Broker threads (remote log readers, copiers), prefetch and part uploads share one client: a pool
        # below their count drops connections and reconnects (TLS) under load; AWS's Java SDK keeps 50.
        max_pool_connections=max(MIN_POOL_CONNECTIONS, 2 * concurrency + 2),
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


def error_code(e: BaseException) -> str:
    """The S3 error code of a botocore ``ClientError`` (``NoSuchKey``, ...); empty for any other exception."""
    from botocore.exceptions import ClientError

    return str(e.response.get("Error", {}).get("Code", "")) if isinstance(e, ClientError) else ""


def classify_error(e: BaseException) -> ErrorKind:
    """What kind of failure a botocore exception is, for ``backends.retry``."""
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
