"""Cost as the data grows: planning and the operator's tools over N tiered segments behind real store latency.

A bucket on SeaweedFS (or another emulator) is filled by ``segment_generator`` with N segments per size (one
partition, each under its own key prefix, plus 1% orphans for ``kts gc``), and every operation then runs through
``latency_store``'s proxy (default 20 ms per request) in a process of its own, so its peak RSS is its own. The
proxy counts the requests. Each figure is printed next to a limit measured in the same run: the same number of
manifest GETs issued raw through a pool of the same size (``backend.fetch`` + read, nothing parsed), i.e. what
any reader of N manifests from one Python process pays on this machine; and next to the issue's target where it
has one.

    python benchmarks/bench_scale.py --workdir /tmp/kts-scale [--sizes 100,1000,10000] [--delay-ms 20]

``--workdir`` keeps SeaweedFS's data, so a second run skips the generation. ``kts verify`` and ``kts keys rotate``
are measured per worker count (``--workers 1,2,4,8,16``) over ``--tool-segments`` segments. Prefetch is off for
``kts verify``: its 16 MiB budget would walk thousands of these 2 KB segments ahead of the scrub (real segments
are larger than the budget).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_config import encryption_config  # noqa: E402 - benchmarks/ is sys.path[0]
from latency_store import DEFAULT_DELAY_MS, ProxyCounts, latency_store  # noqa: E402
from segment_generator import GeneratorSpec, generate  # noqa: E402

TARGETS_10K = {"plan": 15.0, "plan-1%": 2.0, "ls": 30.0, "gc --dry-run": 30.0}
"""The issue's targets (seconds at 20 ms per request) for N = 10,000."""
CONCURRENCY = 32


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _start_peak() -> float:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS and return that: the operation's own peak is then
    VmHWM at its end, whatever the imports before it peaked at."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def _second_key(work: Path) -> dict[str, str]:
    """A second key pair ``c`` next to ``encryption_config``'s ``b``, for rotation back and forth."""
    from Crypto.PublicKey import RSA

    keys = work / "keys"
    if not (keys / "priv-c.pem").exists():
        k = RSA.generate(2048)
        (keys / "priv-c.pem").write_bytes(k.export_key(pkcs=8))
        (keys / "pub-c.pem").write_bytes(k.public_key().export_key())
    return {
        "encryption.key.pairs": "b,c",
        "encryption.key.pairs.c.public.key.file": str(keys / "pub-c.pem"),
        "encryption.key.pairs.c.private.key.file": str(keys / "priv-c.pem"),
    }


# --- one operation, in a child process ------------------------------------------------------------------------


def _child(op: str, config: dict[str, str], args: dict[str, Any]) -> dict[str, Any]:
    """Run ``op`` once in this (fresh) process; returns seconds, RSS before and peak, and what it produced."""
    from rsm.cli.main import main as kts
    from rsm.spark.planning import PushedBounds
    from rsm.spark.reader import TieredReader

    out: dict[str, Any] = {}
    options = {**config, "topic": args["topic"], "planningConcurrency": str(args.get("concurrency", CONCURRENCY))}
    if op == "raw":
        from rsm.core.manager import RemoteStorageManager
        from rsm.core.parallel import ordered_map

        manager = RemoteStorageManager()
        manager.configure(config)
        segments = manager.catalog().segments(args["topic"])

        def get(key: str) -> int:
            with manager.backend.fetch(key) as f:
                return len(f.read())

        base, started = _start_peak(), time.perf_counter()
        out["bytes"] = sum(o.result or 0 for o in ordered_map(get, [s.keys.manifest for s in segments], CONCURRENCY))
    elif op.startswith("plan"):
        reader = TieredReader({**options, **args.get("options", {})})
        reader.manager  # noqa: B018 - configure before the clock starts
        pushed = PushedBounds(min_timestamp=args["min_timestamp"]) if "min_timestamp" in args else None
        base, started = _start_peak(), time.perf_counter()
        out["slices"] = len(reader.plan(pushed))
    else:
        argv = [a.replace("{config}", args["config_file"]) for a in args["argv"]]
        base, started = _start_peak(), time.perf_counter()
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()) as err:
            out["rc"] = kts(argv)
        out["stdout_lines"] = sink.getvalue().count("\n")
        if out["rc"]:
            out["stderr"] = err.getvalue()[-2000:]
    out["seconds"] = time.perf_counter() - started
    out["rss_base_mb"] = base
    out["rss_peak_mb"] = _status_mb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(op: str, config: dict[str, str], args: dict[str, Any], store: Any) -> dict[str, Any]:
    store.reset()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps({"op": op, "config": config, "args": args})],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{op} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    used: ProxyCounts = store.stats()
    result["requests"] = used.requests
    result["manifest_gets"] = used.get("manifest")
    result["by_kind"] = used.by_kind
    result["max_in_flight"] = used.max_in_flight
    return result


