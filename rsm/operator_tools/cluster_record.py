"""The cluster's own record of tiered segments, read as Kafka's tools read a cluster: ``--bootstrap-server
HOST:PORT`` and ``--command-config FILE`` (the client properties of Kafka's command-line tools).

Two things are read, in this order: every record of ``__remote_log_metadata`` (:func:`read_record`: from each
partition's log start to its end offset, both noted when the read begins, without a gap; parsed by
``rsm.kafka.remote_log_metadata``), then the ids of the topics the cluster has (:func:`read_topics`, Metadata API
v10+, asked of one broker). The order matters: a topic created between the two reads is absent from the record,
so it can never be taken for a deleted one. A record whose partitions no longer start at offset 0 (retention on
the topic) is read, but it is not complete (:attr:`RecordRead.complete`): segments whose first records are gone
are unknown, and nothing is deleted on its word. One Metadata answer never proves a topic deleted
(:class:`TopicAbsence`).

The client is kafka-python (the ``cluster`` extra); ``rsm.operator_tools.client_settings`` maps Kafka's client
properties to its settings.
"""

from __future__ import annotations

import logging
import ssl
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsm.deletion.rules import TOPIC_GONE_CONFIRMED, Evidence
from rsm.errors import RemoteStorageException
from rsm.kafka.remote_log_metadata import (
    PartitionDeleteRecord,
    RemoteLogMetadataError,
    RemoteLogMetadataRecord,
    SegmentRecord,
    decode,
    uuid_to_str,
)

METADATA_TOPIC = "__remote_log_metadata"


class ClusterReadError(RemoteStorageException):
    """The cluster's record could not be read: the cluster is unreachable, the client settings are unusable, or a
    record is not one this version reads."""


@dataclass(frozen=True)
class PartitionRead:
    """One partition of ``__remote_log_metadata``: its log start and end offset when the read began."""

    partition: int
    log_start: int
    end: int


@dataclass(frozen=True)
class RecordRead:
    """Every record of ``__remote_log_metadata`` from each partition's log start to its end offset, read without
    a gap, in each partition's order."""

    records: list[RemoteLogMetadataRecord]
    partitions: tuple[PartitionRead, ...]

    @property
    def complete(self) -> bool:
        """Whether every partition still starts at offset 0: nothing was ever removed from the topic, so the read
        holds every segment's whole history."""
        return all(p.log_start == 0 for p in self.partitions)

    def extent(self) -> str:
        """What was read, for the operator: ``__remote_log_metadata-0 offsets 0..41, -1 offsets 0..7``."""
        return ", ".join(f"{METADATA_TOPIC}-{p.partition} offsets {p.log_start}..{p.end}" for p in self.partitions)

    def shortfall(self) -> str:
        """The partitions whose beginning is gone (empty for a complete read)."""
        cut = [p for p in self.partitions if p.log_start > 0]
        return ", ".join(f"{METADATA_TOPIC}-{p.partition} starts at offset {p.log_start}" for p in cut)

    def delete_marked(self) -> set[str]:
        """The topic ids with a partition delete marker (DELETE_PARTITION_MARKED or a later state). The format has
        them for a deleted partition, though the brokers of Kafka 3.9 and 4.x write none when a topic is deleted
        (they move each segment to DELETE_SEGMENT_STARTED and on): then two Metadata reads confirm it."""
        return {r.topic_id_partition.topic_id for r in self.records if isinstance(r, PartitionDeleteRecord)}

    def topic_names(self) -> dict[str, str]:
        """The topic ids the record's segments belong to, with their names."""
        return {r.metadata.topic_id_partition.topic_id: r.metadata.topic_id_partition.topic for r in self.records
                if isinstance(r, SegmentRecord)}  # fmt: skip


@dataclass(frozen=True)
class TopicsRead:
    """One Metadata read of the cluster's topics, answered by one broker."""

    broker_id: int
    broker: str
    """The broker that answered, for the operator: ``broker 2 (127.0.0.1:9093)``."""
    brokers: tuple[int, ...]
    """The ids of every broker the cluster listed at the time."""
    at: float
    """When the answer came (Unix time)."""
    topic_ids: dict[str, str]
    """The topic ids the broker listed (Kafka Uuid strings), with their names."""
    undecided: dict[str, str] = field(default_factory=dict)
    """Topic ids of the record that the listing lacks but whose deletion the broker did not confirm (asked by
    name, it answered with an error other than "unknown topic": no right to describe it, say), with that error.
    They count as live: nothing of theirs is removed."""

    def lacks(self, topic_id: str) -> bool:
        """Whether this read says the cluster has no topic of this id."""
        return topic_id not in self.topic_ids and topic_id not in self.undecided


