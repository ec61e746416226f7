"""What the broker benchmarks share: the broker's process tree (the JVM and our Python sidecar) and its CPU and
memory from /proc, py-spy, the LocalTieredStorage jar, and small Java programs compiled against a release's jars.

The parsing helpers here take text and return numbers, so tests/unit checks them without a broker."""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

BENCH_DIR = Path(__file__).resolve().parent


def process_tree(root: int) -> Iterator[tuple[int, str, str]]:
    """``root`` and its descendants (children of any thread, as the JVM starts the sidecar from one): pid, a short
    name (``sidecar`` for our Python sidecar, else ``broker``) and the /proc stat line. Processes that exit
    meanwhile are skipped."""
    pids = [root]
    while pids:
        pid = pids.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            children = [c for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
        except OSError:
            continue
        yield pid, "sidecar" if b"rsm.jvm.sidecar" in cmd else "broker", stat
        pids += [int(c) for c in children]


def stat_cpu_seconds(stat: str, tick: int) -> float:
    """User plus system CPU seconds of one /proc/<pid>/stat line (the fields after the command's parenthesis)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / tick


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of the broker JVM and, when there is one, the Python sidecar."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for _, name, stat in process_tree(root):
        out[name] = out.get(name, 0.0) + stat_cpu_seconds(stat, tick)
    return out


def pid_cpu(pid: int) -> float:
    """CPU seconds of one process (0 once it is gone)."""
    try:
        return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))
    except OSError:
        return 0.0


def parse_host_cpu(text: str) -> tuple[int, int]:
    """Busy and total jiffies of the whole host from /proc/stat's first line (idle and iowait are not busy)."""
    fields = [int(f) for f in text.splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # guest time is already counted in user
    return total - fields[3] - fields[4], total


def host_cpu() -> tuple[int, int]:
    return parse_host_cpu(Path("/proc/stat").read_text())


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the host's cores that were busy between two :func:`host_cpu` readings (0..1)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else float("nan")


def sidecar_pid(root: int) -> int | None:
    return next((pid for pid, name, _ in process_tree(root) if name == "sidecar"), None)


def pyspy() -> str:
    """py-spy next to this interpreter (a venv's bin/) or on PATH."""
    import sys

    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else "py-spy"


def local_tiered_storage_jar(kafka: Path) -> Path:
    """The jar with Kafka's LocalTieredStorage in ``kafka``'s libs/ (``kafka-storage``'s ``test`` jar, called
    ``test-fixtures`` from 4.4), which kafka_dist puts on the broker's class path."""
    jars = sorted((kafka / "libs").glob("kafka-storage-*-test*.jar"))
    if not jars:
        raise SystemExit(f"no kafka-storage test jar (LocalTieredStorage) in {kafka / 'libs'}")
    return jars[0]


def compile_java(kafka: Path, source: Path, out: Path) -> Path:
    """``source`` compiled against ``kafka``'s libs/ into ``out``/classes; returns that folder."""
    classes = out / "classes"
    subprocess.run(["javac", "-cp", f"{kafka / 'libs'}/*", "-d", classes, source], check=True)
    return classes


# --- memory ---------------------------------------------------------------------------------------------


def parse_proc_status(text: str) -> dict[str, int]:
    """The ``kB`` fields of /proc/<pid>/status (VmHWM, VmRSS, RssAnon, RssShmem, ...) in bytes."""
    out = {}
    for m in re.finditer(r"^(\w+):\s+(\d+) kB$", text, re.M):
        out[m.group(1)] = int(m.group(2)) * 1024
    return out


def proc_status(pid: int) -> dict[str, int]:
    """/proc/<pid>/status's sizes in bytes; empty once the process is gone."""
    try:
        return parse_proc_status(Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return {}


def peak_sizes(samples: Iterable[dict[str, int]], fields: Iterable[str]) -> dict[str, int]:
    """The largest value each of ``fields`` reached over a series of :func:`proc_status` readings."""
    peaks: dict[str, int] = {}
    for sample in samples:
        for name in fields:
            if name in sample:
                peaks[name] = max(peaks.get(name, 0), sample[name])
    return peaks


class StatusWatch:
    """Reads /proc/<pid>/status every ``every`` seconds in a thread; :meth:`stop` returns each size's peak. The
    kernel keeps only the total's peak (VmHWM); this shows which part (RssAnon, RssShmem) made it."""

    FIELDS = ("VmRSS", "RssAnon", "RssShmem")

    def __init__(self, pid: int, every: float = 0.2) -> None:
        import threading

        self.pid = pid
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            self.samples.append(proc_status(self.pid))

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return peak_sizes(self.samples, self.FIELDS)


class JstatSample(NamedTuple):
    """One line of ``jstat -gc``: heap in use outside Eden (survivors and old generation) and the GC counts."""

    retained_bytes: int
    eden_bytes: int
    gcs: int


def parse_jstat_gc(text: str) -> list[JstatSample]:
    """The samples of ``jstat -gc`` output (sizes in KB; a header line repeats every so often). Columns are found
    by name, as releases add some (CGC, CGCT)."""
    samples: list[JstatSample] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] == "S0C":
            header = cols
            continue
        if header is None or len(cols) != len(header):
            continue
        try:
            row = {h: float(v) for h, v in zip(header, cols, strict=True) if v != "-"}
        except ValueError:
            continue
        retained = row["S0U"] + row["S1U"] + row["OU"]
        gcs = int(row.get("YGC", 0) + row.get("FGC", 0))  # G1's concurrent cycles (CGC) leave Eden as it is
        samples.append(JstatSample(int(retained * 1024), int(row["EU"] * 1024), gcs))
    return samples


def heap_after_gc_peak(samples: Iterable[JstatSample]) -> int | None:
    """The largest heap in use right after a collection: of the samples taken after the GC count moved, the most
    held outside Eden (Eden is empty after a young collection; what it held since is garbage-to-be or new)."""
    peak: int | None = None
    last: int | None = None
    for s in samples:
        if last is not None and s.gcs != last:
            peak = s.retained_bytes if peak is None else max(peak, s.retained_bytes)
        last = s.gcs
    return peak


# --- the broker's own metrics ----------------------------------------------------------------------------

READER_TIMER = "kafka.log.remote:type=RemoteLogManager,name=RemoteLogReaderFetchRateAndTimeMs"
"""The broker's timer of every remote read its reader threads make (Kafka 3.8+): the time from the read task's
start to the records being read from the plugin's stream, per partition fetch, in ms."""


def parse_jmx_properties(text: str) -> dict[str, dict[str, float]]:
    """``JmxTool --report-format properties`` output: ObjectName -> attribute -> value (numbers only)."""
    out: dict[str, dict[str, float]] = {}
    for m in re.finditer(r"^(\S+?:\S*?):(\w+)=([0-9.eE+-]+|NaN)\s*$", text, re.M):
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.setdefault(m.group(1), {})[m.group(2)] = value
    return out


# --- consumers and copies ----------------------------------------------------------------------------------


class ConsumerRun(NamedTuple):
    partition: int
    bytes: int
    records: int
    seconds: float

    @property
    def mbs(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def parse_consumers(text: str) -> list[ConsumerRun]:
    """The ``partition=P bytes=B records=R seconds=S`` lines CatchUpConsumers.java prints, one per consumer."""
    runs = []
    for m in re.finditer(r"^partition=(\d+) bytes=(\d+) records=(\d+) seconds=([0-9.]+)$", text, re.M):
        runs.append(ConsumerRun(int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))))
    return runs


def starved(rates: dict[int, float], factor: float = 2.0) -> list[int]:
    """The consumers (by partition) whose rate is outside ``factor`` times the median of all, either way."""
    if not rates:
        return []
    median = statistics.median(rates.values())
    return sorted(p for p, r in rates.items() if r * factor < median or r > median * factor)


_LOG_TIME = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \w+ "
_PARTITION = r"\[RemoteLogManager=\d+ partition=(\S+?)\] "


def parse_copy_times(log: str) -> list[tuple[float, float, str]]:
    """Each segment copy the broker's remote log manager logged (``[RemoteLogManager=N partition=P] Copying X to
    remote storage.`` and ``... Copied X to remote storage with segment-id: ...``) as (start, end, "P/X"), epoch
    seconds (the log's clock, UTC), in the order they ended. Copies without both lines are left out."""
    import datetime as dt

    def when(stamp: str) -> float:
        return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=dt.UTC).timestamp()

    started: dict[str, float] = {}
    done = []
    for m in re.finditer(_LOG_TIME + _PARTITION + r"Copying (\S+) to remote storage\.", log, re.M):
        started[f"{m.group(2)}/{m.group(3)}"] = when(m.group(1))
    for m in re.finditer(_LOG_TIME + _PARTITION + r"Copied (\S+) to remote storage with segment-id", log, re.M):
        name = f"{m.group(2)}/{m.group(3)}"
        if name in started:
            done.append((started.pop(name), when(m.group(1)), name))
    return sorted(done, key=lambda c: c[1])


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


