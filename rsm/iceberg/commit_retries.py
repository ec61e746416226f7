"""A commit tried again after another writer's commit won, from the table as it is then: the loop the latest
table's updates and the operator tools' row removals and restores share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pyiceberg.exceptions import CommitFailedException, ValidationException

__all__ = ["CONFLICTS", "retry_conflicts"]

CONFLICTS = (CommitFailedException, ValidationException)
"""What pyiceberg raises when another writer committed first."""
RETRY_PAUSE_S = 0.05
"""The pause before the n-th retry is n times this."""

_T = TypeVar("_T")


def _ignore(conflict: Exception, attempt: int) -> None:
    pass


def retry_conflicts(
    attempt: Callable[[], _T],
    retries: int,
    refusal: Callable[[Exception, int], Exception],
    on_conflict: Callable[[Exception, int], None] = _ignore,
) -> _T:
    """``attempt()``, and again after each conflict up to ``retries`` more times. ``on_conflict(conflict, n)`` is
    called at the n-th attempt's conflict; after the last attempt, ``refusal(conflict, attempts)`` is raised from
    the conflict."""
    for n in range(retries + 1):
        try:
            return attempt()
        except CONFLICTS as e:
            on_conflict(e, n + 1)
            if n == retries:
                raise refusal(e, retries + 1) from e
            time.sleep(RETRY_PAUSE_S * (n + 1))
    raise AssertionError("unreachable")
