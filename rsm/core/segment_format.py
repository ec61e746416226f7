"""How a segment is stored: the ``SegmentFormat`` protocol, the formats plugged in beside the classic one, and
the choice between them.

A format writes a segment's body (classic: ``.log``, the segment in chunks; Iceberg mode: rows of the topic's
table), opens fetches and row reads of what it wrote, and deletes it. What every segment has besides, its
``.indexes`` and its manifest, is written and removed by ``rsm.core.segment_objects`` whatever the format.

The classic format lives in this package (``rsm.core.classic_format``). Any other is plugged in from above
(``plug_format``, which the package root calls for Iceberg mode), so the plugin names no format but its own.
The manager chooses once per segment: by configuration on copy (``Formats.for_copy``), by the manifest's kind on
fetch and delete (``Formats.of``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from backends.configdef import ConfigDef
from chunking.chunk_index import ChunkIndex
from encryption.aes import ChunkCipher
from rsm.core.config import RsmConfig
from rsm.core.manifest import EncryptionMetadata, SegmentManifest
from rsm.core.manifest_sections import ManifestSection, add_section_parser
from rsm.core.object_keys import SegmentKeys
from rsm.errors import CorruptDataException
from rsm.fetch.source import SegmentSource
from rsm.metadata import LogSegmentData, RemoteLogSegmentMetadata

if TYPE_CHECKING:
    import pyarrow as pa

    from rsm.metrics.sources import HasStats

__all__ = [
    "FormatPlugin",
    "Formats",
    "SegmentFormat",
    "WrittenBody",
    "plug_format",
    "plugged_formats",
]


@dataclass(frozen=True)
class WrittenBody:
    """What a format's copy of a segment's body leaves for the manifest: the chunk index (for a body without
    chunks, the original segment as one chunk, which gives its size), a CRC-32C per chunk, the codec and data key
    (``cipher`` also encrypts the ``.indexes``), the bytes stored in ``.log`` and the format's manifest section."""

    chunk_index: ChunkIndex
    chunk_crcs: list[int]
    compression: bool
    encryption: EncryptionMetadata | None
    cipher: ChunkCipher | None
    log_size: int
    section: ManifestSection | None = None


class SegmentFormat(Protocol):
    """One way of storing a segment's body. Thread-safe: the broker copies, fetches and deletes at once."""

    @property
    def kind(self) -> str:
        """``classic``, or the manifest key of the format's section."""
        ...

    @property
    def stores_log(self) -> bool:
        """Whether its segments have a ``.log`` object (gc: a manifest without one answers for nothing)."""
        ...

    @property
    def deletes_need_manifest(self) -> bool:
        """Whether ``delete_body`` must be given the segment's manifest (read before a delete, then)."""
        ...

    def takes(self, topic: str) -> bool:
        """Whether the configuration tiers ``topic``'s segments in this format."""
        ...

    def write_body(
        self,
        meta: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        keys: SegmentKeys,
        uploaded: list[str],
        cancelled: Callable[[], bool] | None,
    ) -> WrittenBody | None:
        """Store the segment's body; None: the segment cannot be stored this way (the classic format takes it).
        Every object key uploaded to goes into ``uploaded`` first (a failed copy removes them). ``cancelled``:
        once true, stop with ``CopyCancelled``, leaving nothing committed."""
        ...

    def open_fetch(
        self,
        meta: RemoteLogSegmentMetadata,
        manifest: SegmentManifest,
        source: SegmentSource,
        start: int,
        end: int | None,
    ) -> BinaryIO:
        """A lazy stream over the segment's bytes ``[start, end]`` (inclusive; None: to the end)."""
        ...

    def open_rows(
        self,
        meta: RemoteLogSegmentMetadata,
        manifest: SegmentManifest,
        start: int,
        end: int | None,
        columns: Sequence[str],
        kafka_fields: Sequence[str] | None,
    ) -> Iterator[pa.Table]:
        """The rows of the batches at positions ``[start, end]``, for readers that want records (Spark);
        ``RemoteStorageException`` for a format that keeps no rows."""
        ...

    def delete_body(self, meta: RemoteLogSegmentMetadata, manifest: SegmentManifest | None) -> None:
        """Delete what the segment stored outside its three objects, before its manifest goes (a failure leaves
        the manifest, so the broker's retry finds it again). ``manifest`` is None where it is gone already."""
        ...

    def metric_sources(self) -> Mapping[str, Callable[[], HasStats | None]]:
        """The format's own counters, by the name ``rsm.metrics.sources.fetch_path_sources`` takes them."""
        ...

    def close(self) -> None:
        """Stop what the format runs in the background; fetches already open may still finish."""
        ...


class FormatPlugin(Protocol):
    """What plugs a format in: its manifest section, its configuration keys, and how to build it."""

    @property
    def kind(self) -> str: ...

    @property
    def config_defs(self) -> Sequence[ConfigDef]:
        """The declarations of the keys it reads from the plugin's map (so configure() does not refuse them)."""
        ...

    def parse_section(self, obj: Any) -> ManifestSection:
        """Its manifest section from JSON; ``KeyError``/``TypeError``/``ValueError`` when malformed."""
        ...

    def memory_floor(self, configs: Mapping[str, Any]) -> list[tuple[str, int]]:
        """(what, bytes) the format certainly holds in memory with ``configs``, each naming its key(s)."""
        ...

    def build(self, config: RsmConfig) -> SegmentFormat:
        """The format for one configured plugin; ``ConfigException`` when the configuration cannot work."""
        ...


_PLUGGED: dict[str, FormatPlugin] = {}


def plug_format(plugin: FormatPlugin) -> None:
    """Make ``plugin``'s format available to every plugin configured from now on: its manifest section read, its
    keys known. Plugging the same kind again replaces it."""
    _PLUGGED[plugin.kind] = plugin
    add_section_parser(plugin.kind, plugin.parse_section)


def plugged_formats() -> list[FormatPlugin]:
    """The formats plugged in beside the classic one."""
    return list(_PLUGGED.values())


class Formats:
    """The configured plugin's formats: the classic one and those plugged in, each built once."""

    def __init__(self, classic: SegmentFormat, others: Sequence[SegmentFormat]) -> None:
        self.classic = classic
        self.others = tuple(others)
        self._by_kind = {f.kind: f for f in (classic, *self.others)}

    def all(self) -> tuple[SegmentFormat, ...]:
        return (self.classic, *self.others)

    def named(self, kind: str) -> SegmentFormat | None:
        return self._by_kind.get(kind)

    def for_copy(self, topic: str) -> list[SegmentFormat]:
        """The formats to try for a copy of ``topic``'s segment, in order: the one its configuration names,
        then the classic one (which takes every segment)."""
        return [f for f in self.others if f.takes(topic)] + [self.classic]

    def of(self, manifest: SegmentManifest, what: str) -> SegmentFormat:
        """The format a segment was stored in, by its manifest's kind."""
        found = self._by_kind.get(manifest.kind)
        if found is None:
            raise CorruptDataException(
                f"{what} is a segment of format {manifest.kind!r}, which this plugin does not read"
            )
        return found

    def deleting_needs_manifest(self) -> bool:
        return any(f.deletes_need_manifest for f in self.all())

    def metric_sources(self) -> dict[str, Callable[[], HasStats | None]]:
        sources: dict[str, Callable[[], HasStats | None]] = {}
        for f in self.all():
            sources.update(f.metric_sources())
        return sources

    def close(self) -> None:
        for f in self.all():
            f.close()
