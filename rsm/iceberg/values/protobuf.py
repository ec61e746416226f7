"""Protobuf values: the message type comes from a descriptor set file (``iceberg.value.schema.<id>.protobuf``,
as ``protoc --include_imports --descriptor_set_out`` writes it) or from a schema registry (the ``.proto`` text
of a schema id, compiled here with grpcio-tools' protoc). Each value is Protobuf binary, parsed with the
protobuf package; :func:`arrow_type_from_protobuf` gives the struct's Arrow type.
"""

from __future__ import annotations

import datetime
import decimal
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from backends.configdef import ConfigException
from rsm.iceberg.values.common import UnsupportedSchema, ValueParser

# FieldDescriptor.TYPE_* numbers (descriptor.proto), so this module's top level needs no protobuf import.
_DOUBLE, _FLOAT, _INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _BOOL, _STRING = 1, 2, 3, 4, 5, 6, 7, 8, 9
_MESSAGE, _BYTES, _UINT32, _ENUM, _SFIXED32, _SFIXED64, _SINT32, _SINT64 = 11, 12, 13, 14, 15, 16, 17, 18

_SCALARS: dict[int, pa.DataType] = {
    _DOUBLE: pa.float64(),
    _FLOAT: pa.float32(),
    _INT64: pa.int64(),
    _SINT64: pa.int64(),
    _SFIXED64: pa.int64(),
    _INT32: pa.int32(),
    _SINT32: pa.int32(),
    _SFIXED32: pa.int32(),
    _UINT32: pa.int64(),  # Iceberg has no unsigned types: the next wider signed one
    _FIXED32: pa.int64(),
    _UINT64: pa.decimal128(20, 0),
    _FIXED64: pa.decimal128(20, 0),
    _BOOL: pa.bool_(),
    _STRING: pa.string(),
    _BYTES: pa.binary(),
    _ENUM: pa.string(),  # the value's name (its number where the enum does not name it)
}

_WRAPPERS = {
    f"google.protobuf.{n}Value": t
    for n, t in (
        ("Double", pa.float64()),
        ("Float", pa.float32()),
        ("Int64", pa.int64()),
        ("UInt64", pa.decimal128(20, 0)),
        ("Int32", pa.int32()),
        ("UInt32", pa.int64()),
        ("Bool", pa.bool_()),
        ("String", pa.string()),
        ("Bytes", pa.binary()),
    )
}
_TIMESTAMP = "google.protobuf.Timestamp"
#: Well-known types that can nest themselves: kept as their JSON text.
_JSON_TEXT = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}


def _repeated(fd: Any) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5.29; `label` is deprecated there
    return bool(flag) if flag is not None else fd.label == 3


def _is_map(fd: Any) -> bool:
    return fd.type == _MESSAGE and fd.message_type.GetOptions().map_entry


def arrow_type_from_protobuf(descriptor: Any) -> pa.StructType:
    """The Arrow struct of a message descriptor: messages become structs, repeated fields lists, maps maps,
    enums their names, unsigned integers the next wider signed type (uint64 a decimal of 20 digits),
    ``google.protobuf.Timestamp`` a UTC timestamp, the wrapper types their value, ``Struct``/``Value``/
    ``ListValue`` their JSON text. A message that contains itself, or has no fields, raises
    :class:`UnsupportedSchema`."""
    t = _message_type(descriptor, ())
    assert isinstance(t, pa.StructType)
    return t


def _message_type(descriptor: Any, stack: tuple[str, ...]) -> pa.DataType:
    name = descriptor.full_name
    if name == _TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if name in _WRAPPERS:
        return _WRAPPERS[name]
    if name in _JSON_TEXT:
        return pa.string()
    if name in stack:
        raise UnsupportedSchema(f"Protobuf message {name!r} contains itself; Iceberg has no recursive types")
    if not descriptor.fields:
        raise UnsupportedSchema(f"Protobuf message {name!r} has no fields; Iceberg has no empty structs")
    return pa.struct([pa.field(fd.name, _field_type(fd, (*stack, name))) for fd in descriptor.fields])


def _field_type(fd: Any, stack: tuple[str, ...]) -> pa.DataType:
    if _is_map(fd):
        entry = fd.message_type
        return pa.map_(
            _single_type(entry.fields_by_name["key"], stack), _single_type(entry.fields_by_name["value"], stack)
        )
    t = _single_type(fd, stack)
    return pa.list_(t) if _repeated(fd) else t


def _single_type(fd: Any, stack: tuple[str, ...]) -> pa.DataType:
    if fd.type == _MESSAGE:
        return _message_type(fd.message_type, stack)
    if fd.type not in _SCALARS:  # groups (proto2)
        raise UnsupportedSchema(f"Protobuf field {fd.full_name!r} is a group, which is not supported")
    return _SCALARS[fd.type]


def protobuf_to_arrow_value(message: Any) -> Any:
    """A parsed message as the Python value ``pa.array`` takes for :func:`arrow_type_from_protobuf`'s type."""
    return _message_value(message)


