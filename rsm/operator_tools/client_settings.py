"""Kafka's client properties (``--command-config``) as kafka-python's settings, for reading the cluster's record
(``rsm.operator_tools.cluster_record``).

A property that would change how the connection is secured and that kafka-python cannot honour (a JKS store, a
PKCS12 keystore, GSSAPI, OAUTHBEARER) is an error naming it and the conversion, never ignored. A PKCS12
truststore is read here (``cryptography``) and handed to kafka-python as an SSL context. Other properties are
ignored with a warning.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from rsm.operator_tools.cluster_record import ClusterReadError

_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_IGNORED = ("client.dns.lookup", "ssl.enabled.protocols", "ssl.protocol", "sasl.login.class")


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