@dataclass
class TopicAbsence:
    """Which topic ids of the record the cluster lacks, over successive Metadata reads. One broker's answer
    proves nothing (a broker cut off from the controllers serves a stale image): a topic id is gone only when
    (a) reads at least ``confirm_after_s`` apart, from two brokers when the cluster has several, all lack it, or
    (b) the record holds a partition delete marker for it and the latest read lacks it."""

    confirm_after_s: float
    runs: dict[str, list[TopicsRead]] = field(default_factory=dict)
    """For each topic id the reads have lacked since the last read that listed it."""

    def __post_init__(self) -> None:
        if self.confirm_after_s < 0:
            raise ValueError(f"confirm_after_s must not be negative, got {self.confirm_after_s}")

    def observe(self, read: TopicsRead, known: Iterable[str]) -> None:
        """Take ``read`` into account for the topic ids ``known`` to the record."""
        known = set(known)
        for topic_id in known:
            if read.lacks(topic_id):
                self.runs.setdefault(topic_id, []).append(read)
            else:
                self.runs.pop(topic_id, None)
        for topic_id in [t for t in self.runs if t not in known]:
            del self.runs[topic_id]

    def suspected(self) -> set[str]:
        """The topic ids the latest read lacks."""
        return set(self.runs)

    def gone(self, marked: Iterable[str]) -> dict[str, Evidence]:
        """The topic ids confirmed gone, each with its evidence (``TOPIC_GONE_CONFIRMED``); ``marked``: the topic
        ids the record holds a partition delete marker for."""
        marked = set(marked)
        out: dict[str, Evidence] = {}
        for topic_id, reads in self.runs.items():
            first, latest = reads[0], reads[-1]
            if topic_id in marked:
                out[topic_id] = Evidence(
                    TOPIC_GONE_CONFIRMED,
                    f"the record holds a partition delete marker for it and {latest.broker} does not list it",
                )
                continue
            apart = latest.at - first.at
            asked = {r.broker_id for r in reads}
            if len(reads) >= 2 and apart >= self.confirm_after_s and (len(latest.brokers) == 1 or len(asked) > 1):
                out[topic_id] = Evidence(
                    TOPIC_GONE_CONFIRMED,
                    f"neither {first.broker} nor {latest.broker} lists it, in reads {apart:.0f} s apart",
                )
        return out


def _kafka() -> Any:
    try:
        import kafka
    except ImportError:
        raise ClusterReadError(
            "reading the cluster needs kafka-python: pip install 'kafka-tiered-storage[cluster]'"
        ) from None
    return kafka


def read_record(
    settings: Mapping[str, Any], timeout_s: float = 120, on_poll: Callable[[], None] | None = None
) -> RecordRead:
    """Every ``__remote_log_metadata`` record from each partition's log start to its end offset, both noted when
    the read begins. A record that the read would skip (the log start moved past the read's position, or the
    client passed over offsets without returning records) is a :class:`ClusterReadError`: a record read with a
    hole in it could make a live segment look unfinished. ``on_poll`` is called after each poll (a test's seam)."""
    kafka = _kafka()
    from kafka.errors import KafkaError

    causes = _Causes()
    logging.getLogger("kafka").addHandler(causes)
    try:
        return _read_metadata_topic(kafka, settings, timeout_s, on_poll)
    except KafkaError as e:
        raise ClusterReadError(_unreadable(settings, e, causes.seen)) from e
    finally:
        logging.getLogger("kafka").removeHandler(causes)


def read_topics(
    settings: Mapping[str, Any], names: Mapping[str, str], previous: TopicsRead | None = None
) -> TopicsRead:
    """The cluster's topic ids, asked of one broker: another one than ``previous`` asked when the cluster has
    several (those of the bootstrap list first). ``names``: the record's topic ids with their names; each one
    the listing lacks is asked for by name, since a listing of all topics leaves out those the principal may not
    describe, and only "unknown topic" (or another id) proves it deleted."""
    kafka = _kafka()
    from kafka.errors import KafkaError

    causes = _Causes()
    logging.getLogger("kafka").addHandler(causes)
    try:
        admin = kafka.KafkaAdminClient(**settings)
        try:
            brokers = {int(b["broker_id"]): f"{b['host']}:{b['port']}" for b in admin.describe_cluster()["brokers"]}
            node = choose_broker(brokers, settings["bootstrap_servers"], previous)
            topic_ids = _topic_ids(_metadata(admin, node, None))
            missing = {tid: name for tid, name in names.items() if tid not in topic_ids}
            undecided: dict[str, str] = {}
            if missing:
                answers = {t["name"]: t for t in _metadata(admin, node, sorted(set(missing.values())))}
                for tid, name in missing.items():
                    answer = answers.get(name)
                    code = None if answer is None else answer.get("error_code", 0)
                    if code == 0 and _topic_ids([answer]).get(tid) == name:
                        topic_ids[tid] = name
                    elif code not in (0, _UNKNOWN_TOPIC):
                        undecided[tid] = f"{name}: error code {code}"
            at = time.time()
        finally:
            admin.close()
    except KafkaError as e:
        raise ClusterReadError(_unreadable(settings, e, causes.seen)) from e
    finally:
        logging.getLogger("kafka").removeHandler(causes)
    return TopicsRead(node, f"broker {node} ({brokers[node]})", tuple(sorted(brokers)), at, topic_ids, undecided)


