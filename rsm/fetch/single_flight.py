"""Single flight: one load per key at a time, every other caller waits for it.

When 32 broker threads want the same chunk or manifest at once, one of them loads it and the others wait for
that load's future instead of reading the store 31 more times. The caches (``lru.TimedLru``) and the coalescing
fetcher (``coalescing_fetcher``) both keep their loads in flight here.

A flight ends in two steps: the owner sets its future's result (waiters wake), then calls :meth:`land` once
nothing more may join it. A key voided while it flies (its segment was deleted) lands as voided: its owner
hands the value to the waiters but must not cache it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
F = TypeVar("F", bound=Future)  # type: ignore[type-arg]


class SingleFlight(Generic[K, F]):
    """The flights in the air, by key. ``make`` builds a new flight (a ``Future`` or a subclass of one)."""

    def __init__(self, make: Callable[[], F]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._flights: dict[K, F] = {}
        self._voided: set[K] = set()

    def claim(self, key: K) -> tuple[F, bool]:
        """The flight for ``key`` and whether the caller owns it (and must end it)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = self._flights[key] = self._make()
            return flight, True

    def claim_new(self, key: K) -> F | None:
        """A new flight for ``key``, or None when one is in the air."""
        with self._lock:
            if key in self._flights:
                return None
            flight = self._flights[key] = self._make()
            return flight

    def claim_leading(
        self,
        keys: Sequence[K],
        on_join: Callable[[F], None] | None = None,
        on_claim: Callable[[F], None] | None = None,
    ) -> tuple[F, dict[K, F]]:
        """The flight for ``keys[0]``: joined when one is in the air (``on_join`` runs under the lock, and no
        key is claimed), else new, with new flights for the keys after it up to the first one in the air.
        ``on_claim`` runs under the lock for each new flight, before anyone can join it."""
        claimed: dict[K, F] = {}
        with self._lock:
            flight = self._flights.get(keys[0])
            if flight is not None:
                if on_join is not None:
                    on_join(flight)
                return flight, claimed
            for key in keys:
                if key in self._flights:
                    break
                flight = claimed[key] = self._flights[key] = self._make()
                if on_claim is not None:
                    on_claim(flight)
        return claimed[keys[0]], claimed

    def join(self, key: K, on_join: Callable[[F], None] | None = None) -> F | None:
        """The flight for ``key``, or None. ``on_join`` runs under the lock, while the flight cannot land."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and on_join is not None:
                on_join(flight)
            return flight

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._flights

    def __len__(self) -> int:
        with self._lock:
            return len(self._flights)

    def void(self, key: K) -> None:
        """Mark the flight for ``key``, if any: its value must not be cached when it lands."""
        with self._lock:
            if key in self._flights:
                self._voided.add(key)

    def void_where(self, predicate: Callable[[K], bool]) -> None:
        """Mark the flights whose keys match: their values must not be cached when they land."""
        with self._lock:
            self._voided.update(k for k in self._flights if predicate(k))

    def land(self, key: K, on_land: Callable[[F], None] | None = None) -> bool:
        """End the flight for ``key``; False when it was voided while it flew. ``on_land`` runs under the lock."""
        with self._lock:
            flight = self._flights.pop(key, None)
            voided = key in self._voided
            self._voided.discard(key)
            if flight is not None and on_land is not None:
                on_land(flight)
            return not voided
