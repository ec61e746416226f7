"""`kts gc` on real leftovers, and the demo's Spark step: the commands as an operator runs them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rsm.cli.gc import parse_duration
from rsm.cli.main import main
from rsm.cli.settings import load_configs
from rsm.core.manager import RemoteStorageManager


def test_duration_parsing() -> None:
    assert parse_duration("90s") == 90 and parse_duration("15m") == 900 and parse_duration("1.5h") == 5400
    assert parse_duration("2d") == 172800 and parse_duration("30") == 30
    with pytest.raises(Exception, match="not a duration"):
        parse_duration("soon")


def test_gc_lists_then_deletes_orphans_and_stale_cache_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "demo"
    assert main(["demo", "--dir", str(d), "--segments", "2", "--segment-mb", "0.3", "--no-spark", "--no-iceberg"]) == 0
    props = str(d / "server.properties")
    cache = str(tmp_path / "chunk-cache")
    common = ["--config", props, "--set", "fetch.chunk.cache.class=disk", "--set", f"fetch.chunk.cache.path={cache}"]
    # The broker's plugin reads segment 0 through its disk chunk cache (kts commands never fill that cache).
    with RemoteStorageManager() as broker:
        broker.configure(load_configs(props, tuple(common[3::2]), environ={}))
        meta = broker.segment_metadata(broker.catalog().segments()[0])
        with broker.fetch_log_segment(meta, 0) as stream:
            assert stream.read(1000)
        assert broker.chunk_cache is not None and broker.chunk_cache.wait_idle()
    assert any(Path(cache).iterdir())
    store = d / "store"
    manifests = sorted(store.rglob("*.rsm-manifest"))
    assert len(manifests) == 2
    # A crashed copy: .log and .indexes of a segment whose manifest never came, an hour and a half old.
    crashed = [manifests[1].with_suffix(".log"), manifests[1].with_suffix(".indexes")]
    # The segment whose chunks are cached is deleted by someone else (its manifest goes first).
    manifests[0].unlink()
    manifests[1].unlink()
    old = time.time() - 5400
    for p in crashed:
        os.utime(p, (old, old))
    capsys.readouterr()

    files = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert main(["gc", *common, "--older-than", "1h"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "cache-entry" in out
    assert all(p.name in out for p in crashed)
    assert {p for p in store.rglob("*") if p.is_file()} == set(files), "a dry run creates and removes nothing"

    assert main(["gc", *common, "--older-than", "1h", "--delete"]) == 0
    assert "failed 0" in capsys.readouterr().out
    assert not any(p.exists() for p in crashed)
    held = {p.name: p.read_bytes() for p in store.rglob("*") if p.is_file() and "kts-quarantine" in p.parts}
    assert {p.name: files[p] for p in crashed} == {n: b for n, b in held.items() if not n.endswith(".json")}
    # The rest of segment 0 (no manifest, but fresh) is younger than the grace period: kept.
    assert main(["gc", *common, "--older-than", "1h"]) == 0
    out = capsys.readouterr().out
    assert "0 items" in out


def test_demo_runs_the_spark_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "demo"
    assert main(["demo", "--dir", str(d), "--segments", "2", "--segment-mb", "0.3", "--transport", "python"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "read by Spark" in line)
    records = int(line.split("records read by Spark")[0].strip().replace(",", ""))
    summary = next(line for line in out.splitlines() if line.strip().startswith("records "))
    assert f"{records:,} data records" in summary  # Spark saw exactly the records the catch-up read decoded


def test_command_config_maps_kafka_client_properties(tmp_path: Path) -> None:
    from rsm.operator_tools.client_settings import client_settings
    from rsm.operator_tools.cluster_record import ClusterReadError

    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" password="p\\"w";'
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
    }
    s = client_settings("a:9092,b:9092", props)
    assert s["bootstrap_servers"] == ["a:9092", "b:9092"] and s["security_protocol"] == "SASL_SSL"
    assert (s["sasl_mechanism"], s["sasl_plain_username"], s["sasl_plain_password"]) == ("SCRAM-SHA-512", "ops", 'p"w')
    assert s["ssl_cafile"] == "/etc/ca.pem" and s["ssl_check_hostname"] is False
    with pytest.raises(
        ClusterReadError, match="ssl.truststore.location /t.jks is a JKS store.*keytool -importkeystore"
    ):
        client_settings("a:9092", {"security.protocol": "SSL", "ssl.truststore.location": "/t.jks"})
    with pytest.raises(ClusterReadError, match="sasl.mechanism GSSAPI is not supported"):
        client_settings("a:9092", {"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas})
    with pytest.raises(ClusterReadError, match="needs sasl.jaas.config"):
        client_settings("a:9092", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ClusterReadError, match="security.protocol 'TLS'"):
        client_settings("a:9092", {"security.protocol": "TLS"})


def test_command_config_reads_a_pkcs12_truststore(tmp_path: Path) -> None:
    """A PKCS12 truststore (Java's kind, trusted certificate entries) becomes an SSL context with its CA; a wrong
    password and a PKCS12 keystore are refused by name."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    from rsm.operator_tools.client_settings import client_settings
    from rsm.operator_tools.cluster_record import ClusterReadError

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "unit-ca")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256())
    )  # fmt: skip
    store = tmp_path / "truststore.p12"
    trusted = pkcs12.PKCS12Certificate(ca, b"ca")
    store.write_bytes(pkcs12.serialize_java_truststore([trusted], serialization.BestAvailableEncryption(b"secret")))
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(store)}
    s = client_settings("a:9092", {**props, "ssl.truststore.password": "secret"})
    context = s["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname and "ssl_cafile" not in s
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "unit-ca"),),)]
    with pytest.raises(ClusterReadError, match="cannot read it as PKCS12 with the given ssl.truststore.password"):
        client_settings("a:9092", {**props, "ssl.truststore.password": "wrong"})
    with pytest.raises(ClusterReadError, match="ssl.keystore.location /k.p12 is a PKCS12 store"):
        client_settings("a:9092", {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12"})


def test_watch_needs_the_cluster_and_never_deletes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "p.properties"
    props.write_text(f"storage.backend.class=filesystem\nstorage.root={tmp_path}\n")
    assert main(["gc", "--config", str(props), "--watch", "1m"]) == 2
    assert main(["gc", "--config", str(props), "--watch", "1m", "--bootstrap-server", "h:9092", "--delete"]) == 2
    assert "--watch needs --bootstrap-server and never deletes" in capsys.readouterr().err


def test_the_upload_deadline_is_the_backends_own() -> None:
    from rsm.operator_tools.garbage import upload_deadline_seconds

    assert upload_deadline_seconds({}) == 3600.0  # filesystem: storage.stale.upload.age.ms, 1 h by default
    assert upload_deadline_seconds({"storage.stale.upload.age.ms": "120000"}) == 120.0
    assert upload_deadline_seconds({"storage.backend.class": "s3"}) == 1800.0
    assert upload_deadline_seconds({"storage.backend.class": "backends.s3:S3Backend"}) == 1800.0
    aiven = "io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage"
    assert upload_deadline_seconds({"storage.backend.class": aiven, "storage.azure.upload.timeout.ms": 5000}) == 5.0
    assert upload_deadline_seconds({"storage.backend.class": "gcs", "storage.gcs.upload.timeout.ms": "2000"}) == 2.0
    # a backend of another's making: its uploads never count as abandoned
    assert upload_deadline_seconds({"storage.backend.class": "mystore:Backend"}) is None
    with pytest.raises(Exception, match="storage.s3.upload.timeout.ms: expected milliseconds"):
        upload_deadline_seconds({"storage.backend.class": "s3", "storage.s3.upload.timeout.ms": "soon"})


def test_the_watch_exports_what_the_quarantine_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kts gc --watch` serves the quarantine's objects and bytes beside the reconciliation (the cluster's answer
    is a stand-in here: tests/system/test_gc_cluster.py reads a real one)."""
    import io
    from types import SimpleNamespace

    from gc_watch import watch_metrics

    import rsm.cli.gc_cluster as gc_cluster
    from rsm.deletion.rules import STORE_AGE, Evidence
    from rsm.operator_tools.garbage_removal import quarantine_of
    from rsm.operator_tools.reconcile import Reconciliation

    props = tmp_path / "p.properties"
    store = tmp_path / "store"
    props.write_text(f"storage.backend.class=filesystem\nstorage.root={store}\nkey.prefix=t/\nchunk.size=4096\n")
    (tmp_path / "store").mkdir()
    empty = SimpleNamespace(record=SimpleNamespace(complete=True), topics=None, result=Reconciliation())
    monkeypatch.setattr(gc_cluster, "check", lambda *_args: empty)
    assert watch_metrics(str(props), "unused:9092", rounds=2)["kts_gc_cluster_quarantined_objects"] == 0

    from rsm.metadata import random_kafka_uuid

    key = f"t/orders-{random_kafka_uuid()}/0/{0:020d}-{random_kafka_uuid()}.log"
    with RemoteStorageManager() as m:
        m.configure(load_configs(str(props), (), environ={}))
        m.backend.upload(key, io.BytesIO(b"x" * 1234))
        quarantine_of(m).hold("orphan-object", [(key, None)], [Evidence(STORE_AGE)], "20261129T041500Z-9f3a")
    values = watch_metrics(str(props), "unused:9092", rounds=2)
    assert values["kts_gc_cluster_quarantined_objects"] == 1 and values["kts_gc_cluster_quarantined_bytes"] == 1234
