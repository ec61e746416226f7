"""Iceberg mode end to end through the Python RemoteStorageManager: segments become rows of the topic's table,
and a fetch from any batch position gives what the classic path gives, record by record."""

from __future__ import annotations

import builtins
import io
import json
import random
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from crc32c import crc32c
from emulators import FIXTURE_FOR
from helpers import TIP, encryption_configs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsm import IndexType, RemoteResourceNotFoundException, RemoteStorageException, RemoteStorageManager
from rsm.formats.iceberg import iceberg_format
from rsm.iceberg.value_hook import ValueColumn
from rsm.kafka.batch_builder import build_batch, build_control_batch
from rsm.kafka.indexes import decode_offset_index
from rsm.kafka.log_scan import batch_view, iter_batches
from rsm.kafka.records import ControlRecordType, decode_records
from rsm.kafka.writer import write_entries_segment
from rsm.metadata import TopicIdPartition

BASE = {"chunk.size": "65536", "storage.backend.class": "filesystem", "storage.fsync.enabled": "false"}


def _configs(tmp: Path, **extra: str) -> dict[str, str]:
    return {
        **BASE,
        "storage.root": str(tmp / "store"),
        "iceberg.mode.topics.regex": "orders|ice-.*",
        "iceberg.mode.catalog.sqlite.path": str(tmp / "catalog.db"),
        **extra,
    }


def _manager(configs: dict[str, str]) -> RemoteStorageManager:
    m = RemoteStorageManager()
    m.configure(configs)
    return m


def _table(m: RemoteStorageManager, topic: str = "orders") -> Any:
    handle = iceberg_format(m).mode().handle
    return handle.catalog.load_table(handle.table_identifier(topic)).scan().to_arrow()


