"""``kts gc --bootstrap-server --command-config`` against a real Kafka 4.4 broker whose client listener takes only
SASL_SSL with SCRAM-SHA-512 (the broker's own listeners and the remote log metadata manager stay on PLAINTEXT).

The certificates are made here (``cryptography``: a CA, the broker's certificate for 127.0.0.1 in a PKCS12
keystore); the client truststores are the CA as PEM, and as PKCS12 and JKS stores made by the JDK's keytool, as
an operator's would be. One broker tiers one segment to the filesystem store, then:

- PEM and PKCS12 truststores with the right password read the cluster's record (the segment is in it);
- a JKS truststore is refused before any connection, with the keytool command that converts it;
- a wrong SASL password and a truststore of another CA each fail with one line naming the cause and the setting
  to fix, and return (no hang, no retry loop);
- ``kts gc --watch`` over the same settings serves every family the metrics catalog declares.
"""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jvm_testing as jt
import kafka_dist as kd
import kraft_cluster as kc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from gc_watch import watch_metrics

from rsm.cli.main import main
from rsm.metrics.catalog import GC_CLUSTER_METRICS

pytestmark = pytest.mark.timeout(600)

USER, PASSWORD = "kts-gc", "kts-gc-secret"
STORE_PASSWORD = "store-secret"
SEGMENT_BYTES = 1024 * 1024  # the smallest segment.bytes Kafka 4.x accepts


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(
    ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("broker"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


@dataclass
class Secured:
    cluster: kc.Cluster
    sasl_bootstrap: str
    config: str
    certs: Path
    store: Path


def keytool_truststore(ca_pem: Path, out: Path, kind: str) -> Path:
    keytool = str(kd.DEFAULT_JAVA_HOME / "bin" / "keytool")
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem), "-keystore", str(out),
         "-storetype", kind, "-storepass", STORE_PASSWORD],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    jt.ensure_built()
    work = tmp_path_factory.mktemp("secured")
    certs = work / "certs"
    certs.mkdir()
    ca_key, ca = make_ca("kts-test-ca")
    key, cert = make_server_cert(ca_key, ca)
    (certs / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    encryption = serialization.BestAvailableEncryption(STORE_PASSWORD.encode())
    p12 = pkcs12.serialize_key_and_certificates(b"broker", key, cert, [ca], encryption)
    (certs / "broker.p12").write_bytes(p12)
    _other_key, other = make_ca("another-ca")
    (certs / "other-ca.pem").write_bytes(other.public_bytes(serialization.Encoding.PEM))
    keytool_truststore(certs / "ca.pem", certs / "truststore.p12", "PKCS12")
    keytool_truststore(certs / "ca.pem", certs / "truststore.jks", "JKS")

    sasl_port = jt.free_ports(1)[0]
    store = work / "store"
    plugin = kc.shim_plugin_lines({"backend.class": "filesystem", "root": str(store)}, **{"chunk.size": "262144"})
    c = kc.make_cluster(kd.kafka_home(kd.NEWEST_4X), work / "kafka", 1, plugin)
    node = c.nodes[0]
    # later lines win in a properties file: the SASL_SSL listener beside the test harness's PLAINTEXT one
    c.extra_server = (
        f"listeners=PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
        f"SASL_SSL://127.0.0.1:{sasl_port}\n"
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port},SASL_SSL://127.0.0.1:{sasl_port}\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
        f"ssl.keystore.type=PKCS12\nssl.keystore.location={certs / 'broker.p12'}\n"
        f"ssl.keystore.password={STORE_PASSWORD}\nssl.key.password={STORE_PASSWORD}\n"
    )
    c.java_home = str(kd.DEFAULT_JAVA_HOME)
    c.rlm_log_level = "INFO"
    try:
        # as Cluster.start, with the SCRAM user written by the format step (KRaft keeps credentials in its log)
        c.work.mkdir(parents=True, exist_ok=True)
        cluster_id = c.tool("format", "random-uuid").strip().splitlines()[-1]
        node.work.mkdir(parents=True, exist_ok=True)
        props = node.work / "server.properties"
        props.write_text(c.properties(node))
        scram = f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"
        c.tool("format", "format", "-t", cluster_id, "-c", str(props), "--add-scram", scram)
        c.start_node(node)
        c.wait_started(node)
        c.create_topic(
            "secured", 1, 1, remote_storage_enable="true", segment_bytes=str(SEGMENT_BYTES), local_retention_bytes="1"
        )
        c.produce("secured", [f"{i:06d}-" + "x" * 1100 for i in range(1500)])  # one closed segment, tiered
        deadline = time.monotonic() + 240
        while not list(store.rglob("*.rsm-manifest")):
            assert node.alive() and time.monotonic() < deadline, node.out.read_text()[-3000:]
            time.sleep(0.5)
        yield Secured(c, f"127.0.0.1:{sasl_port}", str(props), certs, store)
    finally:
        c.stop()


