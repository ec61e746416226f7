"""Every configuration key of Aiven's plugin, and what each one means here: the one declaration behind the
migration table of docs/configuration.md, ``kts config check`` and the plugin's startup WARNs.

An Aiven user keeps their broker file. For each of Aiven's keys (its configuration reference: the core, the
three caches, S3, GCS, Azure, the filesystem, the SOCKS5 proxy, the metrics and the Iceberg mode) this says
whether it is *honoured* (same name, same meaning, same special values such as ``-1`` or null), *honoured
differently* (it works, but not as it does in Aiven's plugin) or *not supported* (it has no effect here). The
last two carry the exact difference and what to use instead; whenever such a key is set, ``kts config check``
prints that and the plugin logs it as a WARN at startup. Only the values listed in ``differs_for`` differ for a
key whose other values are honoured (``segment.format=kafka`` is what we do; ``iceberg`` is not).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Support(enum.Enum):
    HONOURED = "honoured"
    DIFFERENT = "honoured differently"
    UNSUPPORTED = "not supported"


# Where an Aiven key is written: after ``rsm.config.`` (the plugin's map), or as a broker key of its own.
PLUGIN = "rsm.config."
BROKER = ""


@dataclass(frozen=True)
class AivenKey:
    """One key of Aiven's configuration reference. ``name`` is as the plugin receives it (``rsm.config.``
    stripped), with ``<id>``/``<property>`` placeholders for the keys Aiven defines per key pair or passes to
    the Iceberg catalog. ``aiven_default`` is Aiven's documented default ("required" when it has none)."""

    name: str
    aiven_default: str
    support: Support
    note: str = ""
    differs_for: Callable[[str], bool] | None = None  # the values that differ (None: any value of the key)
    where: str = PLUGIN
    section: str = "Core"

    def matches(self, key: str) -> bool:
        return _pattern(self.name).match(key) is not None

    def differs(self, value: Any) -> bool:
        """Whether this value behaves otherwise here than in Aiven's plugin (for a key that is not honoured)."""
        if self.support is Support.HONOURED:
            return False
        return self.differs_for is None or self.differs_for(str(value).strip())

    def warning(self, key: str, value: Any) -> str:
        """The WARN of the plugin and the line of ``kts config check``: what differs and what to use instead."""
        shown = "[hidden]" if any(w in key for w in ("password", "secret", "key.id", "token")) else value
        return f"{self.where}{key}={shown}: {self.support.value} (Aiven's plugin key): {self.note}"


def _pattern(name: str) -> re.Pattern[str]:
    escaped = re.escape(name).replace(re.escape("<id>"), r"[^.]+").replace(re.escape("<property>"), r".+")
    return re.compile(f"^{escaped}$")


def _not(*same: str) -> Callable[[str], bool]:
    """``differs_for`` of a key whose listed values (case-insensitive) are honoured and every other value is not."""
    honoured = {s.lower() for s in same}
    return lambda value: value.lower() not in honoured


_H, _D, _U = Support.HONOURED, Support.DIFFERENT, Support.UNSUPPORTED

_ICEBERG = (
    "Aiven's Iceberg mode (segment.format=iceberg) is not read here, so this key has no effect. This plugin's own "
    "Iceberg mode is chosen per topic and configured with the iceberg.mode.* keys (iceberg.mode.topics.regex)."
)
_PROXY = (
    "no SOCKS5 proxy: the backends connect directly, or through an HTTP(S) proxy named by HTTPS_PROXY / NO_PROXY "
    "in the broker's environment (the sidecar inherits it; boto3, google-cloud-storage and the Azure SDK read it)."
)
_UNBOUNDED = "-1 means unbounded, as in Aiven's plugin."
_NO_EXPIRY = "-1 means no expiry, as in Aiven's plugin."
_NO_POOL = (
    "accepted, but there is no such pool: a load runs on the thread that asked for it, one load per entry at a "
    "time (the others wait for it), so sizing a pool has no effect."
)

