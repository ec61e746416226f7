"""The custom metadata bytes returned from ``copyLogSegmentData``, in Aiven's encoding.

Kafka stores them in the remote log metadata topic (at most ``remote.log.metadata.custom.metadata.max.bytes``,
128 by default). Encoding: a tagged-fields section only, ``uvarint(count)`` then per field in tag order
``uvarint(tag) uvarint(size) value``. Tag 0 REMOTE_SIZE is a zigzag varlong, tags 1 OBJECT_PREFIX and
2 OBJECT_KEY are compact strings (``uvarint(len+1)`` + UTF-8).
"""

from __future__ import annotations

from dataclasses import dataclass

FIELDS = ("REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY")
TAG_REMOTE_SIZE, TAG_OBJECT_PREFIX, TAG_OBJECT_KEY = 0, 1, 2


class CustomMetadataError(ValueError):
    """The custom metadata bytes cannot be decoded."""


def write_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("uvarint cannot encode a negative value")
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_uvarint(data: bytes, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    result = shift = 0
    for i in range(max_bytes):
        if pos + i >= len(data):
            raise CustomMetadataError(f"truncated varint at byte {pos}")
        b = data[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise CustomMetadataError(f"varint longer than {max_bytes} bytes at byte {pos}")


def zigzag64(value: int) -> int:
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF


def unzigzag64(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _compact_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return write_uvarint(len(raw) + 1) + raw


def _read_compact_string(body: bytes, tag: int) -> str | None:
    """A Kafka compact string filling a tagged field: uvarint length + 1 (0 = null), then UTF-8 bytes. A length
    past the field or bytes that are not UTF-8 mean the field is damaged: never a shortened or replaced name."""
    length, start = read_uvarint(body, 0)
    if length == 0:
        return None
    raw = body[start : start + length - 1]
    if len(raw) != length - 1:
        raise CustomMetadataError(f"field {tag} declares a {length - 1}-byte string but holds {len(raw)} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CustomMetadataError(f"field {tag} is not UTF-8: {e}") from None


@dataclass(frozen=True)
class CustomMetadata:
    remote_size: int | None = None
    object_prefix: str | None = None
    object_key: str | None = None

    def encode(self) -> bytes | None:
        """The bytes for Kafka, or None when no field is set (Kafka's ``Optional.empty()``)."""
        fields: list[tuple[int, bytes]] = []
        if self.remote_size is not None:
            fields.append((TAG_REMOTE_SIZE, write_uvarint(zigzag64(self.remote_size))))
        if self.object_prefix is not None:
            fields.append((TAG_OBJECT_PREFIX, _compact_string(self.object_prefix)))
        if self.object_key is not None:
            fields.append((TAG_OBJECT_KEY, _compact_string(self.object_key)))
        if not fields:
            return None
        out = bytearray(write_uvarint(len(fields)))
        for tag, value in fields:
            out += write_uvarint(tag) + write_uvarint(len(value)) + value
        return bytes(out)

    @staticmethod
    def decode(data: bytes | None) -> CustomMetadata:
        if not data:
            return CustomMetadata()
        count, pos = read_uvarint(data, 0)
        values: dict[int, object] = {}
        for _ in range(count):
            tag, pos = read_uvarint(data, pos)
            size, pos = read_uvarint(data, pos)
            body = data[pos : pos + size]
            if len(body) != size:
                raise CustomMetadataError(f"field {tag} declares {size} bytes but only {len(body)} remain")
            pos += size
            if tag == TAG_REMOTE_SIZE:
                raw, end = read_uvarint(body, 0)
                values[tag] = unzigzag64(raw)
            elif tag in (TAG_OBJECT_PREFIX, TAG_OBJECT_KEY):
                values[tag] = _read_compact_string(body, tag)
            # unknown tags are skipped, as Kafka's tagged fields allow
        if pos != len(data):
            raise CustomMetadataError(f"{len(data) - pos} trailing bytes after the tagged fields")
        return CustomMetadata(
            values.get(TAG_REMOTE_SIZE),
            values.get(TAG_OBJECT_PREFIX),  # type: ignore[arg-type]
            values.get(TAG_OBJECT_KEY),
        )  # type: ignore[arg-type]
