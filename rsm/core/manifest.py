"""The segment manifest (``.rsm-manifest``): Aiven's JSON version "1", plus our integrity record.

The manifest is uploaded last and is the commit marker of a copy: a segment without one does not exist.
It is not encrypted (it holds only the *wrapped* data key). Our per-chunk CRC-32C values live in
``remoteLogSegmentMetadata.integrity``: Aiven declares that whole property write-only (ignored when it reads a
manifest), so the extra field can never break Aiven's reader, while ours verifies every chunk it serves.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from chunking.chunk_index import MAX_FILE_SIZE, ChunkIndex, ChunkIndexError, json_int
from rsm.core.manifest_sections import ManifestSection, section_parsers
from rsm.errors import CorruptDataException
from rsm.metadata import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

# A manifest is a few KiB (a variable index of the largest allowed chunk count stays well under this); anything
# bigger is refused before it is parsed.
MAX_MANIFEST_SIZE = 32 * 1024 * 1024
READ_PIECE = 64 * 1024
"""Manifests are read in pieces of this size: ``read(MAX_MANIFEST_SIZE + 1)`` at once may allocate the whole
32 MiB bound up front (a file object sizes its buffer by the request), for every manifest a pool has in flight."""


def read_bounded(f: BinaryIO) -> bytes:
    """A manifest object's bytes, stopping once past ``MAX_MANIFEST_SIZE`` (the parser then refuses it by size)."""
    parts: list[bytes] = []
    total = 0
    while total <= MAX_MANIFEST_SIZE and (piece := f.read(READ_PIECE)):
        parts.append(piece)
        total += len(piece)
    return b"".join(parts)


INDEX_JSON_NAMES: dict[IndexType, str] = {
    IndexType.OFFSET: "offset",
    IndexType.TIMESTAMP: "timestamp",
    IndexType.PRODUCER_SNAPSHOT: "producerSnapshot",
    IndexType.LEADER_EPOCH: "leaderEpoch",
    IndexType.TRANSACTION: "transaction",
}
# The order in which the indexes are concatenated into the .indexes object (Aiven's order).
INDEX_UPLOAD_ORDER = [
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.LEADER_EPOCH,
    IndexType.TRANSACTION,
]


@dataclass(frozen=True)
class SegmentIndexEntry:
    position: int
    size: int


@dataclass(frozen=True)
class EncryptionMetadata:
    data_key: str  # "<keyPairId>:<base64 RSA-OAEP(DEK)>"
    aad: bytes

    @property
    def key_pair_id(self) -> str:
        return self.data_key.split(":", 1)[0]


@dataclass(frozen=True)
class IntegrityRecord:
    """CRC-32C of every original chunk and of every original index."""

    chunk_crcs: list[int]
    index_crcs: dict[IndexType, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": "crc32c",
            "chunks": base64.b64encode(struct.pack(f">{len(self.chunk_crcs)}I", *self.chunk_crcs)).decode("ascii"),
            "indexes": {INDEX_JSON_NAMES[t]: crc for t, crc in self.index_crcs.items()},
        }

    @staticmethod
    def from_json(obj: Any) -> IntegrityRecord | None:
        """``None`` only when the manifest has no record at all (Aiven's plugin writes none). A record that is
        present but malformed raises: dropping it would silently turn off the CRC check of every read."""
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise ValueError(f"integrity must be a JSON object, got {type(obj).__name__}")
        if obj.get("algorithm") != "crc32c":
            raise ValueError(f"integrity.algorithm {str(obj.get('algorithm'))[:40]!r} is unknown (expected 'crc32c')")
        chunks = obj.get("chunks")
        if not isinstance(chunks, str):
            raise ValueError("integrity.chunks must be a base64 string")
        raw = base64.b64decode(chunks, validate=True)
        if len(raw) % 4:
            raise ValueError("integrity.chunks is not a whole number of 32-bit values")
        crcs = list(struct.unpack(f">{len(raw) // 4}I", raw))
        indexes = obj.get("indexes") or {}
        if not isinstance(indexes, dict):
            raise ValueError("integrity.indexes must be a JSON object")
        by_name = {v: k for k, v in INDEX_JSON_NAMES.items()}
        index_crcs = {
            by_name[k]: json_int(f"integrity.indexes.{k}", v, 0, 2**32 - 1) for k, v in indexes.items() if k in by_name
        }
        return IntegrityRecord(crcs, index_crcs)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a manifest can hold")


