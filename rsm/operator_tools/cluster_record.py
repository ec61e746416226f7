"""The cluster's own record of tiered segments, read as Kafka's tools read a cluster: ``--bootstrap-server
HOST:PORT`` and ``--command-config FILE`` (the client properties of Kafka's command-line tools).

Two things are read, in this order: every record of ``__remote_log_metadata`` (from the start of each partition
to its end at the time of the read, parsed by ``rsm.kafka.remote_log_metadata``), then the ids of the topics the
cluster has (Metadata API v10+). The order matters: a topic created between the two reads is absent from the
record, so it can never be taken for a deleted one.

The client is kafka-python (the ``cluster`` extra). Kafka's client properties map to its settings as below; a
property that would change how the connection is secured and that kafka-python cannot honour (a JKS store, a
PKCS12 keystore, GSSAPI, OAUTHBEARER) is an error naming it and the conversion, never ignored. A PKCS12
truststore is read here (``cryptography``) and handed to kafka-python as an SSL context. Other properties are
ignored with a warning.
"""

from __future__ import annotations

import logging
import re
import ssl
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from rsm.errors import RemoteStorageException
from rsm.kafka.remote_log_metadata import (
    RemoteLogMetadataError,
    RemoteLogMetadataRecord,
    SegmentRecord,
    decode,
    uuid_to_str,
)

METADATA_TOPIC = "__remote_log_metadata"
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_IGNORED = ("client.dns.lookup", "ssl.enabled.protocols", "ssl.protocol", "sasl.login.class")


class ClusterReadError(RemoteStorageException):
    """The cluster's record could not be read: the cluster is unreachable, the client settings are unusable, or a
    record is not one this version reads."""


@dataclass(frozen=True)
class ClusterView:
    """What the cluster said: its ``__remote_log_metadata`` records (in each partition's order) and its topics'
    ids (Kafka Uuid strings) with their names."""

    records: list[RemoteLogMetadataRecord]
    topic_ids: dict[str, str]
    undecided: dict[str, str] = field(default_factory=dict)
    """Topic ids of the record that the cluster's listing lacks but whose deletion it did not confirm (asked by
    name, it answered with an error other than "unknown topic": no right to describe it, say), with that error.
    They count as live: nothing of theirs is removed."""


def _jaas_credentials(jaas: str, path: str) -> tuple[str, str]:
    options = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS_OPTION.findall(jaas)}
    if not re.search(r"(PlainLoginModule|ScramLoginModule)\s+required", jaas):
        raise ClusterReadError(
            f"{path}: sasl.jaas.config must use PlainLoginModule or ScramLoginModule (kafka-python supports PLAIN "
            "and SCRAM only)"
        )
    if "username" not in options or "password" not in options:
        raise ClusterReadError(f'{path}: sasl.jaas.config needs username="..." and password="..."')
    return options["username"], options["password"]


