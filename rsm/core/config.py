"""The RemoteStorageManager's configuration keys (Aiven's names, plus ours), declared once.

``RsmConfig.from_map`` validates the map the broker passes to ``configure()`` and exposes typed values. Keys
of other parts (``storage.*`` for backends, ``python.*``/``jvm.*`` for the shim) pass through untouched and
are validated by their owners. ``rsm.cli.config_docs`` gathers every declaration for the generated docs table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.configdef import REQUIRED, ConfigDef, ConfigKey, in_range, one_of
from backends.registry import ALLOWED_DOC
from rsm.core.custom_metadata import FIELDS as CUSTOM_METADATA_FIELDS
from rsm.errors import ConfigException

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
        ConfigKey("key.prefix", "string", "", "Prefix of every object key, e.g. 'tiered/cluster-1/'."),
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
            "custom.metadata.fields.include",
            "list",
            [],
            "Fields returned to the broker as custom metadata (Kafka caps it at 128 bytes by default). "
            "With OBJECT_PREFIX/OBJECT_KEY recorded, every later operation uses the recorded location.",
            validator=one_of(*CUSTOM_METADATA_FIELDS),
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
            "int",
            1000,
            "Parsed manifests (with unwrapped data keys) kept in memory.",
            validator=in_range(0, None),
        ),
    ]
)

FIELD_NAMES = {"REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY"}


@dataclass(frozen=True)
class KeyPairSource:
    key_id: str
    public_pem: bytes | None
    private_pem: bytes | None


def _read_pem(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigException(
            f"Invalid value {path!r} for configuration {key}: cannot read the key file ({e.strerror})"
        ) from None


def _check_key_prefix(prefix: str) -> None:
    """Refuse a prefix no store can hold keys under (../, /x, a//b): configure() fails instead of every copy."""
    parts = prefix.split("/")[:-1] if prefix.endswith("/") else prefix.split("/")
    if prefix and (
        prefix.startswith("/") or "\\" in prefix or "\x00" in prefix or any(p in ("", ".", "..") for p in parts)
    ):
        raise ConfigException(
            f"Invalid value {prefix!r} for configuration key.prefix: it must be a relative '/'-separated path "
            f"without empty, '.' or '..' segments, e.g. 'tiered/cluster-1/'"
        )


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
        if values["compression.heuristic.enabled"] and not values["compression.enabled"]:
            raise ConfigException(
                "Invalid value true for configuration compression.heuristic.enabled: it requires "
                "compression.enabled=true"
            )
        _check_key_prefix(values["key.prefix"])
        pairs: list[KeyPairSource] = []
        if values["encryption.enabled"]:
            active = values["encryption.key.pair.id"]
            ids = values["encryption.key.pairs"]
            if not active:
                raise ConfigException(
                    "Missing required configuration 'encryption.key.pair.id' (encryption.enabled "
                    "is true): name the key pair that wraps new data keys"
                )
            if not ids:
                raise ConfigException(
                    "Missing required configuration 'encryption.key.pairs' (encryption.enabled is "
                    "true): list the ids of the key pairs on the key ring"
                )
            if active not in ids:
                raise ConfigException(
                    f"Invalid value {active!r} for configuration encryption.key.pair.id: it must "
                    f"be one of encryption.key.pairs ({', '.join(ids)})"
                )
            for key_id in ids:
                base = f"encryption.key.pairs.{key_id}."
                for part in ("public.key", "private.key"):
                    if raw.get(base + part) and raw.get(base + part + ".file"):
                        raise ConfigException(
                            f"Conflicting configuration for key pair {key_id!r}: both {base}{part} (inline) and "
                            f"{base}{part}.file are set; set only one of them"
                        )
                public = raw.get(base + "public.key")
                private = raw.get(base + "private.key")
                if public is None and raw.get(base + "public.key.file"):
                    public = _read_pem(base + "public.key.file", str(raw[base + "public.key.file"]))
                if private is None and raw.get(base + "private.key.file"):
                    private = _read_pem(base + "private.key.file", str(raw[base + "private.key.file"]))
                if public is None and private is None:
                    raise ConfigException(
                        f"Missing configuration for key pair {key_id!r}: set {base}public.key.file and "
                        f"{base}private.key.file (or the inline {base}public.key / {base}private.key)"
                    )
                pairs.append(
                    KeyPairSource(
                        key_id,
                        public.encode() if isinstance(public, str) else public,
                        private.encode() if isinstance(private, str) else private,
                    )
                )
        storage = {
            k[len("storage.") :]: v for k, v in raw.items() if k.startswith("storage.") and k != "storage.backend.class"
        }
        return RsmConfig(values, storage, pairs, raw)
