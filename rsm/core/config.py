"""The RemoteStorageManager's configuration machinery: parsing, validation and the rules between keys.

``RsmConfig.from_map`` validates the map the broker passes to ``configure()`` against the key table
(``rsm.core.config_keys``) and exposes typed values, with Aiven's special values resolved (a cache size of ``-1`` is
unbounded, a retention of ``-1`` never expires). ``config_problems`` finds every problem of the same map at once,
for ``kts config check``. Keys of other parts (``storage.*`` for backends, ``python.*``/``jvm.*`` for the shim)
pass through untouched and are validated by their owners; ``rsm.core.known_keys`` refuses keys nothing reads.
``rsm.cli.config_docs`` gathers every declaration for the generated docs tables.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsm.core.aiven_keys import PLUGIN, aiven_differences
from rsm.core.config_keys import (
    AIVEN_DISK_CHUNK_CACHE,
    AIVEN_UNBOUNDED,
    CACHE_SIZE,
    CORE,
    NO_EXPIRY_MS,
    REQUIRED_BY_PROVIDER,
    RETENTION,
    SERVICE_PAIR_KEYS,
    UNBOUNDED_SIZE,
)
from rsm.errors import ConfigException

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyPairSource:
    key_id: str
    public_pem: bytes | None
    private_pem: bytes | None
    provider: str = "file"
    service: dict[str, Any] = field(default_factory=dict)
    """The pair's ``encryption.key.pairs.<id>.<name>`` values of ``SERVICE_PAIR_KEYS``, typed (None when unset)."""


def pair_values(raw: Mapping[str, Any], key_id: str) -> tuple[str, dict[str, Any]]:
    """The provider and the typed service settings of key pair ``key_id``; ``ConfigException`` for a bad value."""
    base = f"encryption.key.pairs.{key_id}."
    values = {}
    for name in ("provider", *SERVICE_PAIR_KEYS):
        decl = CORE.keys[f"encryption.key.pairs.<id>.{name}"]
        try:
            values[name] = decl.value_from(raw.get(base + name))
        except ConfigException as e:
            raise ConfigException(str(e).replace("<id>", key_id)) from None
    return values.pop("provider"), values


