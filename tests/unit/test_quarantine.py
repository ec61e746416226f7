"""``rsm.deletion.quarantine`` on the filesystem backend and on a small fake store: objects held byte for byte,
put back only where nothing lives, purged, expired; never what is not the plugin's; a failed copy deletes
nothing; an interrupted hold resolves cleanly; the record's codec round-trips and refuses bad input precisely."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.base import BackendCapabilities, KeyNotFound, StorageBackendException
from backends.filesystem import FileSystemBackend
from rsm.deletion.holding import Held
from rsm.deletion.quarantine import (
    RECORD_SUFFIX,
    BackendHolding,
    Quarantine,
    check_run_id,
    decode_record,
    encode_record,
    new_run_id,
    run_started,
)
from rsm.deletion.rules import STORE_AGE, STORE_RELISTED, DeletionRefused, Evidence
from rsm.errors import CorruptDataException

pytestmark = pytest.mark.unit
RUN = "20261129T041500Z-9f3a"
EVIDENCE = [Evidence(STORE_AGE, "2.0 h old"), Evidence(STORE_RELISTED)]


class Clock:
    """The time, from when run RUN started (its id is its start time)."""

    def __init__(self) -> None:
        self.now = run_started(RUN) or 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FileSystemBackend]:
    backend = FileSystemBackend()
    backend.configure({"root": str(tmp_path / "store")})
    yield backend
    backend.close()


def _put(backend: FileSystemBackend, key: str, data: bytes) -> None:
    backend.upload(key, io.BytesIO(data))


def _read(backend: FileSystemBackend, key: str) -> bytes:
    with backend.fetch(key) as f:
        return f.read()


def test_hold_restore_purge_on_the_filesystem(fs: FileSystemBackend) -> None:
    store = BackendHolding(fs, "p/", owned=lambda k: k.endswith(".log"))
    clock = Clock()
    q = Quarantine(store, store.root, retention_s=3600, clock=clock)
    body = bytes(range(256)) * 40
    _put(fs, "p/t/0/a.log", body)
    _put(fs, "p/t/0/b.log", b"")
    _put(fs, "p/t/0/notes.txt", b"someone else's")

    held = q.hold("orphan-object", [("p/t/0/a.log", None), ("p/t/0/b.log", 0)], EVIDENCE, RUN, topic="t")
    assert [(h.original, h.location, h.size) for h in held] == [
        ("p/t/0/a.log", f"p/kts-quarantine/{RUN}/t/0/a.log", len(body)),
        ("p/t/0/b.log", f"p/kts-quarantine/{RUN}/t/0/b.log", 0),
    ]
    assert held[0].evidence == ("store-age: 2.0 h old", "store-relisted") and held[0].until == clock.now + 3600
    assert not store.exists("p/t/0/a.log") and _read(fs, held[0].location) == body
    assert sorted(fs.list("p/kts-quarantine/")) == sorted(
        [h.location for h in held] + [h.location + RECORD_SUFFIX for h in held]
    )
    assert q.held() == held and q.held(topic="t") == held and q.held(topic="u") == []
    assert q.held(key="p/t/0/b.log") == [held[1]] and q.held(run="20200101T000000Z-0000") == []

    # a name that is not the plugin's is refused before anything moves
    with pytest.raises(DeletionRefused, match="p/t/0/notes.txt is not the plugin's.*neither moved nor deleted"):
        q.hold("orphan-object", [("p/t/0/c.log", None), ("p/t/0/notes.txt", None)], EVIDENCE, RUN)
    with pytest.raises(DeletionRefused, match="not the plugin's"):
        q.hold("orphan-object", [(held[0].location, None)], EVIDENCE, RUN)  # the quarantine's own
    assert _read(fs, "p/t/0/notes.txt") == b"someone else's"

    # restore refuses to overwrite a live object, puts back the other byte for byte
    _put(fs, "p/t/0/b.log", b"new life")
    report = q.restore(q.held())
    assert [h.original for h in report.restored] == ["p/t/0/a.log"]
    assert [(h.original, "live object" in why) for h, why in report.refused] == [("p/t/0/b.log", True)]
    assert _read(fs, "p/t/0/a.log") == body and _read(fs, "p/t/0/b.log") == b"new life"
    assert q.held() == [held[1]]

    assert q.expired() == []
    clock.now += 3600
    assert q.expired() == [held[1]]
    assert q.purge(q.expired()).bytes_freed == 0
    assert list(fs.list("p/kts-quarantine/")) == [] and q.held() == []


class FakeStore:
    """A dict of objects; ``fail_copy`` makes copies fail, ``fail_delete_of`` makes one name's delete fail."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail_copy = False
        self.fail_delete_of: str | None = None

    def describe(self) -> str:
        return "FakeStore"

    def relative(self, name: str) -> str | None:
        return name[len("w/") :] if name.startswith("w/") and not name.startswith("w/kts-quarantine/") else None

    def copy(self, source: str, target: str) -> None:
        if self.fail_copy:
            raise StorageBackendException(f"copy {source} failed: throttled")
        if source not in self.objects:
            raise KeyNotFound(source)
        self.objects[target] = self.objects[source]

    def exists(self, name: str) -> bool:
        return name in self.objects

    def size(self, name: str) -> int | None:
        return len(self.objects[name]) if name in self.objects else None

    def delete(self, name: str) -> None:
        if name == self.fail_delete_of:
            raise StorageBackendException(f"delete {name} failed")
        self.objects.pop(name, None)

    def put(self, name: str, data: bytes) -> None:
        self.objects[name] = data

    def get(self, name: str) -> bytes:
        return self.objects[name]

    def list(self, prefix: str) -> Iterator[str]:
        return iter(sorted(k for k in self.objects if k.startswith(prefix)))


