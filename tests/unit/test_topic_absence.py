"""``TopicAbsence`` and ``choose_broker``: when the cluster's Metadata answers prove a topic id gone, and which
broker is asked next. The reads are built by hand (what a broker answered); the real brokers' answers are in
tests/system/test_gc_cluster_record.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.deletion.rules import TOPIC_GONE_CONFIRMED
from rsm.operator_tools.cluster_record import ClusterReadError, TopicAbsence, TopicsRead, choose_broker

pytestmark = pytest.mark.unit
DEAD, LIVE = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"


def read(broker: int, at: float, *listed: str, brokers: tuple[int, ...] = (1, 2, 3)) -> TopicsRead:
    return TopicsRead(broker, f"broker {broker}", brokers, at, {t: "t" for t in listed})


def test_one_read_never_confirms_without_a_marker() -> None:
    absence = TopicAbsence(300)
    absence.observe(read(1, 0, LIVE), [DEAD, LIVE])
    assert absence.suspected() == {DEAD}
    assert absence.gone([]) == {}
    assert set(absence.gone([DEAD])) == {DEAD}  # a partition delete marker and one read that lacks it
    assert absence.gone([DEAD])[DEAD].signal == TOPIC_GONE_CONFIRMED


def test_two_reads_confirm_only_far_enough_apart_and_from_two_brokers() -> None:
    absence = TopicAbsence(300)
    absence.observe(read(1, 1000, LIVE), [DEAD, LIVE])
    absence.observe(read(2, 1299, LIVE), [DEAD, LIVE])
    assert absence.gone([]) == {}  # 299 s apart
    absence.observe(read(3, 1300, LIVE), [DEAD, LIVE])
    evidence = absence.gone([])[DEAD]
    assert "broker 1" in evidence.detail and "broker 3" in evidence.detail and "300 s apart" in evidence.detail
    same = TopicAbsence(300)
    same.observe(read(1, 0, LIVE), [DEAD, LIVE])
    same.observe(read(1, 900, LIVE), [DEAD, LIVE])
    assert same.gone([]) == {}  # one broker of three, asked twice
    single = TopicAbsence(300)
    single.observe(read(1, 0, LIVE, brokers=(1,)), [DEAD, LIVE])
    single.observe(read(1, 900, LIVE, brokers=(1,)), [DEAD, LIVE])
    assert set(single.gone([])) == {DEAD}  # the only broker there is


def test_a_read_that_lists_the_topic_starts_over() -> None:
    absence = TopicAbsence(300)
    absence.observe(read(1, 0, LIVE), [DEAD, LIVE])
    absence.observe(read(2, 200, LIVE, DEAD), [DEAD, LIVE])  # the first broker was stale
    absence.observe(read(3, 400, LIVE), [DEAD, LIVE])
    assert absence.gone([]) == {}  # absent for 0 s since it was last listed
    undecided = TopicsRead(1, "broker 1", (1, 2, 3), 900, {LIVE: "t"}, {DEAD: "t: error code 29"})
    absence.observe(undecided, [DEAD, LIVE])
    assert absence.suspected() == set() and absence.gone([DEAD]) == {}  # not allowed to describe it: live


@given(
    reads=st.lists(
        st.tuples(st.integers(1, 3), st.floats(0, 1000, allow_nan=False), st.booleans()), min_size=1, max_size=8
    )
)
def test_confirmed_only_if_every_read_since_lacks_it(reads: list[tuple[int, float, bool]]) -> None:
    absence = TopicAbsence(100)
    at = 0.0
    history: list[tuple[int, float, bool]] = []
    for broker, step, listed in reads:
        at += step
        absence.observe(read(broker, at, LIVE, *([DEAD] if listed else [])), [DEAD, LIVE])
        history.append((broker, at, listed))
    run = []
    for entry in reversed(history):
        if entry[2]:
            break
        run.append(entry)
    expect = len(run) >= 2 and run[0][1] - run[-1][1] >= 100 and len({b for b, _, _ in run}) > 1
    assert (DEAD in absence.gone([])) == expect


def test_choose_broker_turns_to_another_one() -> None:
    brokers = {1: "h:1", 2: "h:2", 3: "h:3"}
    first = choose_broker(brokers, ["h:2", "h:3"], None)
    assert first == 2  # of the bootstrap list when it names several
    second = choose_broker(brokers, ["h:2", "h:3"], read(first, 0))
    assert second == 3
    assert choose_broker(brokers, ["h:2", "h:3"], read(second, 0)) == 2
    assert choose_broker(brokers, ["h:1"], read(1, 0)) == 2  # one bootstrap address: any other broker
    assert choose_broker({7: "h:7"}, ["h:7"], read(7, 0)) == 7  # the only one
    with pytest.raises(ClusterReadError, match="listed no broker"):
        choose_broker({}, ["h:1"], None)


def test_a_dead_topics_latest_rows_alone_wait_for_the_second_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of a dead topic id in a latest table, with no segment of it left in the store: ``kts gc --delete``
    still waits for the second read, and the item gets its ``topic-gone-confirmed`` only from it."""
    from types import SimpleNamespace

    from rsm.cli import gc_cluster
    from rsm.deletion.rules import RECORD_COMPLETE, Evidence
    from rsm.operator_tools.garbage import GarbageItem
    from rsm.operator_tools.latest_rows import DEAD_TOPIC_LATEST
    from rsm.operator_tools.reconcile import Reconciliation

    item = GarbageItem(
        DEAD_TOPIC_LATEST,
        f"kafka.orders_latest _kafka.topic_id={DEAD}",
        0.0,
        evidence=(Evidence(RECORD_COMPLETE, "whole"),),
        dead_topic=(DEAD, "orders"),
        rows=3,
    )
    record = SimpleNamespace(topic_names=lambda: {DEAD: "orders", LIVE: "other"}, delete_marked=lambda: set())
    absence = TopicAbsence(300)
    first = read(1, 1000, LIVE)
    absence.observe(first, [DEAD, LIVE])
    checked = gc_cluster.ClusterCheck(record, first, Reconciliation(items=[item]))  # type: ignore[arg-type]
    assert gc_cluster._unconfirmed_topics(checked.result) == {DEAD: "orders"}
    waited: list[float] = []
    monkeypatch.setattr(gc_cluster.time, "sleep", waited.append)
    monkeypatch.setattr(gc_cluster, "read_topics", lambda settings, names, previous: read(2, 1300, LIVE))
    gc_cluster.confirm_dead_topics(checked, {}, absence)
    assert waited == [300]
    [confirmed] = checked.result.items
    assert gc_cluster.removable(confirmed) and TOPIC_GONE_CONFIRMED in {e.signal for e in confirmed.evidence}
    # Listed again by the second read: the item is dropped, nothing of the topic is removed.
    absence = TopicAbsence(300)
    absence.observe(first, [DEAD, LIVE])
    checked = gc_cluster.ClusterCheck(record, first, Reconciliation(items=[item]))  # type: ignore[arg-type]
    monkeypatch.setattr(gc_cluster, "read_topics", lambda settings, names, previous: read(2, 1300, LIVE, DEAD))
    gc_cluster.confirm_dead_topics(checked, {}, absence)
    assert checked.result.items == []


def test_a_latest_rows_commit_is_tried_again_after_a_conflict_then_refused_with_the_next_step() -> None:
    from pyiceberg.exceptions import CommitFailedException

    from rsm.errors import RemoteStorageException
    from rsm.operator_tools.latest_rows import _commit_with_retries

    calls: list[int] = []

    def lose_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise CommitFailedException("another writer")
        return "landed"

    assert _commit_with_retries(lose_twice, 2, "removing rows", "run it again") == "landed" and len(calls) == 3
    calls.clear()
    with pytest.raises(RemoteStorageException, match=r"removing rows: another writer committed first 2 times .*run it"):
        _commit_with_retries(lose_twice, 1, "removing rows", "run it again")
    assert len(calls) == 2
