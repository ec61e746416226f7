"""The partition's next tiered segment: where prefetch and the sidecar go on when a reader reaches a segment's end.

A consumer catching up reads a partition front to back. What follows a segment is found by listing the
partition's manifests, and that listing is cached briefly, so a catch-up lists once, not once per segment; a copy
or delete in the partition drops it (``forget``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rsm.fetch.index_reader import IndexReader
from rsm.fetch.lru import TimedLru
from rsm.fetch.source import SegmentSource, SegmentSources
from rsm.metadata import RemoteLogSegmentMetadata, TopicIdPartition

LISTINGS_KEPT = 256
"""Partitions whose listing is kept at once."""


class ListedSegment(Protocol):
    """One segment of a listing (the plugin's ``TieredSegment``): enough to order it."""

    @property
    def start_offset(self) -> int: ...


class PartitionListing(Protocol):
    """The plugin's side: what is tiered in a partition, and the broker's metadata of one listed segment."""

    def partition_segments(self, tip: TopicIdPartition) -> Sequence[ListedSegment]:
        """The partition's tiered segments, by start offset."""
        ...

    def segment_metadata(self, segment: ListedSegment) -> RemoteLogSegmentMetadata:
        """The broker's metadata of a listed segment (its manifest keeps a copy)."""
        ...


class NextSegmentFinder:
    """Owns the cache of partition listings (``listing_ttl_s`` seconds each)."""

    def __init__(
        self,
        listing: PartitionListing,
        sources: SegmentSources,
        indexes: IndexReader,
        listing_ttl_s: float,
        get_timeout_s: float,
    ) -> None:
        self.listing = listing
        self.sources = sources
        self.indexes = indexes
        self.get_timeout_s = get_timeout_s
        self._listings: TimedLru[TopicIdPartition, Sequence[ListedSegment]] = TimedLru(
            "partition-listing", LISTINGS_KEPT, listing_ttl_s
        )

    def following(self, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The metadata of the partition's tiered segment after ``meta`` (the one starting at its end offset + 1,
        else the next one up), or None when it is the last: what a consumer reading on will fetch next."""
        tip = meta.topic_id_partition
        listing = self._listings.get_or_load(
            tip,
            lambda: self.listing.partition_segments(tip),
            self.get_timeout_s,
            f"the listing of {tip.topic}-{tip.partition}",
        )
        after = [s for s in listing if s.start_offset > meta.start_offset]
        if not after:
            return None
        following = [s for s in after if s.start_offset == meta.end_offset + 1]
        return self.listing.segment_metadata((following or after)[0])

    def next_source(self, src: SegmentSource) -> SegmentSource | None:
        """The source of the segment after ``src`` for prefetch across the border, with the indexes the broker
        fetches first already loaded ahead; None after the partition's last segment."""
        meta = self.following(src.meta)
        if meta is None:
            return None
        following = self.sources.source(meta)
        self.indexes.load_ahead(following)
        return following

    def forget(self, tip: TopicIdPartition) -> None:
        """A segment of ``tip`` was copied or deleted: its listing, which tells what follows what, is stale."""
        self._listings.invalidate(tip)