AIVEN_KEYS: tuple[AivenKey, ...] = (
    # --- the broker lines (not rsm.config.*) ---------------------------------------------------------------------
    AivenKey(
        "remote.log.storage.manager.class.name",
        "io.aiven.kafka.tieredstorage.RemoteStorageManager",
        _D,
        "set it to io.kts.shim.PythonRemoteStorageManager; `kts config check` prints the line.",
        where=BROKER,
        section="Broker",
    ),
    AivenKey(
        "remote.log.storage.manager.class.path",
        "(Aiven's core/* and backend jars)",
        _D,
        "set it to the folder `kts plugin-path` prints, followed by /* (the shim jar); `kts config check` prints "
        "the line. Not needed with `kts kafka-server-start` (in-process transport).",
        where=BROKER,
        section="Broker",
    ),
    # --- core ----------------------------------------------------------------------------------------------------
    AivenKey("chunk.size", "required", _H),
    AivenKey(
        "storage.backend.class",
        "required",
        _H,
        "Aiven's class names for the filesystem, S3, GCS and Azure storages select ours; unset means filesystem.",
    ),
    AivenKey("key.prefix", '""', _H),
    AivenKey("key.prefix.mask", "false", _H),
    AivenKey("compression.enabled", "false", _H),
    AivenKey(
        "compression.heuristic.enabled",
        "false",
        _H,
        "Samples batches across the whole segment (Aiven looks at the first batch only).",
    ),
    AivenKey("encryption.enabled", "false", _H),
    AivenKey("encryption.key.pair.id", "null", _H),
    AivenKey("encryption.key.pairs", '""', _H),
    AivenKey("encryption.key.pairs.<id>.public.key.file", "null", _H),
    AivenKey("encryption.key.pairs.<id>.private.key.file", "null", _H),
    AivenKey(
        "upload.rate.limit.bytes.per.second",
        "null",
        _H,
        "null: no limit. The limit covers manifests too, with a 100 ms burst (Aiven: log and indexes, 1 s burst).",
    ),
    AivenKey(
        "custom.metadata.fields.include",
        '""',
        _H,
        "With OBJECT_PREFIX/OBJECT_KEY recorded, every operation uses the recorded location (Aiven: fetch only).",
    ),
    AivenKey(
        "segment.format",
        "kafka",
        _D,
        "only kafka, Aiven's default, is supported; iceberg fails the broker's startup, since the data of an "
        "Iceberg-mode topic cannot be read or written here. Keep such topics on Aiven's plugin.",
        differs_for=_not("kafka"),
    ),
    AivenKey("structure.provider.class", "null", _U, _ICEBERG),
    AivenKey("structure.provider.serde.schema.registry.url", "null", _U, _ICEBERG),
    AivenKey("iceberg.namespace", "null", _U, _ICEBERG),
    AivenKey("iceberg.catalog.class", "null", _U, _ICEBERG),
    AivenKey("iceberg.catalog.cache.enabled", "true", _U, _ICEBERG),
    AivenKey("iceberg.catalog.cache.expiration.ms", "600000", _U, _ICEBERG),
    AivenKey("iceberg.catalog.<property>", "(none)", _U, _ICEBERG),
    AivenKey("metrics.num.samples", "2", _H),
    AivenKey("metrics.sample.window.ms", "30000", _H),
    AivenKey("metrics.recording.level", "INFO", _H),
    # --- caches --------------------------------------------------------------------------------------------------
    AivenKey("fetch.manifest.cache.size", "1000", _H, _UNBOUNDED, section="Caches"),
    AivenKey("fetch.manifest.cache.retention.ms", "3600000", _H, _NO_EXPIRY, section="Caches"),
    AivenKey("fetch.manifest.cache.get.timeout.ms", "10000", _H, section="Caches"),
    AivenKey("fetch.manifest.cache.thread.pool.size", "0", _D, _NO_POOL, differs_for=_not("0"), section="Caches"),
    AivenKey("fetch.indexes.cache.size", "10485760", _H, _UNBOUNDED, section="Caches"),
    AivenKey("fetch.indexes.cache.retention.ms", "600000", _H, _NO_EXPIRY, section="Caches"),
    AivenKey("fetch.indexes.cache.get.timeout.ms", "10000", _H, section="Caches"),
    AivenKey("fetch.indexes.cache.thread.pool.size", "0", _D, _NO_POOL, differs_for=_not("0"), section="Caches"),
    AivenKey(
        "fetch.chunk.cache.class",
        "required",
        _H,
        "Aiven's MemoryChunkCache and DiskChunkCache select ours; unset means memory. The disk cache keeps chunks as "
        "stored (still compressed and encrypted) and reuses them after a restart (Aiven: plaintext, wiped at start), "
        "plus fetch.chunk.cache.memory.size of decoded chunks in RAM.",
        section="Caches",
    ),
    AivenKey("fetch.chunk.cache.size", "required", _H, _UNBOUNDED, section="Caches"),
    AivenKey("fetch.chunk.cache.retention.ms", "600000", _H, _NO_EXPIRY, section="Caches"),
    AivenKey(
        "fetch.chunk.cache.prefetch.max.size",
        "0",
        _H,
        "Prefetch goes on into the partition's next segment (Aiven stops at the segment's end).",
        section="Caches",
    ),
    AivenKey("fetch.chunk.cache.get.timeout.ms", "10000", _H, section="Caches"),
    AivenKey("fetch.chunk.cache.thread.pool.size", "0", _H, "0: one thread per CPU core.", section="Caches"),
    AivenKey(
        "fetch.chunk.cache.path",
        "required (disk cache)",
        _H,
        "Created if missing (Aiven requires it to exist) and reused after a restart (Aiven wipes it).",
        section="Caches",
    ),
    # --- S3 ------------------------------------------------------------------------------------------------------
    AivenKey("storage.s3.bucket.name", "required", _H, section="S3"),
    AivenKey("storage.s3.region", "required", _H, "Unset: the SDK's region chain, then us-east-1.", section="S3"),
    AivenKey("storage.s3.endpoint.url", "null", _H, section="S3"),
    AivenKey("storage.s3.path.style.access.enabled", "null", _H, "null: the SDK chooses.", section="S3"),
    AivenKey("storage.s3.storage.class", "STANDARD", _H, section="S3"),
    AivenKey("storage.s3.multipart.upload.part.size", "26214400", _H, section="S3"),
    AivenKey(
        "storage.s3.api.call.timeout", "null", _H, "null: bounded by the attempts and their timeout.", section="S3"
    ),
    AivenKey(
        "storage.s3.api.call.attempt.timeout",
        "null",
        _H,
        "Unset here means 60000 ms (Aiven: no timeout per attempt), so a stalled connection is retried.",
        section="S3",
    ),
    AivenKey("storage.s3.legacy.md5.plugin.enabled", "false", _H, section="S3"),
    AivenKey("storage.aws.access.key.id", "null", _H, section="S3"),
    AivenKey("storage.aws.secret.access.key", "null", _H, section="S3"),
    AivenKey("storage.aws.session.token", "null", _H, section="S3"),
    AivenKey(
        "storage.aws.credentials.file", "null", _H, "Re-read when it changes, as in Aiven's plugin.", section="S3"
    ),
    AivenKey(
        "storage.aws.credentials.provider.class",
        "null",
        _D,
        "a Java credentials provider cannot run in Python. Remove the key: with no storage.aws.* credentials set, "
        "boto3's default chain is used, which covers the AWS SDK's own providers (environment, profile/SSO, web "
        "identity/IRSA, ECS container and EC2 instance roles). For anything else set storage.aws.credentials.file "
        "(re-read when it changes) or static keys.",
        section="S3",
    ),
    AivenKey("storage.aws.checksum.check.enabled", "false", _H, section="S3"),
    AivenKey("storage.aws.certificate.check.enabled", "true", _H, section="S3"),
    # --- GCS -----------------------------------------------------------------------------------------------------
    AivenKey("storage.gcs.bucket.name", "required", _H, section="GCS"),
    AivenKey("storage.gcs.endpoint.url", "null", _H, section="GCS"),
    AivenKey("storage.gcs.credentials.default", "null", _H, section="GCS"),
    AivenKey("storage.gcs.credentials.json", "null", _H, section="GCS"),
    AivenKey("storage.gcs.credentials.path", "null", _H, section="GCS"),
    AivenKey("storage.gcs.resumable.upload.chunk.size", "26214400", _H, section="GCS"),
    # --- Azure ---------------------------------------------------------------------------------------------------
    AivenKey("storage.azure.container.name", "required", _H, section="Azure"),
    AivenKey("storage.azure.account.name", "null", _H, section="Azure"),
    AivenKey("storage.azure.account.key", "null", _H, section="Azure"),
    AivenKey("storage.azure.sas.token", "null", _H, section="Azure"),
    AivenKey("storage.azure.connection.string", "null", _H, section="Azure"),
    AivenKey("storage.azure.endpoint.url", "null", _H, section="Azure"),
    AivenKey("storage.azure.upload.block.size", "26214400", _H, section="Azure"),
    # --- filesystem ----------------------------------------------------------------------------------------------
    AivenKey("storage.root", "required", _H, "Created if missing.", section="Filesystem"),
    AivenKey(
        "storage.overwrite.enabled",
        "false",
        _D,
        "an existing object is always replaced, atomically (a segment copied again replaces its objects, as on "
        "the cloud stores); Aiven's false, which refuses to overwrite, has no equivalent. Remove the key.",
        differs_for=_not("true"),
        section="Filesystem",
    ),
    # --- SOCKS5 proxy (Aiven: GCS and Azure) -----------------------------------------------------------------------
    AivenKey("storage.proxy.host", "null", _U, _PROXY, section="Proxy"),
    AivenKey("storage.proxy.port", "null", _U, _PROXY, section="Proxy"),
    AivenKey("storage.proxy.username", "null", _U, _PROXY, section="Proxy"),
    AivenKey("storage.proxy.password", "null", _U, _PROXY, section="Proxy"),
)

