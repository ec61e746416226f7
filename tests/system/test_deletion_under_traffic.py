"""Deletions the plugin infers, run beside a real Kafka 4.x broker under traffic, and undone.

One single-node KRaft broker (Kafka ``NEWEST_4X`` from Maven Central) tiers to SeaweedFS's S3: a classic topic
and an Iceberg-mode topic that consumers read from offset 0 the whole time, and garbage made for real: the objects
of a deleted topic put back after the broker removed them (a topic deleted while the store refused deletes
leaves the same), and the ``.log`` of a copy that died before its manifest. While the consumers read,
``kts gc --delete --bootstrap-server`` and ``kts iceberg maintain`` run. Every record the consumers read is the one
produced; everything gc removed is in the quarantine, byte for byte, and ``kts gc restore`` puts it back where it
was, byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jvm_testing as jt
import kafka_dist as kd
import pytest
from emulators import StoreServer, fresh_store, serving, start_seaweedfs

from rsm.core.object_keys import parse_object_key

pytestmark = pytest.mark.timeout(900)

CLASSIC, ICE, GONE = "keep", "ice-keep", "gone"
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "segment.bytes": str(1024 * 1024),  # the smallest Kafka 4.x accepts
    "local.retention.bytes": "1",
    "retention.ms": "-1",
}
RECORDS = 3000


def _value(topic: str, i: int) -> bytes:
    return f"{topic}-{i:06d}-".encode() + bytes([97 + i % 26]) * (700 + i * 37 % 500)


def _kts(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "250"},
    )


def held_kinds(objects: dict[str, bytes]) -> dict[str, str]:
    """The kind each quarantine record says its object was held as, by the object's original key."""
    out = {}
    for key, data in objects.items():
        if "kts-quarantine/" in key and key.endswith(".kts-held.json"):
            record = json.loads(data)
            out[record["original"]] = record["kind"]
    return out


class Reader(threading.Thread):
    """Reads ``topic`` from offset 0 to ``end`` again and again until told to stop; counts the passes and keeps
    the first record that differs from what was produced."""

    def __init__(self, bootstrap: str, topic: str, expected: list[bytes]) -> None:
        super().__init__(daemon=True, name=f"reader-{topic}")
        self.bootstrap, self.topic, self.expected = bootstrap, topic, expected
        self.stop = threading.Event()
        self.passes = 0
        self.error: str | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        tp = TopicPartition(self.topic, 0)
        try:
            while not self.stop.is_set() or self.passes == 0:
                consumer = KafkaConsumer(
                    bootstrap_servers=self.bootstrap,
                    enable_auto_commit=False,
                    group_id=None,
                    max_partition_fetch_bytes=256 * 1024,
                )
                try:
                    consumer.assign([tp])
                    consumer.seek(tp, 0)
                    got = 0
                    deadline = time.monotonic() + 180
                    while got < len(self.expected):
                        if time.monotonic() > deadline:
                            self.error = f"{self.topic}: pass {self.passes} stuck at offset {got}"
                            return
                        for batch in consumer.poll(timeout_ms=1000).values():
                            for r in batch:
                                if r.offset != got or r.value != self.expected[got]:
                                    self.error = f"{self.topic}: offset {r.offset} read {r.value[:40]!r}..."
                                    return
                                got += 1
                                if got == len(self.expected):
                                    break
                finally:
                    consumer.close()
                self.passes += 1
        except Exception as e:  # reported by the test, with the pass it happened in
            self.error = f"{self.topic}: pass {self.passes}: {type(e).__name__}: {e}"


@pytest.fixture
def seaweedfs(tmp_path: Path) -> Iterator[StoreServer]:
    """SeaweedFS that knows the test key pair: the Iceberg table's FileIO (pyarrow) signs its uploads."""
    with serving("s3-seaweedfs", lambda d: start_seaweedfs(d, credentials=True), tmp_path / "seaweedfs") as server:
        yield server


