"""How the Azure backend reaches azure-storage-blob: the service client (transport, pool, timeouts), its
credential, and the random request id every call carries (see ``backends.azure``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from backends.cloud import MIN_POOL_CONNECTIONS, config_error
from backends.configdef import ConfigException


def request_id() -> dict[str, str]:
    """The ``client_request_id`` of one request: random, so that the SDK never makes a time-based one."""
    return {"client_request_id": str(uuid.uuid4())}


def make_service(values: Mapping[str, Any], block_size: int, concurrency: int) -> Any:
    """The ``BlobServiceClient`` for the parsed ``values``, with our own connection pool sized for
    ``concurrency`` parallel block uploads of ``block_size``."""
    import requests
    import requests.adapters
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import BlobServiceClient

    attempt_s = values["azure.api.call.attempt.timeout"] / 1000
    # Our own pool so that `concurrency` parallel block uploads never exceed (and thrash) the default 10.
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_maxsize=max(MIN_POOL_CONNECTIONS, concurrency + 4), max_retries=0)
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
        "max_single_put_size": block_size,
        "max_block_size": block_size,
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
        return BlobServiceClient(account_url=url.rstrip("/"), credential=credential(values), **kwargs)
    except ValueError as e:  # malformed connection string or URL
        key = "azure.connection.string" if values["azure.connection.string"] else "azure.endpoint.url"
        raise config_error(key, str(e)) from None


def credential(values: Mapping[str, Any]) -> Any:
    """The account key, the SAS token, or (when neither is set) azure-identity's default credential."""
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