def test_a_failed_copy_deletes_nothing_and_leaves_no_record() -> None:
    store = FakeStore()
    store.objects["w/t/data/f.parquet"] = b"rows"
    q = Quarantine(store, "w/kts-quarantine/", 60)
    store.fail_copy = True
    with pytest.raises(StorageBackendException, match="throttled"):
        q.hold("iceberg-orphan", [("w/t/data/f.parquet", 4)], [], RUN)
    assert store.objects == {"w/t/data/f.parquet": b"rows"}


def test_an_interrupted_hold_resolves_cleanly() -> None:
    store = FakeStore()
    store.objects["w/t/data/f.parquet"] = b"rows"
    q = Quarantine(store, "w/kts-quarantine/", 60)
    location = f"w/kts-quarantine/{RUN}/t/data/f.parquet"
    # killed after the copy, before the original's delete: both are there
    store.fail_delete_of = "w/t/data/f.parquet"
    with pytest.raises(StorageBackendException):
        q.hold("iceberg-orphan", [("w/t/data/f.parquet", 4)], [], RUN)
    assert store.objects["w/t/data/f.parquet"] == b"rows" and store.objects[location] == b"rows"
    store.fail_delete_of = None
    # the retry of the same run holds it once
    (held,) = q.hold("iceberg-orphan", [("w/t/data/f.parquet", 4)], [], RUN)
    assert q.held() == [held] and "w/t/data/f.parquet" not in store.objects
    # retried again once the original is gone: the same item, nothing new
    assert q.hold("iceberg-orphan", [("w/t/data/f.parquet", 4)], [], RUN) == [held]

    # killed after the record, before the copy: listed as not present; purge removes the record only
    store.objects["w/t/data/g.parquet"] = b"more"
    store.fail_copy = True
    with pytest.raises(StorageBackendException):
        q.hold("iceberg-orphan", [("w/t/data/g.parquet", 4)], [], RUN)
    store.fail_copy = False
    record = f"w/kts-quarantine/{RUN}/t/data/g.parquet{RECORD_SUFFIX}"
    store.objects[record] = encode_record(
        Held("w/t/data/g.parquet", record[: -len(RECORD_SUFFIX)], 4, "iceberg-orphan", RUN, 0.0, 60.0)
    )
    stray = q.held(key="w/t/data/g.parquet")
    assert [h.present for h in stray] == [False]
    assert q.restore(stray).refused  # the original lives: it was never deleted
    assert q.purge(stray).bytes_freed == 0 and record not in store.objects
    assert store.objects["w/t/data/g.parquet"] == b"more"


def test_a_record_that_points_elsewhere_is_refused() -> None:
    store = FakeStore()
    store.objects["w/live.parquet"] = b"live"
    q = Quarantine(store, "w/kts-quarantine/", 60)
    record = f"w/kts-quarantine/{RUN}/t/x.parquet{RECORD_SUFFIX}"
    store.objects[record] = encode_record(Held("w/t/x.parquet", "w/live.parquet", 4, "iceberg-orphan", RUN, 0, 60))
    with pytest.raises(CorruptDataException, match="not where the record is"):
        q.held()
    assert store.objects["w/live.parquet"] == b"live"


def test_run_ids_sort_by_time_and_are_checked() -> None:
    first, second = new_run_id(1_800_000_000), new_run_id(1_800_000_060)
    assert first.startswith("20270115T080000Z-") and first < second and check_run_id(first) == first
    with pytest.raises(ValueError, match="not a quarantine run id"):
        check_run_id("../etc")
    with pytest.raises(ValueError, match="not a quarantine run id"):
        Quarantine(FakeStore(), "w/kts-quarantine/").held(run="x/y")


