"""What every maintenance step shares: the mark of a table the plugin made, a step's result, the guard held
around commits."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pyiceberg.table import Table

OWNER_PROPERTY = "kafka.topic"
"""Set by the writer on every table it creates: the mark of a table whose files maintenance may touch."""
COMPACTION_SNAPSHOT_PROPERTY = "kafka.maintenance"
Guard = Callable[[], AbstractContextManager[object]]


@dataclass
class StepResult:
    """What one step did (or, in a dry run, would do)."""

    step: str
    count: int = 0
    bytes: int = 0
    details: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0
    given_up: int = 0  # compaction: bins left because their files changed meanwhile
    refused: str = ""  # why the step did nothing and will not until an operator acts (not a conflict)


def is_ours(table: Table) -> bool:
    return OWNER_PROPERTY in table.properties