SECTIONS = ("Broker", "Core", "Caches", "S3", "GCS", "Azure", "Filesystem", "Proxy")


def aiven_key(key: str, where: str = PLUGIN) -> AivenKey | None:
    """The declaration of one of Aiven's keys (an exact name before a placeholder pattern), or None."""
    candidates = [a for a in AIVEN_KEYS if a.where == where]
    exact = next((a for a in candidates if a.name == key), None)
    return exact or next((a for a in candidates if "<" in a.name and a.matches(key)), None)


@dataclass(frozen=True)
class AivenDifference:
    """A supplied key of Aiven's that does not do here what it does there."""

    key: str
    value: Any
    declaration: AivenKey = field(repr=False)

    def message(self) -> str:
        return self.declaration.warning(self.key, self.value)


def aiven_differences(configs: Mapping[str, Any], where: str = PLUGIN) -> list[AivenDifference]:
    """The supplied keys (``rsm.config.`` stripped) that are Aiven's and are honoured differently or not at all."""
    out = []
    for key, value in configs.items():
        declared = aiven_key(str(key), where)
        if declared is not None and declared.differs(value):
            out.append(AivenDifference(str(key), value, declared))
    return out


def counts(keys: Iterable[AivenKey] = AIVEN_KEYS) -> dict[Support, int]:
    out = dict.fromkeys(Support, 0)
    for k in keys:
        out[k.support] += 1
    return out
