"""What every schema source shares: the parser interface, schemas given inline or as a file, and (from
``rsm.iceberg.value_hook``) the merge of two versions of a schema's Arrow type."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from backends.configdef import ConfigException
from rsm.iceberg.value_hook import IncompatibleSchema, merge_types

__all__ = ["IncompatibleSchema", "UnsupportedSchema", "ValueParser", "merge_types", "schema_text", "to_array"]


class UnsupportedSchema(ConfigException):
    """A schema holds a type the Iceberg `value` struct cannot store; the message names where."""


def schema_text(key: str, text: str) -> Any:
    """Parse a schema given inline (JSON) or as a file path."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[", '"')):
        try:
            with open(os.path.expanduser(stripped), encoding="utf-8") as f:
                stripped = f.read()
        except OSError as e:
            raise ConfigException(
                f"Invalid value {text!r} for configuration {key}: neither inline JSON nor a readable file ({e})"
            ) from e
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as e:
        raise ConfigException(f"Invalid value for configuration {key}: the schema is not valid JSON ({e})") from e


class ValueParser:
    """Turns a topic's raw values into the ``value`` struct column (null where a value does not parse)."""

    arrow_type: pa.DataType

    def parse_one(self, raw: bytes) -> Any:
        """The Python value for ``arrow_type``; raises (any exception) when ``raw`` does not parse."""
        raise NotImplementedError

    def parse(self, raws: Sequence[bytes | None]) -> pa.Array:
        """One ``value`` per raw value, null for a null value or one that does not parse."""
        return to_array(
            self.arrow_type, (None if raw is None else functools.partial(self.parse_one, bytes(raw)) for raw in raws)
        )


def to_array(arrow_type: pa.DataType, thunks: Iterable[Callable[[], Any] | None]) -> pa.Array:
    """An array of ``arrow_type`` from callables giving each Python value (None: a null row); a callable that
    raises (but for OSError: the registry did not answer), or gives a value the type cannot hold, makes its row
    null."""
    out: list[Any] = []
    for thunk in thunks:
        if thunk is None:
            out.append(None)
            continue
        try:
            v = thunk()
            pa.scalar(v, type=arrow_type)  # a value the type cannot hold is one that did not parse
        except OSError:  # a schema registry that does not answer: the copy fails (and is retried), no null
            raise
        except Exception:
            v = None
        out.append(v)
    return pa.array(out, type=arrow_type)
