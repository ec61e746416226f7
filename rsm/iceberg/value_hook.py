"""The hook that fills the table's optional ``value`` struct: topic -> ``ValueColumn`` or None.

``iceberg.mode.value.column.factory`` names a ``module:function`` taking the topic name. It returns None (the
table has only ``value_raw``) or a ``ValueColumn``: the Arrow struct type of the parsed value and a converter
from a chunk of ``value_raw`` values to a struct array of that type (null where a value does not parse).
``rsm.iceberg.values`` provides the factories for Avro, JSON Schema and a schema registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from backends.configdef import ConfigException


@dataclass(frozen=True)
class ValueColumn:
    """A topic's parsed value: its Arrow struct type and the converter of raw values into it."""

    arrow_type: pa.StructType
    convert: Callable[[Sequence[bytes | None]], pa.Array]


ValueColumnFactory = Callable[[str], "ValueColumn | None"]


def no_value_column(_topic: str) -> ValueColumn | None:
    """The default: no parsed value, only ``value_raw``."""
    return None


def load_factory(spec: str) -> ValueColumnFactory:
    """The factory ``module:function`` names (empty: ``no_value_column``); a bad name is a ``ConfigException``."""
    if not spec:
        return no_value_column
    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigException(
            f"Invalid value {spec!r} for configuration iceberg.mode.value.column.factory: {type(e).__name__}: {e}"
        ) from None
    if not callable(factory):
        raise ConfigException(
            f"Invalid value {spec!r} for configuration iceberg.mode.value.column.factory: it is not callable"
        )
    return factory  # type: ignore[no-any-return]