def _message_value(msg: Any) -> Any:
    name = msg.DESCRIPTOR.full_name
    if name == _TIMESTAMP:
        return datetime.datetime.fromtimestamp(msg.seconds, datetime.UTC) + datetime.timedelta(
            microseconds=msg.nanos // 1000
        )
    if name in _WRAPPERS:
        return _scalar(msg.DESCRIPTOR.fields_by_name["value"], msg.value)
    if name in _JSON_TEXT:
        from google.protobuf import json_format

        return json_format.MessageToJson(msg, indent=None, sort_keys=True)
    out = {}
    for fd in msg.DESCRIPTOR.fields:
        v = getattr(msg, fd.name)
        if _is_map(fd):
            vfd = fd.message_type.fields_by_name["value"]
            out[fd.name] = [(k, _single_value(vfd, v[k])) for k in v]
        elif _repeated(fd):
            out[fd.name] = [_single_value(fd, x) for x in v]
        elif fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = _single_value(fd, v)
    return out


def _single_value(fd: Any, v: Any) -> Any:
    if fd.type == _MESSAGE:
        return _message_value(v)
    return _scalar(fd, v)


def _scalar(fd: Any, v: Any) -> Any:
    if fd.type == _ENUM:
        named = fd.enum_type.values_by_number.get(v)
        return named.name if named is not None else str(v)
    if fd.type in (_UINT64, _FIXED64):
        return decimal.Decimal(v)
    return v


class ProtobufValueParser(ValueParser):
    """Values in Protobuf binary of one message type."""

    def __init__(self, descriptor: Any) -> None:
        from google.protobuf import message_factory

        self.descriptor = descriptor
        self.arrow_type = arrow_type_from_protobuf(descriptor)
        self._cls = message_factory.GetMessageClass(descriptor)

    def parse_one(self, raw: bytes) -> Any:
        msg = self._cls()
        msg.ParseFromString(raw)  # DecodeError on bytes that are not this message
        return protobuf_to_arrow_value(msg)


# --------------------------------------------------------------------------------------- where descriptors come


def pool_from_descriptor_set(data: bytes) -> Any:
    """A descriptor pool of its own holding a serialized ``FileDescriptorSet`` (with its imports)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(data)
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return pool, [f.name for f in fds.file]


def descriptor_from_file(key: str, path: str, message: str | None) -> Any:
    """The message ``message`` (default: the first message of the set's last file) of a descriptor set file;
    ConfigException naming ``key`` when the file cannot be read or holds no such message."""
    try:
        with open(os.path.expanduser(path), "rb") as f:
            data = f.read()
        pool, names = pool_from_descriptor_set(data)
    except Exception as e:  # OSError, or protobuf's DecodeError/TypeError for a file that is not a descriptor set
        raise ConfigException(
            f"Invalid value {path!r} for configuration {key}: not a readable descriptor set ({type(e).__name__}: {e}); "
            "write one with protoc --include_imports --descriptor_set_out"
        ) from e
    if message:
        try:
            return pool.FindMessageTypeByName(message)
        except KeyError:
            raise ConfigException(
                f"Invalid value for configuration {key}.message: the descriptor set {path} has no message {message!r}"
            ) from None
    try:
        return message_at(pool.FindFileByName(names[-1]), [0])
    except (IndexError, KeyError):
        raise ConfigException(
            f"Invalid value {path!r} for configuration {key}: the descriptor set's last file holds no message"
        ) from None


def compile_proto(main: str, files: Mapping[str, str]) -> Any:
    """The file descriptor of ``.proto`` text ``files[main]`` (``files`` also holds the files it imports, by
    import path), compiled with grpcio-tools' protoc into a descriptor pool of its own."""
    try:
        import grpc_tools
    except ImportError as e:
        raise UnsupportedSchema(
            "Protobuf schemas from a registry need grpcio-tools (pip install 'kafka-tiered-storage[iceberg]')"
        ) from e
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="kts-proto-") as tmp:
        for name, text in files.items():
            path = os.path.join(tmp, name)
            if not os.path.realpath(path).startswith(os.path.realpath(tmp) + os.sep):
                raise UnsupportedSchema(f"Protobuf import path {name!r} leaves the schema's folder")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "set.pb")
        # protoc in a process of its own: its errors come on its stderr, and a crash stays there.
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{tmp}",
                f"-I{well_known}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                main,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise UnsupportedSchema(f"the Protobuf schema does not compile: {done.stderr.strip()[:500]}")
        with open(out, "rb") as f:
            pool, _ = pool_from_descriptor_set(f.read())
    return pool.FindFileByName(main)


def message_at(file: Any, indexes: Sequence[int]) -> Any:
    """The message of a file that Confluent message indexes point at: the first index picks a top-level
    message, each next one a message nested in the previous; IndexError when there is none."""
    if not indexes:
        raise IndexError("no message index")
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    proto.ParseFromString(file.serialized_pb)
    prefix = f"{proto.package}." if proto.package else ""
    messages = [file.pool.FindMessageTypeByName(prefix + m.name) for m in proto.message_type]
    descriptor = None
    for i in indexes:
        if not 0 <= i < len(messages):
            raise IndexError(f"message index {i} of {len(messages)}")
        descriptor = messages[i]
        messages = list(descriptor.nested_types)
    return descriptor