def _read_pem(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigException(
            f"Invalid value {path!r} for configuration {key}: cannot read the key file ({e.strerror})"
        ) from None


def _encryption_problems(values: Mapping[str, Any], raw: Mapping[str, Any]) -> list[str]:
    active = values["encryption.key.pair.id"]
    ids = values["encryption.key.pairs"]
    out = []
    if not active:
        out.append(
            "Missing required configuration 'encryption.key.pair.id' (encryption.enabled is true): name the key "
            "pair that wraps new data keys"
        )
    if not ids:
        out.append(
            "Missing required configuration 'encryption.key.pairs' (encryption.enabled is true): list the ids of "
            "the key pairs on the key ring"
        )
    elif active and active not in ids:
        out.append(
            f"Invalid value {active!r} for configuration encryption.key.pair.id: it must be one of "
            f"encryption.key.pairs ({', '.join(ids)})"
        )
    for key_id in ids:
        base = f"encryption.key.pairs.{key_id}."
        try:
            provider, service = pair_values(raw, key_id)
        except ConfigException as e:
            out.append(str(e))
            continue
        if provider != "file":
            if not service["key.id"]:
                out.append(
                    f"Missing configuration {base}key.id (key pair {key_id!r} is held by {provider}): name the key in "
                    f"the service"
                )
            for name in REQUIRED_BY_PROVIDER[provider]:
                if not service[name]:
                    out.append(f"Missing configuration {base}{name} (key pair {key_id!r} is held by {provider})")
            if provider == "pkcs11" and service["pkcs11.token.label"] is None and service["pkcs11.slot"] is None:
                out.append(f"Missing configuration {base}pkcs11.token.label or {base}pkcs11.slot (pkcs11 pair)")
            held = [p for p in ("private.key", "private.key.file") if raw.get(base + p)]
            if held:
                out.append(
                    f"Conflicting configuration for key pair {key_id!r}: it is held by {provider}, so it has no "
                    f"private key here; remove {', '.join(base + p for p in held)}"
                )
            continue
        for part in ("public.key", "private.key"):
            if raw.get(base + part) and raw.get(base + part + ".file"):
                out.append(
                    f"Conflicting configuration for key pair {key_id!r}: both {base}{part} (inline) and "
                    f"{base}{part}.file are set; set only one of them"
                )
        if not any(
            raw.get(base + part) for part in ("public.key", "private.key", "public.key.file", "private.key.file")
        ):
            out.append(
                f"Missing configuration for key pair {key_id!r}: set {base}public.key.file and "
                f"{base}private.key.file (or the inline {base}public.key / {base}private.key)"
            )
    return out


def _cross_key_problems(values: Mapping[str, Any], raw: Mapping[str, Any]) -> list[str]:
    """The rules between keys, each checked on its own so that one run can report all of them."""
    out = []
    if values["compression.heuristic.enabled"] and not values["compression.enabled"]:
        out.append(
            "Invalid value true for configuration compression.heuristic.enabled: it requires compression.enabled=true"
        )
    if values["encryption.enabled"]:
        out += _encryption_problems(values, raw)
    if _is_disk_cache(values["fetch.chunk.cache.class"]) and not values["fetch.chunk.cache.path"]:
        out.append(
            "Missing required configuration 'fetch.chunk.cache.path' (fetch.chunk.cache.class is disk): name a "
            "writable directory on a local disk"
        )
    return out


def _is_disk_cache(cache_class: Any) -> bool:
    return str(cache_class).strip().lower() in ("disk", AIVEN_DISK_CHUNK_CACHE.lower())


def config_problems(configs: Mapping[str, Any]) -> list[str]:
    """Every problem ``RsmConfig.from_map`` could raise for, at once: invalid values, missing required keys and
    the rules between keys (key files are not read: ``kts config check`` runs where they may not exist)."""
    raw = {str(k): v for k, v in configs.items()}
    values, problems = CORE.parse_all(raw)
    return list(problems.values()) + _cross_key_problems(values, raw)


def _resolve_special_values(values: dict[str, Any]) -> None:
    """Aiven's -1: an unbounded cache holds as much as it is given, a retention of -1 never expires."""
    for name, key in CORE.keys.items():
        if values.get(name) == AIVEN_UNBOUNDED:
            if key.validator is CACHE_SIZE:
                values[name] = UNBOUNDED_SIZE
            elif key.validator is RETENTION:
                values[name] = NO_EXPIRY_MS


@dataclass(frozen=True)
class RsmConfig:
    values: dict[str, Any]
    storage: dict[str, Any]
    key_pairs: list[KeyPairSource]
    raw: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def thread_pool_size(self) -> int:
        return self.values["transform.thread.pool.size"] or (os.cpu_count() or 2)

    @staticmethod
    def from_map(configs: Mapping[str, Any]) -> RsmConfig:
        raw = {str(k): v for k, v in configs.items()}
        values = CORE.parse(raw)
        problems = _cross_key_problems(values, raw)
        if problems:
            raise ConfigException(problems[0])
        pairs: list[KeyPairSource] = []
        if values["encryption.enabled"]:
            for key_id in values["encryption.key.pairs"]:
                base = f"encryption.key.pairs.{key_id}."
                public = raw.get(base + "public.key")
                private = raw.get(base + "private.key")
                if public is None and raw.get(base + "public.key.file"):
                    public = _read_pem(base + "public.key.file", str(raw[base + "public.key.file"]))
                if private is None and raw.get(base + "private.key.file"):
                    private = _read_pem(base + "private.key.file", str(raw[base + "private.key.file"]))
                provider, service = pair_values(raw, key_id)
                pairs.append(
                    KeyPairSource(
                        key_id,
                        public.encode() if isinstance(public, str) else public,
                        private.encode() if isinstance(private, str) else private,
                        provider,
                        service,
                    )
                )
        values["fetch.chunk.cache.class"] = "disk" if _is_disk_cache(values["fetch.chunk.cache.class"]) else "memory"
        _resolve_special_values(values)
        storage = {
            k[len("storage.") :]: v for k, v in raw.items() if k.startswith("storage.") and k != "storage.backend.class"
        }
        return RsmConfig(values, storage, pairs, raw)


# --- unknown keys: configure() and `kts config check` refuse them, naming the closest known key -------------------


def configuration_warnings(configs: Mapping[str, Any]) -> list[str]:
    """What the plugin warns about at startup: each of Aiven's keys that is honoured differently or not at all
    here (with what to use instead). Unknown keys are refused instead (``refuse_unknown_keys``)."""
    return [d.message() for d in aiven_differences(configs, PLUGIN)]


def warn_aiven_differences(configs: Mapping[str, Any]) -> list[str]:
    """Log one WARN per ``configuration_warnings`` line: an Aiven key that behaves differently here must not pass
    in silence."""
    found = configuration_warnings(configs)
    for line in found:
        log.warning("%s", line)
    return found
