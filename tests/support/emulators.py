"""The emulators as pytest fixtures: the servers themselves live in ``rsm.cli.emulators`` (``kts demo --backend``
starts them too). No server is ever skipped: one that cannot start fails the fixture with the reason.

This module is a pytest plugin named in tests/conftest.py, so each server fixture is registered once for the
session. Test modules import helpers from here, never a fixture: an imported fixture is registered again in that
module and starts a second server (tests/conftest.py refuses such a run)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rsm.cli.emulators import (  # noqa: F401 - re-exported for the tests and benchmarks
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    BUCKET,
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    STARTERS,
    VENV_BIN,
    EmulatorError,
    StoreServer,
    azurite_binary,
    azurite_connection_string,
    fake_gcs_binary,
    free_port,
    free_port_block,
    running,
    start_azurite,
    start_fake_gcs,
    start_moto,
    start_seaweedfs,
)

REPO = Path(__file__).resolve().parents[2]
CHECKOUT_AZURITE = REPO / ".ci" / "node" / "node_modules" / ".bin" / "azurite-blob"
"""Where ``make setup`` (.ci/install_emulators.sh) puts Azurite; the tests hand it to the package's lookup."""
if CHECKOUT_AZURITE.exists():
    os.environ.setdefault("KTS_AZURITE_BIN", str(CHECKOUT_AZURITE))

# --- pytest fixtures ----------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(name: str, start: Callable[[Path], StoreServer], workdir: Path) -> Iterator[StoreServer]:
    """The server ``start`` starts in ``workdir``, stopped on exit; one that cannot start fails the test."""
    try:
        server = start(workdir)
    except EmulatorError as e:
        pytest.fail(f"emulator {name} could not start: {e}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _fixture(name: str) -> Any:
    @pytest.fixture(scope="session", name=name.replace("-", "_") + "_server")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
        with serving(name, STARTERS[name], tmp_path_factory.mktemp(name)) as server:
            yield server

    return fixture


s3_seaweedfs_server = _fixture("s3-seaweedfs")
s3_moto_server = _fixture("s3-moto")
gcs_fake_server = _fixture("gcs-fake")
azure_azurite_server = _fixture("azure-azurite")


@pytest.fixture
def s3_seaweedfs_client(s3_seaweedfs_server: StoreServer) -> Any:
    """A boto3 client of the session's SeaweedFS, for tests that look at the bucket beside the plugin."""
    return s3_client(s3_seaweedfs_server)


def s3_client(server: StoreServer) -> Any:
    """A boto3 client of an S3 emulator: path-style addressing and the emulators' keys, botocore's retries."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def s3_keys(client: Any, bucket: str, prefix: str = "") -> list[str]:
    """Every key under ``prefix`` in ``bucket``, in the store's order."""
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


FIXTURE_FOR = {name: name.replace("-", "_") + "_server" for name in STARTERS}
"""Emulator name -> fixture name, for ``request.getfixturevalue``."""

EVERY_STORE = ["filesystem", *STARTERS]
"""The filesystem and every emulator: the stores a test of what the plugin writes runs on."""


def empty_store_config(flavour: str, request: pytest.FixtureRequest, root: Path, tag: str) -> dict[str, str]:
    """``storage.*`` settings of an empty store of ``flavour`` (a folder under ``root``, or a new bucket named
    ``tag-<random>`` on the emulator's session server): for tests whose empty ``key.prefix`` is the whole store."""
    import uuid

    if flavour == "filesystem":
        return {"storage.backend.class": "filesystem", "storage.root": str(root / "store")}
    server = request.getfixturevalue(FIXTURE_FOR[flavour])
    settings = fresh_store(server, f"{tag}-{uuid.uuid4().hex[:12]}")
    return {"storage.backend.class": server.backend, **{f"storage.{k}": str(v) for k, v in settings.items()}}


def fresh_store(server: StoreServer, name: str) -> dict[str, Any]:
    """A new empty bucket (container) on ``server`` named ``name``: the backend configuration that uses it. For
    tests whose empty ``key.prefix`` means the whole bucket."""
    import json
    import urllib.request

    if server.backend == "s3":
        from rsm.cli.emulators import _s3_client

        _s3_client(server.endpoint).create_bucket(Bucket=name)
        return server.config(**{"s3.bucket.name": name})
    if server.backend == "gcs":
        request = urllib.request.Request(
            f"{server.endpoint}/storage/v1/b?project=test",
            method="POST",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        return server.config(**{"gcs.bucket.name": name})
    from azure.storage.blob import BlobServiceClient

    BlobServiceClient.from_connection_string(azurite_connection_string(server.endpoint)).create_container(name)
    return server.config(**{"azure.container.name": name})