def _offsets(table: Any, partition: int | None = None) -> list[int]:
    kafka = table.column("kafka")
    offsets = pc.struct_field(kafka, "offset").to_pylist()
    if partition is None:
        return offsets
    parts = pc.struct_field(kafka, "partition").to_pylist()
    return [o for o, p in zip(offsets, parts, strict=True) if p == partition]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_fetch_from_every_indexed_position_matches_the_classic_path(
    codec: str, segment_factory: Any, tmp_path: Path
) -> None:
    seg = segment_factory(num_batches=40, codec=codec, transactional=True, seed=5)
    meta = seg.to_metadata(TIP)
    classic_meta = seg.to_metadata(TopicIdPartition(TIP.topic_id, "classic-orders", TIP.partition))
    m = _manager(_configs(tmp_path))
    try:
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        m.copy_log_segment_data(classic_meta, seg.to_log_segment_data())
        assert m.fetch_manifest(meta).kind == "iceberg"
        assert m.fetch_manifest(classic_meta).kind == "classic"
        assert not (tmp_path / "store" / m.manifests.keys(meta).log).exists()  # one copy: the table's

        original = seg.log.read_bytes()
        positions = [0] + [p for _, p in decode_offset_index(seg.offset_index.read_bytes(), seg.base_offset)]
        positions += [h.position for h, _ in iter_batches(original)][-3:]
        for position in positions:
            got = m.fetch_log_segment(meta, position).read()
            want = m.fetch_log_segment(classic_meta, position).read()
            assert want == original[position:]
            assert _fetched_view(got) == _fetched_view(want), (codec, position)
            if codec == "none":
                assert got == want  # uncompressed batches come back byte for byte
        # a bounded fetch: the batches that start in [start, end]
        batches = [h for h, _ in iter_batches(original)]
        mid = batches[len(batches) // 2]
        got = m.fetch_log_segment(meta, batches[1].position, mid.position).read()
        assert [f[0] for f, _ in _fetched_view(got)] == [b.base_offset for b in batches[1 : len(batches) // 2 + 1]]
        # past the last batch: nothing
        assert m.fetch_log_segment(meta, len(original)).read() == b""

        for index_type in IndexType:
            try:
                classic = m.fetch_index(classic_meta, index_type).read()
            except RemoteResourceNotFoundException:
                with pytest.raises(RemoteResourceNotFoundException):
                    m.fetch_index(meta, index_type)
                continue
            assert m.fetch_index(meta, index_type).read() == classic

        rows = _table(m)
        assert rows.num_rows == sum(len(r) for _, r in _fetched_view(original))
        assert sorted(_offsets(rows)) == [r.offset for _, rs in _fetched_view(original) for r in rs]
    finally:
        m.close()


def test_transactions_are_marked_for_iceberg_readers(segment_factory: Any, tmp_path: Path) -> None:
    seg = segment_factory(num_batches=60, transactional=True, seed=9)
    assert seg.aborted_txns
    m = _manager(_configs(tmp_path))
    try:
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        kafka = _table(m).column("kafka")
        rows = {
            o: (c, t, a, ct, pid)
            for o, c, t, a, ct, pid in zip(
                *(
                    pc.struct_field(kafka, f).to_pylist()
                    for f in (
                        "offset",
                        "is_control",
                        "is_transactional",
                        "aborted",
                        "control_type",
                        "batch_producer_id",
                    )
                ),
                strict=True,
            )
        }
        markers = 0
        for h, b in iter_batches(seg.log.read_bytes()):
            for r in decode_records(b):
                control, transactional, aborted, control_type, pid = rows[r.offset]
                assert (control, transactional, pid) == (h.is_control, h.is_transactional, h.producer_id)
                if h.is_control:
                    markers += 1
                    assert control_type == struct.unpack(">hh", r.key)[1]
                    assert not aborted
                else:
                    assert control_type is None
                    expected = h.is_transactional and any(
                        a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                        for a in seg.aborted_txns
                    )
                    assert aborted == expected
        assert markers > 0
        assert any(a for _, _, a, _, _ in rows.values())
    finally:
        m.close()


def test_a_retried_copy_and_an_overlapping_segment_leave_no_duplicates(tmp_path: Path) -> None:
    def batches(first: int, count: int, tag: bytes) -> list[bytes]:
        return [
            build_batch([(1_700_000_000_000 + i, b"k", tag + b"%d" % i, [])], base_offset=first + i)
            for i in range(count)
        ]

    old = write_entries_segment(tmp_path / "old", batches(0, 50, b"old"))
    new = write_entries_segment(tmp_path / "new", batches(30, 40, b"new"), leader_epochs={1: 30})
    m = _manager(_configs(tmp_path))
    try:
        meta_old = old.to_metadata(TIP)
        m.copy_log_segment_data(meta_old, old.to_log_segment_data())
        retry = old.to_metadata(TIP, "retriedCopyxxxxxxxxxxx")
        m.copy_log_segment_data(retry, old.to_log_segment_data())
        assert sorted(_offsets(_table(m))) == list(range(50))
        meta_new = new.to_metadata(TIP)
        m.copy_log_segment_data(meta_new, new.to_log_segment_data())
        table = _table(m)
        assert sorted(_offsets(table)) == list(range(70))
        values = dict(zip(_offsets(table), table.column("value_raw").to_pylist(), strict=True))
        assert values[29] == b"old29" and values[30] == b"new0" and values[69] == b"new39"
        # Kafka reads each segment from the table as it is now: the old one (its retried copy) keeps the offsets
        # the new one did not replace (never the new one's rows: they carry the new segment's positions), the new
        # one all of its own; the copy the retry replaced has no rows left
        old_values = [r.value for _, rs in _fetched_view(m.fetch_log_segment(retry, 0).read()) for r in rs]
        assert old_values == [b"old%d" % i for i in range(30)]
        assert m.fetch_log_segment(meta_old, 0).read() == b""
        new_values = [r.value for _, rs in _fetched_view(m.fetch_log_segment(meta_new, 0).read()) for r in rs]
        assert new_values == [b"new%d" % i for i in range(40)]
    finally:
        m.close()


def test_rows_name_their_segment_and_topic_and_old_tables_get_the_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row carries ``kafka.segment_id`` and ``kafka.topic_id``; a table made before those fields gets them
    when a copy loads it, its old rows read them as null, and both segments still fetch byte-identical."""
    from rsm.iceberg import rows, schema, tables

    def segment(name: str) -> Any:
        entries = [build_batch([(1_700_000_000_000 + i, b"k", b"v%d" % i, [])], base_offset=i) for i in range(20)]
        return write_entries_segment(tmp_path / name, entries)

    old_fields = tuple(f for f in schema.KAFKA_FIELDS if f[0] not in ("segment_id", "topic_id"))
    assert len(old_fields) == len(schema.KAFKA_FIELDS) - 2
    old_seg, new_seg = segment("old"), segment("new")
    old_meta = old_seg.to_metadata(TopicIdPartition(TIP.topic_id, "orders", 1))
    new_meta = new_seg.to_metadata(TopicIdPartition(TIP.topic_id, "orders", 2))
    with monkeypatch.context() as before:  # the writer as it was: a table without the fields
        for module in (schema, rows, tables):
            before.setattr(module, "KAFKA_FIELDS", old_fields)
        m = _manager(_configs(tmp_path))
        try:
            m.copy_log_segment_data(old_meta, old_seg.to_log_segment_data())
            assert "segment_id" not in _table(m).column("kafka").type.names
        finally:
            m.close()
    m = _manager(_configs(tmp_path))
    try:
        m.copy_log_segment_data(new_meta, new_seg.to_log_segment_data())
        kafka = _table(m).column("kafka")
        found = set(
            zip(
                *(pc.struct_field(kafka, f).to_pylist() for f in ("partition", "segment_id", "topic_id")),
                strict=True,
            )
        )
        assert found == {(1, None, None), (2, new_meta.remote_log_segment_id.id, TIP.topic_id)}
        for meta, seg in ((old_meta, old_seg), (new_meta, new_seg)):
            assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
    finally:
        m.close()


def _counting_batches(first: int, count: int, tag: bytes) -> list[bytes]:
    return [
        build_batch([(1_700_000_000_000 + i, b"k", tag + b"%d" % i, [])], base_offset=first + i) for i in range(count)
    ]


def _data_files(tmp: Path) -> list[Path]:
    return sorted((tmp / "store").rglob("*.parquet"))


def test_a_copy_cancelled_before_its_commit_commits_nothing(tmp_path: Path) -> None:
    """The cancel is asked right before the commit (after the data files are written): the copy stops there,
    the table has no snapshot and no data file is left."""
    from rsm.core.copy_pipeline import CopyCancelled

    seg = write_entries_segment(tmp_path / "seg", _counting_batches(0, 20, b"v"))
    asked: list[int] = []

    def cancelled() -> bool:
        asked.append(len(_data_files(tmp_path)))
        return len(asked) > 1  # the first check is before the rows; the second, right before the commit

    m = _manager(_configs(tmp_path))
    try:
        with pytest.raises(CopyCancelled, match="commit"):
            m.copy_log_segment_data_unless(seg.to_metadata(TIP), seg.to_log_segment_data(), cancelled)
        assert asked == [0, 1]  # the data file was written when the commit was called off
        assert iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders")).current_snapshot() is None
        assert _data_files(tmp_path) == []
    finally:
        m.close()


@pytest.mark.parametrize("reads_back", [True, False])
def test_a_commit_lost_at_commit_deletes_nothing_it_cannot_rule_out(tmp_path: Path, reads_back: bool) -> None:
    """The catalog commits, then the connection drops before it answers. Read back, the commit has landed: the
    copy succeeds and fetches byte-identical. Not readable back: the copy fails saying so, and every data file
    the (landed) commit references is still there."""
    from sqlalchemy.exc import OperationalError

    from rsm.iceberg.replace import CommitOutcomeUnknown

    seg = write_entries_segment(tmp_path / "seg", _counting_batches(0, 20, b"v"))
    meta = seg.to_metadata(TIP)
    m = _manager(_configs(tmp_path))
    try:
        catalog = iceberg_format(m).mode().handle.catalog
        real_commit, real_load = catalog.commit_table, catalog.load_table
        down = []

        def commit_then_drop(*args: Any, **kwargs: Any) -> Any:
            real_commit(*args, **kwargs)
            down.append(not reads_back)
            raise OperationalError("COMMIT", {}, ConnectionError("server closed the connection unexpectedly"))

        def load(*args: Any, **kwargs: Any) -> Any:
            if any(down):
                raise OperationalError("SELECT", {}, ConnectionError("connection refused"))
            return real_load(*args, **kwargs)

        catalog.commit_table, catalog.load_table = commit_then_drop, load
        if reads_back:
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
        else:
            with pytest.raises(CommitOutcomeUnknown, match="could not be read back"):
                m.copy_log_segment_data(meta, seg.to_log_segment_data())
        catalog.commit_table, catalog.load_table = real_commit, real_load
        table = catalog.load_table(("kafka", "orders"))
        assert sorted(_offsets(table.scan().to_arrow())) == list(range(20))
        assert all(Path(urlparse(t.file.file_path).path).exists() for t in table.scan().plan_files())
    finally:
        m.close()


def test_retention_deletes_only_the_rows_its_segment_wrote(tmp_path: Path) -> None:
    """A new leader's segment replaced offsets 30..49 of the old one; deleting the old segment (its manifest says
    0..49) leaves 30..69, the new segment's, and fetching the new segment still works."""
    old = write_entries_segment(tmp_path / "old", _counting_batches(0, 50, b"old"))
    new = write_entries_segment(tmp_path / "new", _counting_batches(30, 40, b"new"), leader_epochs={1: 30})
    m = _manager(_configs(tmp_path, **{"iceberg.mode.delete.rows.enabled": "true"}))
    try:
        meta_old, meta_new = old.to_metadata(TIP), new.to_metadata(TIP)
        m.copy_log_segment_data(meta_old, old.to_log_segment_data())
        m.copy_log_segment_data(meta_new, new.to_log_segment_data())
        m.delete_log_segment_data(meta_old)
        table = _table(m)
        assert sorted(_offsets(table)) == list(range(30, 70))
        assert set(table.column("value_raw").to_pylist()) == {b"new%d" % i for i in range(40)}
        assert m.fetch_log_segment(meta_new, 0).read() == new.log.read_bytes()
    finally:
        m.close()


def test_a_topic_created_again_leaves_the_old_topics_rows_alone(tmp_path: Path) -> None:
    """Same name, new topic id, offsets from 0 again: the new topic's copies and deletes never touch the old
    topic's rows, which stay in the table (told apart by kafka.topic_id) until the old topic's own segments are
    deleted."""
    first = write_entries_segment(tmp_path / "first", _counting_batches(0, 10, b"first"))
    second = write_entries_segment(tmp_path / "second", _counting_batches(0, 10, b"second"))
    old_meta = first.to_metadata(TIP)
    new_meta = second.to_metadata(TopicIdPartition("NEWtopicIdxxxxxxxxxxxx", TIP.topic, TIP.partition))
    m = _manager(_configs(tmp_path, **{"iceberg.mode.delete.rows.enabled": "true"}))
    try:
        m.copy_log_segment_data(old_meta, first.to_log_segment_data())
        m.copy_log_segment_data(new_meta, second.to_log_segment_data())
        values = set(_table(m).column("value_raw").to_pylist())
        assert values == {b"first%d" % i for i in range(10)} | {b"second%d" % i for i in range(10)}
        m.delete_log_segment_data(new_meta)
        assert set(_table(m).column("value_raw").to_pylist()) == {b"first%d" % i for i in range(10)}
        assert m.fetch_log_segment(old_meta, 0).read() == first.log.read_bytes()
        m.delete_log_segment_data(old_meta)
        assert _table(m).num_rows == 0
    finally:
        m.close()


def test_a_changed_namespace_keeps_deletes_working(tmp_path: Path) -> None:
    """Deletes go to the table the segment's manifest names, not the one the namespace configured now names."""
    seg = write_entries_segment(tmp_path / "seg", _counting_batches(0, 10, b"v"))
    meta = seg.to_metadata(TIP)
    m = _manager(_configs(tmp_path))
    try:
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
    finally:
        m.close()
    m = _manager(_configs(tmp_path, **{"iceberg.mode.namespace": "lake", "iceberg.mode.delete.rows.enabled": "true"}))
    try:
        m.delete_log_segment_data(meta)
        catalog = iceberg_format(m).mode().handle.catalog
        assert catalog.load_table(("kafka", "orders")).scan().to_arrow().num_rows == 0
    finally:
        m.close()


def test_partitions_committing_at_once_all_land(tmp_path: Path) -> None:
    m = _manager(_configs(tmp_path, **{"iceberg.mode.commit.retries": "50"}))
    errors: list[BaseException] = []

    def copy(partition: int) -> None:
        try:
            entries = [
                build_batch([(1_700_000_000_000, None, b"p%d-%d" % (partition, i), [])], base_offset=i)
                for i in range(10)
            ]
            seg = write_entries_segment(tmp_path / f"p{partition}", entries)
            tip = TopicIdPartition(TIP.topic_id, "orders", partition)
            m.copy_log_segment_data(seg.to_metadata(tip), seg.to_log_segment_data())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=copy, args=(p,)) for p in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        table = _table(m)
        for p in range(4):
            assert sorted(_offsets(table, p)) == list(range(10))
    finally:
        m.close()


def test_delete_keeps_rows_unless_told(segment_factory: Any, tmp_path: Path) -> None:
    seg = segment_factory(num_batches=10, seed=4)
    for keep in (True, False):
        d = tmp_path / str(keep)
        m = _manager(_configs(d, **{"iceberg.mode.delete.rows.enabled": str(not keep).lower()}))
        try:
            meta = seg.to_metadata(TIP)
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
            rows = _table(m).num_rows
            m.delete_log_segment_data(meta)
            with pytest.raises(RemoteResourceNotFoundException):
                m.fetch_log_segment(meta, 0)
            with pytest.raises(RemoteResourceNotFoundException):
                m.fetch_index(meta, IndexType.OFFSET)
            assert _table(m).num_rows == (rows if keep else 0)
            m.delete_log_segment_data(meta)  # again: already gone is fine
        finally:
            m.close()


class _CountingFileIO(io.FileIO):
    """The segment file as the OS gives it: counts the bytes every read takes from it."""

    counted: ClassVar[list[int]] = []

    def readinto(self, buffer: Any) -> int | None:
        n = super().readinto(buffer)
        _CountingFileIO.counted.append(n or 0)
        return n

    def readall(self) -> bytes:
        data = super().readall()
        _CountingFileIO.counted.append(len(data))
        return data


def test_an_iceberg_copy_reads_the_log_once_and_makes_no_data_key(
    segment_factory: Any, tmp_path: Path, key_pairs: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With compression (and its heuristic) and encryption on, an Iceberg copy still only writes rows: the
    segment file is opened once and each byte read once (the row walk, whose CRC-32C the manifest records), no
    data key is made, and the manifest says the body is neither compressed nor encrypted."""
    seg = segment_factory(num_batches=40, codec="none", seed=11)
    log_path = Path(seg.log).resolve()
    size = log_path.stat().st_size
    configs = _configs(
        tmp_path,
        **encryption_configs(key_pairs),
        **{"compression.enabled": "true", "compression.heuristic.enabled": "true"},
    )
    m = _manager(configs)
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, Path)) and Path(file).resolve() == log_path:
            assert mode == "rb", mode
            opened.append(mode)
            return io.BufferedReader(_CountingFileIO(log_path))
        return real_open(file, mode, *args, **kwargs)

    try:
        meta = seg.to_metadata(TIP)
        _CountingFileIO.counted.clear()
        monkeypatch.setattr(builtins, "open", counting_open)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        monkeypatch.undo()
        assert opened == ["rb"]
        assert sum(_CountingFileIO.counted) == size
        manifest = m.fetch_manifest(meta)
        assert manifest.kind == "iceberg"
        assert manifest.encryption is None and manifest.compression is False
        assert manifest.chunk_index.original_file_size == size and manifest.chunk_index.chunk_count == 1
        assert manifest.integrity is not None
        assert manifest.integrity.chunk_crcs == [crc32c(log_path.read_bytes())]
        with m.fetch_log_segment(meta, 0) as f:
            assert f.read() == log_path.read_bytes()
    finally:
        m.close()


def test_a_topic_switched_over_keeps_serving_its_classic_segments(segment_factory: Any, tmp_path: Path) -> None:
    first = segment_factory(num_batches=10, seed=1)
    second = segment_factory(num_batches=10, seed=2, base_offset=first.end_offset + 1)
    classic = _manager({**_configs(tmp_path), "iceberg.mode.topics.regex": ""})
    meta1 = first.to_metadata(TIP)
    classic.copy_log_segment_data(meta1, first.to_log_segment_data())
    classic.close()
    m = _manager(_configs(tmp_path))
    try:
        meta2 = second.to_metadata(TIP)
        m.copy_log_segment_data(meta2, second.to_log_segment_data())
        assert [m.fetch_manifest(x).kind for x in (meta1, meta2)] == ["classic", "iceberg"]
        assert m.fetch_log_segment(meta1, 0).read() == first.log.read_bytes()
        assert _fetched_view(m.fetch_log_segment(meta2, 0).read()) == _fetched_view(second.log.read_bytes())
        assert m.following_segment(meta1) is not None
        m.delete_log_segment_data(meta1)
        with pytest.raises(RemoteResourceNotFoundException):
            m.fetch_log_segment(meta1, 0)
    finally:
        m.close()


# --- property: random segments, the Iceberg path against the classic one -----------------------------------------

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=40))
_header = st.tuples(st.text(max_size=8), _bytes_or_none)
_record = st.tuples(st.integers(0, 10_000), _bytes_or_none, _bytes_or_none, st.lists(_header, max_size=3))
_batch = st.fixed_dictionaries(
    {
        "records": st.lists(_record, min_size=1, max_size=6),
        "codec": st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
        "txn": st.sampled_from([None, "commit", "abort"]),
        "producer": st.integers(0, 2),
        "epoch": st.integers(0, 1),  # 1: a new leader epoch starts at this batch
    }
)


def _entries(batches: list[dict[str, Any]]) -> tuple[list[bytes], dict[int, int]]:
    """The batches (and their markers) at offsets from 5, and the leader epochs (epoch -> start offset)."""
    out: list[bytes] = []
    offset = 5
    seq: dict[int, int] = {}
    epoch = 0
    epochs = {0: 5}
    for i, b in enumerate(batches):
        if b["epoch"]:
            epoch += 1
            epochs[epoch] = offset
        pid = 4000 + b["producer"]
        records = [(1_700_000_000_000 + i * 1000 + ts, k, v, h) for ts, k, v, h in b["records"]]
        sequence = seq.get(pid, 0)
        out.append(
            build_batch(
                records,
                base_offset=offset,
                codec=b["codec"],
                leader_epoch=epoch,
                producer_id=pid,
                producer_epoch=1,
                base_sequence=sequence,
                transactional=b["txn"] is not None,
            )
        )
        seq[pid] = sequence + len(records)
        offset += len(records)
        if b["txn"] is not None:
            kind = ControlRecordType.COMMIT if b["txn"] == "commit" else ControlRecordType.ABORT
            out.append(
                build_control_batch(
                    kind,
                    base_offset=offset,
                    timestamp_ms=1_700_000_000_000 + i * 1000,
                    producer_id=pid,
                    producer_epoch=1,
                    leader_epoch=epoch,
                )
            )
            offset += 1
    return out, epochs


@pytest.fixture(scope="module")
def shared_manager(tmp_path_factory: pytest.TempPathFactory) -> Any:
    m = _manager(_configs(tmp_path_factory.mktemp("iceberg-prop")))
    yield m
    m.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_batch, min_size=1, max_size=8), start=st.integers(0, 20))
def test_random_segments_fetch_like_the_classic_path(
    batches: list[dict[str, Any]], start: int, shared_manager: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Random segments (codecs, transactions, null keys and values, headers, leader epochs): a fetch from any
    batch position gives the batches the classic path gives, field by field and record by record."""
    m = shared_manager
    entries, epochs = _entries(batches)
    seg = write_entries_segment(tmp_path_factory.mktemp("prop"), entries, leader_epochs=epochs)
    meta = seg.to_metadata(TopicIdPartition(TIP.topic_id, "ice-prop", 3))
    classic = seg.to_metadata(TopicIdPartition(TIP.topic_id, "classic-prop", 3))
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    m.copy_log_segment_data(classic, seg.to_log_segment_data())
    assert m.fetch_manifest(meta).kind == "iceberg"
    positions = [h.position for h, _ in iter_batches(seg.log.read_bytes())]
    position = positions[start % len(positions)]
    got = _fetched_view(m.fetch_log_segment(meta, position).read())
    want = _fetched_view(m.fetch_log_segment(classic, position).read())
    assert got == want
    for index_type in IndexType:
        try:
            expected = m.fetch_index(classic, index_type).read()
        except RemoteResourceNotFoundException:
            continue
        assert m.fetch_index(meta, index_type).read() == expected


# --- the tools: kts ls, inspect, verify and gc know both kinds ---------------------------------------------------


def test_kts_tools_understand_iceberg_segments(
    segment_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rsm.cli.main import main

    seg = segment_factory(num_batches=20, codec="lz4", transactional=True, seed=8)
    configs = _configs(tmp_path)
    m = _manager(configs)
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    classic = seg.to_metadata(TopicIdPartition(TIP.topic_id, "classic-orders", 1))
    m.copy_log_segment_data(classic, seg.to_log_segment_data())
    m.close()
    sets = [a for k, v in configs.items() for a in ("--set", f"{k}={v}")]
    capsys.readouterr()

    assert main(["ls", *sets, "--json"]) == 0
    rows = {r["topic"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["orders"]["kind"] == "iceberg" and rows["classic-orders"]["kind"] == "classic"
    assert rows["orders"]["size"] == seg.size and rows["orders"]["stored"] > 0

    assert main(["inspect", *sets, f"orders/{TIP.partition}/{seg.base_offset}"]) == 0
    out = capsys.readouterr().out
    assert "kind         iceberg" in out and "table        kafka.orders" in out and ".parquet" in out

    assert main(["verify", *sets]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["gc", *sets, "--older-than", "0s"]) == 0
    out = capsys.readouterr().out
    assert "0 items" in out and ".parquet" not in out and "metadata" not in out, out

    # a data file gone (snapshot expiry that ignored the segment) is damage verify names
    table_dir = tmp_path / "store" / "iceberg"
    data_file = next(table_dir.rglob("*.parquet"))
    data_file.unlink()
    assert main(["verify", *sets]) != 0
    captured = capsys.readouterr()
    assert data_file.name in captured.out + captured.err


# --- S3, GCS and Azure: the warehouse in the bucket, the FileIO from the storage.* keys -----------------------------

_SCHEMES = {"s3": "s3://", "gcs": "gs://", "azure": "abfs://"}


@pytest.mark.parametrize("flavour", ["s3-moto", "gcs-fake", "azure-azurite"])
def test_iceberg_mode_over_cloud_backends(
    flavour: str,
    segment_factory: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The warehouse in the bucket, its FileIO from the storage.* keys (GCS: pyarrow's client needs a token, any
    token for the emulator, given as a catalog property; Azure: adlfs through a connection string built from the
    account, key and endpoint): copy, fetch back record-identical, kts verify, delete with its rows."""
    from rsm.cli.main import main

    server = request.getfixturevalue(FIXTURE_FOR[flavour])
    token = {}
    if server.backend == "gcs":
        token = {
            "iceberg.mode.catalog.property.gcs.oauth2.token": "emulator",
            "iceberg.mode.catalog.property.gcs.oauth2.token-expires-at": str(int(time.time() * 1000) + 86_400_000),
        }
    seg = segment_factory(num_batches=30, codec="zstd", transactional=True, seed=12)
    prefix = f"ice-{uuid.uuid4().hex[:8]}/"
    configs = {
        "chunk.size": "65536",
        "key.prefix": prefix,
        "storage.backend.class": server.backend,
        **{f"storage.{k}": str(v) for k, v in server.config().items()},
        **token,
        "iceberg.mode.topics.regex": "orders",
        "iceberg.mode.catalog.sqlite.path": str(tmp_path / "catalog.db"),
        "iceberg.mode.delete.rows.enabled": "true",
    }
    sets = [a for k, v in configs.items() for a in ("--set", f"{k}={v}")]
    m = _manager(configs)
    try:
        meta = seg.to_metadata(TIP)
        classic = seg.to_metadata(TopicIdPartition(TIP.topic_id, "classic-orders", TIP.partition))
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        m.copy_log_segment_data(classic, seg.to_log_segment_data())
        section = m.fetch_manifest(meta).section
        assert section is not None and section.files
        assert all(f.path.startswith(_SCHEMES[server.backend]) for f in section.files)
        stored = set(m.backend.list(prefix))
        data_keys = {k for k in stored if k.startswith(prefix + "iceberg/") and k.endswith(".parquet")}
        assert data_keys
        assert m.manifests.keys(meta).log not in stored
        original = seg.log.read_bytes()
        for h, _ in list(iter_batches(original))[::7]:
            got = m.fetch_log_segment(meta, h.position).read()
            assert _fetched_view(got) == _fetched_view(m.fetch_log_segment(classic, h.position).read())
        assert _fetched_view(m.fetch_log_segment(meta, 0).read()) == _fetched_view(original)
        rows = _table(m)
        assert sorted(_offsets(rows)) == [r.offset for _, rs in _fetched_view(original) for r in rs]

        capsys.readouterr()
        assert main(["verify", *sets]) == 0, capsys.readouterr()
        assert "verified 2 segments" in capsys.readouterr().out
        assert main(["gc", *sets, "--older-than", "0s"]) == 0  # the table's files are not leftovers of ours
        out = capsys.readouterr().out
        assert "0 items" in out and ".parquet" not in out and "iceberg/" not in out, out

        m.delete_log_segment_data(meta)
        with pytest.raises(RemoteResourceNotFoundException):
            m.fetch_log_segment(meta, 0)
        assert _table(m).num_rows == 0  # the segment's offset range is gone from the table too
        assert m.fetch_log_segment(classic, 0).read() == original  # the other topic is untouched
        assert main(["verify", *sets]) == 0, capsys.readouterr()
        assert "verified 1 segments" in capsys.readouterr().out
    finally:
        m.close()


# --- the value hook: a topic's parsed value fills the table's value struct -----------------------------------------

_VALUE_TYPE = pa.struct([pa.field("n", pa.int64()), pa.field("name", pa.string())])


def _parse_values(raw: Any) -> pa.Array:
    rows = []
    for v in raw:
        try:
            doc = json.loads(v) if v is not None else None
        except ValueError:
            doc = None
        rows.append({"n": doc.get("n"), "name": doc.get("name")} if isinstance(doc, dict) else None)
    return pa.array(rows, type=_VALUE_TYPE)


def json_values(topic: str) -> ValueColumn | None:
    """A factory for the test: JSON values of topics named ice-json*."""
    return ValueColumn(_VALUE_TYPE, _parse_values) if topic.startswith("ice-json") else None


def test_the_value_hook_fills_the_value_struct(tmp_path: Path) -> None:
    entries = [
        build_batch([(1_700_000_000_000, None, b'{"n": %d, "name": "x%d"}' % (i, i), [])], base_offset=i)
        for i in range(5)
    ] + [build_batch([(1_700_000_000_000, None, b"not json", [])], base_offset=5)]
    seg = write_entries_segment(tmp_path / "seg", entries)
    m = _manager(_configs(tmp_path, **{"iceberg.mode.value.column.factory": f"{__name__}:json_values"}))
    try:
        meta = seg.to_metadata(TopicIdPartition(TIP.topic_id, "ice-json", 0))
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        table = _table(m, "ice-json")
        by_offset = dict(zip(_offsets(table), table.column("value").to_pylist(), strict=True))
        assert by_offset[3] == {"n": 3, "name": "x3"} and by_offset[5] is None
        assert table.column("value_raw").to_pylist()[_offsets(table).index(5)] == b"not json"
        assert _fetched_view(m.fetch_log_segment(meta, 0).read()) == _fetched_view(seg.log.read_bytes())
    finally:
        m.close()


def test_a_value_column_another_broker_added_first_is_taken_as_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two brokers that both find the table without its value column both add it: the second one's schema
    commit fails (the schema changed under it), and it goes on with the table as the first one left it."""
    seg = write_entries_segment(tmp_path / "seg", [build_batch([(1_700_000_000_000, None, b'{"n": 1}', [])])])
    plain = _manager(_configs(tmp_path))
    m = _manager(_configs(tmp_path, **{"iceberg.mode.value.column.factory": f"{__name__}:json_values"}))
    try:
        plain.copy_log_segment_data(
            seg.to_metadata(TopicIdPartition(TIP.topic_id, "ice-json", 1)), seg.to_log_segment_data()
        )
        catalog = iceberg_format(m).mode().handle.catalog
        stale = catalog.load_table(("kafka", "ice_json"))  # loaded before the other broker's change
        other = iceberg_format(plain).mode().handle.catalog.load_table(("kafka", "ice_json"))
        with other.update_schema() as update:
            update.union_by_name(pa.schema([pa.field("value", _VALUE_TYPE)]))
        loads = iter([stale])
        real_load = catalog.load_table
        monkeypatch.setattr(catalog, "load_table", lambda ident: next(loads, None) or real_load(ident))
        meta = seg.to_metadata(TopicIdPartition(TIP.topic_id, "ice-json", 0))
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        table = _table(m, "ice-json")
        parts = pc.struct_field(table.column("kafka"), "partition").to_pylist()
        by_partition = dict(zip(parts, table.column("value").to_pylist(), strict=True))
        assert by_partition == {0: {"n": 1, "name": None}, 1: None}  # partition 1 was copied before the column
        assert _fetched_view(m.fetch_log_segment(meta, 0).read()) == _fetched_view(seg.log.read_bytes())
    finally:
        m.close()
        plain.close()


def test_rows_spread_over_days_and_row_groups_come_back_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timestamps that jump between days put a segment's rows in several data files (one per day), each in
    several row groups: a fetch from any position merges them back into the original batches."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    from rsm.iceberg import tables

    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 5)
    day = 86_400_000
    entries = []
    offset = 0
    for i in range(24):
        records = [(1_700_000_000_000 + ((i * 7 + r) % 3) * day, b"k%d" % r, b"v%d-%d" % (i, r), []) for r in range(4)]
        entries.append(build_batch(records, base_offset=offset, codec="zstd" if i % 2 else "none"))
        offset += len(records)
    seg = write_entries_segment(tmp_path / "seg", entries)
    m = _manager(_configs(tmp_path))
    try:
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        section = m.fetch_manifest(meta).section
        assert section is not None and len(section.files) == 3
        groups = [pq.ParquetFile(urlparse(f.path).path).metadata.num_row_groups for f in section.files]
        assert min(groups) > 1, groups
        # each day's file carries the exact offset bounds of its own rows
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        oid = table.schema().find_field("kafka.offset").field_id
        for task in table.scan().plan_files():
            offsets = pc.struct_field(pq.read_table(urlparse(task.file.file_path).path).column("kafka"), "offset")
            got = (
                from_bytes(LongType(), task.file.lower_bounds[oid]),
                from_bytes(LongType(), task.file.upper_bounds[oid]),
            )
            assert got == (pc.min(offsets).as_py(), pc.max(offsets).as_py())
        original = seg.log.read_bytes()
        for h, _ in iter_batches(original):
            assert _fetched_view(m.fetch_log_segment(meta, h.position).read()) == _fetched_view(original[h.position :])
    finally:
        m.close()


@pytest.mark.parametrize("cache_bytes", [None, "0"])
def test_the_row_group_cache_is_sized_by_config(tmp_path: Path, cache_bytes: str | None) -> None:
    """Fetches keep the row groups they read within iceberg.mode.fetch.cache.size (64 MiB by default); with 0
    they keep none and still serve the same bytes. The cache reports on its own declared bean."""
    from rsm.metrics.catalog import ALL, CACHE_DOMAIN, ICEBERG_CACHE_TYPE

    rng = random.Random(3)
    entries = [
        build_batch([(1_700_000_000_000 + o + r, b"k%d" % r, rng.randbytes(300), []) for r in range(50)], base_offset=o)
        for o in range(0, 1000, 50)
    ]
    seg = write_entries_segment(tmp_path / "seg", entries)
    extra = {} if cache_bytes is None else {"iceberg.mode.fetch.cache.size": cache_bytes}
    m = _manager(_configs(tmp_path, **extra))
    try:
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        original = seg.log.read_bytes()
        positions = [h.position for h, _ in iter_batches(original)]
        for p in positions[::5]:
            assert _fetched_view(m.fetch_log_segment(meta, p).read()) == _fetched_view(original[p:])
        cache = iceberg_format(m).mode().row_groups
        bean = m.metrics()[f"{CACHE_DOMAIN}:type={ICEBERG_CACHE_TYPE}"]
        assert bean["cache-weight-total"] == cache.held_bytes
        declared = {a for d in ALL if d.bean.endswith(f"type={ICEBERG_CACHE_TYPE}") for a in d.attributes}
        assert set(bean) == declared
        if cache_bytes is None:
            assert iceberg_format(m).mode().cfg.fetch_cache_bytes == 64 << 20
            assert 0 < cache.held_bytes <= 64 << 20
            assert bean["cache-hits-total"] > 0, "later fetches read row groups the earlier ones cached"
        else:
            assert cache.held_bytes == 0
            assert bean["cache-hits-total"] == 0
    finally:
        m.close()


def test_a_catalog_that_does_not_answer_fails_the_copy_with_what_to_check(tmp_path: Path) -> None:
    """configure() does not need the catalog (a database that is down must not keep the broker from starting);
    the copy fails with the exception Kafka retries, naming the catalog without its password, and leaves
    nothing in the store."""
    uri = "postgresql+psycopg2://kts:s3cret@127.0.0.1:1/catalog"
    m = _manager(_configs(tmp_path, **{"iceberg.mode.catalog.uri": uri}))
    seg = write_entries_segment(tmp_path / "seg", [build_batch([(1_700_000_000_000, b"k", b"v", [])])])
    try:
        with pytest.raises(RemoteStorageException) as e:
            m.copy_log_segment_data(seg.to_metadata(TIP), seg.to_log_segment_data())
        message = str(e.value)
        assert "cannot copy" in message and "Iceberg table" in message
        assert "postgresql+psycopg2://kts:***@127.0.0.1:1/catalog" in message and "s3cret" not in message
        assert "iceberg.mode.catalog" in message and "Kafka retries" in message
        assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []
    finally:
        m.close()


def test_a_segment_the_table_cannot_rebuild_is_tiered_classic(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A legacy magic 1 message set cannot be given back from rows exactly: that segment is tiered classic (the
    topic's others stay in Iceberg mode) and serves its bytes as they were."""
    from spark_data import legacy_entry

    entries = [
        legacy_entry(1, 0, 0, [(1_700_000_000_000, b"k", b"old format")]),
        build_batch([(1_700_000_000_001, b"k", b"v2", [])], base_offset=1),
    ]
    seg = write_entries_segment(tmp_path / "seg", entries)
    m = _manager(_configs(tmp_path))
    try:
        meta = seg.to_metadata(TIP)
        with caplog.at_level("WARNING"):
            m.copy_log_segment_data(meta, seg.to_log_segment_data())
        assert m.fetch_manifest(meta).kind == "classic"
        assert "tiered in the classic format" in caplog.text
        assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
    finally:
        m.close()


def test_a_segment_refused_half_way_leaves_no_files_and_no_commit(tmp_path: Path) -> None:
    """Rows are written as the segment is walked: a segment found not representable after some of its rows
    became data files (a legacy entry near its end) leaves no data file and no snapshot, and is tiered classic."""
    from spark_data import legacy_entry

    rng = random.Random(5)
    good = [build_batch([(1_700_000_000_000 + r, b"k", rng.randbytes(200), [])], base_offset=r) for r in range(4)]
    entries = [
        build_batch([(1_700_000_000_000 + r, b"k%d" % r, rng.randbytes(1000), []) for r in range(100)], base_offset=o)
        for o in range(0, 500, 100)
    ]
    entries.append(legacy_entry(1, 0, 500, [(1_700_000_000_500, b"k", b"old format")]))
    m = _manager(_configs(tmp_path, **{"iceberg.mode.write.batch.bytes": "65536"}))
    try:
        first = write_entries_segment(tmp_path / "first", good)
        m.copy_log_segment_data(first.to_metadata(TIP), first.to_log_segment_data())
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        snapshots = [s.snapshot_id for s in table.snapshots()]
        files = sorted(tmp_path.rglob("*.parquet"))
        seg = write_entries_segment(tmp_path / "seg", entries)
        meta = seg.to_metadata(TIP)
        m.copy_log_segment_data(meta, seg.to_log_segment_data())
        assert m.fetch_manifest(meta).kind == "classic"
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        assert [s.snapshot_id for s in table.snapshots()] == snapshots
        assert sorted(tmp_path.rglob("*.parquet")) == files
        assert m.fetch_log_segment(meta, 0).read() == seg.log.read_bytes()
    finally:
        m.close()


def test_data_files_carry_offset_bounds_and_commits_read_no_other_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each data file carries exact bounds of kafka.partition and kafka.offset (pyiceberg keeps none for struct
    fields), so the commit of a segment that overlaps nothing in the table reads no data file, and a retried
    copy drops the earlier copy's files by their bounds alone."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.types import IntegerType, LongType

    reads: list[object] = []
    real = ArrowScan.to_table
    monkeypatch.setattr(ArrowScan, "to_table", lambda self, tasks: reads.append(tasks) or real(self, tasks))
    m = _manager(_configs(tmp_path))
    try:
        for n in range(4):
            entries = [
                build_batch([(1_700_000_000_000 + i, b"k", b"v", [])], base_offset=n * 100 + i) for i in range(9)
            ]
            seg = write_entries_segment(tmp_path / f"s{n}", entries)
            m.copy_log_segment_data(seg.to_metadata(TIP), seg.to_log_segment_data())
        m.copy_log_segment_data(seg.to_metadata(TIP, "retriedCopyxxxxxxxxxxx"), seg.to_log_segment_data())
        assert reads == []
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        schema = table.schema()
        pid, oid = schema.find_field("kafka.partition").field_id, schema.find_field("kafka.offset").field_id
        bounds = sorted(
            (
                from_bytes(IntegerType(), t.file.lower_bounds[pid]),
                from_bytes(IntegerType(), t.file.upper_bounds[pid]),
                from_bytes(LongType(), t.file.lower_bounds[oid]),
                from_bytes(LongType(), t.file.upper_bounds[oid]),
            )
            for t in table.scan().plan_files()
        )
        assert bounds == [(TIP.partition, TIP.partition, n * 100, n * 100 + 8) for n in range(4)]
        assert sorted(_offsets(_table(m))) == [n * 100 + i for n in range(4) for i in range(9)]
    finally:
        m.close()


def _fetched_view(data: bytes) -> list[tuple[tuple[int, ...], list[Any]]]:
    """The batches of a fetch (which may end in a truncated batch), compared by their fields and records."""
    return batch_view(data, stop_on_truncated_tail=True)


def test_a_new_table_gets_the_writer_and_reader_properties(segment_factory: Any, tmp_path: Path) -> None:
    """The properties docs/iceberg.md lists, on the table the first segment creates; its data files are snappy."""
    from rsm.iceberg import tables

    seg = segment_factory(num_batches=30, seed=9)
    m = _manager(_configs(tmp_path))
    try:
        m.copy_log_segment_data(seg.to_metadata(TIP), seg.to_log_segment_data())
        table = iceberg_format(m).mode().handle.catalog.load_table(("kafka", "orders"))
        assert {
            "kafka.topic": "orders",
            "write.parquet.compression-codec": "snappy",
            "write.parquet.row-group-limit": str(tables.ROW_GROUP_ROWS),
            "write.parquet.page-row-limit": "1024",
            "write.parquet.dict-size-bytes": "64",
            "commit.manifest-merge.enabled": "true",
            "read.split.adaptive-size.enabled": "false",
            "read.split.target-size": str(64 << 20),  # a small first segment: small data files
        }.items() <= table.properties.items()
        for task in table.scan().plan_files():
            meta = pq.ParquetFile(urlparse(task.file.file_path).path).metadata
            assert {meta.row_group(0).column(c).compression for c in range(meta.num_columns)} == {"SNAPPY"}
    finally:
        m.close()
