"""The key ring from the configuration: key files, or a key service per key pair (``encryption.keyservice``).

Building a service pair makes no call to its service: the public key is fetched at the first copy, the first
unwrap is made by the first fetch. Secrets a provider needs (a Vault token, a PKCS#11 PIN) come from a file or the
environment, never from a key file of the pair.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from encryption.errors import KeyPairError, KeyServiceError
from encryption.keyring import RsaKeyPair, RsaKeyRing
from encryption.keyservice import DataKeyCache, KeyPair, KeyService, Observer, ServiceKeyPair
from encryption.providers import AwsKms, Pkcs11, VaultTransit
from rsm.core.config import KeyPairSource, RsmConfig, pair_values
from rsm.core.config_keys import CORE
from rsm.errors import ConfigException

log = logging.getLogger(__name__)


def _secret(pair: KeyPairSource, file_key: str, env: str, what: str) -> str:
    path = pair.service[file_key]
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as e:
            raise ConfigException(
                f"Invalid value {path!r} for configuration encryption.key.pairs.{pair.key_id}.{file_key}: cannot "
                f"read the {what} ({e.strerror})"
            ) from None
    value = os.environ.get(env)
    if not value:
        raise ConfigException(
            f"Missing {what} for key pair {pair.key_id!r} ({pair.provider}): set "
            f"encryption.key.pairs.{pair.key_id}.{file_key} or the environment variable {env}"
        )
    return value


def key_service(pair: KeyPairSource, timeout_s: float) -> KeyService:
    """The client of the service that holds ``pair`` (no call is made)."""
    s = pair.service
    if pair.provider == "aws-kms":
        return AwsKms(
            s["key.id"], s["aws.region"], s["aws.endpoint.url"], s["aws.access.key.id"], s["aws.secret.access.key"],
            timeout_s,
        )  # fmt: skip
    if pair.provider == "vault-transit":
        url = s["vault.url"] or os.environ.get("VAULT_ADDR")
        if not url:
            raise ConfigException(
                f"Missing configuration encryption.key.pairs.{pair.key_id}.vault.url (or $VAULT_ADDR) for key pair "
                f"{pair.key_id!r}"
            )
        token_file = s["vault.token.file"]
        if token_file:  # read by the client, and again when Vault Agent rewrites it
            _secret(pair, "vault.token.file", "VAULT_TOKEN", "Vault token")  # unreadable: a ConfigException now
            token = None
        else:
            token = _secret(pair, "vault.token.file", "VAULT_TOKEN", "Vault token")
        try:
            return VaultTransit(
                s["key.id"], url, token, s["vault.mount"], s["vault.namespace"], timeout_s, token_file=token_file
            )
        except KeyServiceError as e:
            raise ConfigException(f"key pair {pair.key_id!r}: {e}") from None
    if pair.provider == "pkcs11":
        pin = _secret(pair, "pkcs11.pin.file", "KTS_PKCS11_PIN", "PKCS#11 user PIN")
        return Pkcs11(s["key.id"], s["pkcs11.library"], s["pkcs11.token.label"], s["pkcs11.slot"], pin)
    raise ConfigException(f"key pair {pair.key_id!r}: unknown provider {pair.provider!r}")


def build_key_ring(
    config: RsmConfig,
    observer: Observer | None = None,
    service_factory: Callable[[KeyPairSource, float], KeyService] = key_service,
) -> RsaKeyRing | None:
    """The key ring of ``encryption.key.pairs`` when encryption is on; bad key material is a ``ConfigException``."""
    if not config["encryption.enabled"]:
        return None
    cache = DataKeyCache(config["encryption.data.key.cache.size"], config["encryption.data.key.cache.ttl.ms"] / 1000)
    timeout_s = config["encryption.key.service.timeout.ms"] / 1000
    refresh_s = config["encryption.key.service.public.key.refresh.ms"] / 1000
    try:
        pairs: dict[str, KeyPair] = {}
        for p in config.key_pairs:
            if p.provider == "file":
                pairs[p.key_id] = RsaKeyPair.from_pem(p.key_id, p.public_pem, p.private_pem)
            else:
                pairs[p.key_id] = ServiceKeyPair(p.key_id, service_factory(p, timeout_s), cache, observer, refresh_s)
        ring = RsaKeyRing(pairs, config["encryption.key.pair.id"])
    except KeyPairError as e:
        raise ConfigException(str(e)) from None
    active = pairs[ring.active_key_id]
    if isinstance(active, ServiceKeyPair):
        threading.Thread(target=_pin, args=(active,), name="kts-pin-public-key", daemon=True).start()
    return ring


def _pin(pair: ServiceKeyPair) -> None:
    """Fetch the active pair's public key in the background, so that even the first copy finds it pinned; a
    failure is only logged (the first copy asks again, and fails retriably if the service is still away)."""
    try:
        pair.public_key()
    except (KeyServiceError, KeyPairError) as e:
        log.warning("cannot fetch the public key of %s yet: %s", pair.describe(), e)


@dataclass(frozen=True)
class PairStatus:
    """What ``kts keys`` and ``kts config check --connect`` say of one key pair."""

    key_id: str
    provider: str
    key: str
    active: bool
    answers: bool | None
    """True: the service answered and unwrapped a probe with the key; False: it did not (see ``detail``); None:
    not asked (key files)."""
    detail: str
    version: str | None = None
    """The key version the service serves now (the one new segments are wrapped under); None when not asked."""


def key_pair_status(configs: Mapping[str, Any], connect: bool = True) -> list[PairStatus]:
    """Each configured key pair, and (``connect``) whether its service answers and holds the key: the public key is
    fetched and a random key wrapped with it is unwrapped by the service. Makes no change anywhere."""
    values = CORE.parse(configs)
    if not values["encryption.enabled"]:
        return []
    active = values["encryption.key.pair.id"]
    timeout_s = values["encryption.key.service.timeout.ms"] / 1000
    out = []
    for key_id in values["encryption.key.pairs"]:
        provider, service = pair_values(configs, key_id)
        base = f"encryption.key.pairs.{key_id}."
        if provider == "file":
            where = configs.get(base + "private.key.file") or ("inline" if configs.get(base + "private.key") else "")
            out.append(PairStatus(key_id, provider, str(where or "-"), key_id == active, None, "key files"))
            continue
        key = str(service["key.id"])
        if not connect:
            out.append(PairStatus(key_id, provider, key, key_id == active, None, "not asked"))
            continue
        source = KeyPairSource(key_id, None, None, provider, service)
        try:
            pair = ServiceKeyPair(key_id, key_service(source, timeout_s), DataKeyCache(0, 1))
            pair.check()
            version = pair.public_key()[1]
            out.append(PairStatus(key_id, provider, key, key_id == active, True, "answers and holds the key", version))
        except (KeyServiceError, KeyPairError, ConfigException) as e:
            out.append(PairStatus(key_id, provider, key, key_id == active, False, str(e)))
    return out
