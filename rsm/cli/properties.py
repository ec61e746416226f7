"""Reading broker-style ``.properties`` files with Java's own rules (javaproperties: ``\\:``, ``\\=``,
``\\uXXXX``, whitespace separators, continuations), so an operator's server.properties means the same to
``kts`` as to the broker."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import javaproperties

from rsm.core.config_providers import resolve_variables

BROKER_PREFIX = "rsm.config."


def read_properties(path: str | Path) -> dict[str, str]:
    """Every key of the file, parsed as ``java.util.Properties.load`` would (a later duplicate wins)."""
    with open(path, encoding="latin-1") as f:  # Properties.load(InputStream) reads ISO-8859-1 and \\u escapes
        return dict(javaproperties.load(f))


def plugin_keys(props: Mapping[str, str]) -> list[str]:
    """The keys ``rsm_configs`` takes from ``props``."""
    if any(k.startswith(BROKER_PREFIX) for k in props):
        return [k for k in props if k.startswith(BROKER_PREFIX)]
    return list(props)


def read_broker_file(
    path: str | Path, also: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every key of the file, with the Kafka config-provider variables (``${file:...}``, ``${dir:...}``,
    ``${env:...}``) of the plugin's keys and of ``also`` resolved as the broker resolves them; a variable that
    cannot be resolved raises ``ConfigException`` naming the key and the file. Other broker keys stay as written
    (their secrets may live only on the broker's host)."""
    props = read_properties(path)
    return resolve_variables(props, str(path), [*plugin_keys(props), *(k for k in also if k in props)], environ)


def rsm_configs(props: dict[str, str]) -> dict[str, str]:
    """The plugin's keys: from a broker file, the ``rsm.config.``-prefixed ones stripped, as Kafka does;
    from a plain plugin file (no prefixed key at all), every key."""
    if any(k.startswith(BROKER_PREFIX) for k in props):
        return {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    return dict(props)


def write_properties(path: str | Path, props: dict[str, str], comment: str | None = None) -> None:
    """Write keys in the given order with Java escaping (no timestamp line, so re-runs give the same file)."""
    with open(path, "w", encoding="latin-1") as f:
        if comment:
            for line in comment.splitlines():
                f.write(f"# {line}\n")
        for key, value in props.items():
            f.write(javaproperties.join_key_value(key, value) + "\n")
