"""Migration from Aiven's plugin, made exact: every key of Aiven's configuration reference (shared/reference
aiven-plugin.md, sections 1.1 and 1.2) is declared in ``rsm.core.aiven_keys`` as honoured, honoured differently
or not supported; honoured ones accept Aiven's defaults and special values with the same meaning; the others are
named, with what to use instead, by ``kts config check`` and by a WARN when the plugin starts."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import pytest

from rsm.cli.config_docs import aiven_docs_markdown, declared_key
from rsm.cli.main import main
from rsm.cli.properties import write_properties
from rsm.core.aiven_keys import AIVEN_KEYS, BROKER, Support, aiven_key, counts
from rsm.core.config import config_problems, configuration_warnings
from rsm.core.config_keys import UNBOUNDED_SIZE
from rsm.core.known_keys import unknown_keys
from rsm.core.manager import RemoteStorageManager
from rsm.errors import ConfigException

# Aiven's keys as its reference lists them (rsm.config. stripped; the two broker lines as they are), with Aiven's
# default ("required": none) and the special values its docs give. Written out here, apart from the declaration,
# so that a key dropped from the declaration, or a default changed there, fails this test.
REFERENCE: dict[str, tuple[str, tuple[str, ...]]] = {
    # broker lines (1.1, RSM entry point)
    "remote.log.storage.manager.class.name": ("io.aiven.kafka.tieredstorage.RemoteStorageManager", ()),
    "remote.log.storage.manager.class.path": ("(Aiven's core/* and backend jars)", ()),
    # core (1.2)
    "chunk.size": ("required", ()),
    "storage.backend.class": ("required", ()),
    "compression.enabled": ("false", ()),
    "compression.heuristic.enabled": ("false", ()),
    "encryption.enabled": ("false", ()),
    "encryption.key.pair.id": ("null", ()),
    "encryption.key.pairs": ('""', ()),
    "encryption.key.pairs.<id>.public.key.file": ("null", ()),
    "encryption.key.pairs.<id>.private.key.file": ("null", ()),
    "key.prefix": ('""', ()),
    "key.prefix.mask": ("false", ()),
    "segment.format": ("kafka", ()),
    "structure.provider.class": ("null", ()),
    "structure.provider.serde.schema.registry.url": ("null", ()),
    "iceberg.namespace": ("null", ()),
    "iceberg.catalog.class": ("null", ()),
    "iceberg.catalog.<property>": ("(none)", ()),
    "iceberg.catalog.cache.enabled": ("true", ()),
    "iceberg.catalog.cache.expiration.ms": ("600000", ()),
    "upload.rate.limit.bytes.per.second": ("null", ()),
    "custom.metadata.fields.include": ('""', ()),
    "metrics.num.samples": ("2", ()),
    "metrics.sample.window.ms": ("30000", ()),
    "metrics.recording.level": ("INFO", ()),
    # caches: -1 is an unbounded size and a retention that never expires, for all three
    "fetch.manifest.cache.size": ("1000", ("-1",)),
    "fetch.manifest.cache.retention.ms": ("3600000", ("-1",)),
    "fetch.manifest.cache.get.timeout.ms": ("10000", ()),
    "fetch.manifest.cache.thread.pool.size": ("0", ()),
    "fetch.indexes.cache.size": ("10485760", ("-1",)),
    "fetch.indexes.cache.retention.ms": ("600000", ("-1",)),
    "fetch.indexes.cache.get.timeout.ms": ("10000", ()),
    "fetch.indexes.cache.thread.pool.size": ("0", ()),
    "fetch.chunk.cache.class": ("required", ()),
    "fetch.chunk.cache.size": ("required", ("-1",)),
    "fetch.chunk.cache.retention.ms": ("600000", ("-1",)),
    "fetch.chunk.cache.prefetch.max.size": ("0", ()),
    "fetch.chunk.cache.get.timeout.ms": ("10000", ()),
    "fetch.chunk.cache.thread.pool.size": ("0", ()),
    "fetch.chunk.cache.path": ("required (disk cache)", ()),
    # S3
    "storage.s3.bucket.name": ("required", ()),
    "storage.s3.region": ("required", ()),
    "storage.s3.endpoint.url": ("null", ()),
    "storage.s3.path.style.access.enabled": ("null", ()),
    "storage.s3.storage.class": ("STANDARD", ()),
    "storage.s3.multipart.upload.part.size": ("26214400", ()),
    "storage.s3.api.call.timeout": ("null", ()),
    "storage.s3.api.call.attempt.timeout": ("null", ()),
    "storage.s3.legacy.md5.plugin.enabled": ("false", ()),
    "storage.aws.access.key.id": ("null", ()),
    "storage.aws.secret.access.key": ("null", ()),
    "storage.aws.session.token": ("null", ()),
    "storage.aws.credentials.file": ("null", ()),
    "storage.aws.credentials.provider.class": ("null", ()),
    "storage.aws.checksum.check.enabled": ("false", ()),
    "storage.aws.certificate.check.enabled": ("true", ()),
    # GCS
    "storage.gcs.bucket.name": ("required", ()),
    "storage.gcs.endpoint.url": ("null", ()),
    "storage.gcs.credentials.default": ("null", ()),
    "storage.gcs.credentials.json": ("null", ()),
    "storage.gcs.credentials.path": ("null", ()),
    "storage.gcs.resumable.upload.chunk.size": ("26214400", ()),
    # Azure
    "storage.azure.container.name": ("required", ()),
    "storage.azure.account.name": ("null", ()),
    "storage.azure.account.key": ("null", ()),
    "storage.azure.sas.token": ("null", ()),
    "storage.azure.connection.string": ("null", ()),
    "storage.azure.endpoint.url": ("null", ()),
    "storage.azure.upload.block.size": ("26214400", ()),
    # filesystem
    "storage.root": ("required", ()),
    "storage.overwrite.enabled": ("false", ()),
    # SOCKS5 proxy (GCS, Azure)
    "storage.proxy.host": ("null", ()),
    "storage.proxy.port": ("null", ()),
    "storage.proxy.username": ("null", ()),
    "storage.proxy.password": ("null", ()),
}

# A value for each key whose Aiven default is no value at all, so every honoured key can be set in a file.
SAMPLES = {
    "chunk.size": "4194304",
    "storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
    "encryption.key.pair.id": "kek1",
    "encryption.key.pairs": "kek1",
    "upload.rate.limit.bytes.per.second": "104857600",
    "custom.metadata.fields.include": "REMOTE_SIZE",
    "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache",
    "fetch.chunk.cache.size": "1073741824",
    "fetch.chunk.cache.path": "/var/cache/kafka-tiered",
    "storage.s3.bucket.name": "tiered",
    "storage.s3.region": "eu-west-1",
    "storage.s3.endpoint.url": "http://127.0.0.1:9000",
    "storage.s3.path.style.access.enabled": "true",
    "storage.s3.api.call.timeout": "300000",
    "storage.s3.api.call.attempt.timeout": "30000",
    "storage.aws.access.key.id": "AKIAEXAMPLE",
    "storage.aws.secret.access.key": "secret",
    "storage.aws.session.token": "token",
    "storage.aws.credentials.file": "/etc/kafka/aws-credentials",
    "storage.gcs.bucket.name": "tiered",
    "storage.gcs.endpoint.url": "http://127.0.0.1:4443",
    "storage.gcs.credentials.default": "true",
    "storage.gcs.credentials.json": '{"type": "service_account"}',
    "storage.gcs.credentials.path": "/etc/kafka/gcs.json",
    "storage.azure.container.name": "tiered",
    "storage.azure.account.name": "account",
    "storage.azure.account.key": "a2V5",
    "storage.azure.sas.token": "sv=2024&sig=x",
    "storage.azure.connection.string": "AccountName=a;AccountKey=a2V5",
    "storage.azure.endpoint.url": "http://127.0.0.1:10000/account",
    "storage.root": "/var/lib/kafka-tiered",
}


def _value(key: str) -> str:
    default = REFERENCE[key][0]
    return SAMPLES.get(key, "" if default == '""' else default)


def test_the_declaration_lists_exactly_the_reference_keys_with_their_defaults() -> None:
    declared = {k.name: k for k in AIVEN_KEYS}
    assert len(declared) == len(AIVEN_KEYS), "a key declared twice"
    assert sorted(declared) == sorted(REFERENCE)
    for name, (default, _special) in REFERENCE.items():
        assert declared[name].aiven_default == default, name
        assert (declared[name].where == BROKER) == name.startswith("remote.log.storage.manager."), name
        if declared[name].support is not Support.HONOURED:
            assert declared[name].note, f"{name}: what differs, and what to use instead, must be said"
    assert counts() == {Support.HONOURED: 58, Support.DIFFERENT: 7, Support.UNSUPPORTED: 11}


def _backend_for(name: str) -> str:
    prefixes = {"storage.s3.": "s3", "storage.aws.": "s3", "storage.gcs.": "gcs", "storage.azure.": "azure"}
    return next((backend for prefix, backend in prefixes.items() if name.startswith(prefix)), "filesystem")


@pytest.mark.parametrize("aiven", [k for k in AIVEN_KEYS if k.support is Support.HONOURED], ids=lambda k: k.name)
def test_an_honoured_key_is_declared_and_accepts_aivens_values(aiven) -> None:  # noqa: ANN001
    ours = declared_key(aiven.name)
    assert ours is not None, f"{aiven.name} is honoured, so one of our declarations must read it"
    name = aiven.name.replace("<id>", "kek1")
    for value in (_value(aiven.name), *REFERENCE[aiven.name][1]):
        if value not in ("null", "required", "(none)"):
            ours.value_from(value)  # raises ConfigException for a value Aiven documents but we refuse
        assert unknown_keys({"chunk.size": "1", "storage.backend.class": _backend_for(name), name: value}) == []


def test_aivens_special_values_mean_the_same_here(make_manager, tmp_path: Path) -> None:  # noqa: ANN001
    unbounded = {
        "fetch.manifest.cache.size": "-1",
        "fetch.manifest.cache.retention.ms": "-1",
        "fetch.indexes.cache.size": "-1",
        "fetch.indexes.cache.retention.ms": "-1",
        "fetch.chunk.cache.size": "-1",
        "fetch.chunk.cache.retention.ms": "-1",
    }
    assert config_problems({"chunk.size": "1024", **unbounded}) == []
    manager = make_manager(extra=unbounded)
    for cache in (manager.manifest_cache, manager.index_cache, manager.chunk_cache.memory):
        assert cache.capacity == UNBOUNDED_SIZE and cache.retention_s == math.inf
        assert not cache._expired(0.0, 1e15)  # noqa: SLF001 - no expiry, however long an entry sits
    # -2 is not Aiven's and not ours
    problems = config_problems({"chunk.size": "1024", "fetch.chunk.cache.retention.ms": "-2"})
    assert problems == [
        "Invalid value '-2' for configuration fetch.chunk.cache.retention.ms: value must be at least 1, "
        "or -1 (no expiry)"
    ]
    # the disk class too: unbounded and never expiring, and it reads back what it cached
    disk = make_manager(
        extra={**unbounded, "fetch.chunk.cache.class": "disk", "fetch.chunk.cache.path": str(tmp_path / "cache")}
    )
    assert disk.chunk_cache.disk.retention_s == math.inf


@pytest.mark.parametrize("aiven", [k for k in AIVEN_KEYS if k.support is not Support.HONOURED], ids=lambda k: k.name)
def test_a_key_that_differs_is_named_by_config_check_and_at_startup(
    aiven,  # noqa: ANN001
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = aiven.name.replace("<property>", "uri")
    value = {"segment.format": "iceberg", "storage.overwrite.enabled": "false"}.get(key, "1")
    if key in ("fetch.manifest.cache.thread.pool.size", "fetch.indexes.cache.thread.pool.size"):
        value = "8"
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.aiven.kafka.tieredstorage.RemoteStorageManager",
        "remote.log.storage.manager.class.path": "/opt/tiered-storage/core/*",
        "rsm.config.chunk.size": "4194304",
        "rsm.config.storage.root": str(tmp_path),
        "rsm.config.python.executable": sys.executable,
    }
    if aiven.where == BROKER:
        write_properties(tmp_path / "server.properties", props)
        rc, out, err = _check(tmp_path / "server.properties", capsys)
        assert rc == 0, err
        changes = out.split("change these 2 line(s):\n", 1)[1].splitlines()[:2]
        assert any(line.startswith(f"  {key}=") for line in changes), out
        return
    props["rsm.config." + key] = value
    write_properties(tmp_path / "server.properties", props)
    rc, out, err = _check(tmp_path / "server.properties", capsys)
    line = aiven.warning(key, value)
    shown = "[hidden]" if key.endswith("password") else value
    assert line == f"rsm.config.{key}={shown}: {aiven.support.value} (Aiven's plugin key): {aiven.note}"
    assert line in out.split("different from Aiven's plugin (1):\n", 1)[1]
    assert f"rsm.config.{key}: " not in out.split("ignored (", 1)[1].split("\n\n", 1)[0]
    configs = {k[len("rsm.config.") :]: v for k, v in props.items() if k.startswith("rsm.config.")}
    with caplog.at_level(logging.WARNING, logger="rsm.core.config"), RemoteStorageManager() as manager:
        if key == "segment.format":  # Iceberg data cannot be served: the broker must not start
            assert rc == 1 and "segment.format" in err
            with pytest.raises(ConfigException, match="only kafka"):
                manager.configure(configs)
            return
        assert rc == 0, err
        manager.configure(configs)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line in warned
    assert aiven_key(key) is aiven


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["config", "check", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_values_that_behave_as_in_aivens_plugin_are_not_flagged() -> None:
    assert configuration_warnings({"chunk.size": "1", "segment.format": "KAFKA", "storage.root": "/x"}) == []
    assert configuration_warnings({"chunk.size": "1", "storage.overwrite.enabled": "true", "storage.root": "/x"}) == []
    assert configuration_warnings({"chunk.size": "1", "fetch.indexes.cache.thread.pool.size": "0"}) == []


@pytest.mark.parametrize(
    ("backend", "storage"),
    [
        ("io.aiven.kafka.tieredstorage.storage.s3.S3Storage", "storage.s3.|storage.aws."),
        ("io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage", "storage.gcs."),
        ("io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage", "storage.azure."),
        ("io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage", "storage.root"),
    ],
)
def test_an_aiven_file_with_every_honoured_key_checks_clean(
    backend: str,
    storage: str,
    tmp_path: Path,
    key_pairs: dict[str, tuple[Path, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every honoured core and cache key at Aiven's default (or special value), plus one backend's keys, through
    ``kts config check``: all honoured, nothing ignored, nothing flagged, no error."""
    exclusive = {  # keys of one backend that exclude each other: the first of each group is set
        "storage.aws.credentials.file",
        "storage.gcs.credentials.json",
        "storage.gcs.credentials.path",
        "storage.azure.sas.token",
        "storage.azure.connection.string",
    }
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.kts.shim.PythonRemoteStorageManager",
        "remote.log.storage.manager.class.path": "/opt/venvs/kts/lib/python3.11/site-packages/rsm/_jars/*",
        "rsm.config.python.executable": sys.executable,
        "rsm.config.encryption.enabled": "true",
    }
    for aiven in AIVEN_KEYS:
        name = aiven.name
        if aiven.support is not Support.HONOURED or aiven.where == BROKER or name in exclusive:
            continue
        if name.startswith("storage.") and not any(name.startswith(p) for p in storage.split("|")):
            continue
        special = REFERENCE[name][1]
        value = special[0] if special else _value(name)
        if value in ("null", "required"):
            continue
        if "<id>" in name:
            public, private = key_pairs["kek1"]
            name, value = name.replace("<id>", "kek1"), str(public if "public" in name else private)
        props["rsm.config." + name] = value
    props["rsm.config.storage.backend.class"] = backend
    write_properties(tmp_path / "server.properties", props)
    rc, out, err = _check(tmp_path / "server.properties", capsys)
    assert rc == 0, err
    assert "ignored (0):" in out and "different from Aiven's plugin" not in out and "change these" not in out
    honoured = out.split("ignored (", 1)[0]
    assert all(f"  {k}\n" in honoured for k in props if k.startswith("rsm.config."))


def test_the_generated_table_shows_every_key() -> None:
    table = aiven_docs_markdown()
    for aiven in AIVEN_KEYS:
        assert f"| `{aiven.where}{aiven.name}` | `{aiven.aiven_default}` | {aiven.support.value} |" in table
    assert table.startswith("76 keys: 58 honoured, 7 honoured differently, 11 not supported.")
    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert table in docs.read_text()
