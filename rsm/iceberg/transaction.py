"""A pyiceberg transaction that builds its view of the table's metadata once per change, not once per read.

pyiceberg's ``Transaction.table_metadata`` applies the staged updates to the table's metadata and deep-copies
the result on every read, and a commit reads it a dozen times and more (each snapshot producer, each
validation): several milliseconds each for a table of a few snapshots, much of a small copy's time. The
metadata is immutable (frozen models), so the view is kept until the table's metadata or the staged updates
change (pyiceberg replaces both objects on every change, so identity tells).

It also counts pyiceberg's own retries of a commit that lost to a concurrent update (``retries``).
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate, update_table_metadata


class CachingTransaction(Transaction):
    """``Transaction`` with ``table_metadata`` kept between changes; ``retries`` counts the times pyiceberg
    rebuilt the commit on a fresh table after another writer committed first."""

    _view: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None
    retries: int = 0

    def _rebuild_snapshot_updates(self) -> None:
        self.retries += 1
        super()._rebuild_snapshot_updates()

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        view = self._view
        if view is not None and view[0] is base and view[1] is updates:
            return view[2]
        metadata = update_table_metadata(base, updates)
        self._view = (base, updates, metadata)
        return metadata


def transaction(table: Table) -> CachingTransaction:
    """A transaction on ``table`` (what ``table.transaction()`` gives, with the metadata view kept)."""
    return CachingTransaction(table)
