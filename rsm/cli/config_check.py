"""``kts config check FILE``: is this broker file right for our plugin, and what does an Aiven user change?

An Aiven user keeps every ``rsm.config.*`` key we share (same names, same storage back-ends, Aiven's backend
class names accepted); only the plugin's two broker lines change: the class path and the class name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from backends.configdef import ConfigDef, ConfigException
from rsm.cli.properties import BROKER_PREFIX, read_properties
from rsm.core.config import RsmConfig, backend_config_def, unknown_keys

SHIM_CLASS = "io.kts.shim.PythonRemoteStorageManager"
AIVEN_CLASS = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
CLASS_NAME = "remote.log.storage.manager.class.name"
CLASS_PATH = "remote.log.storage.manager.class.path"
JAR_NAME = "kafka-tiered-storage-shim.jar"


@dataclasses.dataclass
class CheckResult:
    honoured: list[str]
    ignored: list[str]  # one message per ignored key
    changes: list[str]  # broker lines to change, as "key=value"
    errors: list[str]
    notes: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors


def _plugin_dir() -> str:
    from rsm.jvm.launcher import PLUGIN_JAR

    return str(PLUGIN_JAR.parent)


def _names_our_jar(class_path: str) -> bool:
    """True when an entry is a folder holding the shim jar here, or the installed/packaged jar folder by name
    (the broker's host may not be this one: rsm/_jars of a pip install, or the demo image's link)."""
    for entry in filter(None, (e.strip() for e in class_path.split(":"))):
        folder = entry.removesuffix("*").rstrip("/")
        if (Path(folder) / JAR_NAME).is_file() or folder.endswith(("/rsm/_jars", "/kafka-tiered-storage/jars")):
            return True
    return False


def _validate(configs: dict[str, Any], errors: list[str], notes: list[str]) -> None:
    """Types, ranges and cross-key rules. A key file missing on this host (it must exist on the broker) is
    noted, and validation goes on with a stand-in PEM so the other encryption rules are still checked."""
    checked = dict(configs)
    for key, path in configs.items():
        if key.startswith("encryption.key.pairs.") and key.endswith(".key.file") and not Path(path).exists():
            notes.append(f"rsm.config.{key}: {path} does not exist on this host (it must on the broker)")
            del checked[key]
            checked[key[: -len(".file")]] = "(key file not on this host)"
    try:
        RsmConfig.from_map(checked)
    except ConfigException as e:
        errors.append(str(e))
    backend = backend_config_def(str(configs.get("storage.backend.class") or "filesystem"))
    if backend is not None:
        prefixed = ConfigDef()
        for key in backend.keys.values():
            prefixed.define(dataclasses.replace(key, name="storage." + key.name))
        try:
            prefixed.parse(configs)
        except ConfigException as e:
            errors.append(str(e))


def check_broker_properties(props: dict[str, str]) -> CheckResult:
    configs = {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    unknown = {u.key: u for u in unknown_keys(configs)}
    result = CheckResult(
        honoured=sorted(BROKER_PREFIX + k for k in configs if k not in unknown),
        ignored=[f"{BROKER_PREFIX}{u.key}: {u.message()}" for u in unknown.values()],
        changes=[],
        errors=[],
        notes=[],
    )
    if props.get("remote.log.storage.system.enable", "false").strip().lower() != "true":
        result.notes.append("remote.log.storage.system.enable is not true: the broker tiers nothing")
    if props.get(CLASS_NAME) != SHIM_CLASS:
        result.changes.append(f"{CLASS_NAME}={SHIM_CLASS}")
        if props.get(CLASS_NAME) == AIVEN_CLASS:
            result.notes.append("this is an Aiven plugin file: the stored data stays readable both ways")
    if not _names_our_jar(props.get(CLASS_PATH, "")):
        result.changes.append(f"{CLASS_PATH}={_plugin_dir()}/*")
    if not configs:
        result.errors.append("no rsm.config.* keys: the plugin would start without chunk.size")
    else:
        _validate(configs, result.errors, result.notes)
    return result


@click.group("config")
def config_group() -> None:
    """Configuration checks (the table of every key: kts config-docs)."""


@config_group.command("check")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def config_check_command(file: str) -> int:
    """Validate a broker's server.properties: honoured keys, ignored keys, and the lines to change."""
    result = check_broker_properties(read_properties(file))
    click.echo(f"honoured ({len(result.honoured)}):")
    for key in result.honoured:
        click.echo(f"  {key}")
    click.echo(f"ignored ({len(result.ignored)}):")
    for line in result.ignored:
        click.echo(f"  {line}")
    if result.changes:
        click.echo(f"change these {len(result.changes)} line(s):")
        for line in result.changes:
            click.echo(f"  {line}")
    for note in result.notes:
        click.echo(f"note: {note}")
    for error in result.errors:
        click.echo(f"ERROR: {error}", err=True)
    click.echo("OK" if result.ok else f"{len(result.errors)} error(s)")
    return 0 if result.ok else 1
