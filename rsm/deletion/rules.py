"""The rules for every deletion the plugin infers, written once.

A rule names a kind of deletion, the signals it needs (each from an independent source, every one required),
the grace it waits, and whether it goes through the quarantine (and so can be undone for ``gc.quarantine.ms``).
Code that finds something to delete collects :class:`Evidence` as it looks; :func:`authorize` then says yes, or
raises :class:`DeletionRefused` naming what is missing. docs/reliability.md's table is generated from
:data:`RULES`.

Kafka's own deletes (``deleteLogSegmentData``, retention) are not here: the broker decided them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rsm.errors import RemoteStorageException

# --- signals: what was observed, and where -----------------------------------------------------------------------

STORE_AGE = "store-age"
"""The store dates every object of the item, and each is older than the kind's grace."""
STORE_RELISTED = "store-relisted"
"""The store, listed again just before the move, still shows the state that made the item garbage (no manifest
beside the data; no data beside the manifest; the upload still open and unfinished)."""
UPLOAD_DEADLINE = "upload-deadline"
"""The item is older than the longest an upload of this plugin may run (its deadline), so no copy still writes it."""
RECORD_COMPLETE = "record-complete"
"""The cluster's ``__remote_log_metadata`` was read from each partition's log start to its end offset, without a
gap, and it says the item's segment is deleted, never finished, or of a topic id it knows."""
TOPIC_GONE_CONFIRMED = "topic-gone-confirmed"
"""The cluster no longer has the topic id: two Metadata reads some minutes apart agree, or the record holds a
partition delete marker for it and a Metadata read agrees."""
TABLE_UNREFERENCED = "table-unreferenced"
"""No version of the table that is kept (the current metadata file and every one in its metadata log) references
the file, read again just before the move; and no other table shares its location."""
TABLE_UNREFERENCED_FOR_GRACE = "table-unreferenced-for-grace"
"""The file has been unreferenced for longer than the table's orphan grace (never less than a day for data files),
counted from the first pass that saw it so, as the table's ledger of unreferenced files records (a file referenced
again leaves the ledger and starts over), and the file was not written since."""
SEGMENT_GONE = "segment-gone"
"""The store no longer holds the manifest of the segment a local cache entry belongs to."""

SIGNALS: Mapping[str, str] = {
    STORE_AGE: "the store dates every object, each older than the grace",
    STORE_RELISTED: "listed again just before the move, the store shows the same state",
    UPLOAD_DEADLINE: "older than the longest an upload may run",
    RECORD_COMPLETE: "the cluster's record, read complete, says so",
    TOPIC_GONE_CONFIRMED: "the topic id is gone in two reads minutes apart, or in a read and a delete marker",
    TABLE_UNREFERENCED: "no kept table version references it, read again just before the move",
    TABLE_UNREFERENCED_FOR_GRACE: "unreferenced for longer than the table's orphan grace, by its ledger",
    SEGMENT_GONE: "the store has no manifest for the segment",
}


@dataclass(frozen=True)
class Rule:
    """One kind of inferred deletion."""

    kind: str
    what: str
    signals: tuple[str, ...]
    grace: str
    reversible: bool
    why_not_reversible: str = ""

    def missing(self, evidence: Iterable[Evidence]) -> list[str]:
        """The signals this rule needs that ``evidence`` lacks, in the rule's order."""
        seen = {e.signal for e in evidence}
        return [s for s in self.signals if s not in seen]


@dataclass(frozen=True)
class Evidence:
    """One signal observed for one item, with what was seen (shown to the operator and kept in the quarantine's
    record of the item)."""

    signal: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"unknown deletion signal {self.signal!r}; known: {', '.join(SIGNALS)}")


class DeletionRefused(RemoteStorageException):
    """A deletion was asked for without the signals its rule needs. Nothing was removed."""


_CLUSTER_GRACE = "`kts gc --older-than` (default 1 h)"

