"""The values of a ``kafka-tiered`` read's own options (``rsm.spark.options``): each parsed from its text, a
malformed one refused with a ``ReadOptionsError`` that names it as users spell it."""

from __future__ import annotations

import json
from collections.abc import Mapping

from rsm.errors import RemoteStorageException

#: Spark's Kafka source spells "from the first offset" as -2 and "to the end" as -1 in offset JSON.
EARLIEST = -2
LATEST = -1

_SPELLED = {
    k.lower(): k
    for k in (
        "topicPattern",
        "subscribePattern",
        "isolationLevel",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "includeHeaders",
        "failOnCorruption",
        "maxSliceBytes",
        "maxBatchBytes",
        "rowsPerBatch",
        "planningConcurrency",
        "icebergRead",
    )
}


def option_name(key: str) -> str:
    """The option as users spell it (Spark hands keys over lower-cased)."""
    return _SPELLED.get(key, key)


class ReadOptionsError(RemoteStorageException):
    """An option of a ``kafka-tiered`` read is missing or malformed; the message names it and its expected form."""


def bool_option(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ReadOptionsError(f"option {option_name(key)} must be true or false, got {raw!r}")
    return text == "true"


def int_option(options: Mapping[str, str], key: str, default: int | None, minimum: int | None = None) -> int | None:
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ReadOptionsError(f"option {option_name(key)} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ReadOptionsError(f"option {option_name(key)} must be at least {minimum}, got {value}")
    return value


def offsets_option(options: Mapping[str, str], key: str, default: int) -> tuple[int, dict[str, dict[int, int]]]:
    """``earliest``/``latest`` or Spark's per-partition JSON ``{"topic": {"0": 23, "1": -2}}``."""
    raw = options.get(key)
    if raw is None or raw.strip() in ("", "earliest" if default == EARLIEST else "latest"):
        return default, {}
    text = raw.strip()
    if text in ("earliest", "latest"):
        return (EARLIEST if text == "earliest" else LATEST), {}
    try:
        parsed = json.loads(text)
        per_topic = {
            str(topic): {int(p): int(o) for p, o in parts.items()}
            for topic, parts in parsed.items()  # type: ignore[union-attr]
        }
    except (ValueError, AttributeError, TypeError):
        raise ReadOptionsError(
            f'option {option_name(key)} must be "earliest", "latest" or JSON like {{"orders": {{"0": 23, "1": -2}}}}, '
            f"got {raw!r}"
        ) from None
    return default, per_topic


def assign_option(raw: str) -> dict[str, frozenset[int]]:
    """Spark's ``assign``: ``{"orders": [0, 1], "payments": [3]}``."""
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict) or not parsed:
            raise TypeError
        out: dict[str, frozenset[int]] = {}
        for topic, parts in parsed.items():
            if not isinstance(parts, list) or not all(type(p) is int and p >= 0 for p in parts):
                raise TypeError
            out[str(topic)] = frozenset(parts)
    except (ValueError, TypeError):
        raise ReadOptionsError(
            f'option assign must be JSON mapping each topic to a list of partitions, like {{"orders": [0, 1]}}, '
            f"got {raw!r}"
        ) from None
    return out


def isolation_option(options: Mapping[str, str]) -> str:
    """``isolationLevel``, or ``kafka.isolation.level`` as Spark's Kafka source takes it (the consumer's setting);
    both given must agree."""
    given = {k: options[k].strip().lower() for k in ("isolationlevel", "kafka.isolation.level") if k in options}
    for key, value in given.items():
        if value not in ("read_uncommitted", "read_committed"):
            raise ReadOptionsError(f"{option_name(key)} must be read_uncommitted or read_committed, got {value!r}")
    if len(set(given.values())) > 1:
        raise ReadOptionsError(
            f"isolationLevel ({given['isolationlevel']}) and kafka.isolation.level ({given['kafka.isolation.level']}) "
            "disagree; give one of them"
        )
    return next(iter(given.values()), "read_uncommitted")
