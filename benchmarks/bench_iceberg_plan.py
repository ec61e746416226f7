"""Iceberg mode: what planning a segment's fetch costs during a catch-up, as the table ages, for this checkout and
another (``--code DIR``, e.g. a checkout of main: ``git worktree add /tmp/old-plan main``) in the same run.

One table of ``--partitions`` partitions, ``--segments`` segments copied into it one commit each (the plugin's
data files with their ``kafka`` bounds; one manifest a commit, as copies leave it without maintenance), and a
young table of its first 10 commits. Each checkout then runs in its own process (``FetchPlanner``, no broker,
no row read), on each table:

- ``cold``: the first plan of a fresh planner (a broker's first fetch after it starts);
- ``catch-up``: consumers of ``--consumers`` partitions catching up through ``--per-consumer`` segments each,
  ``--fetches`` fetches a segment, the consumers taking turns as a broker's reader threads do: per segment the
  mean time and the manifests read in all;
- ``with commits``: the same catch-up on the aged table while copies land (a commit to a partition nobody
  reads after every ``--commit-every`` segments; the table state reloaded at every fetch), on its own copy of
  the catalog.

It prints each figure for both checkouts and their ratios (old over new), and the aged table's catch-up against
the young one's for each (1.0: flat in table age).

    .venv/bin/python benchmarks/bench_iceberg_plan.py --code /tmp/old-plan [--segments 400] [--partitions 20]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ROWS = 100  # offsets a segment holds (the plan reads no row: only the files' bounds matter)
TOPIC_ID = "T" * 22
TOPIC = "orders"


def _config(work: Path, catalog: Path) -> dict[str, str]:
    return {
        "storage.backend.class": "filesystem",
        "storage.root": str(work / "store"),
        "iceberg.mode.topics.regex": TOPIC,
        "iceberg.mode.catalog.sqlite.path": str(catalog),
        "iceberg.mode.warehouse": f"file://{work / 'warehouse'}",
        "iceberg.mode.maintenance.enabled": "false",
    }


def _handle(work: Path, catalog: Path) -> Any:
    from rsm.iceberg.catalog import CatalogHandle, catalog_properties
    from rsm.iceberg.config import IcebergConfig

    cfg = IcebergConfig.from_map(_config(work, catalog))
    return CatalogHandle(cfg, catalog_properties(cfg, "filesystem", {"root": str(work / "store")}, ""))


def _commit(table: Any, partition: int, first: int, segment_id: str) -> int:
    """A segment's rows as one commit (the plugin's data files, one manifest); the new snapshot's id."""
    from iceberg_tables import kafka_rows

    from rsm.iceberg.data_files import write_data_files

    rows = kafka_rows(partition, range(first, first + ROWS), TOPIC_ID, segment_id)
    with table.transaction() as txn, txn.update_snapshot().fast_append() as append:
        for f in write_data_files(table, rows, uuid.uuid4(), itertools.count()):
            append.append_data_file(f)
    return int(table.current_snapshot().snapshot_id)


def build(work: Path, segments: int, partitions: int) -> dict[str, Any]:
    """The aged table (``orders``) and the young one (``young``, its first 10 commits); the segments of each."""
    from iceberg_tables import topic_table

    (work / "warehouse").mkdir(parents=True)
    handle = _handle(work, work / "catalog.db")
    handle.catalog.create_namespace_if_not_exists("kafka")
    out: dict[str, Any] = {}
    for name, count in (("young", 10), (TOPIC, segments)):
        table = topic_table(handle.catalog, name)
        segs = []
        started = time.perf_counter()
        for i in range(count):
            p, k = i % partitions, i // partitions
            sid = uuid.uuid4().hex[:22]
            segs.append(
                {"partition": p, "first": k * ROWS, "segment_id": sid, "snapshot": _commit(table, p, k * ROWS, sid)}
            )
        out[name] = segs
        print(f"table {name}: {count} commits over {partitions} partitions ({time.perf_counter() - started:.0f} s)")
    return out