def test_streamed_copy_without_server_side_copy(fs: FileSystemBackend) -> None:
    store = BackendHolding(fs, "", capabilities=BackendCapabilities())  # no copy_object, no list_details
    body = b"x" * (3 * 1024 * 1024 + 7)
    _put(fs, "t/0/a.log", body)
    (held,) = Quarantine(store, store.root).hold("orphan-object", [("t/0/a.log", None)], [], RUN)
    assert held.size == len(body) and _read(fs, held.location) == body and not store.exists("t/0/a.log")


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
times = st.floats(min_value=0, max_value=1e12, allow_nan=False)


@given(
    original=names,
    location=names,
    size=st.integers(0, 2**63),
    kind=names,
    held_at=times,
    until=times,
    topic=st.none() | names,
    evidence=st.lists(st.text(max_size=30), max_size=4),
)
def test_record_round_trip(
    original: str,
    location: str,
    size: int,
    kind: str,
    held_at: float,
    until: float,
    topic: str | None,
    evidence: list[str],
) -> None:
    held = Held(original, location, size, kind, RUN, held_at, until, topic, tuple(evidence))
    assert decode_record(encode_record(held), "r") == held


record_fields = st.fixed_dictionaries(
    {},
    optional={
        k: st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.lists(st.text(max_size=5))
        for k in ("format", "original", "location", "size", "kind", "run", "heldAt", "until", "topic", "evidence")
    },
)


@given(record_fields)
def test_any_record_fields_decode_or_fail_precisely(doc: dict[str, object]) -> None:
    try:
        decode_record(json.dumps({"format": 1, **doc}).encode(), "rec")
    except CorruptDataException as e:
        assert str(e).startswith("quarantine record rec ")


@given(st.binary(max_size=200) | st.recursive(st.none() | st.booleans() | st.integers() | st.text(), lambda c: (
    st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4)), max_leaves=10).map(
    lambda doc: json.dumps(doc).encode()))  # fmt: skip
def test_any_bytes_decode_to_a_record_or_a_precise_error(raw: bytes) -> None:
    try:
        decode_record(raw, "p/kts-quarantine/r/x.kts-held.json")
    except CorruptDataException as e:
        assert "quarantine record p/kts-quarantine/r/x.kts-held.json" in str(e)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"size": -1}, "non-negative integer 'size'"),
        ({"size": True}, "non-negative integer 'size'"),
        ({"until": "soon"}, "'until'"),
        ({"heldAt": 10**400}, "no time 'heldAt'"),
        ({"heldAt": -1}, "no time 'heldAt'"),
        ({"original": ""}, "'original'"),
        ({"evidence": "store-age"}, "'evidence'"),
        ({"format": 2}, "format 2"),
    ],
)
def test_bad_records_are_named(change: dict[str, object], why: str) -> None:
    doc = json.loads(encode_record(Held("a", "b", 1, "orphan-object", RUN, 0, 1)))
    with pytest.raises(CorruptDataException, match=why):
        decode_record(json.dumps({**doc, **change}).encode(), "rec")
    with pytest.raises(CorruptDataException, match="not JSON"):
        decode_record(b'{"size": NaN}', "rec")


def test_a_store_may_refuse_a_name_by_raising() -> None:
    """A place that says "not mine" by raising (a FileIO's warehouse check) is refused the same way."""
    from rsm.errors import RemoteStorageException

    class Raising(FakeStore):
        def relative(self, name: str) -> str | None:
            if not name.startswith("w/"):
                raise RemoteStorageException(f"{name} is outside the warehouse")
            return super().relative(name)

    store = Raising()
    store.objects["elsewhere/f.parquet"] = b"theirs"
    q = Quarantine(store, "w/kts-quarantine/")
    with pytest.raises(DeletionRefused, match="elsewhere/f.parquet is not the plugin's"):
        q.hold("iceberg-orphan", [("elsewhere/f.parquet", 6)], [], RUN)
    assert q.held(key="elsewhere/f.parquet") == [] and store.objects == {"elsewhere/f.parquet": b"theirs"}


def test_expiry_reads_only_the_records_of_runs_old_enough() -> None:
    class Counting(FakeStore):
        def __init__(self) -> None:
            super().__init__()
            self.gets: list[str] = []

        def get(self, name: str) -> bytes:
            self.gets.append(name)
            return super().get(name)

    store = Counting()
    clock = Clock()
    q = Quarantine(store, "w/kts-quarantine/", 3600, clock=clock)
    later = new_run_id(clock.now + 7200)
    for run, name in ((RUN, "w/a.parquet"), (later, "w/b.parquet")):
        store.objects[name] = b"rows"
        q.hold("iceberg-orphan", [(name, 4)], [], run)
    clock.now += 7200 + 1800  # the first run is 2.5 h old, the second half an hour
    assert [h.original for h in q.expired()] == ["w/a.parquet"]
    assert store.gets == [f"w/kts-quarantine/{RUN}/a.parquet{RECORD_SUFFIX}"]
    assert run_started("not-a-run") is None and run_started("20261399T000000Z-0000") is None