def metadata_to_json(meta: RemoteLogSegmentMetadata) -> dict[str, Any]:
    seg = meta.remote_log_segment_id
    tip = seg.topic_id_partition
    return {
        "remoteLogSegmentId": {
            "topicIdPartition": {
                "topicId": tip.topic_id,
                "topicPartition": {"topic": tip.topic, "partition": tip.partition},
            },
            "id": seg.id,
        },
        "startOffset": meta.start_offset,
        "endOffset": meta.end_offset,
        "maxTimestampMs": meta.max_timestamp_ms,
        "brokerId": meta.broker_id,
        "eventTimestampMs": meta.event_timestamp_ms,
        "segmentLeaderEpochs": {str(k): v for k, v in sorted(meta.segment_leader_epochs.items())},
    }


def metadata_from_json(obj: Any, segment_size: int = 0) -> RemoteLogSegmentMetadata:
    """The broker's metadata as the manifest recorded it (the inverse of ``metadata_to_json``).

    Raises ``KeyError``/``TypeError``/``ValueError`` on a malformed record; callers name the manifest.
    """
    seg = obj["remoteLogSegmentId"]
    tip_obj = seg["topicIdPartition"]
    tp = tip_obj["topicPartition"]
    tip = TopicIdPartition(str(tip_obj["topicId"]), str(tp["topic"]), int(tp["partition"]))
    epochs = {int(k): int(v) for k, v in (obj.get("segmentLeaderEpochs") or {}).items()}
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, str(seg["id"])),
        int(obj["startOffset"]),
        int(obj["endOffset"]),
        int(obj.get("maxTimestampMs", -1)),
        int(obj.get("brokerId", -1)),
        int(obj.get("eventTimestampMs", -1)),
        segment_size,
        epochs,
    )