class _Reads:
    """Manifests whose entries are read, counted (pyiceberg reads every manifest through this one method)."""

    def __init__(self) -> None:
        from pyiceberg.manifest import ManifestFile

        self.count = 0
        real = ManifestFile.fetch_manifest_entry

        def counting(manifest: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(manifest, *args, **kwargs)

        ManifestFile.fetch_manifest_entry = counting  # type: ignore[method-assign]


def _section(table: str, seg: dict[str, Any]) -> Any:
    from rsm.iceberg.section import IcebergSection

    first = seg["first"]
    return IcebergSection(f"kafka.{table}", seg["snapshot"], seg["partition"], first, first + ROWS - 1, ROWS, 1, 1, ())


def _queues(segs: list[dict[str, Any]], consumers: int, per_consumer: int) -> list[list[dict[str, Any]]]:
    """The segments each consumer reads: the first ``per_consumer`` of each of the first ``consumers``
    partitions."""
    by_partition: dict[int, list[dict[str, Any]]] = {}
    for s in segs:
        by_partition.setdefault(s["partition"], []).append(s)
    return [by_partition[p][:per_consumer] for p in sorted(by_partition)[:consumers]]


def _catch_up(
    planner: Any, table: str, args: argparse.Namespace, segs: list[dict[str, Any]], reads: _Reads, land: Any = None
) -> dict[str, float]:
    """Consumers taking turns, one fetch each a round, ``--fetches`` fetches a segment; ``land``: called every
    ``--commit-every`` rounds (a copy's commit), the next fetch reloading the table (the periodic reload). The
    planning time of each segment (all its fetches), and the manifests read."""
    queues = _queues(segs, args.consumers, args.per_consumer)
    fetched = [0] * len(queues)
    spent: dict[str, float] = {}
    reads.count = 0
    manifests = 0
    reload = False
    for turn in itertools.count():
        busy = [c for c, q in enumerate(queues) if q]
        if not busy:
            break
        if land is not None and turn and turn % args.commit_every == 0:
            land()
            reload = True
        reads.count = 0
        for c in busy:
            s = queues[c][0]
            started = time.perf_counter()
            planner.rows(_section(table, s), s["segment_id"], table, "catch-up", refresh=reload)
            spent[s["segment_id"]] = spent.get(s["segment_id"], 0.0) + time.perf_counter() - started
            reload = False
            fetched[c] += 1
            if fetched[c] == args.fetches:
                queues[c].pop(0)
                fetched[c] = 0
        manifests += reads.count
    times = sorted(spent.values())
    return {
        "ms_per_segment": 1000 * sum(times) / len(times),
        "median_ms": 1000 * times[len(times) // 2],
        "manifests": manifests,
        "segments": len(times),
    }


def worker(args: argparse.Namespace) -> None:
    """One checkout's figures, as JSON on the last line of stdout."""
    from rsm.iceberg.fetch_plan import FetchPlanner

    work = args.work
    segs = json.loads((work / "segments.json").read_text())
    reads = _Reads()
    handle = _handle(work, work / "catalog.db")
    out: dict[str, Any] = {}
    for table in ("young", TOPIC):
        cold = FetchPlanner(handle, 3600)
        started = time.perf_counter()
        cold.rows(_section(table, segs[table][0]), segs[table][0]["segment_id"], table, "cold")
        out[f"{table} cold ms"] = 1000 * (time.perf_counter() - started)
        out[table] = _catch_up(FetchPlanner(handle, 3600), table, args, segs[table], reads)
    # Copies landing meanwhile: on a copy of the catalog, to partition ``partitions`` (read by nobody).
    catalog = work / f"catalog-{os.getpid()}.db"
    shutil.copy(work / "catalog.db", catalog)
    own = _handle(work, catalog)
    aged = own.catalog.load_table(("kafka", TOPIC))
    landed = itertools.count()

    def land() -> None:
        _commit(aged, args.partitions, next(landed) * ROWS, uuid.uuid4().hex[:22])

    out["with commits"] = _catch_up(FetchPlanner(own, 3600), TOPIC, args, segs[TOPIC], reads, land)
    out["with commits"]["commits"] = next(landed)
    print(json.dumps(out))


def _run(code: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", "--work", str(work), "--code", str(code)]
    for name in ("partitions", "consumers", "per_consumer", "fetches", "commit_every"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the worker for {code} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=None, help="the other checkout (the one before a change)")
    ap.add_argument("--segments", type=int, default=400, help="commits of the aged table")
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--consumers", type=int, default=10, help="partitions caught up through")
    ap.add_argument("--per-consumer", type=int, default=4, help="segments each consumer reads")
    ap.add_argument("--fetches", type=int, default=8, help="fetches a segment (8 MiB, 1 MiB a fetch)")
    ap.add_argument("--commit-every", type=int, default=4, help="segments read between two commits landing")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    code = (args.code or REPO).resolve()
    sys.path[:0] = [str(code if args.worker else REPO), str(REPO / "tests" / "support")]
    if args.worker:
        worker(args)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-plan-"))
    print(f"work directory {work}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    (work / "segments.json").write_text(json.dumps(build(work, args.segments, args.partitions)))
    runs = {"new": _run(REPO, args, work)}
    if args.code is not None:
        runs["old"] = _run(code, args, work)
    report(runs, args)
    shutil.rmtree(work, ignore_errors=True)


def report(runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    names = list(runs)
    print(f"\n{'':44}" + "".join(f"{n:>12}" for n in names) + ("    old/new" if "old" in runs else ""))

    def row(label: str, value: Any, unit: str = "") -> None:
        values = [value(runs[n]) for n in names]
        ratio = f"{values[1] / values[0]:>10.1f}x" if len(values) == 2 and values[0] else ""
        print(f"{label:44}" + "".join(f"{v:>10.2f}{unit:2}" for v in values) + ratio)

    for table, label in (("young", "young (10 commits)"), (TOPIC, f"aged ({args.segments} commits)")):
        row(f"{label}: cold first plan", lambda r, t=table: r[f"{t} cold ms"], "ms")
        row(f"{label}: catch-up, mean a segment", lambda r, t=table: r[t]["ms_per_segment"], "ms")
        row(f"{label}: catch-up, median a segment", lambda r, t=table: r[t]["median_ms"], "ms")
        row(f"{label}: catch-up, manifests read", lambda r, t=table: r[t]["manifests"])
    row("aged, commits landing: mean a segment", lambda r: r["with commits"]["ms_per_segment"], "ms")
    row("aged, commits landing: median a segment", lambda r: r["with commits"]["median_ms"], "ms")
    row("aged, commits landing: manifests read", lambda r: r["with commits"]["manifests"])
    row("aged / young, catch-up mean a segment", lambda r: r[TOPIC]["ms_per_segment"] / r["young"]["ms_per_segment"])
    row("aged / young, catch-up median a segment", lambda r: r[TOPIC]["median_ms"] / r["young"]["median_ms"])
    first = runs[names[0]]
    print(
        f"(catch-up: {first[TOPIC]['segments']} segments of the aged table, {first['young']['segments']} of the young "
        f"one, {args.fetches} fetches each, {args.consumers} consumers taking turns; "
        f"{first['with commits']['commits']} commits landed during the last)"
    )


if __name__ == "__main__":
    main()
