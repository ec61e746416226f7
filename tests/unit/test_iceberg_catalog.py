"""rsm.iceberg.catalog: the warehouse and FileIO properties derived from each storage backend's keys, the
catalog's URI as messages show it, and the namespace created by two brokers at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.iceberg.catalog import derived_properties, open_catalog, redacted_uri
from rsm.iceberg.config import IcebergConfig

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


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        (
            "postgresql+psycopg2://kts:s3cret@db.example:5432/iceberg",
            "postgresql+psycopg2://kts:***@db.example:5432/iceberg",
        ),
        ("postgresql://kts@db/iceberg", "postgresql://kts@db/iceberg"),
        ("sqlite:////var/lib/kts/catalog.db", "sqlite:////var/lib/kts/catalog.db"),
        ("https://rest.example:8181/catalog", "https://rest.example:8181/catalog"),
        ("", ""),
    ],
)
def test_a_uri_is_shown_without_its_password(uri: str, shown: str) -> None:
    assert redacted_uri(uri) == shown


_PART = st.text(st.characters(codec="ascii", exclude_characters="/@:"), min_size=1, max_size=20)


@given(user=_PART, password=st.text(st.characters(codec="ascii", exclude_characters="/@"), min_size=1), host=_PART)
def test_no_password_survives_redaction(user: str, password: str, host: str) -> None:
    shown = redacted_uri(f"postgresql://{user}:{password}@{host}/db")
    assert shown == f"postgresql://{user}:***@{host}/db"


def test_a_namespace_another_broker_inserts_first_is_taken_as_made(tmp_path: Path, monkeypatch: Any) -> None:
    """pyiceberg's SQL catalog checks for the namespace, then inserts it: when another broker inserts it in
    between, the insert is a unique violation. Opening the catalog takes the namespace as made."""
    from pyiceberg.catalog.sql import SqlCatalog

    cfg = IcebergConfig.from_map(
        {"iceberg.mode.topics.regex": "orders", "iceberg.mode.catalog.sqlite.path": str(tmp_path / "c.db")}
    )
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": f"file://{tmp_path / 'wh'}"}
    open_catalog(cfg, props)  # the other broker's: the namespace is there
    checks: list[bool] = []
    real = SqlCatalog.namespace_exists

    def first_check_misses(self: SqlCatalog, namespace: Any) -> bool:
        checks.append(True)
        return False if len(checks) == 1 else real(self, namespace)

    monkeypatch.setattr(SqlCatalog, "namespace_exists", first_check_misses)
    catalog = open_catalog(cfg, props)
    assert len(checks) == 2, "the insert failed and the namespace was looked up again"
    assert catalog.list_namespaces() == [(cfg.namespace,)]


def test_only_the_databases_unique_violation_is_taken_as_made(tmp_path: Path, monkeypatch: Any) -> None:
    """An error that merely has the name ``IntegrityError`` (not SQLAlchemy's, which the SQL catalog raises on a
    unique violation) is not a namespace another broker made: it fails the open."""
    from pyiceberg.catalog.sql import SqlCatalog

    class IntegrityError(Exception):
        pass

    cfg = IcebergConfig.from_map(
        {"iceberg.mode.topics.regex": "orders", "iceberg.mode.catalog.sqlite.path": str(tmp_path / "c.db")}
    )
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": f"file://{tmp_path / 'wh'}"}
    open_catalog(cfg, props)

    def refuse(self: SqlCatalog, namespace: Any, properties: Any = None) -> None:
        raise IntegrityError("not the database's")

    monkeypatch.setattr(SqlCatalog, "create_namespace_if_not_exists", refuse)
    with pytest.raises(IntegrityError):
        open_catalog(cfg, props)
