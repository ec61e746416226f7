"""The plugin's memory budget as ``kts config check`` prints it: each term, the sum, and the warning when the
chunk cache cannot hold what the broker's remote reader threads read ahead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rsm.cli.main import main
from rsm.cli.memory_budget import COPY, FETCH, ICEBERG_LIBRARIES, MIB, PYTHON_BASELINE, memory_budget
from rsm.cli.properties import write_properties

BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.storage.manager.class.name": "io.kts.shim.PythonRemoteStorageManager",
    "rsm.config.chunk.size": str(4 * MIB),
    "rsm.config.storage.backend.class": "s3",
    "rsm.config.storage.s3.bucket.name": "tiered",
    "rsm.config.storage.s3.region": "eu-west-1",
    "rsm.config.python.executable": "/usr/bin/false-python-for-the-test",
}


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], **lines: str) -> tuple[str, dict[str, float]]:
    path = tmp_path / "server.properties"
    write_properties(path, {**BROKER, **lines})
    main(["config", "check", str(path)])
    out = capsys.readouterr().out
    section = out.split("memory of the plugin", 1)[1].split("\nnote:", 1)[0].split("\nWARNING", 1)[0]
    sizes = {
        m.group(1).strip(): (None if m.group(2) == "unbounded" else float(m.group(2).replace(",", "")))
        for m in re.finditer(r"^  (\S[\w ]*?)\s{2,}(unbounded|[\d,.]+)(?: MiB)?", section, re.M)
    }
    return out, sizes  # type: ignore[return-value]


def test_config_check_prints_each_term_and_the_sum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, sizes = _check(
        tmp_path,
        capsys,
        **{"rsm.config.transform.thread.pool.size": "2", "rsm.config.fetch.chunk.cache.thread.pool.size": "2"},
    )
    assert "memory of the plugin at remote.log.reader.threads=unset: Kafka's default" in out
    assert set(sizes) == {
        "shared region",
        "fetches in flight",
        "GETs in flight",
        "index cache",
        "uploads",
        "Python",
        "total",
    }
    assert sizes["total"] == pytest.approx(sum(v for k, v in sizes.items() if k != "total"), abs=0.5)
    # ten copier threads of two chunks each, the 2 x 2 + 1 chunks of read-ahead and the 64 MiB of parts they share
    assert sizes["uploads"] == (10 * 2 + 5) * 4 + 64
    assert sizes["Python"] == PYTHON_BASELINE / MIB
    assert sizes["index cache"] == 10
    # a ranged GET of up to 16 MiB of stored chunks per reader thread, kept stream and prefetch thread (2 cores)
    assert sizes["GETs in flight"] == (10 + 8 + 2) * 16
    # what a broker that only copies, or only serves remote fetches, holds: the interpreter is in both
    copies = re.search(r"^    copies only\s+([\d,.]+) MiB  shared region, uploads, Python$", out, re.M)
    fetches = re.search(
        r"^    fetches only\s+([\d,.]+) MiB  shared region, fetches in flight, GETs in flight, index cache, Python$",
        out,
        re.M,
    )
    # the sidecar's shared region is allocated whole at start, so a broker that only copies holds it too
    assert copies and float(copies.group(1)) == sizes["shared region"] + sizes["uploads"] + sizes["Python"]
    assert fetches and float(fetches.group(1).replace(",", "")) == pytest.approx(
        sizes["total"] - sizes["uploads"], abs=0.5
    )
    assert "WARNING" not in out, "Kafka's default reader threads fit the default chunk cache"


def test_more_reader_threads_than_the_cache_holds_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, sizes = _check(tmp_path, capsys, **{"remote.log.reader.threads": "40"})
    assert "remote.log.reader.threads=40" in out
    warning = next(line for line in out.splitlines() if line.startswith("WARNING"))
    assert "remote.log.reader.threads 40 x" in warning and "KtsCacheThrashing" in warning
    assert "fetch.chunk.cache.size" in warning
    _, fewer = _check(tmp_path, capsys, **{"remote.log.reader.threads": "2"})
    assert fewer["fetches in flight"] < sizes["fetches in flight"]


def test_an_unbounded_cache_makes_the_sum_unbounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, sizes = _check(
        tmp_path,
        capsys,
        **{"rsm.config.fetch.chunk.cache.size": "-1", "rsm.config.jvm.sidecar.shared.memory.bytes": "0"},
    )
    assert sizes["chunk cache memory tier"] is None and sizes["total"] is None
    assert any(line.startswith("WARNING: memory is unbounded (chunk cache memory tier") for line in out.splitlines())


def test_the_memory_tier_lives_in_half_the_shared_region() -> None:
    configs = {"chunk.size": str(MIB), "fetch.chunk.cache.size": str(1024 * MIB)}
    budget = memory_budget({**configs, "jvm.sidecar.shared.memory.bytes": str(64 * MIB)}, {})
    assert budget is not None
    region = next(t for t in budget.terms if t.label == "shared region")
    assert region.size == 64 * MIB and "32.0 MiB, at most half" in region.how
    assert any("holds 32.0 MiB" in w for w in budget.warnings)
    inprocess = memory_budget({**configs, "jvm.transport": "inprocess"}, {})
    assert inprocess is not None
    assert "jvm.inprocess.buffer.memory.bytes" in inprocess.terms[0].how
    python = next(t for t in inprocess.terms if t.label == "Python")  # the interpreter lives in the broker
    assert python.size == PYTHON_BASELINE and "in the broker's process" in python.how
    # in the broker's process the region's pages are used as fetches first write them: no part of a copy's memory
    uploads = next(t.size for t in inprocess.terms if t.label == "uploads")
    assert inprocess.side_total(COPY) == (uploads or 0) + PYTHON_BASELINE
    assert inprocess.side_total(FETCH) == (inprocess.total or 0) - (uploads or 0)
    assert memory_budget({}, {}) is None  # no chunk.size: nothing to size


def test_iceberg_mode_adds_its_row_group_cache_and_the_rows_being_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, classic = _check(tmp_path, capsys)
    assert "Iceberg row groups" not in classic and "Iceberg rows being written" not in classic
    assert "Iceberg slice readers" not in classic and "Iceberg fetch index" not in classic
    on = {"rsm.config.iceberg.mode.topics.regex": "orders", "rsm.config.iceberg.mode.catalog.sqlite.path": "/c.db"}
    _, default = _check(tmp_path, capsys, **on)
    assert default["Iceberg row groups"] == 64
    # one reader of large row groups per broker reader thread (Kafka's 10), 2 x 16 MiB slices each
    assert default["Iceberg slice readers"] == 10 * 32
    # 2 write slots shared by 10 copier threads, each copy writing holding 2 x a row group of at most 16 MiB
    assert default["Iceberg rows being written"] == 2 * 2 * 16
    # the fetch index: 50,000 live data files of about 1 KiB
    assert default["Iceberg fetch index"] == pytest.approx(50_000 / 1024, abs=0.05)
    # pyarrow and pyiceberg loaded: the interpreter's term grows by ICEBERG_LIBRARIES
    assert default["Python"] == classic["Python"] + ICEBERG_LIBRARIES / MIB
    assert default["total"] == pytest.approx(
        classic["total"] + 64 + 320 + 64 + 50_000 / 1024 + ICEBERG_LIBRARIES / MIB, abs=0.5
    )
    _, sized = _check(
        tmp_path,
        capsys,
        **on,
        **{
            "rsm.config.iceberg.mode.fetch.cache.size": str(8 * MIB),
            "rsm.config.iceberg.mode.write.batch.bytes": str(16 * MIB),
            "rsm.config.iceberg.mode.fetch.index.files": "2048",
        },
        **{"remote.log.manager.copier.thread.pool.size": "2"},
    )
    assert sized["Iceberg row groups"] == 8
    assert sized["Iceberg fetch index"] == 2
    assert sized["Iceberg rows being written"] == 2 * 2 * 16  # the write batch sizes files, not the rows held


def test_slice_readers_follow_the_key_and_fewer_than_the_reader_threads_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on = {"rsm.config.iceberg.mode.topics.regex": "orders", "rsm.config.iceberg.mode.catalog.sqlite.path": "/c.db"}
    out, _ = _check(tmp_path, capsys, **on)
    assert "fetch.slice.readers is" not in out  # 10 by default: Kafka's default reader threads
    out, fewer = _check(tmp_path, capsys, **on, **{"rsm.config.iceberg.mode.fetch.slice.readers": "4"})
    assert fewer["Iceberg slice readers"] == 4 * 32
    assert "WARNING: iceberg.mode.fetch.slice.readers is 4, fewer than remote.log.reader.threads 10" in out
    out, matched = _check(
        tmp_path,
        capsys,
        **on,
        **{"rsm.config.iceberg.mode.fetch.slice.readers": "16", "remote.log.reader.threads": "16"},
    )
    assert matched["Iceberg slice readers"] == 16 * 32
    assert "fewer than remote.log.reader.threads" not in out


@pytest.mark.parametrize(
    ("backend", "key"),
    [
        ("s3", "s3.upload.buffer.memory.bytes"),
        ("azure", "azure.upload.buffer.memory.bytes"),
        ("gcs", "gcs.upload.buffer.memory.bytes"),
    ],
)
def test_upload_buffers_are_one_budget_whatever_the_copier_threads(backend: str, key: str) -> None:
    """The part buffers and the read-ahead are shared by the copier threads: only two chunks each grow with their
    number."""
    configs = {
        "chunk.size": str(4 * MIB),
        "storage.backend.class": backend,
        f"storage.{key}": str(48 * MIB),
        "transform.thread.pool.size": "2",
    }

    def uploads(copiers: int) -> int:
        budget = memory_budget(configs, {"remote.log.manager.copier.thread.pool.size": str(copiers)})
        assert budget is not None
        term = next(t for t in budget.terms if t.label == "uploads")
        assert key in term.how
        return int(term.size or 0)

    assert uploads(1) == (1 * 2 + 5) * 4 * MIB + 48 * MIB
    assert uploads(10) == (10 * 2 + 5) * 4 * MIB + 48 * MIB


def test_iceberg_rows_are_counted_per_write_slot_not_per_copier_thread() -> None:
    configs = {
        "chunk.size": str(4 * MIB),
        "storage.backend.class": "filesystem",
        "iceberg.mode.topics.regex": "t",
        "iceberg.mode.write.batch.bytes": str(32 * MIB),
        "iceberg.mode.write.concurrency": "3",
    }

    def rows(copiers: int) -> int:
        budget = memory_budget(configs, {"remote.log.manager.copier.thread.pool.size": str(copiers)}, cpus=2)
        assert budget is not None
        return int(next(t.size for t in budget.terms if t.label == "Iceberg rows being written") or 0)

    assert rows(10) == 3 * 2 * 16 * MIB  # three slots shared by ten copier threads
    assert rows(2) == 2 * 2 * 16 * MIB  # two copier threads never fill three slots