# --- the parent: generate, measure, print -------------------------------------------------------------------------


def _cli(name: str, config: dict[str, str], args: dict[str, Any], argv: list[str], store: Any) -> dict[str, Any]:
    """``kts <argv>`` in a child process (``{config}`` stands for the properties file); it must succeed."""
    r = run_child(name, config, {**args, "argv": argv}, store)
    if r["rc"] != 0:
        raise RuntimeError(f"kts {' '.join(argv)} exited {r['rc']}: {r.get('stderr', '')}")
    return r


def _props(path: Path, config: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in sorted(config.items())))
    return path


def _row(name: str, n: int, r: dict[str, Any], limit: float | None, target: float | None) -> dict[str, Any]:
    ratio = f"{r['seconds'] / limit:5.2f}x raw" if limit else "         "
    goal = f"target {target:.0f} s: {'met' if r['seconds'] < target else 'NOT met'}" if target else ""
    print(
        f"  {name:<14} N={n:<6} {r['seconds']:8.2f} s  {ratio}  requests {r['requests']:>6} "
        f"(manifest GETs {r['manifest_gets']:>6}, most in flight {r['max_in_flight']:>3})  "
        f"peak RSS {r['rss_peak_mb']:6.0f} MB (+{r['rss_peak_mb'] - r['rss_base_mb']:.0f})  {goal}",
        flush=True,
    )
    return {"op": name, "n": n, **{k: v for k, v in r.items() if k != "by_kind"}, "limit_s": limit, "target_s": target}


