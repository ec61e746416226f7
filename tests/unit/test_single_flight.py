"""SingleFlight alone: one owner per key, joins, runs of keys, voiding."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.fetch.single_flight import SingleFlight


def _flights() -> SingleFlight[str, Future[int]]:
    return SingleFlight(Future)


def test_the_first_claim_owns_the_flight_and_the_next_join_it() -> None:
    flights = _flights()
    first, mine = flights.claim("k")
    second, also_mine = flights.claim("k")
    assert mine and not also_mine and second is first
    assert "k" in flights and len(flights) == 1


def test_claim_new_refuses_a_key_in_the_air() -> None:
    flights = _flights()
    assert flights.claim_new("k") is not None
    assert flights.claim_new("k") is None


def test_a_landed_flight_is_gone_and_a_new_claim_owns_a_new_one() -> None:
    flights = _flights()
    first, _ = flights.claim("k")
    assert flights.land("k")
    again, mine = flights.claim("k")
    assert mine and again is not first


def test_a_voided_flight_lands_as_voided_once() -> None:
    flights = _flights()
    flights.claim("a")
    flights.claim("b")
    flights.void_where(lambda k: k == "a")
    flights.void("b")
    flights.void("not flying")  # nothing to void: a later flight of that key is not voided
    assert not flights.land("a") and not flights.land("b")
    flights.claim("not flying")
    assert flights.land("not flying")
    flights.claim("a")
    assert flights.land("a")


def test_claim_leading_stops_at_the_first_key_in_the_air() -> None:
    flights = _flights()
    busy, _ = flights.claim("c")
    first, claimed = flights.claim_leading(["a", "b", "c", "d"])
    assert list(claimed) == ["a", "b"] and first is claimed["a"]
    assert "d" not in flights


def test_claim_leading_joins_when_the_first_key_is_in_the_air() -> None:
    flights = _flights()
    busy, _ = flights.claim("a")
    joined: list[Future[int]] = []
    first, claimed = flights.claim_leading(["a", "b"], joined.append)
    assert first is busy and claimed == {} and joined == [busy]
    assert "b" not in flights


def test_join_and_land_run_their_hooks_only_for_a_flight() -> None:
    flights = _flights()
    seen: list[Future[int]] = []
    assert flights.join("k", seen.append) is None
    assert flights.land("k", seen.append)
    assert seen == []
    flight, _ = flights.claim("k")
    assert flights.join("k", seen.append) is flight
    flights.land("k", seen.append)
    assert seen == [flight, flight]


@settings(deadline=None, max_examples=30)
@given(threads=st.integers(2, 12), keys=st.integers(1, 3))
def test_concurrent_claims_give_one_owner_per_key(threads: int, keys: int) -> None:
    flights = _flights()
    owners: list[str] = []
    start = threading.Barrier(threads)
    lock = threading.Lock()

    def claim(i: int) -> None:
        start.wait()
        key = f"k{i % keys}"
        _, mine = flights.claim(key)
        if mine:
            with lock:
                owners.append(key)

    workers = [threading.Thread(target=claim, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(owners) == sorted({f"k{i % keys}" for i in range(threads)})


def test_a_new_flight_is_ready_before_anyone_can_join_it() -> None:
    flights = _flights()
    ready: list[Future[int]] = []
    first, claimed = flights.claim_leading(["a", "b"], on_claim=ready.append)
    assert ready == [claimed["a"], claimed["b"]] and first is claimed["a"]
