"""The plugin's own configuration keys (Aiven's names, plus ours): a declared table, read by ``rsm.core.config``.

Each key is declared here once, with its type, default, validator and documentation. The machinery that parses
and checks a map against this table is ``rsm.core.config``; which tables make up the known keys is
``rsm.core.known_keys``. What each of Aiven's keys means here is declared in ``rsm.core.aiven_keys``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from backends.configdef import REQUIRED, ConfigDef, ConfigKey, in_range, in_range_or, one_of
from backends.registry import ALLOWED_DOC
from encryption.providers import PROVIDERS as KEY_PROVIDERS
from rsm.core.custom_metadata import FIELDS as CUSTOM_METADATA_FIELDS

# Aiven's class names for its two chunk caches; either spelling selects ours.
AIVEN_MEMORY_CHUNK_CACHE = "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache"
AIVEN_DISK_CHUNK_CACHE = "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache"
CHUNK_CACHE_CLASSES = (AIVEN_MEMORY_CHUNK_CACHE, AIVEN_DISK_CHUNK_CACHE)

# Aiven's special value of its cache sizes and retentions, and what it becomes in the parsed values.
AIVEN_UNBOUNDED = -1
UNBOUNDED_SIZE = sys.maxsize
NO_EXPIRY_MS = math.inf


CACHE_SIZE = in_range_or(AIVEN_UNBOUNDED, "unbounded", 0)
RETENTION = in_range_or(AIVEN_UNBOUNDED, "no expiry", 1)


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
            validator=CACHE_SIZE,
        ),
        ConfigKey(
            "fetch.manifest.cache.retention.ms",
            "long",
            3600000,
            "A manifest not read for this long leaves the manifest cache.",
            validator=RETENTION,
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
            validator=CACHE_SIZE,
        ),
        ConfigKey(
            "fetch.indexes.cache.retention.ms",
            "long",
            600000,
            "An index not read for this long leaves the index cache.",
            validator=RETENTION,
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
            validator=CACHE_SIZE,
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
            validator=RETENTION,
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
REQUIRED_BY_PROVIDER = {"aws-kms": (), "vault-transit": (), "pkcs11": ("pkcs11.library",)}