@dataclass
class SegmentManifest:
    chunk_index: ChunkIndex
    segment_indexes: dict[IndexType, SegmentIndexEntry | None]
    compression: bool
    encryption: EncryptionMetadata | None
    remote_log_segment_metadata: dict[str, Any] | None = None
    integrity: IntegrityRecord | None = None
    section: ManifestSection | None = None
    """Set for a segment of a format other than the classic one (Iceberg mode: rows in a table's data files);
    such a segment has no ``.log`` object, and its chunk index describes the original segment as one chunk."""

    @property
    def kind(self) -> str:
        """``classic`` (chunks of the segment file) or the name of the format whose section the manifest holds."""
        return self.section.kind if self.section is not None else "classic"

    def to_json_bytes(self) -> bytes:
        indexes: dict[str, Any] = {}
        for t in INDEX_UPLOAD_ORDER:
            e = self.segment_indexes.get(t)
            indexes[INDEX_JSON_NAMES[t]] = None if e is None else {"position": e.position, "size": e.size}
        doc: dict[str, Any] = {
            "version": "1",
            "chunkIndex": self.chunk_index.to_json(variable=self.compression),
            "segmentIndexes": indexes,
            "compression": self.compression,
        }
        if self.encryption is not None:
            doc["encryption"] = {
                "dataKey": self.encryption.data_key,
                "aad": base64.b64encode(self.encryption.aad).decode("ascii"),
            }
        rlsm = dict(self.remote_log_segment_metadata or {})
        if self.integrity is not None:
            rlsm["integrity"] = self.integrity.to_json()
        if rlsm:
            doc["remoteLogSegmentMetadata"] = rlsm
        if self.section is not None:
            doc[self.section.kind] = self.section.to_json()
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    def recorded_metadata(self, what: str = "manifest") -> RemoteLogSegmentMetadata:
        """The broker's metadata of the segment as this manifest recorded it (sized by the chunk index): what
        tools list, read without the data key. Raises ``CorruptDataException`` naming ``what`` when the record
        is absent (a manifest of a plugin that does not write it) or malformed."""
        if self.remote_log_segment_metadata is None:
            raise CorruptDataException(
                f"{what} carries no remoteLogSegmentMetadata; it was not written by a plugin that records it, so "
                f"the segment's offsets are unknown"
            )
        try:
            return metadata_from_json(self.remote_log_segment_metadata, self.chunk_index.original_file_size)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptDataException(
                f"{what} has a malformed remoteLogSegmentMetadata: {type(e).__name__}: {e}"
            ) from None

    @staticmethod
    def from_json_bytes(data: bytes, what: str = "manifest") -> SegmentManifest:
        """Parse and bound-check a manifest; every failure is a ``CorruptDataException`` naming ``what``."""
        if len(data) > MAX_MANIFEST_SIZE:
            raise CorruptDataException(f"{what} is {len(data)} bytes, more than the {MAX_MANIFEST_SIZE} a manifest has")
        try:
            doc = json.loads(data, parse_constant=_refuse_constant)
        except (ValueError, RecursionError, MemoryError, OverflowError) as e:
            # ValueError covers bad UTF-8, bad JSON and integers past Python's digit limit; deep nesting recurses.
            raise CorruptDataException(f"{what} is not valid JSON: {type(e).__name__}: {str(e)[:200]}") from None
        try:
            return SegmentManifest._from_doc(doc, what)
        except (RecursionError, MemoryError, OverflowError, AttributeError) as e:
            raise CorruptDataException(f"{what} is malformed: {type(e).__name__}: {str(e)[:200]}") from None

    @staticmethod
    def _from_doc(doc: Any, what: str) -> SegmentManifest:
        if not isinstance(doc, dict):
            raise CorruptDataException(f"{what} is not a JSON object")
        if doc.get("version") != "1":
            raise CorruptDataException(f'{what} has unsupported version {doc.get("version")!r} (expected "1")')
        try:
            chunk_index = ChunkIndex.from_json(doc["chunkIndex"])
            raw_indexes = doc["segmentIndexes"]
            indexes: dict[IndexType, SegmentIndexEntry | None] = {}
            for t, name in INDEX_JSON_NAMES.items():
                if name not in raw_indexes and t is not IndexType.TRANSACTION:
                    raise KeyError(f"segmentIndexes.{name}")
                e = raw_indexes.get(name)
                if e is None:
                    indexes[t] = None
                    continue
                position = json_int(f"segmentIndexes.{name}.position", e["position"], 0, MAX_FILE_SIZE)
                size = json_int(f"segmentIndexes.{name}.size", e["size"], 0, MAX_FILE_SIZE)
                indexes[t] = SegmentIndexEntry(position, size)
            compression = doc["compression"]
            if not isinstance(compression, bool):
                raise TypeError("compression must be a boolean")
            enc = doc.get("encryption")
            encryption = None
            if enc is not None:
                encryption = EncryptionMetadata(str(enc["dataKey"]), base64.b64decode(enc["aad"], validate=True))
            rlsm = doc.get("remoteLogSegmentMetadata")
            integrity = None
            if rlsm is not None and not isinstance(rlsm, dict):
                raise TypeError("remoteLogSegmentMetadata must be a JSON object")
            if isinstance(rlsm, dict):
                rlsm = dict(rlsm)
                integrity = IntegrityRecord.from_json(rlsm.pop("integrity", None))
                if integrity is not None and len(integrity.chunk_crcs) != chunk_index.chunk_count:
                    raise ValueError(
                        f"integrity lists {len(integrity.chunk_crcs)} chunk checksums for "
                        f"{chunk_index.chunk_count} chunks"
                    )
            section = None
            for kind, parse in section_parsers().items():
                if doc.get(kind) is not None:
                    if section is not None:
                        raise ValueError(f"holds sections of two formats, {section.kind} and {kind}")
                    section = parse(doc[kind])
        except CorruptDataException:
            raise
        except (KeyError, TypeError, ValueError, binascii.Error, ChunkIndexError, struct.error) as e:
            raise CorruptDataException(f"{what} is malformed: {type(e).__name__}: {str(e)[:300]}") from None
        return SegmentManifest(chunk_index, indexes, compression, encryption, rlsm, integrity, section)
