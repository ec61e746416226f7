"""One configuration source for every ``kts`` command, and how a command opens the store.

Layers, later ones win: a file (``--config``, or ``$KTS_CONFIG``) which is either the broker's server.properties
(its ``rsm.config.*`` keys are used, with Kafka's ``${file:...}``, ``${dir:...}`` and ``${env:...}`` config
provider variables resolved as the broker does) or a plugin-only file; environment variables ``RSM_CONFIG_<KEY>`` (dots
as ``_``, a literal ``_`` as ``__``, as Kafka's container images spell keys); ``--set key=value`` options.

A command opens the store it is pointed at and nothing else: it creates no root, bucket or container (a missing
one is an error naming it), sweeps none of the broker's temp files, and never opens the broker's disk chunk
cache (which it might fill, or leave owned by another user); only ``kts gc`` looks into an existing one. A
command that reads only manifests (``ls``, ``inspect``) does not even read the key pairs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from backends.base import StorageBackendException
from backends.registry import SHORT_NAMES, resolve_backend_class
from rsm.cli.properties import BROKER_PREFIX, read_broker_file, rsm_configs
from rsm.core.config import RsmConfig
from rsm.core.config_keys import CORE
from rsm.core.manager import RemoteStorageManager
from rsm.errors import ConfigException

ENV_FILE = "KTS_CONFIG"
ENV_PREFIX = "RSM_CONFIG_"

F = TypeVar("F", bound=Callable[..., Any])


def env_configs(environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :].lower().replace("__", "\0").replace("_", ".").replace("\0", "_")
            out[key] = value
    return out


def parse_set(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--set")
        key = key.strip()
        out[key[len(BROKER_PREFIX) :] if key.startswith(BROKER_PREFIX) else key] = value
    return out


def load_configs(
    config: str | None, sets: tuple[str, ...] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The plugin's configuration map from every source; nothing at all is an error that says what to pass."""
    environ = os.environ if environ is None else environ
    path = config or environ.get(ENV_FILE)
    configs: dict[str, str] = {}
    if path:
        if not Path(path).is_file():
            raise click.BadParameter(f"{path} is not a file", param_hint="--config")
        configs.update(rsm_configs(read_broker_file(path, environ=environ)))
    configs.update(env_configs(environ))
    configs.update(parse_set(sets))
    if not configs:
        raise click.UsageError(
            "no configuration: pass --config server.properties (its rsm.config.* keys are used), a plugin "
            f"config file, ${ENV_FILE}, {ENV_PREFIX}<KEY> variables or --set key=value"
        )
    return configs


def config_options(func: F) -> F:
    """The same three options on every command that talks to the store."""
    func = click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="a plugin key (rsm.config. prefix optional); wins over the file and the environment",
    )(func)
    return click.option(
        "--config",
        "config",
        type=click.Path(dir_okay=False),
        help=f"server.properties (its rsm.config.* keys) or a plugin-only file [env: {ENV_FILE}]",
    )(func)


class StoreUnavailable(click.ClickException):
    """The configured root, bucket or container is missing or unreachable (exit 2, like a configuration error)."""

    exit_code = 2


# Where the objects are, per backend: the key that names the root, bucket or container and how to say it.
_STORE_KEYS = {
    "filesystem": ("root", "storage.root {}"),
    "s3": ("s3.bucket.name", "S3 bucket {!r}"),
    "gcs": ("gcs.bucket.name", "GCS bucket {!r}"),
    "azure": ("azure.container.name", "Azure container {!r}"),
}
_NO_SWEEP_MS = str(2**62)  # storage.stale.upload.age.ms for tools: the broker's temp files are the broker's


def backend_short_name(backend_class: str) -> str | None:
    """filesystem/s3/gcs/azure for any spelling of our backends (Aiven's class names too); None for others."""
    try:
        cls = resolve_backend_class(backend_class)
    except ConfigException:
        return None
    spec = f"{cls.__module__}:{cls.__name__}"
    return next((short for short, target in SHORT_NAMES.items() if target == spec), None)