def measure_size(n: int, store: Any, plugin: dict[str, str], work: Path) -> list[dict[str, Any]]:
    spec = GeneratorSpec(f"n{n}/", n, orphans=max(1, n // 100))
    gen = generate(store.direct_config(), plugin, spec)
    print(
        f"N={n}: {'found' if gen.skipped else 'generated'} {n} segments (+{spec.orphans} orphans) "
        f"in {gen.seconds:.1f} s",
        flush=True,
    )
    config = {**plugin, **store.plugin_config(), "key.prefix": spec.prefix}
    props = _props(work / f"n{n}.properties", config)
    common = {"topic": spec.topic, "config_file": str(props)}
    rows = []
    raw = run_child("raw", config, common, store)
    rows.append(_row("raw GETs", n, raw, None, None))
    limit = raw["seconds"]

    def target(op: str) -> float | None:
        return TARGETS_10K[op] if n == 10_000 else None

    plan = run_child("plan", config, common, store)
    assert plan["slices"] == n, plan
    rows.append(_row("plan", n, plan, limit, target("plan")))
    if n <= 1000:
        seq = run_child("plan", config, {**common, "concurrency": 1}, store)
        rows.append(_row("plan, 1 at once", n, seq, limit, None))
    first = (n // 2) * spec.records_per_segment
    count = max(1, n // 100)
    bounded = {
        "startingOffsets": json.dumps({spec.topic: {"0": first}}),
        "endingOffsets": json.dumps({spec.topic: {"0": first + count * spec.records_per_segment}}),
    }
    pct = run_child("plan-1%", config, {**common, "options": bounded}, store)
    assert pct["slices"] == count, pct
    rows.append(_row("plan, 1% offsets", n, pct, limit, target("plan-1%")))
    last_ts = 1_700_000_000_000 + (n - count) * spec.timestamp_step_ms
    ts = run_child("plan-ts", config, {**common, "min_timestamp": last_ts}, store)
    rows.append(_row("plan, 1% time", n, ts, limit, None))
    offset = f"{spec.topic}/0/{first + 1}"
    for name, argv, goal in [
        ("kts ls", ["ls", spec.topic], target("ls")),
        ("kts ls --json", ["ls", "--json", spec.topic], target("ls")),
        ("kts gc (dry)", ["gc", "--older-than", "0s"], target("gc --dry-run")),
        ("kts inspect", ["inspect", offset], None),
    ]:
        r = _cli(name, config, common, [argv[0], "--config", "{config}", *argv[1:]], store)
        rows.append(_row(name, n, r, None if name == "kts inspect" else limit, goal))
    return rows


def measure_tools(n: int, workers: list[int], store: Any, plugin: dict[str, str], work: Path) -> list[dict[str, Any]]:
    """``kts verify`` and ``kts keys rotate`` throughput per worker count over ``n`` segments."""
    spec = GeneratorSpec(f"tools{n}/", n)
    generate(store.direct_config(), plugin, spec)
    config = {
        **plugin,
        **store.plugin_config(),
        "key.prefix": spec.prefix,
        "fetch.chunk.cache.prefetch.max.size": "0",
    }
    props = str(_props(work / f"tools{n}.properties", config))
    rows: list[dict[str, Any]] = []
    target = "c"
    for op in ("verify", "rotate"):
        for w in workers:
            if op == "verify":
                argv = ["verify", "--config", "{config}", "--workers", str(w), spec.topic]
            else:  # back and forth between the two key pairs: every run re-wraps every manifest
                argv = ["keys", "rotate", "--config", "{config}", "--to", target, "--workers", str(w)]
                argv += ["--prefix", f"{spec.prefix}{spec.topic}-"]
                target = "b" if target == "c" else "c"
            r = _cli(op, config, {"topic": spec.topic, "config_file": props}, argv, store)
            r["per_s"] = n / r["seconds"]
            print(
                f"  kts {op:<7} workers={w:<3} {r['seconds']:7.2f} s  {r['per_s']:7.1f} segments/s  requests "
                f"{r['requests']} ({r['requests'] / n:.1f} a segment)  peak RSS {r['rss_peak_mb']:.0f} MB",
                flush=True,
            )
            rows.append({"op": op, "workers": w, "n": n, **r})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kts-scale"))
    parser.add_argument("--store", default="s3-seaweedfs")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--delay-ms", type=float, default=DEFAULT_DELAY_MS)
    parser.add_argument("--workers", default="1,2,4,8,16", help="worker counts for kts verify / keys rotate")
    parser.add_argument("--tool-segments", type=int, default=300, help="segments for the verify/rotate sweep")
    parser.add_argument("--skip-tools", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every row here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its server and proxy
    if args.child:
        job = json.loads(args.child)
        print(json.dumps(_child(job["op"], job["config"], job["args"])))
        return 0
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    plugin = {"chunk.size": str(1 << 20), **encryption_config(work)}
    plugin.update(_second_key(work))
    rows: list[dict[str, Any]] = []
    load = os.getloadavg()[0]
    print(
        f"bench_scale: {args.store} behind a {args.delay_ms:.0f} ms proxy, pool {CONCURRENCY}; load avg {load:.2f} "
        f"on {os.cpu_count()} cores (shared machine: figures are noisy)",
        flush=True,
    )
    with latency_store(work, server=args.store, delay_ms=args.delay_ms) as store:
        for n in (int(x) for x in args.sizes.split(",")):
            rows += measure_size(n, store, plugin, work)
        if not args.skip_tools:
            print(f"tools over {args.tool_segments} segments:", flush=True)
            rows += measure_tools(args.tool_segments, [int(w) for w in args.workers.split(",")], store, plugin, work)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