def command_config(tmp_path: Path, **props: str) -> str:
    base = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";',
    }
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in {**base, **props}.items()))
    return str(path)


def gc(secured: Secured, config: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``kts gc`` (dry run) in a thread: a hang is a failure of its own, not a test that never ends."""
    capsys.readouterr()
    argv = ["gc", "--config", secured.config, "--bootstrap-server", secured.sasl_bootstrap]
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(main([*argv, "--command-config", config])), daemon=True)
    runner.start()
    runner.join(240)
    assert result, "kts gc did not return within 240 s"
    out, err = capsys.readouterr()
    return result[0], out, err


@pytest.mark.parametrize(
    "truststore",
    [
        {"ssl.truststore.type": "PEM", "ssl.truststore.location": "ca.pem"},
        {
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": "truststore.p12",
            "ssl.truststore.password": STORE_PASSWORD,
        },
    ],  # fmt: skip
    ids=["pem", "pkcs12"],
)
def test_reads_the_record_over_sasl_ssl(
    secured: Secured, truststore: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = {**truststore, "ssl.truststore.location": str(secured.certs / truststore["ssl.truststore.location"])}
    code, out, err = gc(secured, command_config(tmp_path, **store), capsys)
    assert code == 0, out + err
    assert "its record holds segments: " in out and "COPY_SEGMENT_FINISHED" in out, out + err
    assert "warning" not in err, err


def test_jks_truststore_names_the_conversion(
    secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jks = str(secured.certs / "truststore.jks")
    config = command_config(tmp_path, **{"ssl.truststore.location": jks, "ssl.truststore.password": STORE_PASSWORD})
    code, out, err = gc(secured, config, capsys)
    assert code != 0, out + err
    assert f"ssl.truststore.location {jks} is a JKS store" in err, err
    assert "keytool -importkeystore" in err and "PKCS12" in err, err


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("password", ["authentication failed", "sasl.jaas.config"]),
        ("ca", ["TLS", "ssl.truststore.location"]),
    ],
)
def test_refusals_name_the_setting(
    secured: Secured, case: str, expect: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(secured.certs / "ca.pem")}
    if case == "password":
        props["sasl.jaas.config"] = (
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" password="wrong";'
        )
    else:
        props["ssl.truststore.location"] = str(secured.certs / "other-ca.pem")
    code, out, err = gc(secured, command_config(tmp_path, **props), capsys)
    assert code != 0, out + err
    assert all(word in err for word in expect), err
    assert "Traceback" not in err, err


def test_watch_serves_the_declared_families(secured: Secured, tmp_path: Path) -> None:
    config = command_config(
        tmp_path, **{"ssl.truststore.type": "PEM", "ssl.truststore.location": str(secured.certs / "ca.pem")}
    )
    samples = watch_metrics(secured.config, secured.sasl_bootstrap, config, rounds=2)
    families = {n.split("{")[0] for n in samples if n.startswith("kts_gc_cluster_") and not n.endswith("_created")}
    assert families == {d.exposed for d in GC_CLUSTER_METRICS}, families
