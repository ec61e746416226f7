"""A size-bounded LRU with expiry after access and single-flight loading: the shape of all three of Aiven's
Caffeine caches (manifests, indexes, decoded chunks), so they share one implementation and one set of stats.

Why single flight: when 32 broker threads ask for the same manifest or chunk at once, one of them loads it
and the others wait for that load instead of issuing 31 more GETs. Why a failed load is never stored: a
transient error must not be served to the next reader (Aiven's #760, cache poisoning).

``stats()`` is keyed by Aiven's cache metric names (``cache-hits-total`` ...), so the metrics layer can pull
the values as they are; times are in nanoseconds. Counters are plain ints updated under the lock the
operation holds anyway: nothing on the hot path allocates for bookkeeping.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Generic, TypeVar

from rsm.errors import RemoteStorageException
from rsm.fetch.single_flight import SingleFlight

K = TypeVar("K", bound=Hashable)
SWEEP_ON_STORE = 64  # expired entries dropped at most per insert
SWEEP_ON_READ = 4  # ... per lookup and per stats() call
V = TypeVar("V")


class TimedLru(Generic[K, V]):
    """At most ``capacity`` weight units; an entry not read for ``retention_s`` seconds is dropped.

    Expired entries are swept from the least recently used end on every insert, lookup and ``stats()`` (a
    metrics scrape), a few at a time: an unbounded cache (capacity ``-1`` in Aiven's terms) frees the chunks
    nobody reads again without waiting for a lookup of that very key. ``sweep()`` drops every expired entry.
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        retention_s: float | None,
        weigher: Callable[[V], int] = lambda _v: 1,
        clock: Callable[[], float] = time.monotonic,
        on_store: Callable[[V], None] | None = None,
        on_drop: Callable[[V], None] | None = None,
    ) -> None:
        """``on_store``/``on_drop`` run under the lock when a value enters/leaves the cache (the chunk tier
        takes and drops a buffer reference there); ``get_with``'s hook runs under it on a hit."""
        self.name = name
        self._on_store = on_store
        self._on_drop = on_drop
        self.capacity = capacity
        self.retention_s = retention_s
        self._weigher = weigher
        self._clock = clock
        self._items: OrderedDict[K, tuple[V, int, float]] = OrderedDict()  # value, weight, last access
        self._weight = 0
        # Loads in flight. One invalidated while it flies hands its value to its waiters but does not store it,
        # or a segment deleted (or copied again) during a read would be served from the cache afterwards.
        self._flights: SingleFlight[K, Future[V]] = SingleFlight(Future)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.load_success = 0
        self.load_success_ns = 0
        self.load_failure = 0
        self.load_failure_ns = 0
        self.evictions = 0
        self.eviction_weight = 0
        self.expirations = 0

    # --- lookups -----------------------------------------------------------------------------------------------

    def _lookup(self, key: K, now: float) -> V | None:
        """The live value, or None; drops it when expired. Caller holds the lock."""
        item = self._items.get(key)
        if item is None:
            return None
        value, weight, last = item
        if self._expired(last, now):
            self._expire(key, value, weight)
            return None
        self._items[key] = (value, weight, now)
        self._items.move_to_end(key)
        return value

    def _expire(self, key: K, value: V, weight: int) -> None:
        """Drop an expired entry and count it. Caller holds the lock."""
        del self._items[key]
        self._weight -= weight
        self._dropped(value)
        self.expirations += 1
        self.evictions += 1
        self.eviction_weight += weight

    def _sweep_locked(self, now: float, limit: int) -> int:
        """Drop up to ``limit`` expired entries from the least recently used end (entries are kept in order of
        last access, so the first live one ends the sweep). Caller holds the lock."""
        if self.retention_s is None:
            return 0
        dropped = 0
        while dropped < limit and self._items:
            key, (value, weight, last) = next(iter(self._items.items()))
            if not self._expired(last, now):
                break
            self._expire(key, value, weight)
            dropped += 1
        return dropped

    def sweep(self, limit: int | None = None) -> int:
        """Drop expired entries (at most ``limit``); how many were dropped."""
        with self._lock:
            return self._sweep_locked(self._clock(), len(self._items) if limit is None else limit)

    def _expired(self, last_used: float, now: float) -> bool:
        return self.retention_s is not None and now - last_used > self.retention_s

    def _dropped(self, value: V) -> None:
        if self._on_drop is not None:
            self._on_drop(value)

    def get(self, key: K) -> V | None:
        return self.get_with(key, None)

    def get_with(
        self, key: K, on_hit: Callable[[V], None] | None, count_miss: bool = True, count_hit: bool = True
    ) -> V | None:
        with self._lock:
            now = self._clock()
            self._sweep_locked(now, SWEEP_ON_READ)
            value = self._lookup(key, now)
            if value is None:
                self.misses += count_miss
            else:
                self.hits += count_hit
                if on_hit is not None:
                    on_hit(value)
            return value

    def count(self, hit: bool) -> None:
        """Count one lookup whose outcome the caller settled itself (a load it joined is a hit)."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def contains(self, key: K) -> bool:
        """Present and live, without counting a hit or a miss (for planning, not for serving)."""
        with self._lock:
            return self._lookup(key, self._clock()) is not None

    def put(self, key: K, value: V) -> None:
        weight = self._weigher(value)
        if weight > self.capacity:
            return
        with self._lock:
            self._store(key, value, weight)

    def _store(self, key: K, value: V, weight: int) -> None:
        """Caller holds the lock and has checked ``weight`` against the capacity."""
        now = self._clock()
        self._sweep_locked(now, SWEEP_ON_STORE)
        old = self._items.pop(key, None)
        if old is not None:
            self._weight -= old[1]
            self._dropped(old[0])
        if self._on_store is not None:
            self._on_store(value)
        self._items[key] = (value, weight, now)
        self._weight += weight
        while self._weight > self.capacity:
            _, (v, w, _) = self._items.popitem(last=False)
            self._weight -= w
            self.evictions += 1
            self.eviction_weight += w
            self._dropped(v)

    def invalidate(self, key: K) -> None:
        with self._lock:
            self._flights.void(key)
            item = self._items.pop(key, None)
            if item is not None:
                self._weight -= item[1]
                self._dropped(item[0])

    def invalidate_where(self, predicate: Callable[[K], bool]) -> None:
        with self._lock:
            self._flights.void_where(predicate)
            for key in [k for k in self._items if predicate(k)]:
                value, weight, _ = self._items.pop(key)
                self._weight -= weight
                self._dropped(value)

    def clear(self) -> None:
        self.invalidate_where(lambda _k: True)

    # --- single flight -----------------------------------------------------------------------------------------

    def claim(self, key: K) -> tuple[Future[V], bool]:
        """The load in flight for ``key`` and whether the caller owns it (and must ``finish`` it)."""
        with self._lock:  # a load landing stores its value under this lock: a claim never falls in between
            return self._flights.claim(key)

    def claim_missing(self, key: K) -> Future[V] | None:
        """Claim a load only when ``key`` is neither cached nor loading: for work done ahead of any reader, which
        must never redo what a reader already did. Does not refresh the entry's recency."""
        with self._lock:
            item = self._items.get(key)
            if item is not None and not self._expired(item[2], self._clock()):
                return None
            return self._flights.claim_new(key)

    def in_flight(self, key: K) -> bool:
        with self._lock:
            return key in self._flights

    def finish(
        self, key: K, future: Future[V], value: V | None, error: BaseException | None, started: int, store: bool = True
    ) -> None:
        """Publish a claimed load: store it on success (never on failure, nor when the key was invalidated while
        it loaded) and wake the waiters."""
        elapsed = time.perf_counter_ns() - started
        weight = 0
        if error is None and store:
            assert value is not None
            weight = self._weigher(value)
        with self._lock:  # one hold: an invalidation lands either before the store (voided) or after it (drops it)
            live = self._flights.land(key)
            if error is None and store and live and weight <= self.capacity:
                self._store(key, value, weight)  # type: ignore[arg-type]
            if error is None:
                self.load_success += 1
                self.load_success_ns += elapsed
            else:
                self.load_failure += 1
                self.load_failure_ns += elapsed
        if error is None:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            future.set_exception(error)

    def get_or_load(self, key: K, load: Callable[[], V], timeout_s: float | None, what: str) -> V:
        """The cached value, or one load shared by every concurrent caller of the same key."""
        value = self.get_with(key, None, count_miss=False)
        if value is not None:
            return value
        future, mine = self.claim(key)
        self.count(hit=not mine)  # joining another caller's load is a hit: it costs no load of its own
        if not mine:
            return wait_for(future, timeout_s, what)
        started = time.perf_counter_ns()
        try:
            value = load()
        except BaseException as e:
            self.finish(key, future, None, e, started)
            raise
        self.finish(key, future, value, None, started)
        return value

    # --- stats -------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def weight(self) -> int:
        with self._lock:
            return self._weight

    def stats(self) -> dict[str, float]:
        with self._lock:
            self._sweep_locked(self._clock(), SWEEP_ON_READ)
            return {
                "cache-hits-total": self.hits,
                "cache-misses-total": self.misses,
                "cache-load-success-total": self.load_success,
                "cache-load-success-time-total": self.load_success_ns,
                "cache-load-failure-total": self.load_failure,
                "cache-load-failure-time-total": self.load_failure_ns,
                "cache-eviction-total": self.evictions,
                "cache-eviction-weight-total": self.eviction_weight,
                "cache-size-total": len(self._items),
                "cache-weight-total": self._weight,
            }


def wait_for(future: Future[V], timeout_s: float | None, what: str) -> V:
    """Wait for another thread's load of ``what``, bounded: a broker thread must never hang on a stuck load."""
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        raise RemoteStorageException(
            f"timed out after {timeout_s:.1f} s waiting for another reader's load of {what}; the storage is slow "
            f"or unreachable (raise fetch.*.cache.get.timeout.ms if this is expected)"
        ) from None
