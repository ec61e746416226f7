"""The exceptions of Kafka-format reading: one family, so a caller can catch everything a damaged log raises."""

from __future__ import annotations


class KafkaFormatError(Exception):
    """Base class for every problem found in Kafka-format bytes."""


class CorruptRecordBatch(KafkaFormatError):
    """A batch header is impossible (or cut short); ``position`` is the byte offset of the batch in the log.

    Callers that walk a log to its end (a fetch stream cut at ``endPosition``, a segment still being
    written) catch :class:`TruncatedBatch` separately; everything else is genuine damage.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (batch at position {position})")
        self.position = position
        self.reason = message


class TruncatedBatch(CorruptRecordBatch):
    """The last batch runs past the end of the data: ``available`` bytes of ``needed`` are present.

    ``needed`` is ``None`` when not even the batch length could be read.
    """

    def __init__(self, position: int, available: int, needed: int | None) -> None:
        want = "an unknown number of" if needed is None else str(needed)
        super().__init__(f"truncated batch: {available} bytes present, {want} needed", position)
        self.available = available
        self.needed = needed


class UnsupportedFormat(KafkaFormatError):
    """Legacy message sets (magic 0 or 1), which brokers only keep for very old topics; we do not parse them."""

    def __init__(self, message: str, position: int | None = None, magic: int | None = None) -> None:
        where = "" if position is None else f" (at position {position})"
        super().__init__(message + where)
        self.position = position
        self.magic = magic
