"""Iceberg mode with the catalogs other than SQL, each a real server on 127.0.0.1: AWS Glue (moto's Glue and S3
in one server, the tables' files on its S3) and Iceberg's own REST catalog server (the test fixture behind the
apache/iceberg-rest-fixture image, from Maven Central through `make setup`). Segments of two partitions are
tiered, fetched back byte for byte, copied again (no offset twice), read from the table through a catalog opened
afresh the way an engine opens it, and deleted with their rows."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from emulators import S3_ACCESS_KEY, S3_SECRET_KEY, fresh_store
from iceberg_testing import ORDER_SCHEMA, REPO, order_records, segment_of
from processes import stop_process

from rsm import RemoteStorageManager
from rsm.cli.emulators import free_port
from rsm.metadata import TopicIdPartition

TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"
TOPIC = "payments.eu"  # a dot: the table is kafka.payments_eu in every catalog


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Iceberg's REST catalog test server (its classpath from .ci/iceberg_rest_fixture.sh): (its URL, the
    warehouse folder it puts tables in)."""
    classpath = (
        subprocess.run(
            ["bash", str(REPO / ".ci" / "iceberg_rest_fixture.sh")],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    work = tmp_path_factory.mktemp("rest")
    warehouse = work / "warehouse"
    warehouse.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "CATALOG_WAREHOUSE": warehouse.as_uri(),
        "CATALOG_REST_PORT": str(port),  # the fixture's "rest.port"
    }
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(
        ["java", "-cp", classpath, "org.apache.iceberg.rest.RESTCatalogServer"], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/config", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the REST catalog server did not start: {(work / 'server.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url, warehouse
    finally:
        stop_process(proc, grace=30)
        log.close()


def _glue_configs(server: Any, tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    store = fresh_store(server, f"glue-{tmp.name[-20:].lower().replace('_', '-')}")
    glue = {
        "glue.endpoint": server.endpoint,
        "glue.region": "us-east-1",
        "glue.access-key-id": S3_ACCESS_KEY,
        "glue.secret-access-key": S3_SECRET_KEY,
    }
    configs = {
        "storage.backend.class": "s3",
        **{f"storage.{k}": str(v) for k, v in store.items()},
        "iceberg.mode.catalog.type": "glue",
        **{f"iceberg.mode.catalog.property.{k}": v for k, v in glue.items()},
    }
    reader = {
        "type": "glue",
        **glue,
        "s3.endpoint": server.endpoint,
        "s3.region": "us-east-1",
        "s3.access-key-id": S3_ACCESS_KEY,
        "s3.secret-access-key": S3_SECRET_KEY,
    }
    return configs, reader


def _rest_configs(url: str, warehouse: Path, tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    configs = {
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp / "store"),
        "storage.fsync.enabled": "false",
        "iceberg.mode.catalog.type": "rest",
        "iceberg.mode.catalog.uri": url,
        "iceberg.mode.warehouse": warehouse.as_uri(),
    }
    return configs, {"type": "rest", "uri": url}


@pytest.mark.parametrize("kind", ["glue", "rest"])
def test_tier_fetch_and_read_through_the_catalog(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    from pyiceberg.catalog import load_catalog

    if kind == "glue":
        configs, reader = _glue_configs(request.getfixturevalue("s3_moto_server"), tmp_path)
    else:
        configs, reader = _rest_configs(*request.getfixturevalue("rest_catalog"), tmp_path)
    configs.update(
        {
            "chunk.size": "65536",
            "key.prefix": f"{kind}-{tmp_path.name}/",
            "iceberg.mode.topics.regex": r"payments\..*",
            "iceberg.mode.delete.rows.enabled": "true",
            "iceberg.value.schema.pay.topic": TOPIC,
            "iceberg.value.schema.pay.avro": json.dumps(ORDER_SCHEMA),
        }
    )
    segments = {
        p: segment_of(tmp_path / f"p{p}", order_records(p * 1000, 50), per_batch=5, codec="none") for p in (0, 1)
    }
    metas = {p: seg.to_metadata(TopicIdPartition(TOPIC_ID, TOPIC, p)) for p, seg in segments.items()}
    m = RemoteStorageManager()
    m.configure(configs)
    try:
        for p, seg in segments.items():
            m.copy_log_segment_data(metas[p], seg.to_log_segment_data())
            section = m.fetch_manifest(metas[p]).section
            assert section is not None and section.table == "kafka.payments_eu"
        retried = segments[0].to_metadata(TopicIdPartition(TOPIC_ID, TOPIC, 0), "retriedCopyxxxxxxxxxxx")
        m.copy_log_segment_data(retried, segments[0].to_log_segment_data())
        # the retried copy's rows replaced the first copy's: Kafka reads the copy that finished
        for meta, seg in ((retried, segments[0]), (metas[1], segments[1])):
            assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()

        # an engine's view: the catalog opened afresh, by its own properties
        catalog = load_catalog("reader", **reader)
        assert ("kafka", "payments_eu") in catalog.list_tables("kafka")
        table = catalog.load_table("kafka.payments_eu")
        assert table.properties["kafka.topic"] == TOPIC
        rows = table.scan(row_filter="kafka.partition = 1", selected_fields=("kafka", "value")).to_arrow()
        assert sorted(pc.struct_field(rows.column("kafka"), "offset").to_pylist()) == list(range(1000, 1050))
        assert sorted(pc.struct_field(rows.column("value"), "id").to_pylist()) == list(range(1000, 1050))
        everything = table.scan(selected_fields=("kafka",)).to_arrow()
        assert everything.num_rows == 100  # the retried copy replaced its rows

        m.delete_log_segment_data(metas[1])
        table = catalog.load_table("kafka.payments_eu")
        left = pc.struct_field(table.scan(selected_fields=("kafka",)).to_arrow().column("kafka"), "offset")
        assert sorted(left.to_pylist()) == list(range(50))
    finally:
        m.close()