def store_label(config: RsmConfig | Mapping[str, Any]) -> str:
    """Where a command looked, for its messages: "S3 bucket 'tiered'", "storage.root /var/lib/t"..."""
    configs = config.raw if isinstance(config, RsmConfig) else config
    backend = str(configs.get("storage.backend.class") or "filesystem")
    short = backend_short_name(backend)
    if short is None:
        return f"the store of {backend}"
    key, text = _STORE_KEYS[short]
    return text.format(configs.get("storage." + key))


def tool_configs(configs: Mapping[str, str], keys: bool = True, disk_cache: bool = False) -> dict[str, str]:
    """The plugin's configuration as a command uses it: no prefetch, a memory chunk cache (``disk_cache``: the
    broker's disk cache when its directory exists; else, for a broker's disk cache, the size of its memory tier,
    so a command in a pod with a small memory limit does not fill RAM up to the disk cache's size), no sweep of
    temp files; ``keys=False`` drops the key ring, for commands that read only manifests."""
    out = dict(configs)
    path = out.get("fetch.chunk.cache.path")
    if not (disk_cache and path and Path(path).is_dir()):
        if "disk" in str(out.get("fetch.chunk.cache.class", "")).lower():
            # the broker's disk cache is not used: hold only as much RAM as its memory tier, not its disk size
            tier = CORE.keys["fetch.chunk.cache.memory.size"]
            out["fetch.chunk.cache.size"] = str(out.get("fetch.chunk.cache.memory.size") or tier.default)
        out["fetch.chunk.cache.class"] = "memory"
    out["fetch.chunk.cache.prefetch.max.size"] = "0"
    if backend_short_name(str(out.get("storage.backend.class") or "filesystem")) == "filesystem":
        out["storage.stale.upload.age.ms"] = _NO_SWEEP_MS
    if not keys:
        out = {k: v for k, v in out.items() if not k.startswith("encryption.")}
    return out


def _check_root_exists(configs: Mapping[str, str]) -> None:
    """The filesystem backend creates a missing root when the broker starts; a command must not."""
    if backend_short_name(str(configs.get("storage.backend.class") or "filesystem")) != "filesystem":
        return
    root = configs.get("storage.root")
    if root and not Path(root).is_dir():
        raise StoreUnavailable(
            f"storage.root {root} does not exist or is not a directory; kts creates nothing: check storage.root "
            f"(the broker's rsm.config.storage.root)"
        )


def open_manager(
    config: str | None, sets: tuple[str, ...], keys: bool = True, disk_cache: bool = False
) -> RemoteStorageManager:
    """A configured manager over an existing store (see ``tool_configs`` for ``keys`` and ``disk_cache``)."""
    return open_store(load_configs(config, sets), keys, disk_cache)


def open_store(configs: Mapping[str, str], keys: bool = True, disk_cache: bool = False) -> RemoteStorageManager:
    """A configured manager over the existing store ``configs`` name; a missing one raises ``StoreUnavailable``."""
    configs = tool_configs(configs, keys, disk_cache)
    _check_root_exists(configs)
    manager = RemoteStorageManager()
    try:
        manager.configure(configs)
        probe_store(manager)
    except BaseException:
        manager.close()
        raise
    return manager


def probe_store(manager: RemoteStorageManager) -> str | None:
    """List one key under key.prefix: the first key found, or None. A missing or unreachable bucket, container or
    root fails here with the store named, before a command could mistake it for an empty store."""
    prefix = manager.config["key.prefix"]
    try:
        return next(iter(manager.backend.list(prefix)), None)
    except StorageBackendException as e:
        raise StoreUnavailable(
            f"cannot list {store_label(manager.config)} (key.prefix {prefix!r}): {e}. kts creates no root, bucket "
            f"or container: check the storage.* keys"
        ) from None
