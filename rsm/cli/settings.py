"""One configuration source for every ``kts`` command.

Layers, later ones win: a file (``--config``, or ``$KTS_CONFIG``) which is either the broker's server.properties
(its ``rsm.config.*`` keys are used) or a plugin-only file; environment variables ``RSM_CONFIG_<KEY>`` (dots
as ``_``, a literal ``_`` as ``__``, as Kafka's container images spell keys); ``--set key=value`` options.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from rsm.cli.properties import BROKER_PREFIX, read_properties, rsm_configs
from rsm.core.manager import RemoteStorageManager

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
        configs.update(rsm_configs(read_properties(path)))
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


def open_manager(config: str | None, sets: tuple[str, ...]) -> RemoteStorageManager:
    manager = RemoteStorageManager()
    try:
        manager.configure(load_configs(config, sets))
    except BaseException:
        manager.close()
        raise
    return manager
