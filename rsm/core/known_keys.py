"""The keys the plugin knows, and the supplied keys nothing reads: configure() and `kts config check` refuse them.

The known keys are the declared tables listed in ``known_key_names``, read on demand: the plugin's own table
(``rsm.core.config_keys``), the configured backend's, the metrics settings' and those of each plugged-in format.
Importing a module registers no key.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from backends.configdef import ConfigDef
from backends.registry import resolve_backend_class
from rsm.core.aiven_keys import Support, aiven_key
from rsm.core.config_keys import CORE
from rsm.core.segment_format import plugged_formats
from rsm.errors import ConfigException
from rsm.metrics.config import CONFIG_DEF as METRICS_CONFIG_DEF

# Keys of the JVM shim (rsm.jvm.config, a layer above this one): the Java side reads and validates them itself.
OWNED_ELSEWHERE_PREFIXES = ("jvm.", "python.")
# Keys the broker itself adds to the map (RemoteLogManager.configureRSM puts broker.id, node.id on Kafka 4.x;
# some builds cluster.id).
BROKER_SUPPLIED_KEYS = frozenset({"broker.id", "node.id", "cluster.id"})


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


def known_tables(backend_class: str = "filesystem") -> list[tuple[str, ConfigDef]]:
    """(prefix, table) of every declared table the plugin reads with this backend: its own, the backend's, the
    metrics settings' and each plugged-in format's."""
    tables = [("", CORE)]
    backend = backend_config_def(backend_class)
    if backend is not None:
        tables.append(("storage.", backend))
    tables.append(("", METRICS_CONFIG_DEF))
    tables += [("", cdef) for plugin in plugged_formats() for cdef in plugin.config_defs]
    return tables


def known_key_names(backend_class: str = "filesystem") -> list[str]:
    """Every key the plugin reads with this backend (dynamic ones with their ``<id>`` placeholder)."""
    return [prefix + name for prefix, cdef in known_tables(backend_class) for name in cdef.keys]


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
