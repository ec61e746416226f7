"""Object keys in Aiven's layout, so both plugins find each other's segments.

``<prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>`` with suffixes
``log``, ``indexes`` and ``rsm-manifest``. The "main path" is the part between prefix and suffix; it is what
the OBJECT_KEY custom-metadata field records.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rsm.metadata import RemoteLogSegmentMetadata


class Suffix(enum.Enum):
    LOG = "log"
    INDEXES = "indexes"
    MANIFEST = "rsm-manifest"


def main_path(meta: RemoteLogSegmentMetadata) -> str:
    seg = meta.remote_log_segment_id
    tip = seg.topic_id_partition
    return f"{tip.topic}-{tip.topic_id}/{tip.partition}/{meta.start_offset:020d}-{seg.id}"


@dataclass(frozen=True)
class SegmentKeys:
    """The three keys of one segment."""

    prefix: str
    main_path: str

    def key(self, suffix: Suffix) -> str:
        return f"{self.prefix}{self.main_path}.{suffix.value}"

    @property
    def log(self) -> str:
        return self.key(Suffix.LOG)

    @property
    def indexes(self) -> str:
        return self.key(Suffix.INDEXES)

    @property
    def manifest(self) -> str:
        return self.key(Suffix.MANIFEST)

    def all(self) -> list[str]:
        return [self.log, self.indexes, self.manifest]


def segment_keys(prefix: str, meta: RemoteLogSegmentMetadata) -> SegmentKeys:
    return SegmentKeys(prefix, main_path(meta))


def mask(key: str, prefix: str, masked: bool) -> str:
    """A key for logs: with ``key.prefix.mask`` the prefix (which may hold an account name) is hidden."""
    if masked and prefix and key.startswith(prefix):
        return "<prefix>" + key[len(prefix) :]
    return key