def choose_broker(brokers: Mapping[int, str], bootstrap: Iterable[str], previous: TopicsRead | None) -> int:
    """The broker to ask: of the bootstrap list's brokers when it names several (else of all), the one after
    ``previous``'s in id order, so that successive reads go to different brokers."""
    if not brokers:
        raise ClusterReadError("the cluster listed no broker to ask for its topics; check that it is up")
    listed = set(bootstrap)
    candidates = sorted(b for b, address in brokers.items() if address in listed)
    if len(candidates) < 2:
        candidates = sorted(brokers)
    if previous is None:
        return candidates[0]
    later = [b for b in candidates if b > previous.broker_id]
    return (later or candidates)[0]


def _metadata(admin: Any, node_id: int, topics: list[str] | None) -> list[dict[str, Any]]:
    """The topics of a Metadata answer of broker ``node_id`` (all topics when ``topics`` is None). kafka-python's
    public calls let the client pick the broker; this asks the chosen one through its connection manager."""
    from kafka.protocol.metadata import MetadataRequest

    manager = getattr(admin, "_manager", None)
    if manager is None:
        raise ClusterReadError(
            "this kafka-python cannot ask a chosen broker for metadata; install kafka-python 3.0 or newer"
        )
    wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False)

    async def ask() -> dict[str, Any]:
        response = await manager.send(request, node_id=node_id)
        answer: dict[str, Any] = response.to_dict()
        return answer

    topics_answer: list[dict[str, Any]] = manager.run(ask)["topics"]
    return topics_answer


