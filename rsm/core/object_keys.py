"""Object keys in Aiven's layout, so both plugins find each other's segments.

``<prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>`` with suffixes
``log``, ``indexes`` and ``rsm-manifest``. The "main path" is the part between prefix and suffix; it is what
the OBJECT_KEY custom-metadata field records.

``segment_keys`` is the one rule that says where a segment's objects are, for every operation.
"""

from __future__ import annotations

import base64
import enum
import logging
import re
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


# A Kafka Uuid as Uuid.toString() writes it: 16 bytes, base64url without padding (22 characters).
_UUID = r"[A-Za-z0-9_-]{22}"
# Kafka's legal topic names: 1 to 249 of [a-zA-Z0-9._-].
_OBJECT_KEY = re.compile(
    rf"(?P<topic>[A-Za-z0-9._-]{{1,249}})-(?P<topic_id>{_UUID})/(?P<partition>0|[1-9][0-9]{{0,9}})/"
    rf"(?P<offset>[0-9]{{20}})-(?P<segment_id>{_UUID})\.(?P<suffix>log|indexes|rsm-manifest)"
)


@dataclass(frozen=True)
class ParsedKey:
    """An object key that follows the plugin's layout (ours and Aiven's), split into its parts."""

    prefix: str
    topic: str
    topic_id: str
    partition: int
    start_offset: int
    segment_id: str
    suffix: Suffix

    @property
    def main_path(self) -> str:
        return f"{self.topic}-{self.topic_id}/{self.partition}/{self.start_offset:020d}-{self.segment_id}"

    @property
    def keys(self) -> SegmentKeys:
        return SegmentKeys(self.prefix, self.main_path)


def _is_uuid(text: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError:
        return False
    return len(raw) == 16 and base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == text


def parse_object_key(key: str, prefix: str) -> ParsedKey | None:
    """``key`` split into the parts of the plugin's layout under ``prefix``, or None when it does not follow it
    exactly (another application's object under the same prefix): only such keys are ever treated as the
    plugin's. The topic and segment ids must be canonical Kafka Uuids, the partition an int32, the offset 20
    digits within a signed 64-bit range, and the suffix one the plugin writes."""
    if not key.startswith(prefix):
        return None
    m = _OBJECT_KEY.fullmatch(key, len(prefix))
    if m is None:
        return None
    partition, offset = int(m["partition"]), int(m["offset"])
    if partition > 2**31 - 1 or offset > 2**63 - 1:
        return None
    if not (_is_uuid(m["topic_id"]) and _is_uuid(m["segment_id"])) or m["topic"] in (".", ".."):
        return None
    return ParsedKey(prefix, m["topic"], m["topic_id"], partition, offset, m["segment_id"], Suffix(m["suffix"]))


def mask(key: str, prefix: str, masked: bool) -> str:
    """A key for logs: with ``key.prefix.mask`` the prefix (which may hold an account name) is hidden."""
    if masked and prefix and key.startswith(prefix):
        return "<prefix>" + key[len(prefix) :]
    return key
