"""The hook that fills the table's optional ``value`` struct: topic -> ``ValueColumn`` or None.

``iceberg.mode.value.column.factory`` names a ``module:function`` taking the topic name. It returns None (the
table has only ``value_raw``) or a ``ValueColumn``: the Arrow struct type of the parsed value and a converter
from a chunk of ``value_raw`` values to a struct array of that type (null where a value does not parse).
``rsm.iceberg.values`` provides the factories for Avro, JSON Schema, Protobuf and a schema registry.

The struct may change from one segment to the next (a new schema version): :func:`merge_types` says what the
table's ``value`` column becomes, the table writer evolves the table to it before it commits the segment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from backends.configdef import ConfigException


@dataclass(frozen=True)
class ValueColumn:
    """A topic's parsed value: its Arrow struct type and the converter of raw values into it (both None: only
    the key is parsed); ``key``, the parsed key the same way (the table's ``key`` column), if any."""

    arrow_type: pa.StructType | None
    convert: Callable[[Sequence[bytes | None]], pa.Array] | None
    key: ValueColumn | None = None

    def parsed(
        self, keys: Callable[[], Sequence[bytes | None]], values: Callable[[], Sequence[bytes | None]]
    ) -> tuple[list[pa.Array], pa.StructType | None, pa.StructType | None]:
        """The parsed columns of a chunk (``value``, then ``key``), the value's and the key's struct types."""
        arrays = []
        if self.arrow_type is not None and self.convert is not None:
            arrays.append(self.convert(values()))
        key_type = None
        if self.key is not None and self.key.arrow_type is not None and self.key.convert is not None:
            key_type = self.key.arrow_type
            arrays.append(self.key.convert(keys()))
        return arrays, self.arrow_type, key_type


ValueColumnFactory = Callable[[str], "ValueColumn | None"]


class IncompatibleSchema(ValueError):
    """A new version of a schema changes a field in a way the table cannot follow (not an added field, an
    int->long or float->double widening, or a field made optional); the message names the field."""


_WIDER = {(pa.int32(), pa.int64()): pa.int64(), (pa.float32(), pa.float64()): pa.float64()}
_PLAIN = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}


def canonical(t: pa.DataType) -> pa.DataType:
    """``t`` without what Arrow types of the same Iceberg type differ by (field metadata, large string and
    binary, list item names), so two can be compared with ``equals``."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, canonical(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(canonical(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(canonical(t.key_type), canonical(t.item_type))
    return _PLAIN.get(t, t)


def merge_types(old: pa.DataType, new: pa.DataType, where: str = "value") -> pa.DataType:
    """The type that holds values of both: structs merged by field name (old fields first, new ones after),
    int widened to long and float to double, lists and maps merged element-wise. Any other change raises
    :class:`IncompatibleSchema` naming the field (``where``)."""
    old, new = canonical(old), canonical(new)
    if old.equals(new):
        return old
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields = []
        for f in old:
            i = new.get_field_index(f.name)
            t = f.type if i < 0 else merge_types(f.type, new.field(i).type, f"{where}.{f.name}")
            fields.append(pa.field(f.name, t))
        fields += [pa.field(f.name, f.type) for f in new if old.get_field_index(f.name) < 0]
        return pa.struct(fields)
    if pa.types.is_list(old) and pa.types.is_list(new):
        return pa.list_(merge_types(old.value_type, new.value_type, f"{where}.element"))
    if pa.types.is_map(old) and pa.types.is_map(new):
        if not old.key_type.equals(new.key_type):
            raise IncompatibleSchema(f"{where}: map key {old.key_type} became {new.key_type}")
        return pa.map_(old.key_type, merge_types(old.item_type, new.item_type, f"{where}.value"))
    for pair in ((old, new), (new, old)):
        if pair in _WIDER:
            return _WIDER[pair]
    raise IncompatibleSchema(f"{where}: {old} became {new}")


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