RULES: Mapping[str, Rule] = {
    r.kind: r
    for r in (
        Rule(
            "orphan-object",
            "a segment's `.log` or `.indexes` with no manifest beside it (a copy that died)",
            (STORE_AGE, STORE_RELISTED),
            _CLUSTER_GRACE,
            True,
        ),
        Rule(
            "manifest-without-data",
            "a manifest whose `.log` or `.indexes` is gone (not an Iceberg-mode segment's)",
            (STORE_AGE, STORE_RELISTED),
            _CLUSTER_GRACE,
            True,
        ),
        Rule(
            "multipart-upload",
            "an S3 multipart upload never completed (its parts are invisible and billed)",
            (STORE_AGE, UPLOAD_DEADLINE),
            _CLUSTER_GRACE,
            False,
            "an unfinished upload holds no object anyone can read; aborting it loses nothing",
        ),
        Rule(
            "uncommitted-blocks",
            "an Azure blob holding only staged blocks, never committed",
            (STORE_AGE, UPLOAD_DEADLINE),
            _CLUSTER_GRACE,
            False,
            "staged blocks are no blob anyone can read; dropping them loses nothing",
        ),
        Rule(
            "temp-file",
            "a filesystem backend's temporary file of an upload whose process was killed",
            (STORE_AGE, UPLOAD_DEADLINE),
            _CLUSTER_GRACE,
            False,
            "a partial upload that no key names; nothing can read it, and putting it back would give nothing to read",
        ),
        Rule(
            "cache-entry",
            "this broker's cached chunks of a segment no longer tiered",
            (SEGMENT_GONE,),
            "none",
            False,
            "a cache holds copies; the store stays the one record",
        ),
        Rule(
            "iceberg-orphan",
            "a file under one of the plugin's Iceberg tables that no kept table version references (a write "
            "before its commit, a file of an expired snapshot, a file compaction replaced)",
            (TABLE_UNREFERENCED, TABLE_UNREFERENCED_FOR_GRACE),
            "`iceberg.mode.maintenance.orphan.grace.ms` (default 3 days, at least 1 day for data files)",
            True,
        ),
        Rule(
            "dead-topic-segment",
            "a segment of a topic id the cluster no longer has",
            (RECORD_COMPLETE, TOPIC_GONE_CONFIRMED, STORE_AGE),
            _CLUSTER_GRACE,
            True,
        ),
        Rule(
            "dead-topic-iceberg-segment",
            "an Iceberg-mode segment (manifest, `.indexes` and its rows) of a topic id the cluster no longer has",
            (RECORD_COMPLETE, TOPIC_GONE_CONFIRMED, STORE_AGE),
            _CLUSTER_GRACE,
            True,
        ),
        Rule(
            "dead-topic-latest-rows",
            "the rows of a topic id the cluster no longer has in a latest-per-key table (a topic's key state "
            "outlives its segments otherwise); rows of other topic ids in the table are kept",
            (RECORD_COMPLETE, TOPIC_GONE_CONFIRMED),
            "`kts gc --confirm-after` (default 5 min) between the two Metadata reads",
            True,
        ),
        Rule(
            "deleted-segment",
            "a segment whose last state in the record is DELETE_SEGMENT_FINISHED but whose objects remain",
            (RECORD_COMPLETE, STORE_AGE),
            _CLUSTER_GRACE,
            True,
        ),
        Rule(
            "unfinished-copy",
            "a segment whose last state in the record is COPY_SEGMENT_STARTED, started longer ago than the grace",
            (RECORD_COMPLETE, STORE_AGE),
            _CLUSTER_GRACE,
            True,
        ),
    )
}


def rule(kind: str) -> Rule:
    """The rule of ``kind``; a kind with no rule may not be deleted at all."""
    try:
        return RULES[kind]
    except KeyError:
        raise DeletionRefused(f"no deletion rule for kind {kind!r}: nothing of it is removed") from None


def authorize(kind: str, subject: str, evidence: Iterable[Evidence]) -> Rule:
    """The rule of ``kind`` when ``evidence`` holds every signal it needs; otherwise :class:`DeletionRefused`
    naming ``subject`` (an object key or a file's location) and the missing signals."""
    found = rule(kind)
    evidence = list(evidence)
    missing = found.missing(evidence)
    if missing:
        raise DeletionRefused(
            f"{subject} ({kind}) is not removed: it lacks the signal(s) {', '.join(missing)} "
            f"({'; '.join(SIGNALS[m] for m in missing)}); it is kept"
        )
    return found


def rules_markdown() -> str:
    """The table of every rule (docs/reliability.md holds it between its ``rules-table`` markers)."""
    lines = [
        "| kind | what | signals required (all of them) | grace | reversible |",
        "|---|---|---|---|---|",
    ]
    for r in RULES.values():
        signals = "<br>".join(f"`{s}`: {SIGNALS[s]}" for s in r.signals)
        reversible = "yes: held in the quarantine" if r.reversible else f"no: {r.why_not_reversible}"
        cells = [f"`{r.kind}`", r.what, signals, r.grace, reversible]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