def test_gc_and_maintenance_under_traffic_are_reversible(tmp_path: Path, seaweedfs: StoreServer) -> None:
    from rsm.cli.emulators import _s3_client

    jt.ensure_built()
    bucket = "deletion-traffic"
    storage = fresh_store(seaweedfs, bucket)
    client = _s3_client(seaweedfs.endpoint)

    def listing() -> dict[str, bytes]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        out = {}
        for k in keys:
            try:
                out[k] = client.get_object(Bucket=bucket, Key=k)["Body"].read()
            except client.exceptions.NoSuchKey:
                continue  # deleted since the listing (the broker deletes while the test waits for it)
        return out

    def topic_objects(objects: dict[str, bytes], topic: str) -> dict[str, bytes]:
        out = {}
        for k, v in objects.items():
            parsed = parse_object_key(k, "")
            if parsed is not None and parsed.topic == topic:
                out[k] = v
        return out

    base = kd.plugin_properties(tmp_path / "unused", "sidecar")
    lines = [line for line in base.splitlines() if not line.startswith("rsm.config.storage.")]
    extra = {
        "storage.backend.class": "s3",
        **{f"storage.{k}": str(v) for k, v in storage.items()},
        "iceberg.mode.topics.regex": ICE,
        "iceberg.mode.catalog.sqlite.path": str(tmp_path / "catalog.db"),
        "iceberg.mode.maintenance.interval.ms": "3000",
        "iceberg.mode.maintenance.compaction.min.files": "2",
        "iceberg.mode.maintenance.snapshot.min.keep": "1",
        "iceberg.mode.maintenance.snapshot.max.keep": "2",
    }
    plugin = "\n".join(lines + [f"rsm.config.{k}={v}" for k, v in extra.items()]) + "\n"

    with kd.running_broker(kd.NEWEST_4X, tmp_path / "broker", plugin) as b:
        expected = {t: [_value(t, i) for i in range(RECORDS)] for t in (CLASSIC, ICE, GONE)}
        for topic in (CLASSIC, ICE, GONE):
            kd.create_topic(b, topic, TOPIC_CONFIG)
            kd.produce(b.bootstrap, topic, expected[topic])
        for topic in (CLASSIC, ICE, GONE):
            local = b.data / f"{topic}-0"
            kd.wait_while_running(lambda local=local: kd.tiered_locally(local), 300, f"{topic} tiered", b)  # type: ignore[misc]
        tiered_end = {
            t: int(next(iter((b.data / f"{t}-0").glob("*.log"))).stem) for t in (CLASSIC, ICE)
        }  # what only the store holds from here on
        assert min(tiered_end.values()) > RECORDS // 2, tiered_end

        # Garbage, made for real. The deleted topic's objects, put back after the broker removed them.
        gone = topic_objects(listing(), GONE)
        assert gone, "the topic to delete tiered nothing"
        kd.delete_topic(b, GONE)
        kd.wait_while_running(lambda: not topic_objects(listing(), GONE), 120, "gone's objects deleted", b)
        for key, data in gone.items():
            client.put_object(Bucket=bucket, Key=key, Body=data)
        # A copy that died before its manifest: a .log of the classic topic's layout under a new segment id.
        a_log = next(k for k in topic_objects(listing(), CLASSIC) if k.endswith(".log"))
        orphan = re.sub(r"-[A-Za-z0-9_-]{22}\.log$", "-AAAAAAAAAAAAAAAAAAAAAA.log", a_log)
        assert orphan != a_log, a_log
        client.put_object(Bucket=bucket, Key=orphan, Body=b"a copy that died" * 1000)
        garbage = {**gone, orphan: b"a copy that died" * 1000}
        before = listing()
        time.sleep(3)  # past gc's grace below

        readers = [Reader(b.bootstrap, t, expected[t]) for t in (CLASSIC, ICE)]
        for r in readers:
            r.start()
        config = str(b.work / "server.properties")
        gc = _kts(
            "gc", "--config", config, "--bootstrap-server", b.bootstrap, "--older-than", "2s",
            "--confirm-after", "3s", "--delete",
        )  # fmt: skip
        maintain = _kts("iceberg", "maintain", "--config", config)
        for r in readers:
            r.stop.set()
        for r in readers:
            r.join(300)
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert maintain.returncode == 0, maintain.stdout + maintain.stderr
        for r in readers:
            assert r.error is None, r.error
            assert r.passes >= 1, r.topic

        after = listing()
        # What gc made garbage went; so may the leftovers of a copy Kafka retried under load (unfinished-copy).
        # Whatever went is held byte for byte; the readers above prove nothing live went.
        removed = {k: v for k, v in before.items() if k not in after}
        assert set(garbage) <= set(removed), sorted(set(garbage) - set(removed))
        kinds = held_kinds(after)
        assert all(kinds.get(k) == "unfinished-copy" for k in set(removed) - set(garbage)), (sorted(removed), kinds)
        held = {k: v for k, v in after.items() if "kts-quarantine/" in k and not k.endswith(".json")}
        for key, data in removed.items():
            copies = [v for k, v in held.items() if k.endswith("/" + key)]
            assert copies == [data], f"{key} is not in the quarantine byte for byte"
        run = re.search(r"kts gc restore --run (\S+) puts", gc.stdout)
        assert run, gc.stdout

        restore = _kts("gc", "restore", "--config", config, "--run", run.group(1))
        assert restore.returncode == 0, restore.stdout + restore.stderr
        back = listing()
        for key, data in removed.items():
            assert back.get(key) == data, f"{key} did not come back byte for byte"
        assert not [k for k in back if "kts-quarantine/" in k and not k.endswith(".json")], "restored, yet held"
