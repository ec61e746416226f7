"""Object keys in Aiven's layout, so both plugins find each other's segments.

``<prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>`` with suffixes
``log``, ``indexes`` and ``rsm-manifest``. The "main path" is the part between prefix and suffix; it is what
the OBJECT_KEY custom-metadata field records.

``segment_keys`` is the one rule that says where a segment's objects are, for every operation.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from rsm.core.custom_metadata import CustomMetadata
from rsm.metadata import RemoteLogSegmentMetadata

log = logging.getLogger(__name__)


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
    """The segment's keys under the configured ``prefix`` (``key.prefix``), unless its custom metadata recorded
    where its copy put them: a recorded prefix or main path wins for every operation (copy, fetch, index,
    delete), so changing ``key.prefix`` later never orphans a segment. Metadata without custom metadata (a copy
    in progress, tools listing the store) gives the configured layout."""
    path = main_path(meta)
    if meta.custom_metadata:
        try:
            recorded = CustomMetadata.decode(meta.custom_metadata)
        except ValueError as e:
            log.warning("ignoring undecodable custom metadata of %s: %s", meta.describe(), e)
        else:
            if recorded.object_prefix is not None:
                prefix = recorded.object_prefix
            if recorded.object_key is not None:
                path = recorded.object_key
    return SegmentKeys(prefix, path)


def mask(key: str, prefix: str, masked: bool) -> str:
    """A key for logs: with ``key.prefix.mask`` the prefix (which may hold an account name) is hidden."""
    if masked and prefix and key.startswith(prefix):
        return "<prefix>" + key[len(prefix) :]
    return key
