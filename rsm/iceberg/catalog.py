"""The pyiceberg catalog and FileIO of Iceberg mode, from the ``iceberg.mode.*`` keys and the storage backend.

The warehouse (where tables' metadata and data files go) defaults to the storage backend's own place, under
``key.prefix`` + ``iceberg/``, as a URI every Iceberg reader opens: ``file://`` for the filesystem backend,
``s3://bucket/...`` for S3, ``gs://bucket/...`` for GCS, ``abfs://container@account...`` for Azure. The FileIO
properties (endpoint, credentials) are derived from the same ``storage.*`` keys; any
``iceberg.mode.catalog.property.<property>`` wins over them. pyiceberg opens ``abfs://`` with adlfs (fsspec), the
others with pyarrow.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError
from pyiceberg.io import FileIO, load_file_io
from sqlalchemy.exc import IntegrityError, ProgrammingError

from backends.configdef import ConfigException
from rsm.iceberg.config import IcebergConfig
from rsm.iceberg.config_keys import ICEBERG_DIR


def _backend_name(backend_class: str) -> str:
    name = backend_class.lower()
    for short in ("filesystem", "s3", "gcs", "azure"):
        if short in name:
            return short
    return name


def derived_properties(backend_class: str, storage: Mapping[str, Any], key_prefix: str) -> dict[str, str]:
    """The warehouse and FileIO properties for the backend (``storage`` keys without ``storage.``)."""
    kind = _backend_name(backend_class)
    props: dict[str, str] = {}
    if kind == "filesystem":
        root = storage.get("root")
        if not root:
            return props
        props["warehouse"] = (Path(str(root)).resolve() / key_prefix / ICEBERG_DIR).as_uri().rstrip("/")
    elif kind == "s3":
        props["warehouse"] = f"s3://{storage.get('s3.bucket.name')}/{key_prefix}{ICEBERG_DIR}".rstrip("/")
        if storage.get("s3.endpoint.url"):
            props["s3.endpoint"] = str(storage["s3.endpoint.url"])
        if storage.get("s3.region"):
            props["s3.region"] = str(storage["s3.region"])
        if storage.get("aws.access.key.id"):
            props["s3.access-key-id"] = str(storage["aws.access.key.id"])
        if storage.get("aws.secret.access.key"):
            props["s3.secret-access-key"] = str(storage["aws.secret.access.key"])
        if storage.get("aws.session.token"):
            props["s3.session-token"] = str(storage["aws.session.token"])
        path_style = str(storage.get("s3.path.style.access.enabled", "")).lower()
        if path_style == "false":
            props["s3.force-virtual-addressing"] = "true"
    elif kind == "gcs":
        props["warehouse"] = f"gs://{storage.get('gcs.bucket.name')}/{key_prefix}{ICEBERG_DIR}".rstrip("/")
        if storage.get("gcs.endpoint.url"):
            props["gcs.service.host"] = str(storage["gcs.endpoint.url"])
    elif kind == "azure":
        props.update(_azure_properties(storage, key_prefix))
    return props


def _connection_string_fields(conn: str) -> dict[str, str]:
    fields = (part.split("=", 1) for part in conn.split(";") if "=" in part)
    return {k.strip().lower(): v.strip() for k, v in fields}


def _account_of(endpoint: str) -> str:
    """The account a blob endpoint names: its first path segment (path style, as Azurite's
    ``http://127.0.0.1:10000/devstoreaccount1``) or else the first label of its host."""
    url = urlparse(endpoint)
    path = url.path.strip("/")
    return path.split("/")[0] if path else (url.hostname or "").split(".")[0]


def _suffix_of(endpoint: str, account: str) -> str | None:
    """The cloud's endpoint suffix of ``https://<account>.blob.<suffix>`` (None for an emulator's address)."""
    host = urlparse(endpoint).hostname or ""
    head = f"{account}.blob."
    return host[len(head) :] if account and host.startswith(head) else None


def _azure_properties(storage: Mapping[str, Any], key_prefix: str) -> dict[str, str]:
    """adlfs (pyiceberg's FileIO for ``abfs://``) reaches the blob endpoint through a connection string whenever
    the backend names an endpoint of its own (Azurite, a sovereign cloud), as the backend's client does."""
    props: dict[str, str] = {}
    suffix = "core.windows.net"
    conn = str(storage.get("azure.connection.string") or "")
    account = str(storage.get("azure.account.name") or "")
    endpoint = str(storage.get("azure.endpoint.url") or "").rstrip("/")
    key = str(storage.get("azure.account.key") or "")
    sas = str(storage.get("azure.sas.token") or "").lstrip("?")
    if conn:
        fields = _connection_string_fields(conn)
        account = fields.get("accountname") or _account_of(fields.get("blobendpoint", ""))
        suffix = fields.get("endpointsuffix") or _suffix_of(fields.get("blobendpoint", ""), account) or suffix
        props["adls.connection-string"] = conn
    elif endpoint and (key or sas):
        account = account or _account_of(endpoint)
        parts = [f"DefaultEndpointsProtocol={urlparse(endpoint).scheme or 'https'}"]
        parts += [f"AccountName={account}", f"AccountKey={key}"] if key else [f"SharedAccessSignature={sas}"]
        parts.append(f"BlobEndpoint={endpoint}")
        props["adls.connection-string"] = ";".join(parts) + ";"
    else:
        account = account or (_account_of(endpoint) if endpoint else "")
        if endpoint:
            props["adls.account-host"] = urlparse(endpoint).netloc
        if key:
            props["adls.account-key"] = key
        if sas:
            props["adls.sas-token"] = sas
    if endpoint:
        suffix = _suffix_of(endpoint, account) or suffix
    if account:
        props["adls.account-name"] = account
    container = storage.get("azure.container.name")
    props["warehouse"] = f"abfs://{container}@{account}.dfs.{suffix}/{key_prefix}{ICEBERG_DIR}".rstrip("/")
    return props


def catalog_properties(
    cfg: IcebergConfig, backend_class: str, storage: Mapping[str, Any], key_prefix: str
) -> dict[str, str]:
    """Every property the catalog is opened with (also what a reader needs to open the same catalog)."""
    props = derived_properties(backend_class, storage, key_prefix)
    if cfg.warehouse:
        props["warehouse"] = cfg.warehouse
    if "warehouse" not in props:
        raise ConfigException(
            "Missing required configuration 'iceberg.mode.warehouse': the storage backend "
            f"{backend_class!r} gives no place for the Iceberg tables; name one as a URI (s3://bucket/path, ...)"
        )
    props["type"] = cfg.catalog_type
    if cfg.catalog_type == "sql":
        props["uri"] = cfg.catalog_uri or f"sqlite:///{Path(cfg.sqlite_path).resolve()}"
    elif cfg.catalog_uri:
        props["uri"] = cfg.catalog_uri
    props.update(cfg.catalog_properties)
    return props


def open_catalog(cfg: IcebergConfig, props: Mapping[str, str]) -> Catalog:
    """The catalog (its SQLite file's folder is created); the namespace is created when missing."""
    uri = props.get("uri", "")
    if props.get("type") == "sql" and uri.startswith("sqlite:///"):
        Path(urlparse(uri).path).parent.mkdir(parents=True, exist_ok=True)
    warehouse = props.get("warehouse", "")
    if warehouse.startswith("file://"):
        Path(urlparse(warehouse).path).mkdir(parents=True, exist_ok=True)
    catalog = _load_catalog(cfg.catalog_name, props)
    try:
        catalog.create_namespace_if_not_exists(cfg.namespace)
    except NamespaceAlreadyExistsError:  # another broker made it in between
        pass
    except IntegrityError:
        # The SQL catalog checks, then inserts: a broker that inserts the same namespace in between makes the
        # insert a unique violation. The namespace is there all the same.
        if not catalog.namespace_exists(cfg.namespace):
            raise
    return catalog


def _load_catalog(name: str, props: Mapping[str, str], attempts: int = 5) -> Catalog:
    """``load_catalog``, again when another broker was creating the SQL catalog's own tables at the same moment
    (PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a concurrent one: a unique violation or a
    duplicate table)."""
    for attempt in range(attempts):
        try:
            return load_catalog(name, **dict(props))
        except (IntegrityError, ProgrammingError):
            if attempt + 1 == attempts:
                raise
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


def redacted_uri(uri: str) -> str:
    """A catalog URI fit for a message: the password of ``scheme://user:password@host`` replaced by ``***``."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", uri)


class CatalogHandle:
    """One catalog per plugin, opened on first use (a broker without Iceberg-mode topics never opens it)."""

    def __init__(self, cfg: IcebergConfig, props: Mapping[str, str]) -> None:
        self.cfg = cfg
        self.props = dict(props)
        self._catalog: Catalog | None = None
        self._io: FileIO | None = None
        self._lock = threading.Lock()

    @property
    def catalog(self) -> Catalog:
        with self._lock:
            if self._catalog is None:
                self._catalog = open_catalog(self.cfg, self.props)
            return self._catalog

    @property
    def io(self) -> FileIO:
        """The FileIO for data files (no catalog needed: a fetch reads files its manifest lists)."""
        with self._lock:
            if self._io is None:
                self._io = load_file_io(self.props, self.props.get("warehouse"))
            return self._io

    def describe(self) -> str:
        """The catalog as an operator configured it, without secrets, for messages."""
        uri = redacted_uri(self.props.get("uri", ""))
        return f"{self.props.get('type', '?')} catalog {self.cfg.catalog_name!r} at {uri}"

    def table_identifier(self, topic: str) -> tuple[str, str]:
        """Where the topic's new segments go (``rsm.iceberg.topic_tables``)."""
        return self.cfg.table_of(topic).identifier
