"""Declarative configuration: every key is declared once, with its type, default, validation and doc.

The broker hands ``configure()`` a flat map of strings (``rsm.config.`` already stripped); the JVM shim may
pass Java numbers and booleans as well. ``ConfigDef.parse`` turns that map into typed values and fails with
a ``ConfigException`` that names the key, the value and what is allowed. The configuration tables of
docs/configuration.md are generated from the same declarations (``kts config-docs``), so docs and behaviour cannot
drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigException(ValueError):
    """A configuration key is missing or invalid; the message names the key and what is allowed.

    Defined here, beside the declarations that raise it, because every layer validates its keys with this
    module; the plugin re-exports it as ``rsm.ConfigException``."""


_NO_DEFAULT = object()
REQUIRED = _NO_DEFAULT


def _parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigException(f"Invalid value {value!r} for configuration {key}: expected true or false")


def _parse_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigException(f"Invalid value {value!r} for configuration {key}: expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigException(f"Invalid value {value!r} for configuration {key}: expected an integer")


def _parse_str(key: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    raise ConfigException(f"Invalid value {value!r} for configuration {key}: expected a string")


def _parse_list(key: str, value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    elif isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    else:
        raise ConfigException(f"Invalid value {value!r} for configuration {key}: expected a comma-separated list")
    return [v for v in items if v]


def _parse_password(key: str, value: Any) -> str:
    return _parse_str(key, value)


PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "boolean": _parse_bool,
    "int": _parse_int,
    "long": _parse_int,
    "string": _parse_str,
    "list": _parse_list,
    "password": _parse_password,
    "class": _parse_str,
}


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key. ``validator`` raises ``ConfigException`` (or returns an error string)."""

    name: str
    type: str
    default: Any
    doc: str
    validator: Callable[[str, Any], str | None] | None = None
    valid_values: str = ""  # for the docs table; derived from an in_range/one_of validator when left empty
    group: str = "core"
    dynamic: bool = False  # a pattern such as encryption.key.pairs.<id>.public.key: documented, parsed by its owner

    def __post_init__(self) -> None:
        if not self.valid_values:
            object.__setattr__(self, "valid_values", getattr(self.validator, "valid_values", ""))

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT

    def parse(self, raw: Any) -> Any:
        if raw is None:
            return None
        value = PARSERS[self.type](self.name, raw)
        if self.validator is not None:
            problem = self.validator(self.name, value)
            if problem:
                raise ConfigException(f"Invalid value {raw!r} for configuration {self.name}: {problem}")
        return value

    def value_from(self, raw: Any) -> Any:
        """The typed value of a supplied raw value, or the default when it is absent (None, or an empty string
        for a number or boolean, as a blank ``key=`` line in a properties file); raises for a missing required
        key or an invalid value."""
        if raw is None or (isinstance(raw, str) and raw == "" and self.type in ("int", "long", "boolean")):
            if self.required:
                raise ConfigException(
                    f"Missing required configuration {self.name!r} which has no default value. {self.doc}"
                )
            return self.default
        return self.parse(raw)

    def doc_default(self) -> str:
        if self.required:
            return "(required)"
        if self.default is None:
            return "null"
        if self.type == "password" and self.default:
            return "[hidden]"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, list):
            return ",".join(self.default) or '""'
        if self.default == "":
            return '""'
        return str(self.default)


def in_range(lo: int | None, hi: int | None) -> Callable[[str, Any], str | None]:
    """A bounds check that also describes itself for the docs: ``[lo,...,hi]``, ``[lo,...]``."""

    def check(_key: str, v: Any) -> str | None:
        if lo is not None and v < lo:
            return f"value must be at least {lo}"
        if hi is not None and v > hi:
            return f"value must be no more than {hi}"
        return None

    check.valid_values = f"[{'' if lo is None else lo},...{'' if hi is None else f',{hi}'}]"  # type: ignore[attr-defined]
    return check


def in_range_or(special: int, meaning: str, lo: int, hi: int | None = None) -> Callable[[str, Any], str | None]:
    """A bounds check that also accepts one special value outside them, e.g. Aiven's ``-1`` for "unbounded" or
    "no expiry" on cache sizes and retentions; documented as ``-1 (unbounded) or [0,...]``."""
    bounds = in_range(lo, hi)

    def check(key: str, v: Any) -> str | None:
        if v == special:
            return None
        problem = bounds(key, v)
        return f"{problem}, or {special} ({meaning})" if problem else None

    check.valid_values = f"{special} ({meaning}) or {bounds.valid_values}"  # type: ignore[attr-defined]
    return check


def one_of(*allowed: str, case_insensitive: bool = True) -> Callable[[str, Any], str | None]:
    def check(_key: str, v: Any) -> str | None:
        values = v if isinstance(v, list) else [v]
        for item in values:
            probe = item.upper() if case_insensitive else item
            pool = [a.upper() for a in allowed] if case_insensitive else list(allowed)
            if probe not in pool:
                return f"{item!r} is not one of: {', '.join(allowed)}"
        return None

    check.valid_values = ", ".join(allowed)  # type: ignore[attr-defined]
    return check


@dataclass
class ConfigDef:
    """A set of ``ConfigKey``s. Unknown keys are passed through (backends and later parts read their own)."""

    keys: dict[str, ConfigKey] = field(default_factory=dict)

    def define(self, key: ConfigKey) -> ConfigDef:
        if key.name in self.keys:
            raise ValueError(f"configuration key {key.name} declared twice")
        self.keys[key.name] = key
        return self

    def extend(self, keys: Iterable[ConfigKey]) -> ConfigDef:
        for k in keys:
            self.define(k)
        return self

    def parse(self, raw: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        """Typed values for every declared key (defaults filled in); ``prefix`` is stripped from raw keys."""
        source = {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)} if prefix else dict(raw)
        return {name: key.value_from(source.get(name)) for name, key in self.keys.items() if not key.dynamic}

    def parse_all(self, raw: Mapping[str, Any], prefix: str = "") -> tuple[dict[str, Any], dict[str, str]]:
        """Like ``parse`` but without stopping at the first problem (``kts config check`` reports them all in one
        run): the typed values, with the default (None for a required key) where a value is missing or invalid,
        and each problem by the key it is about. Keys are looked up, and named, with ``prefix``."""
        values: dict[str, Any] = {}
        problems: dict[str, str] = {}
        for name, key in self.keys.items():
            if key.dynamic:
                continue
            try:
                values[name] = dataclasses.replace(key, name=prefix + name).value_from(raw.get(prefix + name))
            except ConfigException as e:
                values[name] = None if key.required else key.default
                problems[prefix + name] = str(e)
        return values, problems

    def markdown_table(self, doc_prefix: str = "") -> str:
        rows = ["| key | type | default | valid values | description |", "|---|---|---|---|---|"]
        rows += self.markdown_rows(doc_prefix)
        return "\n".join(rows)

    def markdown_rows(self, doc_prefix: str = "") -> list[str]:
        rows = []
        for key in self.keys.values():
            doc = key.doc.replace("|", "\\|").replace("\n", " ")
            valid = key.valid_values.replace("|", "\\|")
            rows.append(f"| `{doc_prefix}{key.name}` | {key.type} | `{key.doc_default()}` | {valid} | {doc} |")
        return rows
