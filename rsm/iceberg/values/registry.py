"""Values in the Confluent wire format, their schemas fetched from a Confluent-compatible schema registry.

A value is byte 0 (the magic 0), bytes 1-4 (the big-endian schema id), then for Protobuf the message indexes
(a zigzag varint count, then that many zigzag varints; a count of 0 means ``[0]``), then the payload: Avro
binary, Protobuf binary or JSON text, whichever the registry says the id's schema is.

The struct evolves: the topic's subject (``<topic>-value``, ``<topic>-key`` for keys) is asked for its versions
at every segment, and every schema id seen in a value is fetched once. Each version's Arrow type is merged by
field name into the struct (:func:`~rsm.iceberg.values.common.merge_types`); a version that cannot be merged
(a field changed to another type) is incompatible: its values keep the column null (their bytes are in the raw
column), :data:`STATS` counts them, and the log names the schema id once.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rsm.iceberg.values.avro import AvroValueParser
from rsm.iceberg.values.common import IncompatibleSchema, UnsupportedSchema, ValueParser, merge_types, to_array
from rsm.iceberg.values.json_schema import JsonSchemaValueParser
from rsm.iceberg.values.protobuf import ProtobufValueParser, compile_proto, message_at

log = logging.getLogger(__name__)

#: The magic byte that starts a value in the Confluent wire format.
CONFLUENT_MAGIC = 0

_TYPES = ("AVRO", "PROTOBUF", "JSON")


# ----------------------------------------------------------------------------------------------- wire format


def split_wire_format(raw: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a value in the Confluent wire format; ValueError when it is not one."""
    if len(raw) < 5 or raw[0] != CONFLUENT_MAGIC:
        raise ValueError("not the schema registry wire format")
    (schema_id,) = struct.unpack(">I", raw[1:5])
    return schema_id, raw[5:]


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (protobuf's sint32/sint64) at ``pos``: ``(value, next pos)``; ValueError past the end."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("message indexes run past the end of the value")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("message index varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _write_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def split_message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    """``(message indexes, Protobuf payload)`` of a Protobuf value's bytes after the schema id; ValueError when
    the indexes are cut short or not indexes at all (negative, or more than the payload could hold)."""
    count, pos = _read_varint(payload, 0)
    if count == 0:
        return [0], payload[pos:]
    if count < 0 or count > len(payload):
        raise ValueError(f"{count} message indexes in a value of {len(payload)} bytes")
    indexes = []
    for _ in range(count):
        i, pos = _read_varint(payload, pos)
        if i < 0:
            raise ValueError(f"negative message index {i}")
        indexes.append(i)
    return indexes, payload[pos:]


def message_indexes_bytes(indexes: Sequence[int]) -> bytes:
    """The wire-format encoding of message indexes (``[0]`` as the single byte 0, as Confluent writes it)."""
    if list(indexes) == [0]:
        return b"\x00"
    return _write_varint(len(indexes)) + b"".join(_write_varint(i) for i in indexes)


def wire_value(schema_id: int, payload: bytes, indexes: Sequence[int] | None = None) -> bytes:
    """A value in the wire format (``indexes`` for Protobuf): what a Confluent serializer writes."""
    head = bytes([CONFLUENT_MAGIC]) + struct.pack(">I", schema_id)
    return head + (message_indexes_bytes(indexes) if indexes is not None else b"") + payload


# -------------------------------------------------------------------------------------------------- client


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema of the registry: its id, type (AVRO, PROTOBUF or JSON), text and references
    (``(import name, subject, version)``)."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[tuple[str, str, int], ...] = ()


class SchemaRegistryClient:
    """The Confluent REST API of a schema registry (Confluent's, Apicurio's ``/apis/ccompat/v7``, Karapace...):
    schemas by id and subject versions, each schema fetched once."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._by_id: dict[int, RegisteredSchema | None] = {}
        self._by_version: dict[tuple[str, int], RegisteredSchema] = {}
        self._lock = threading.Lock()

    def _get(self, path: str) -> Any | None:
        """The JSON body of ``GET path``, None on 404; other HTTP errors and connection failures raise."""
        req = urllib.request.Request(self.url + path, headers={"Accept": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    @staticmethod
    def _registered(schema_id: int, body: dict[str, Any]) -> RegisteredSchema:
        refs = tuple((str(r["name"]), str(r["subject"]), int(r["version"])) for r in body.get("references") or ())
        return RegisteredSchema(schema_id, str(body.get("schemaType") or "AVRO").upper(), str(body["schema"]), refs)

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        """The schema of ``schema_id`` (``GET /schemas/ids/{id}``), or None when the registry has no such id."""
        with self._lock:
            if schema_id in self._by_id:
                return self._by_id[schema_id]
        body = self._get(f"/schemas/ids/{schema_id}")
        got = None if body is None else self._registered(schema_id, body)
        with self._lock:
            self._by_id[schema_id] = got
        return got

    def versions(self, subject: str) -> list[int]:
        """The subject's version numbers (``GET /subjects/{subject}/versions``); empty when there is none."""
        body = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions")
        return sorted(int(v) for v in body or ())

    def version(self, subject: str, version: int | str) -> RegisteredSchema | None:
        """The schema of one version of ``subject`` (a number, or ``"latest"``); None when there is none."""
        if isinstance(version, int):
            with self._lock:
                if (subject, version) in self._by_version:
                    return self._by_version[(subject, version)]
        body = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}")
        if body is None:
            return None
        got = self._registered(int(body["id"]), body)
        with self._lock:
            self._by_version[(subject, int(body.get("version", version if isinstance(version, int) else 0)))] = got
            self._by_id.setdefault(got.schema_id, got)
        return got

    def proto_files(self, schema: RegisteredSchema, name: str) -> dict[str, str]:
        """The ``.proto`` texts a Protobuf schema compiles from: itself as ``name`` and its references, each
        under its import name (references of references too)."""
        files = {name: schema.text}
        todo = list(schema.references)
        while todo:
            ref_name, subject, version = todo.pop()
            if ref_name in files:
                continue
            ref = self.version(subject, version)
            if ref is None:
                raise UnsupportedSchema(f"reference {ref_name!r} (subject {subject!r} version {version}) not found")
            files[ref_name] = ref.text
            todo += ref.references
        return files


# -------------------------------------------------------------------------------------- parsers of one schema


def parser_of(client: SchemaRegistryClient, schema: RegisteredSchema, indexes: Sequence[int] = (0,)) -> ValueParser:
    """The parser of a registry schema's payloads (for Protobuf, of the message ``indexes`` point at);
    UnsupportedSchema when it cannot give a struct."""
    if schema.schema_type == "AVRO":
        if schema.references:
            raise UnsupportedSchema("Avro schemas with references are not supported")
        return AvroValueParser(json.loads(schema.text))
    if schema.schema_type == "JSON":
        if schema.references:
            raise UnsupportedSchema("JSON Schemas with references are not supported")
        return JsonSchemaValueParser(json.loads(schema.text))
    if schema.schema_type == "PROTOBUF":
        name = f"kts_schema_{schema.schema_id}.proto"
        file = compile_proto(name, client.proto_files(schema, name))
        try:
            return ProtobufValueParser(message_at(file, indexes))
        except IndexError as e:
            raise UnsupportedSchema(f"message indexes {list(indexes)}: {e}") from e
    raise UnsupportedSchema(f"schema type {schema.schema_type!r} is not one of {', '.join(_TYPES)}")


@dataclass
class RegistryStats:
    """Counts since start, for the plugin's metrics."""

    incompatible_rows: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_incompatible(self, n: int) -> None:
        with self.lock:
            self.incompatible_rows += n

    def stats(self) -> dict[str, float]:
        """The counters with their metric names."""
        return {"incompatible-rows-total": float(self.incompatible_rows)}


STATS = RegistryStats()
"""Rows whose schema id could not be merged into their table's struct, over every topic of the process."""


def _prune(value: Any, t: pa.DataType) -> Any:
    """``value`` without the struct fields ``t`` lacks (a value of a schema newer than the segment's struct)."""
    if value is None:
        return None
    if pa.types.is_struct(t) and isinstance(value, dict):
        return {f.name: _prune(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t) and isinstance(value, list):
        return [_prune(v, t.value_type) for v in value]
    if pa.types.is_map(t) and isinstance(value, list):
        return [(k, _prune(v, t.item_type)) for k, v in value]
    return value


@dataclass
class _Chunk:
    """What converting one chunk keeps: rows of incompatible ids, and whether each parser's struct fits the
    segment's (else its values are pruned)."""

    incompatible: int = 0
    fits: dict[ValueParser, bool] = field(default_factory=dict)


class RegistryValueParser:
    """One topic's values (or keys) in the wire format, into a struct that follows the subject's versions.

    ``column_type()`` refreshes the struct from the registry (once per segment); ``convert(type, raws)`` reads
    a chunk into that struct. Thread-safe: copies of several partitions share it.
    """

    def __init__(self, client: SchemaRegistryClient, subject: str, pinned_id: int | None = None) -> None:
        self.client = client
        self.subject = subject
        self.pinned_id = pinned_id
        self._lock = threading.Lock()
        self._parsers: dict[tuple[int, tuple[int, ...]], ValueParser | None] = {}
        self._merged: pa.DataType | None = None
        self._merged_ids: set[int] = set()
        self._incompatible: set[int] = set()
        self._seen: list[int] = []  # ids noted (note_ids), merged at the next refresh

    # --- the struct ----------------------------------------------------------------------------------------

    def _parser(self, schema_id: int, indexes: tuple[int, ...]) -> ValueParser | None:
        """The id's parser (None: no such id, or a schema that gives no struct; logged once)."""
        with self._lock:
            if (schema_id, indexes) in self._parsers:
                return self._parsers[(schema_id, indexes)]
        schema = self.client.schema(schema_id)
        parser: ValueParser | None = None
        if schema is None:
            log.warning(
                "subject %s: the schema registry has no schema id %d; its values stay raw", self.subject, schema_id
            )
        else:
            try:
                parser = parser_of(self.client, schema, indexes)
            except (UnsupportedSchema, ValueError) as e:
                log.warning(
                    "subject %s: schema id %d gives no struct (%s); its values stay raw", self.subject, schema_id, e
                )
        with self._lock:
            self._parsers.setdefault((schema_id, indexes), parser)
            return self._parsers[(schema_id, indexes)]

    def _merge(self, schema_id: int) -> None:
        if schema_id in self._merged_ids or schema_id in self._incompatible:
            return
        parser = self._parser(schema_id, (0,))
        if parser is None:
            return
        with self._lock:
            if self._merged is None:
                self._merged = parser.arrow_type
            else:
                try:
                    self._merged = merge_types(self._merged, parser.arrow_type)
                except IncompatibleSchema as e:
                    self._incompatible.add(schema_id)
                    log.warning(
                        "subject %s: schema id %d is incompatible with the table's struct (%s); its values keep "
                        "the parsed column null (their bytes stay in the raw column)",
                        self.subject,
                        schema_id,
                        e,
                    )
                    return
            self._merged_ids.add(schema_id)

    def note_ids(self, raws: Sequence[bytes | None]) -> None:
        """Have the next ``column_type`` merge the schema ids of these values too."""
        for raw in raws:
            try:
                sid, _ = split_wire_format(bytes(raw)) if raw is not None else (None, b"")
            except ValueError:
                continue
            with self._lock:
                if sid is not None and sid not in self._seen:
                    self._seen.append(sid)

    def column_type(self) -> pa.StructType | None:
        """The struct for the next segment: the pinned id, every version of the subject and every id seen in
        values, merged; None while none of them is known."""
        if self.pinned_id is not None:
            self._merge(self.pinned_id)
        for version in self.client.versions(self.subject):
            schema = self.client.version(self.subject, version)
            if schema is not None:
                self._merge(schema.schema_id)
        with self._lock:
            seen, self._seen = self._seen, []
        for sid in seen:
            self._merge(sid)
        with self._lock:
            merged = self._merged
        return merged if isinstance(merged, pa.StructType) else None

    # --- the values ------------------------------------------------------------------------------------------

    def _value(self, arrow_type: pa.DataType, raw: bytes, chunk: _Chunk) -> Any:
        sid, payload = split_wire_format(raw)
        if sid not in self._merged_ids:
            # An id first met here is merged now: incompatible at once, else its new fields join the next segment.
            self._merge(sid)
        if sid in self._incompatible:
            chunk.incompatible += 1
            return None
        parser = self._parsers.get((sid, (0,))) or self._parser(sid, (0,))
        if isinstance(parser, ProtobufValueParser):
            indexes, payload = split_message_indexes(payload)
            if indexes != [0]:
                parser = self._parser(sid, tuple(indexes))
        if parser is None:
            return None
        value = parser.parse_one(payload)
        fits = chunk.fits.get(parser)
        if fits is None:
            try:
                fits = chunk.fits[parser] = merge_types(arrow_type, parser.arrow_type).equals(arrow_type)
            except IncompatibleSchema:
                fits = chunk.fits[parser] = False
        # Fields this segment's struct lacks (a version merged since it was fixed) are left out.
        return value if fits else _prune(value, arrow_type)

    def convert(self, arrow_type: pa.DataType, raws: Sequence[bytes | None]) -> pa.Array:
        """The chunk's values in ``arrow_type`` (a struct ``column_type`` gave), null where one does not parse."""
        chunk = _Chunk()
        out = to_array(
            arrow_type,
            (None if raw is None else (lambda raw=raw: self._value(arrow_type, bytes(raw), chunk)) for raw in raws),
        )
        if chunk.incompatible:
            STATS.add_incompatible(chunk.incompatible)
        return out
