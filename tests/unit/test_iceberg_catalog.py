"""rsm.iceberg.catalog: the warehouse and FileIO properties derived from each storage backend's keys."""

from __future__ import annotations

import pytest

from rsm.iceberg.catalog import derived_properties

KEY = "a2V5"


def test_azure_with_an_endpoint_and_a_key_gets_a_connection_string() -> None:
    props = derived_properties(
        "azure",
        {
            "azure.container.name": "tiered",
            "azure.account.name": "devstoreaccount1",
            "azure.account.key": KEY,
            "azure.endpoint.url": "http://127.0.0.1:10000/devstoreaccount1/",
        },
        "p/",
    )
    assert props == {
        "warehouse": "abfs://tiered@devstoreaccount1.dfs.core.windows.net/p/iceberg",
        "adls.account-name": "devstoreaccount1",
        "adls.connection-string": "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={KEY};BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
    }


def test_azure_account_from_a_sas_endpoint() -> None:
    props = derived_properties(
        "azure",
        {
            "azure.container.name": "c",
            "azure.sas.token": "?sv=1&sig=x",
            "azure.endpoint.url": "https://acct.blob.core.windows.net",
        },
        "",
    )
    assert props["warehouse"] == "abfs://c@acct.dfs.core.windows.net/iceberg"
    assert props["adls.connection-string"] == (
        "DefaultEndpointsProtocol=https;SharedAccessSignature=sv=1&sig=x;BlobEndpoint=https://acct.blob.core.windows.net;"
    )


@pytest.mark.parametrize(
    ("conn", "account"),
    [
        (f"DefaultEndpointsProtocol=https;AccountName=prod;AccountKey={KEY};EndpointSuffix=core.windows.net", "prod"),
        (f"AccountName=cn;AccountKey={KEY};EndpointSuffix=core.chinacloudapi.cn", "cn"),
        ("BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;SharedAccessSignature=sv=1", "devstoreaccount1"),
    ],
)
def test_azure_connection_string_is_passed_as_is(conn: str, account: str) -> None:
    props = derived_properties("azure", {"azure.container.name": "c", "azure.connection.string": conn}, "k/")
    assert props["adls.connection-string"] == conn
    suffix = "core.chinacloudapi.cn" if account == "cn" else "core.windows.net"
    assert props["warehouse"] == f"abfs://c@{account}.dfs.{suffix}/k/iceberg"


def test_azure_account_and_key_only() -> None:
    props = derived_properties(
        "azure", {"azure.container.name": "c", "azure.account.name": "prod", "azure.account.key": KEY}, ""
    )
    assert props == {
        "warehouse": "abfs://c@prod.dfs.core.windows.net/iceberg",
        "adls.account-name": "prod",
        "adls.account-key": KEY,
    }


def test_azure_endpoint_without_a_key_leaves_the_credential_to_adlfs() -> None:
    """No key or SAS token: adlfs, like the backend, authenticates with DefaultAzureCredential at that host."""
    props = derived_properties(
        "azure", {"azure.container.name": "c", "azure.endpoint.url": "https://prod.blob.core.usgovcloudapi.net"}, ""
    )
    assert props == {
        "warehouse": "abfs://c@prod.dfs.core.usgovcloudapi.net/iceberg",
        "adls.account-name": "prod",
        "adls.account-host": "prod.blob.core.usgovcloudapi.net",
    }