class _Causes(logging.Handler):
    """The errors kafka-python logs while it retries: a failed bootstrap ends in a timeout naming none of them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.seen += [a for a in args if isinstance(a, BaseException)]


def _unreadable(settings: Mapping[str, Any], error: Exception, seen: list[BaseException]) -> str:
    """What went wrong, from the most telling cause kafka-python logged, and the setting to look at."""
    from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError

    where = f"cannot read the cluster at {','.join(settings['bootstrap_servers'])}"
    for cause in seen:
        if isinstance(cause, SaslAuthenticationFailedError):
            return (
                f"{where}: SASL authentication failed for user {settings.get('sasl_plain_username')!r} with "
                f"{settings.get('sasl_mechanism')} ({cause}); check the user name and password in "
                "sasl.jaas.config (--command-config) and that the user has credentials for that mechanism"
            )
    for cause in seen:
        # kafka-python raises a failed TLS handshake again as KafkaConnectionError("Handshake failed: ...")
        if isinstance(cause, ssl.SSLError) or "Handshake failed" in str(cause):
            return (
                f"{where}: the TLS handshake failed ({cause}); check that ssl.truststore.location holds the CA "
                "that signed the broker's certificate, that the certificate names the host in --bootstrap-server "
                "(or set ssl.endpoint.identification.algorithm= to skip that check), and that the listener "
                "speaks TLS"
            )
    others = [cause for cause in seen if not isinstance(cause, KafkaTimeoutError)]
    if settings.get("sasl_mechanism") and others and all("disconnected" in str(c) for c in others):
        # A broker may close the connection instead of answering a failed SASL handshake in time (seen under load)
        return (
            f"{where}: the broker closed every connection ({others[-1]}): SASL authentication failed for user "
            f"{settings.get('sasl_plain_username')!r} with {settings.get('sasl_mechanism')}, or the listener does "
            f"not take security.protocol {settings.get('security_protocol')}; check the user name and password in "
            "sasl.jaas.config (--command-config) and security.protocol"
        )
    last = f"; last error: {others[-1]}" if others else ""
    return (
        f"{where}: {error}{last}; check that the address is a listener of the cluster and that security.protocol "
        "(--command-config) is the one that listener takes"
    )


_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION


def _topic_ids(topics: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in topics:
        if t.get("error_code", 0) != 0:
            continue
        raw = t.get("topic_id")  # a uuid.UUID, or its str() in kafka-python's JSON-style dicts
        topic_id = None if raw is None else raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))
        if topic_id is None or topic_id.int == 0:
            raise ClusterReadError(
                f"the cluster gave no topic id for {t.get('name')!r}; topic ids need Kafka 2.8+ (Metadata v10+)"
            )
        out[uuid_to_str(topic_id.bytes)] = t["name"]
    return out


def _read_metadata_topic(
    kafka: Any, settings: Mapping[str, Any], timeout_s: float, on_poll: Callable[[], None] | None
) -> RecordRead:
    from kafka.errors import OffsetOutOfRangeError

    # auto_offset_reset="none": a position below the log start is an error, never a silent jump
    consumer = kafka.KafkaConsumer(enable_auto_commit=False, group_id=None, auto_offset_reset="none", **settings)
    try:
        partitions = consumer.partitions_for_topic(METADATA_TOPIC)
        if not partitions:
            raise ClusterReadError(
                f"the cluster has no {METADATA_TOPIC} topic: tiered storage was never enabled on it "
                "(remote.log.storage.system.enable), or another metadata manager is configured"
            )
        tps = [kafka.TopicPartition(METADATA_TOPIC, p) for p in sorted(partitions)]
        consumer.assign(tps)
        starts = consumer.beginning_offsets(tps)
        ends = consumer.end_offsets(tps)
        read = tuple(PartitionRead(tp.partition, starts[tp], ends[tp]) for tp in tps)
        for tp in tps:
            consumer.seek(tp, starts[tp])
        expected = dict(starts)  # the next offset each partition must give
        by_partition: dict[int, list[RemoteLogMetadataRecord]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout_s
        while any(expected[tp] < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                short = ", ".join(
                    f"{METADATA_TOPIC}-{tp.partition} at offset {expected[tp]} of {ends[tp]}"
                    for tp in tps if expected[tp] < ends[tp]
                )  # fmt: skip
                raise ClusterReadError(
                    f"reading {METADATA_TOPIC} took longer than {timeout_s:.0f} s ({short}); check the brokers' "
                    "load and run again"
                )
            try:
                polled = consumer.poll(timeout_ms=1000)
            except OffsetOutOfRangeError as e:
                raise ClusterReadError(_moved(e, read, expected)) from e
            for tp, messages in polled.items():
                for m in messages:
                    if m.offset >= ends[tp]:
                        continue  # written after the read began
                    if m.offset != expected[tp]:
                        raise ClusterReadError(_gap(tp.partition, expected[tp], m.offset, read))
                    expected[tp] = m.offset + 1
                    if m.value is None:
                        continue
                    try:
                        by_partition[tp.partition].append(decode(m.value))
                    except RemoteLogMetadataError as e:
                        raise ClusterReadError(f"{METADATA_TOPIC}-{tp.partition} offset {m.offset}: {e}") from e
            for tp in tps:
                position = consumer.position(tp)
                if expected[tp] < ends[tp] and position > expected[tp]:
                    raise ClusterReadError(_gap(tp.partition, expected[tp], position, read))
            if on_poll is not None:
                on_poll()
        return RecordRead([r for p in sorted(by_partition) for r in by_partition[p]], read)
    finally:
        consumer.close()


_NEXT_STEP = (
    "nothing was judged on this read; run kts gc again, and keep the topic's retention infinite (Kafka's default "
    f"for it: kafka-configs --alter --entity-type topics --entity-name {METADATA_TOPIC} --add-config "
    "retention.ms=-1,retention.bytes=-1)"
)


def _where(partition: int, read: tuple[PartitionRead, ...]) -> str:
    p = next(p for p in read if p.partition == partition)
    return f"{METADATA_TOPIC}-{partition} (log start {p.log_start} and end offset {p.end} when the read began)"


def _moved(error: Exception, read: tuple[PartitionRead, ...], expected: Mapping[Any, int]) -> str:
    """The partitions whose log start moved past the read's position while it read them."""
    offsets = error.args[0] if error.args and isinstance(error.args[0], dict) else dict(expected)
    parts = [f"{_where(tp.partition, read)} no longer holds offset {offset}" for tp, offset in offsets.items()]
    return (
        f"{'; '.join(parts)}: its log start moved past the read (retention on {METADATA_TOPIC}, or a records "
        f"delete) and the records in between are gone; {_NEXT_STEP}"
    )


def _gap(partition: int, expected: int, got: int, read: tuple[PartitionRead, ...]) -> str:
    return (
        f"{_where(partition, read)}: offsets {expected}..{got - 1} were skipped (the client returned no record for "
        f"them); Kafka's writer of this topic writes neither transactions nor keys, so nothing may be missing "
        f"there; {_NEXT_STEP}"
    )