# --- py-spy ---------------------------------------------------------------------------------------------------


def parse_collapsed(text: str) -> dict[str, int]:
    """py-spy's ``--format raw`` output (collapsed stacks: ``frame;frame;... count`` per line): stack -> samples."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out[stack] = out.get(stack, 0) + int(count)
    return out


def top_leaves(stacks: dict[str, int], n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` innermost frames with the most samples (a frame's share of where the sampled thread was)."""
    leaves: dict[str, int] = {}
    for stack, count in stacks.items():
        leaf = stack.rsplit(";", 1)[-1]
        leaves[leaf] = leaves.get(leaf, 0) + count
    return sorted(leaves.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


class PySpy:
    """``py-spy record --gil`` of one process during a phase: with ``--gil`` a sample is taken only of the thread
    holding the GIL, so the samples over the ticks of the phase are the share of the time the GIL was held."""

    RATE = 100

    def __init__(self, pid: int, out: Path) -> None:
        import time

        self.out = out
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [pyspy(), "record", "-p", str(pid), "-o", str(out), "--format", "raw", "--gil", "--nonblocking"]
            + ["--rate", str(self.RATE), "--threads"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> tuple[float, list[tuple[str, int]]]:
        """The share of the phase the GIL was held (0..1) and the top innermost frames."""
        import signal
        import time

        seconds = time.monotonic() - self.started
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        stacks = parse_collapsed(self.out.read_text(errors="replace")) if self.out.exists() else {}
        return sum(stacks.values()) / (self.RATE * seconds), top_leaves(stacks)
