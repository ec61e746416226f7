"""rsm.iceberg.commit_locks: one table's lock makes its holders take turns, another table's does not wait, and
an entry lasts only while its lock is held or waited for."""

from __future__ import annotations

import threading

from rsm.iceberg.commit_locks import TableLocks


def test_locks_of_different_tables_do_not_wait_for_each_other() -> None:
    locks = TableLocks()
    held = threading.Event()
    release = threading.Event()

    def hold_a() -> None:
        with locks.hold(("kafka", "a")):
            held.set()
            release.wait(timeout=30)

    t = threading.Thread(target=hold_a)
    t.start()
    try:
        assert held.wait(timeout=30)
        with locks.hold(("kafka", "b")):  # another table: not blocked by a's holder
            assert len(locks) == 2
        got_a = threading.Event()

        def take_a() -> None:
            with locks.hold(("kafka", "a")):
                got_a.set()

        waiter = threading.Thread(target=take_a)
        waiter.start()
        assert not got_a.wait(timeout=0.2)  # the same table: waits while a's holder has it
    finally:
        release.set()
        t.join(timeout=30)
    waiter.join(timeout=30)
    assert got_a.is_set()
    assert len(locks) == 0