def client_settings(bootstrap: str, props: Mapping[str, str], path: str = "--command-config") -> dict[str, Any]:
    """kafka-python's settings for Kafka client ``props`` (security.protocol, ssl.*, sasl.*, client.id,
    request.timeout.ms)."""
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","), "client_id": "kts-gc"}
    unused = dict(props)
    protocol = unused.pop("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ClusterReadError(f"{path}: security.protocol {protocol!r} is not one of Kafka's four")
    settings["security_protocol"] = protocol
    truststore = _truststore(unused, props, path)
    keystore_kind = unused.pop("ssl.keystore.type", "JKS" if "ssl.keystore.location" in props else "PEM").upper()
    keystore = unused.pop("ssl.keystore.location", None)
    if keystore is not None and keystore_kind != "PEM":
        raise ClusterReadError(
            f"{path}: ssl.keystore.location {keystore} is a {keystore_kind} store; kafka-python reads a PEM "
            "keystore only: export the key and its certificate chain to one PEM file (openssl pkcs12 -nodes for "
            "PKCS12; keytool -importkeystore to PKCS12 first for JKS) and set ssl.keystore.type=PEM"
        )
    if unused.pop("ssl.truststore.certificates", None) or unused.pop("ssl.keystore.key", None):
        raise ClusterReadError(f"{path}: inline PEM stores are not supported; put them in files (ssl.*.location)")
    key_password = None
    for name in ("ssl.key.password", "ssl.keystore.password"):
        if name in unused:
            key_password = unused.pop(name)
    check_hostname = unused.pop("ssl.endpoint.identification.algorithm", "https").strip() != ""
    if isinstance(truststore, bytes):  # certificates read from a PKCS12 store: a context of our own
        settings["ssl_context"] = _ssl_context(truststore, keystore, key_password, check_hostname)
    else:
        if truststore is not None:
            settings["ssl_cafile"] = truststore
        if keystore is not None:  # a PEM keystore holds the key and the certificate chain
            settings["ssl_certfile"] = settings["ssl_keyfile"] = keystore
        if key_password is not None:
            settings["ssl_password"] = key_password
        if not check_hostname:
            settings["ssl_check_hostname"] = False
    if protocol.startswith("SASL"):
        mechanism = unused.pop("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in _SASL_MECHANISMS:
            raise ClusterReadError(
                f"{path}: sasl.mechanism {mechanism} is not supported; use one of {_SASL_MECHANISMS}"
            )
        jaas = unused.pop("sasl.jaas.config", None)
        if jaas is None:
            raise ClusterReadError(f"{path}: {protocol} needs sasl.jaas.config with the user name and password")
        settings["sasl_mechanism"] = mechanism
        settings["sasl_plain_username"], settings["sasl_plain_password"] = _jaas_credentials(jaas, path)
    if "client.id" in unused:
        settings["client_id"] = unused.pop("client.id")
    if "request.timeout.ms" in unused:
        settings["request_timeout_ms"] = int(unused.pop("request.timeout.ms"))
    for name in sorted(unused):
        if name not in _IGNORED:
            click.echo(f"warning: {path}: {name} is not used by kts (kafka-python)", err=True)
    return settings


def _truststore(unused: dict[str, str], props: Mapping[str, str], path: str) -> str | bytes | None:
    """The truststore: a PEM file's path, the PEM certificates of a PKCS12 store, or None (the system's CAs)."""
    kind = unused.pop("ssl.truststore.type", "JKS" if "ssl.truststore.location" in props else "PEM").upper()
    location = unused.pop("ssl.truststore.location", None)
    password = unused.pop("ssl.truststore.password", None)
    if location is None:
        return None
    if kind == "PEM":
        return location
    if kind == "PKCS12":
        from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

        try:
            store = pkcs12.load_pkcs12(Path(location).read_bytes(), password.encode() if password else None)
        except (OSError, ValueError) as e:
            raise ClusterReadError(
                f"{path}: ssl.truststore.location {location}: cannot read it as PKCS12 with the given "
                f"ssl.truststore.password ({e}); check the file and the password"
            ) from e
        certs = [c.certificate for c in store.additional_certs]
        certs += [store.cert.certificate] if store.cert is not None else []
        if not certs:
            raise ClusterReadError(f"{path}: ssl.truststore.location {location} holds no certificate")
        return b"".join(c.public_bytes(Encoding.PEM) for c in certs)
    convert = (
        f"keytool -importkeystore -srckeystore {location} -srcstoretype {kind} -destkeystore truststore.p12 "
        "-deststoretype PKCS12"
    )
    raise ClusterReadError(
        f"{path}: ssl.truststore.location {location} is a {kind} store, which kafka-python cannot read; convert "
        f"it (`{convert}`) and set ssl.truststore.type=PKCS12, or give the CA certificates as PEM "
        "(ssl.truststore.type=PEM)"
    )


def _ssl_context(cadata: bytes, keystore: str | None, password: str | None, check_hostname: bool) -> ssl.SSLContext:
    """What kafka-python builds from ssl_cafile and the rest, with the CA certificates given as data."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=cadata.decode("ascii"))
    context.check_hostname = check_hostname
    if keystore is not None:
        context.load_cert_chain(keystore, keystore, password)
    return context


def _kafka() -> Any:
    try:
        import kafka
    except ImportError:
        raise ClusterReadError(
            "reading the cluster needs kafka-python: pip install 'kafka-tiered-storage[cluster]'"
        ) from None
    return kafka


def read_cluster(settings: Mapping[str, Any], timeout_s: float = 120) -> ClusterView:
    """Every ``__remote_log_metadata`` record up to the end of each partition, then the cluster's topic ids."""
    kafka = _kafka()
    from kafka.errors import KafkaError

    causes = _Causes()
    logging.getLogger("kafka").addHandler(causes)
    try:
        records = _read_metadata_topic(kafka, settings, timeout_s)
        admin = kafka.KafkaAdminClient(**settings)
        try:
            topic_ids = _topic_ids(admin.describe_topics())
            # A listing of all topics leaves out those the principal may not describe: each topic of the record
            # the listing lacks is asked for by name, and only "unknown topic" (or another id) proves it deleted.
            names = {r.metadata.topic_id_partition.topic_id: r.metadata.topic_id_partition.topic for r in records
                     if isinstance(r, SegmentRecord)}  # fmt: skip
            missing = {tid: name for tid, name in names.items() if tid not in topic_ids}
            undecided: dict[str, str] = {}
            if missing:
                answers = {t["name"]: t for t in admin.describe_topics(sorted(set(missing.values())))}
                for tid, name in missing.items():
                    answer = answers.get(name)
                    code = None if answer is None else answer.get("error_code", 0)
                    if code == 0 and _topic_ids([answer]).get(tid) == name:
                        topic_ids[tid] = name
                    elif code not in (0, _UNKNOWN_TOPIC):
                        undecided[tid] = f"{name}: error code {code}"
        finally:
            admin.close()
    except KafkaError as e:
        raise ClusterReadError(_unreadable(settings, e, causes.seen)) from e
    finally:
        logging.getLogger("kafka").removeHandler(causes)
    return ClusterView(records, topic_ids, undecided)


class _Causes(logging.Handler):
    """The errors kafka-python logs while it retries: a failed bootstrap ends in a timeout naming none of them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.seen += [a for a in args if isinstance(a, BaseException)]


def _unreadable(settings: Mapping[str, Any], error: Exception, seen: list[BaseException]) -> str:
    """What went wrong, from the most telling cause kafka-python logged, and the setting to look at."""
    from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError

    where = f"cannot read the cluster at {','.join(settings['bootstrap_servers'])}"
    for cause in seen:
        if isinstance(cause, SaslAuthenticationFailedError):
            return (
                f"{where}: SASL authentication failed for user {settings.get('sasl_plain_username')!r} with "
                f"{settings.get('sasl_mechanism')} ({cause}); check the user name and password in "
                "sasl.jaas.config (--command-config) and that the user has credentials for that mechanism"
            )
    for cause in seen:
        # kafka-python raises a failed TLS handshake again as KafkaConnectionError("Handshake failed: ...")
        if isinstance(cause, ssl.SSLError) or "Handshake failed" in str(cause):
            return (
                f"{where}: the TLS handshake failed ({cause}); check that ssl.truststore.location holds the CA "
                "that signed the broker's certificate, that the certificate names the host in --bootstrap-server "
                "(or set ssl.endpoint.identification.algorithm= to skip that check), and that the listener "
                "speaks TLS"
            )
    others = [cause for cause in seen if not isinstance(cause, KafkaTimeoutError)]
    last = f"; last error: {others[-1]}" if others else ""
    return (
        f"{where}: {error}{last}; check that the address is a listener of the cluster and that security.protocol "
        "(--command-config) is the one that listener takes"
    )


_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION


def _topic_ids(topics: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in topics:
        if t.get("error_code", 0) != 0:
            continue
        raw = t.get("topic_id")  # a uuid.UUID, or its str() in kafka-python's JSON-style dicts
        topic_id = None if raw is None else raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))
        if topic_id is None or topic_id.int == 0:
            raise ClusterReadError(
                f"the cluster gave no topic id for {t.get('name')!r}; topic ids need Kafka 2.8+ (Metadata v10+)"
            )
        out[uuid_to_str(topic_id.bytes)] = t["name"]
    return out


def _read_metadata_topic(kafka: Any, settings: Mapping[str, Any], timeout_s: float) -> list[RemoteLogMetadataRecord]:
    consumer = kafka.KafkaConsumer(enable_auto_commit=False, group_id=None, **settings)
    try:
        partitions = consumer.partitions_for_topic(METADATA_TOPIC)
        if not partitions:
            raise ClusterReadError(
                f"the cluster has no {METADATA_TOPIC} topic: tiered storage was never enabled on it "
                "(remote.log.storage.system.enable), or another metadata manager is configured"
            )
        tps = [kafka.TopicPartition(METADATA_TOPIC, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        by_partition: dict[int, list[RemoteLogMetadataRecord]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise ClusterReadError(f"reading {METADATA_TOPIC} took longer than {timeout_s:.0f} s")
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                for m in messages:
                    if m.offset >= ends[tp] or m.value is None:
                        continue
                    try:
                        by_partition[tp.partition].append(decode(m.value))
                    except RemoteLogMetadataError as e:
                        raise ClusterReadError(f"{METADATA_TOPIC}-{tp.partition} offset {m.offset}: {e}") from e
        return [r for p in sorted(by_partition) for r in by_partition[p]]
    finally:
        consumer.close()
