"""The RemoteStorageManager's configuration keys (Aiven's names, plus ours), declared once.

``RsmConfig.from_map`` validates the map the broker passes to ``configure()`` and exposes typed values, with
Aiven's special values resolved (a cache size of ``-1`` is unbounded, a retention of ``-1`` never expires).
``config_problems`` finds every problem of the same map at once, for ``kts config check``. Keys of other parts
(``storage.*`` for backends, ``python.*``/``jvm.*`` for the shim) pass through untouched and are validated by
their owners. ``rsm.cli.config_docs`` gathers every declaration for the generated docs tables; what each of
Aiven's keys means here is declared in ``rsm.core.aiven_keys``.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.configdef import REQUIRED, ConfigDef, ConfigKey, in_range, in_range_or, one_of
from backends.registry import ALLOWED_DOC, resolve_backend_class
from encryption.providers import PROVIDERS as KEY_PROVIDERS
from rsm.core.aiven_keys import PLUGIN, Support, aiven_differences, aiven_key
from rsm.core.custom_metadata import FIELDS as CUSTOM_METADATA_FIELDS
from rsm.errors import ConfigException

# Aiven's class names for its two chunk caches; either spelling selects ours.
AIVEN_MEMORY_CHUNK_CACHE = "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache"
AIVEN_DISK_CHUNK_CACHE = "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache"
CHUNK_CACHE_CLASSES = (AIVEN_MEMORY_CHUNK_CACHE, AIVEN_DISK_CHUNK_CACHE)

# Aiven's special value of its cache sizes and retentions, and what it becomes in the parsed values.
AIVEN_UNBOUNDED = -1
UNBOUNDED_SIZE = sys.maxsize
NO_EXPIRY_MS = math.inf


_CACHE_SIZE = in_range_or(AIVEN_UNBOUNDED, "unbounded", 0)
_RETENTION = in_range_or(AIVEN_UNBOUNDED, "no expiry", 1)


def _kafka_format_only(_key: str, value: Any) -> str | None:
    if str(value).strip().lower() == "kafka":
        return None
    return (
        f"{value!r} is not supported: only kafka (choose this plugin's Iceberg mode per topic with "
        f"iceberg.mode.topics.regex). Aiven's Iceberg mode is Aiven's alone; the data of its Iceberg-mode topic "
        f"cannot be read or written by this plugin"
    )


_kafka_format_only.valid_values = "kafka"  # type: ignore[attr-defined]


def _relative_key_prefix(_key: str, prefix: str) -> str | None:
    """A prefix no store can hold keys under (../, /x, a//b) fails configure() instead of every copy."""
    parts = prefix.split("/")[:-1] if prefix.endswith("/") else prefix.split("/")
    if prefix and (
        prefix.startswith("/") or "\\" in prefix or "\x00" in prefix or any(p in ("", ".", "..") for p in parts)
    ):
        return "it must be a relative '/'-separated path without empty, '.' or '..' segments, e.g. 'tiered/cluster-1/'"
    return None


CORE = ConfigDef().extend(
    [
        ConfigKey(
            "chunk.size",
            "int",
            REQUIRED,
            "Size in bytes of the original chunks a segment is cut into; each is compressed and encrypted on its "
            "own and is the unit of ranged reads and caching. 4 MiB is a good default for S3/GCS/Azure.",
            validator=in_range(1, 1073741823),
        ),
        ConfigKey(
            "storage.backend.class",
            "class",
            "filesystem",
            "The object store: a short name, Aiven's Java class name for it, or module:Class of your own "
            "StorageBackend. Its own keys start with storage.",
            valid_values=ALLOWED_DOC,
        ),
        ConfigKey(
            "key.prefix",
            "string",
            "",
            "Prefix of every object key, e.g. 'tiered/cluster-1/'.",
            validator=_relative_key_prefix,
        ),
        ConfigKey("key.prefix.mask", "boolean", False, "Hide the key prefix in log and error messages."),
        ConfigKey(
            "compression.enabled",
            "boolean",
            False,
            "Compress each chunk with zstd (one frame per chunk, content size in the header).",
        ),
        ConfigKey(
            "compression.heuristic.enabled",
            "boolean",
            False,
            "Skip compression for segments whose record batches are already compressed by the producer. "
            "Samples batches across the whole segment (via the offset index), not only the first one. "
            "Requires compression.enabled=true.",
        ),
        ConfigKey(
            "compression.level",
            "int",
            3,
            "zstd level for chunk compression (negative levels are the fast modes).",
            validator=in_range(-7, 22),
        ),
        ConfigKey(
            "encryption.enabled",
            "boolean",
            False,
            "Encrypt chunks and indexes with AES-256-GCM under a per-segment data key wrapped by the active RSA "
            "key pair (RSA-OAEP with SHA3-512).",
        ),
        ConfigKey(
            "encryption.key.pair.id",
            "string",
            None,
            "Id of the key pair that wraps the data keys of new segments. Required when encryption is enabled.",
        ),
        ConfigKey(
            "encryption.key.pairs",
            "list",
            [],
            "Ids of all key pairs on the key ring; keep old ids so older segments stay readable.",
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.public.key.file",
            "string",
            None,
            "Path of the PEM public key (SubjectPublicKeyInfo) of key pair <id>.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.private.key.file",
            "string",
            None,
            "Path of the PEM private key (PKCS#8) of key pair <id>.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.public.key",
            "password",
            None,
            "The PEM public key of key pair <id> inline (instead of the .file key).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.private.key",
            "password",
            None,
            "The PEM private key of key pair <id> inline (instead of the .file key).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.provider",
            "string",
            "file",
            "Where the private key of key pair <id> lives: file (PEM files or inline keys, Aiven's format), aws-kms, "
            "vault-transit (Vault or OpenBao) or pkcs11 (an HSM). With a key service, copies wrap data keys locally "
            "with the pair's public key (fetched once) and fetches unwrap them through the service.",
            validator=one_of(*KEY_PROVIDERS),
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.key.id",
            "string",
            None,
            "The key in the key service: an AWS KMS key id, ARN or alias (an RSA key for ENCRYPT_DECRYPT), a "
            "Transit key name (rsa-2048/3072/4096) or the label of the RSA key pair on the PKCS#11 token.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.aws.region",
            "string",
            None,
            "aws-kms: the key's region (unset: the AWS default chain's region).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.aws.endpoint.url",
            "string",
            None,
            "aws-kms: the KMS endpoint (unset: AWS's own for the region).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.aws.access.key.id",
            "password",
            None,
            "aws-kms: a static access key id (unset: the AWS default credential chain, e.g. an instance or pod role).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.aws.secret.access.key",
            "password",
            None,
            "aws-kms: the secret of the static access key id.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.vault.url",
            "string",
            None,
            "vault-transit: the server's address, e.g. https://vault.example:8200 (unset: $VAULT_ADDR).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.vault.mount",
            "string",
            "transit",
            "vault-transit: the path the Transit engine is mounted at.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.vault.token.file",
            "string",
            None,
            "vault-transit: a file holding the token (e.g. written by Vault Agent); read again when it changes "
            "and when Vault refuses the token. Unset: $VAULT_TOKEN.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.vault.namespace",
            "string",
            None,
            "vault-transit: the Vault Enterprise namespace (unset: none).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.pkcs11.library",
            "string",
            None,
            "pkcs11: path of the token's PKCS#11 library (.so).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.pkcs11.token.label",
            "string",
            None,
            "pkcs11: the label of the token holding the key (or give pkcs11.slot).",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.pkcs11.slot",
            "int",
            None,
            "pkcs11: the slot id of the token, when it is not found by label.",
            validator=in_range(0, None),
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.pairs.<id>.pkcs11.pin.file",
            "string",
            None,
            "pkcs11: a file holding the token's user PIN (read at start). Unset: $KTS_PKCS11_PIN. A wrong, "
            "expired or locked PIN stops further logins until the plugin is configured again with a new PIN.",
            dynamic=True,
        ),
        ConfigKey(
            "encryption.key.service.timeout.ms",
            "long",
            5000,
            "How long a call to a key service may take (per attempt) before the fetch fails as retriable.",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "encryption.key.service.public.key.refresh.ms",
            "long",
            300000,
            "How old the pinned public key of a key service pair may get before a copy fetches it again, so that "
            "a key version rotated in the service (a Transit key's rotate) wraps new segments within this time. A "
            "segment read under a newer version triggers the refresh at once; while the service does not answer, "
            "the pinned key keeps wrapping.",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "encryption.data.key.cache.size",
            "long",
            10000,
            "Data keys unwrapped by a key service kept in memory (never on disk), so a segment costs one call to "
            "the service. 0 = none kept.",
            validator=in_range(0, None),
        ),
        ConfigKey(
            "encryption.data.key.cache.ttl.ms",
            "long",
            3600000,
            "How long an unwrapped data key stays in that cache; past it, the key is dropped and its bytes zeroed "
            "within a tenth of this time (at most a minute later), even when no fetch comes.",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "custom.metadata.fields.include",
            "list",
            [],
            "Fields returned to the broker as custom metadata (Kafka caps it at 128 bytes by default). "
            "With OBJECT_PREFIX/OBJECT_KEY recorded, every later operation uses the recorded location.",
            validator=one_of(*CUSTOM_METADATA_FIELDS),
        ),
        ConfigKey(
            "segment.format",
            "string",
            "kafka",
            "How segments are stored: kafka, Aiven's classic format (chunks of the segment file). Aiven's iceberg "
            "value fails the start: its tables cannot be read here. Our Iceberg mode is chosen per topic with "
            "iceberg.mode.topics.regex.",
            validator=_kafka_format_only,
        ),
        ConfigKey(
            "transform.thread.pool.size",
            "int",
            0,
            "Threads that compress/encrypt and decrypt/decompress chunks (0 = number of CPU cores).",
            validator=in_range(0, 1024),
        ),
        ConfigKey(
            "fetch.readahead.chunks",
            "int",
            4,
            "Chunks a fetch stream decodes ahead of the reader, in parallel. Bounded, so a reader that stops "
            "early costs at most this many extra chunks.",
            validator=in_range(0, 256),
        ),
        ConfigKey(
            "fetch.manifest.cache.size",
            "long",
            1000,
            "Parsed manifests (with unwrapped data keys) kept in memory, so the RSA unwrap happens once per "
            "segment, not once per fetch.",
            validator=_CACHE_SIZE,
        ),
        ConfigKey(
            "fetch.manifest.cache.retention.ms",
            "long",
            3600000,
            "A manifest not read for this long leaves the manifest cache.",
            validator=_RETENTION,
        ),
        ConfigKey(
            "fetch.manifest.cache.get.timeout.ms",
            "long",
            10000,
            "How long a reader waits for another reader's load of the same manifest before failing.",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "fetch.manifest.cache.thread.pool.size",
            "int",
            0,
            "Accepted for compatibility with Aiven's plugin; manifests load on the caller's thread "
            "(single flight), so no pool is needed.",
            validator=in_range(0, 1024),
        ),
        ConfigKey(
            "fetch.indexes.cache.size",
            "long",
            10485760,
            "Bytes of decoded segment indexes (offset, time, transaction...) kept in memory.",
            validator=_CACHE_SIZE,
        ),
        ConfigKey(
            "fetch.indexes.cache.retention.ms",
            "long",
            600000,
            "An index not read for this long leaves the index cache.",
            validator=_RETENTION,
        ),
        ConfigKey(
            "fetch.indexes.cache.get.timeout.ms",
            "long",
            10000,
            "How long a reader waits for another reader's load of the same index before failing.",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "fetch.indexes.cache.thread.pool.size",
            "int",
            0,
            "Accepted for compatibility with Aiven's plugin; indexes load on the caller's thread (single flight).",
            validator=in_range(0, 1024),
        ),
        ConfigKey(
            "fetch.chunk.cache.class",
            "string",
            "memory",
            "Where decoded chunks are cached: memory (decoded chunks in RAM) or disk (chunks as stored "
            "remotely, still compressed and encrypted, kept across restarts, plus a small memory tier of "
            "decoded chunks). Aiven's class names for the two are accepted.",
            validator=one_of("memory", "disk", *CHUNK_CACHE_CLASSES),
        ),
        ConfigKey(
            "fetch.chunk.cache.size",
            "long",
            134217728,
            "Bytes the chunk cache may hold: decoded chunks in RAM for the memory class, stored chunks on disk "
            "for the disk class.",
            validator=_CACHE_SIZE,
        ),
        ConfigKey(
            "fetch.chunk.cache.memory.size",
            "long",
            67108864,
            "With the disk class: bytes of decoded chunks kept in RAM for the hottest reads.",
            validator=in_range(0, None),
        ),
        ConfigKey(
            "fetch.chunk.cache.path",
            "string",
            None,
            "Directory of the disk chunk cache (required for the disk class). Reused after a restart.",
        ),
        ConfigKey(
            "fetch.chunk.cache.retention.ms",
            "long",
            600000,
            "A chunk not read for this long leaves the chunk cache.",
            validator=_RETENTION,
        ),
        ConfigKey(
            "fetch.chunk.cache.prefetch.max.size",
            "long",
            4194304,
            "After a fetch ends, bytes of the following chunks loaded into the cache in the background, "
            "continuing into the partition's next segment (0 = no prefetch).",
            validator=in_range(0, None),
        ),
        ConfigKey(
            "fetch.chunk.cache.get.timeout.ms",
            "long",
            10000,
            "How long a reader waits for another reader's load of the same chunk before failing.",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "fetch.chunk.cache.thread.pool.size",
            "int",
            0,
            "Threads that prefetch and decode chunks brought by coalesced GETs in the background "
            "(0 = number of CPU cores).",
            validator=in_range(0, 1024),
        ),
        ConfigKey(
            "fetch.coalesce.max.bytes",
            "long",
            16777216,
            "Adjacent chunks missing from the cache are read with one ranged GET of up to this many stored "
            "bytes (S3's throughput sweet spot is 8-16 MiB).",
            validator=in_range(1, None),
        ),
        ConfigKey(
            "upload.rate.limit.bytes.per.second",
            "long",
            None,
            "Bytes per second for all uploads of the process together (log, indexes and manifests); unset = "
            "unlimited. Bounded over any window to about 1% (one token bucket with a 100 ms burst).",
            validator=in_range(1048576, 1000000000),
        ),
        ConfigKey(
            "fetch.rate.limit.bytes.per.second",
            "long",
            None,
            "Bytes per second for all remote reads of the process together; unset = unlimited. Prefetch yields "
            "to readers a broker thread waits for.",
            validator=in_range(1048576, 1000000000),
        ),
        ConfigKey(
            "gc.quarantine.ms",
            "long",
            604800000,
            "How long `kts gc --delete` keeps what it removes in the quarantine (`<key.prefix>kts-quarantine/`) "
            "before a later `kts gc --delete` purges it; until then `kts gc restore` puts it back. 0 purges at "
            "the next run.",
            validator=in_range(0, None),
        ),
    ]
)

PREFETCH_LISTING_CACHE_S = 10.0

FIELD_NAMES = {"REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY"}


SERVICE_PAIR_KEYS = (
    "key.id",
    "aws.region",
    "aws.endpoint.url",
    "aws.access.key.id",
    "aws.secret.access.key",
    "vault.url",
    "vault.mount",
    "vault.token.file",
    "vault.namespace",
    "pkcs11.library",
    "pkcs11.token.label",
    "pkcs11.slot",
    "pkcs11.pin.file",
)
# What each key service needs configured (besides key.id).
_REQUIRED_BY_PROVIDER = {"aws-kms": (), "vault-transit": (), "pkcs11": ("pkcs11.library",)}


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
            for name in _REQUIRED_BY_PROVIDER[provider]:
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
            if key.validator is _CACHE_SIZE:
                values[name] = UNBOUNDED_SIZE
            elif key.validator is _RETENTION:
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

log = logging.getLogger(__name__)

# Keys of the JVM shim (rsm.jvm.config, a layer above this one): the Java side reads and validates them itself.
OWNED_ELSEWHERE_PREFIXES = ("jvm.", "python.")
# Keys the broker itself adds to the map (RemoteLogManager.configureRSM puts broker.id, node.id on Kafka 4.x;
# some builds cluster.id).
BROKER_SUPPLIED_KEYS = frozenset({"broker.id", "node.id", "cluster.id"})
_REGISTERED: list[tuple[str, ConfigDef]] = []


def register_known_keys(cdef: ConfigDef, prefix: str = "") -> None:
    """Declare keys of a part that reads them from the same map (so configure() does not call them unknown)."""
    _REGISTERED.append((prefix, cdef))


def backend_config_def(backend_class: str) -> ConfigDef | None:
    try:
        module = importlib.import_module(resolve_backend_class(backend_class).__module__)
    except (ConfigException, ImportError):
        return None
    cdef = getattr(module, "CONFIG_DEF", None)
    return cdef if isinstance(cdef, ConfigDef) else None


def _name_pattern(name: str) -> re.Pattern[str]:
    pattern = re.escape(name).replace(re.escape("<id>"), r"[^.]+").replace(re.escape("<property>"), r".+")
    return re.compile("^" + pattern + "$")


def known_key_names(backend_class: str = "filesystem") -> list[str]:
    """Every key the plugin reads with this backend (dynamic ones with their ``<id>`` placeholder)."""
    names = list(CORE.keys)
    backend = backend_config_def(backend_class)
    if backend is not None:
        names += [f"storage.{k}" for k in backend.keys]
    for prefix, cdef in _REGISTERED:
        names += [prefix + k for k in cdef.keys]
    return names


@dataclass(frozen=True)
class UnknownKey:
    """A supplied key nothing reads: the closest known key, or the other backend that would read it."""

    key: str
    closest: str | None
    other_backend: str | None = None

    def message(self) -> str:
        text = f"The configuration '{self.key}' was supplied but isn't a known config."
        if self.other_backend:
            return f"{text} It is a key of the {self.other_backend} backend, not of the configured one."
        return f"{text} Did you mean '{self.closest}'?" if self.closest else text

    def error(self) -> str:
        """The same, as a refusal that says what to do."""
        if self.other_backend:
            fix = f"remove it, or set storage.backend.class={self.other_backend} if that is the store meant"
        elif self.closest:
            fix = f"rename it to rsm.config.{self.closest} if that is what was meant, or remove it"
        else:
            fix = "remove it (docs/configuration.md lists every key)"
        return f"rsm.config.{self.key}: {self.message()} The plugin would go on without it: {fix}"


def closest_name(key: str, names: Iterable[str]) -> str | None:
    """The name most like ``key`` (difflib, the bar at 0.6), for "did you mean" hints; None when none is close."""
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_keys(configs: Mapping[str, Any], shim: ConfigDef | None = None) -> list[UnknownKey]:
    """The supplied keys nothing reads, each with the closest known key (difflib) where one is close. The JVM
    shim's ``jvm.*``/``python.*`` keys pass unless ``shim``, their declarations, is given."""
    backend_class = str(configs.get("storage.backend.class") or CORE.keys["storage.backend.class"].default)
    names = known_key_names(backend_class)
    if shim is not None:
        names += list(shim.keys)
    patterns = [_name_pattern(n) for n in names if "<id>" in n or "<property>" in n]
    exact = {n for n in names if "<id>" not in n and "<property>" not in n}
    custom_backend = backend_config_def(backend_class) is None
    out: list[UnknownKey] = []
    for key in map(str, configs):
        if key in exact or key in BROKER_SUPPLIED_KEYS:
            continue
        if shim is None and key.startswith(OWNED_ELSEWHERE_PREFIXES):
            continue
        if any(p.match(key) for p in patterns):
            continue
        if custom_backend and key.startswith("storage."):
            continue  # a user's own backend declares no keys we can see; it validates them itself
        aiven = aiven_key(key)
        if aiven is not None and aiven.support is not Support.HONOURED:
            continue  # one of Aiven's keys we do not read: aiven_differences says what to do instead
        other = next(
            (b for b in ("filesystem", "s3", "gcs", "azure") if b != backend_class and key in known_key_names(b)),
            None,
        )
        out.append(UnknownKey(key, closest_name(key, names), other))
    return out


def refuse_unknown_keys(configs: Mapping[str, Any], shim: ConfigDef | None = None) -> None:
    """Raise ``ConfigException`` naming every supplied key nothing reads: a misspelt ``key.prefix`` would
    otherwise put every object under the default prefix."""
    found = unknown_keys(configs, shim)
    if found:
        raise ConfigException("; ".join(u.error() for u in found))


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
