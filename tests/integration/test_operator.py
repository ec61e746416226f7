"""Issue #28, "an operator's first day": each row of its table, driven through ``kts`` as an operator calls it (the
entry point ``main``, or click's runner), on the demo's real tiered partition and on the real emulators."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from emulators import StoreServer

from rsm.cli.main import cli, main
from rsm.cli.properties import read_properties, write_properties
from rsm.kafka.batch_builder import build_batch
from rsm.kafka.writer import write_entries_segment
from rsm.metadata import TopicIdPartition

KTS = [sys.executable, "-m", "rsm.cli.main"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's partition (orders/0, 3 segments, zstd + AES under the key pair 'demo'): its server.properties."""
    d = tmp_path_factory.mktemp("op") / "demo"
    args = ["demo", "--dir", str(d), "--segments", "3", "--segment-mb", "0.3", "--chunk-size", "65536", "--no-spark"]
    args.append("--no-iceberg")  # the classic partition only
    assert main(args) == 0
    return d / "server.properties"


def kts(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*"))


# --- row 1 and 6: key generation never replaces a key file; ids that cannot be ids are usage errors -----------


def test_keys_generate_never_replaces_a_key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["keys", "generate", "--id", "k2", "--bits", "2048", "--out", str(tmp_path)]
    assert kts(args, capsys)[0] == 0
    private, public = tmp_path / "k2-private.pem", tmp_path / "k2-public.pem"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    before = (private.read_bytes(), public.read_bytes())
    rc, out, err = kts(args, capsys)
    assert rc == 1 and out == ""
    assert f"refusing to replace {private} and {public}" in err and err.count("\n") == 1
    assert (private.read_bytes(), public.read_bytes()) == before
    # only the public half left: still refused, the lone file untouched, no private key written beside it
    private.unlink()
    rc, _, err = kts(args, capsys)
    assert rc == 1 and f"refusing to replace {public}" in err and not private.exists()
    # a link planted where the private key would go is not followed
    public.unlink()
    private.symlink_to(tmp_path / "elsewhere.pem")
    rc, _, err = kts(args, capsys)
    assert rc == 1 and str(private) in err and not (tmp_path / "elsewhere.pem").exists()


@pytest.mark.parametrize("bad_id", ["bad id/x", "a:b", "", "k.1", "a,b", "../k", "x" * 65])
def test_keys_generate_refuses_ids_that_cannot_be_ids(
    bad_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = kts(["keys", "generate", "--id", bad_id, "--bits", "2048", "--out", str(tmp_path / "k")], capsys)
    assert rc == 2 and out == ""
    assert "cannot be a key pair id" in err and "--id" in err and "Traceback" not in err
    assert not (tmp_path / "k").exists()


def test_old_command_names_work_but_are_hidden(tmp_path: Path) -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["--help"]).output
    commands = listing.split("Commands:", 1)[1]
    assert "keygen" not in commands and "rewrap" not in commands
    assert "keys" in commands and "gc" in commands and "metrics-docs" in commands
    done = runner.invoke(cli, ["keygen", "--id", "old", "--bits", "2048", "--out", str(tmp_path)])
    assert done.exit_code == 0 and (tmp_path / "old-private.pem").exists()
    assert "Old name of `kts keys rotate`" in runner.invoke(cli, ["rewrap", "--help"]).output


# --- row 2: read-only commands create nothing; a missing root, bucket or container is an error naming it --------


@pytest.mark.parametrize(
    "command",
    [
        ["ls"],
        ["verify"],
        ["inspect", "orders/0/0"],
        ["cat", "orders/0/0"],
        ["gc"],
        ["gc", "quarantine"],
        ["keys", "rotate"],
    ],
)
def test_a_missing_root_is_an_error_and_stays_missing(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "no" / "such" / "dir"
    cache = tmp_path / "cache"
    sets = ["--set", f"storage.root={root}", "--set", "chunk.size=1024", "--set", "fetch.chunk.cache.class=disk"]
    sets += ["--set", f"fetch.chunk.cache.path={cache}"]
    rc, out, err = kts([*command, *sets], capsys)
    assert rc == 2 and f"storage.root {root} does not exist" in err and "kts creates nothing" in err
    assert not (tmp_path / "no").exists() and not cache.exists()


def test_commands_leave_the_store_and_the_disk_cache_as_they_were(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = demo.parent / "store"
    temp = store / ".kts-partial.orphan.1"  # a temp file of a killed upload, older than the sweep's age
    temp.write_bytes(b"x")
    os.utime(temp, (1, 1))
    before = files_under(store)
    cache = tmp_path / "broker-cache"
    disk = ["--set", "fetch.chunk.cache.class=disk", "--set", f"fetch.chunk.cache.path={cache}"]
    read_only = (["ls"], ["inspect", "orders/0/0"], ["cat", "orders/0/0", "--limit", "3"], ["verify"], ["gc"])
    for args in (*read_only, ["gc", "quarantine"]):
        rc, _, err = kts([*args, "--config", str(demo), *disk], capsys)
        assert rc == 0, (args, err)
    assert files_under(store) == before and not cache.exists()
    temp.unlink()


def _cloud_configs(server: StoreServer, **overrides: str) -> list[str]:
    sets = ["--set", f"storage.backend.class={server.backend}", "--set", "chunk.size=1024"]
    for key, value in server.config(**overrides).items():
        sets += ["--set", f"storage.{key}={value}"]
    return sets


@pytest.mark.parametrize(
    ("server_fixture", "bucket_key", "named"),
    [
        ("s3_moto_server", "s3.bucket.name", "S3 bucket 'no-such-bucket'"),
        ("gcs_fake_server", "gcs.bucket.name", "GCS bucket 'no-such-bucket'"),
        ("azure_azurite_server", "azure.container.name", "Azure container 'no-such-bucket'"),
    ],
)
def test_a_missing_bucket_or_container_is_an_error_naming_it_and_is_not_created(
    server_fixture: str, bucket_key: str, named: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    server: StoreServer = request.getfixturevalue(server_fixture)
    sets = _cloud_configs(server, **{bucket_key: "no-such-bucket"})
    for command in (["ls"], ["verify"], ["gc"]):
        rc, out, err = kts([*command, *sets], capsys)
        assert rc == 2 and out == "", (command, err)
        assert f"cannot list {named}" in err and "creates no root, bucket or container" in err
    assert "no-such-bucket" not in _containers(server)
    # the bucket that exists answers: nothing tiered there is said as such (exit 1), not as a missing bucket
    prefix = f"op-{uuid.uuid4().hex}/"
    rc, _, err = kts(["ls", *_cloud_configs(server), "--set", f"key.prefix={prefix}"], capsys)
    assert rc == 1 and f"no tiered segments under key.prefix '{prefix}'" in err and server.bucket in err


def _containers(server: StoreServer) -> list[str]:
    if server.backend == "s3":
        from rsm.cli.emulators import _s3_client

        return [b["Name"] for b in _s3_client(server.endpoint).list_buckets()["Buckets"]]
    if server.backend == "gcs":
        import urllib.request

        with urllib.request.urlopen(f"{server.endpoint}/storage/v1/b?project=test") as r:
            return [b["name"] for b in json.load(r).get("items", [])]
    from azure.storage.blob import BlobServiceClient

    from rsm.cli.emulators import azurite_connection_string

    service = BlobServiceClient.from_connection_string(azurite_connection_string(server.endpoint))
    return [c.name for c in service.list_containers()]


# --- row 3 and 4: a scope that matches nothing is an error listing what exists; a malformed one a usage error --


@pytest.mark.parametrize("command", [["ls"], ["verify"]])
def test_a_scope_that_matches_nothing_lists_the_topics_that_exist(
    command: list[str], demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = kts([*command, "--config", str(demo), "nosuch"], capsys)
    assert rc == 1 and "verified" not in out
    assert "topic 'nosuch' has no tiered segments" in err and "topics with tiered segments: orders" in err
    rc, out, err = kts([*command, "--config", str(demo), "orders/5"], capsys)
    assert rc == 1 and "partition 5 of topic 'orders' has nothing tiered" in err
    assert "its partitions with tiered segments: 0" in err


@pytest.mark.parametrize("command", [["ls"], ["verify"]])
@pytest.mark.parametrize(
    ("scope", "says"),
    [
        ("orders/x", "the partition 'x' is not a number"),
        ("orders/0/5", "is not TOPIC or TOPIC/PARTITION"),
        ("bad topic", "is not a Kafka topic name"),
        ("/0", "is not a Kafka topic name"),
    ],
)
def test_a_malformed_scope_is_a_usage_error(
    command: list[str], scope: str, says: str, demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = kts([*command, "--config", str(demo), scope], capsys)
    assert rc == 2 and out == "" and says in err and "Usage:" in err


@pytest.mark.parametrize(
    ("segment", "rc", "says"),
    [
        ("orders/x/5", 2, "the partition 'x' is not a number"),
        ("orders/0/five", 2, "the offset 'five' is not a number"),
        ("orders/0", 2, "names no segment"),
        ("nosuch/0/5", 1, "topics with tiered segments: orders"),
        ("orders/3/5", 1, "its partitions with tiered segments: 0"),
        ("orders/0/99999999", 1, "no tiered segment of orders-0 holds offset 99999999"),
        ("AAAAAAAAAAAAAAAAAAAAAA", 1, "no tiered segment has id AAAAAAAAAAAAAAAAAAAAAA"),
        ("demo/x.log", 2, "is not a segment object key"),
        (
            "demo/orders-MWJ6FHTfRYy67jzwZdeqSQ/0/00000000000000000001-AAAAAAAAAAAAAAAAAAAAAA.log",
            1,
            "no tiered segment",
        ),
    ],
)
@pytest.mark.parametrize("command", ["inspect", "cat"])
def test_segment_names_are_checked_the_same_way(
    command: str, segment: str, rc: int, says: str, demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got, out, err = kts([command, "--config", str(demo), segment], capsys)
    assert (got, out) == (rc, "") and says in err, err


def test_a_rotation_of_nothing_is_not_a_finished_rotation(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = kts(["keys", "rotate", "--config", str(demo), "--prefix", "other-cluster/"], capsys)
    assert rc == 1 and "no segment manifests under 'other-cluster/'" in err and "before retiring any key pair" in err
    rc, out, _ = kts(["keys", "rotate", "--config", str(demo), "--dry-run"], capsys)
    assert rc == 0 and "segments seen 3" in out


# --- row 5: listing needs no private key and unwraps no data key -------------------------------------------------


def test_ls_and_inspect_need_no_private_key(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from encryption.keyring import RsaKeyRing

    props = read_properties(demo)
    private = "rsm.config.encryption.key.pairs.demo.private.key.file"
    props[private] = str(tmp_path / "not-on-this-host.pem")  # the operator's host has no private key
    no_key = tmp_path / "server.properties"
    write_properties(no_key, props)
    public_only = dict(props)
    del public_only[private]
    write_properties(tmp_path / "public-only.properties", public_only)

    def no_unwrap(*_a: Any, **_k: Any) -> bytes:
        raise AssertionError("a listing unwrapped a data key")

    monkeypatch.setattr(RsaKeyRing, "unwrap", no_unwrap)
    for config in (no_key, tmp_path / "public-only.properties"):
        rc, out, err = kts(["ls", "--config", str(config), "--json"], capsys)
        rows = [json.loads(line) for line in out.splitlines()]
        assert rc == 0, err
        assert len(rows) == 3 and {r["key_id"] for r in rows} == {"demo"}
        assert rows[0]["max_timestamp"].endswith("Z") and rows[1]["start_offset"] == rows[0]["end_offset"] + 1
        rc, out, err = kts(["inspect", "--config", str(config), f"orders/0/{rows[1]['start_offset']}"], capsys)
        assert rc == 0 and "encryption key pair demo" in out, err
    # reading records does need the key, and says which
    rc, _, err = kts(["cat", "--config", str(no_key), "orders/0/0"], capsys)
    assert rc == 2 and "not-on-this-host.pem" in err


# --- row 8: Aiven's documented values mean the same here --------------------------------------------------------


def test_aivens_minus_one_is_accepted_as_aiven_documents_it(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unbounded = ["fetch.chunk.cache.retention.ms=-1", "fetch.chunk.cache.size=-1", "fetch.manifest.cache.size=-1"]
    props = read_properties(demo)
    props.update({f"rsm.config.{kv.split('=')[0]}": kv.split("=")[1] for kv in unbounded})
    props["rsm.config.python.executable"] = sys.executable
    write_properties(demo.parent / "aiven-values.properties", props)
    rc, out, err = kts(["config", "check", str(demo.parent / "aiven-values.properties")], capsys)
    assert rc == 0, err
    assert "rsm.config.fetch.chunk.cache.size=-1: unbounded, as in Aiven's plugin" in out
    sets = [arg for kv in unbounded for arg in ("--set", kv)]
    rc, out, err = kts(["verify", "--config", str(demo), *sets], capsys)
    assert rc == 0 and "0 damaged objects" in out, err
    rc, _, err = kts(["ls", "--config", str(demo), "--set", "fetch.chunk.cache.retention.ms=-2"], capsys)
    assert rc == 2 and "value must be at least 1, or -1 (no expiry)" in err


# --- row 9: cat prints ISO 8601 times with Z, and null as null, the same in text and JSON --------------------------


def test_cat_times_are_iso_8601_utc_and_nulls_are_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rsm.core.manager import RemoteStorageManager

    records = [
        (1_700_000_000_123, b"k", b"v", [("trace", b"t1"), ("retry", None)]),
        (1_700_000_000_124, None, None, [("retry", None), ("retry", b"2")]),
    ]
    seg = write_entries_segment(tmp_path / "seg", [build_batch(records, base_offset=40)])
    configs = {"chunk.size": "4096", "storage.root": str(tmp_path / "store"), "storage.fsync.enabled": "false"}
    with RemoteStorageManager() as manager:
        manager.configure(configs)
        tip = TopicIdPartition("MWJ6FHTfRYy67jzwZdeqSQ", "nulls", 0)
        manager.copy_log_segment_data(seg.to_metadata(tip), seg.to_log_segment_data())
    plugin = tmp_path / "plugin.properties"
    write_properties(plugin, configs)
    rc, text, err = kts(["cat", "--config", str(plugin), "nulls/0/40"], capsys)
    assert rc == 0, err
    assert text.splitlines() == [
        "40\t2023-11-14T22:13:20.123Z\tk\tv\ttrace=t1 retry=null",
        "41\t2023-11-14T22:13:20.124Z\tnull\tnull\tretry=null retry=2",
    ]
    rc, out, _ = kts(["cat", "--config", str(plugin), "nulls/0/40", "--json"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and [r["timestamp"] for r in rows] == ["2023-11-14T22:13:20.123Z", "2023-11-14T22:13:20.124Z"]
    assert rows[0]["headers"] == [["trace", "t1"], ["retry", None]]
    assert (rows[1]["key"], rows[1]["value"], rows[1]["headers"]) == (None, None, [["retry", None], ["retry", "2"]])
    assert rows[0]["timestamp_ms"] == 1_700_000_000_123


# --- the CLI as a separate process: the installed entry point, exit codes and one-line errors ---------------------


def test_kts_as_a_process(demo: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KTS, *args], capture_output=True, text=True, timeout=120)

    done = run("verify", "--config", str(demo), "nosuch")
    assert done.returncode == 1 and "topics with tiered segments: orders" in done.stderr
    done = run("ls", "--set", f"storage.root={tmp_path / 'none'}", "--set", "chunk.size=1024")
    assert done.returncode == 2 and not (tmp_path / "none").exists()
    done = run("ls", "--config", str(demo), "orders/0")
    assert done.returncode == 0 and "2023-11-14T" in done.stdout and "Z" in done.stdout


# --- row 7: config check reports every problem in one run; --connect reaches the store ----------------------------


def broken_interpreter(folder: Path) -> Path:
    """A Python 3.11 that cannot import the package (no site-packages), as a wrong venv would be."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python3"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    script.chmod(0o755)
    return script


def test_config_check_reports_every_problem_in_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "server.properties"
    f.write_text(
        "remote.log.storage.system.enable=true\n"
        "remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager\n"
        "remote.log.storage.manager.class.path=/opt/venvs/kts/lib/python3.11/site-packages/rsm/_jars/*\n"
        "rsm.config.chunk.size=0\n"
        "rsm.config.storage.backend.class=s3\n"
        "rsm.config.python.executable=/nope/python\n"
        "rsm.config.storage.s3.multipart.upload.part.size=1024\n"
        "rsm.config.fetch.chunk.cache.retention.ms=0\n"
        "rsm.config.metrics.num.samples=0\n"
        "rsm.config.jvm.sidecar.request.timeout.ms=0\n"
        "rsm.config.compression.heuristic.enabled=true\n"
        "rsm.config.compresion.enabled=true\n"
    )
    rc, out, err = kts(["config", "check", str(f)], capsys)
    assert rc == 1 and out.rstrip().endswith("9 error(s)")
    errors = [line for line in err.splitlines() if line.startswith("ERROR: ")]
    assert [e.split(": ", 2)[1] for e in errors] == [
        "rsm.config.compresion.enabled",  # a key nothing reads: the plugin's configure() refuses it too
        "Invalid value '0' for configuration chunk.size",
        "Invalid value '0' for configuration fetch.chunk.cache.retention.ms",
        "Invalid value true for configuration compression.heuristic.enabled",
        "Invalid value '1024' for configuration storage.s3.multipart.upload.part.size",
        "Missing required configuration 'storage.s3.bucket.name' for the S3 backend",
        "Invalid value '0' for configuration metrics.num.samples",
        "Invalid value '0' for configuration jvm.sidecar.request.timeout.ms",
        "rsm.config.python.executable",
    ]
    assert "/nope/python does not exist or is not executable" in err
    assert "Did you mean 'compression.enabled'?" in out.split("ignored (1):", 1)[1]


def test_config_check_reports_iceberg_mode_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The iceberg.mode.* keys are checked as configure() checks them: each value, then a catalog the mode needs."""
    f = tmp_path / "server.properties"
    base = (
        "remote.log.storage.system.enable=true\n"
        "remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager\n"
        "rsm.config.chunk.size=4194304\n"
        "rsm.config.storage.backend.class=filesystem\n"
        f"rsm.config.storage.root={tmp_path / 'store'}\n"
        "rsm.config.iceberg.mode.topics.regex=orders\n"
    )
    f.write_text(base + "rsm.config.iceberg.mode.fetch.cache.size=-5\nrsm.config.iceberg.mode.write.batch.bytes=5\n")
    _, _, err = kts(["config", "check", str(f)], capsys)
    errors = [line.split(": ", 2)[1] for line in err.splitlines() if line.startswith("ERROR: ")]
    assert "Invalid value '5' for configuration iceberg.mode.write.batch.bytes" in errors
    assert "Invalid value '-5' for configuration iceberg.mode.fetch.cache.size" in errors
    f.write_text(base)  # every value valid, but no catalog named
    _, _, err = kts(["config", "check", str(f)], capsys)
    assert "ERROR: Missing required configuration 'iceberg.mode.catalog.sqlite.path'" in err
    f.write_text(base + f"rsm.config.iceberg.mode.catalog.sqlite.path={tmp_path / 'catalog.db'}\n")
    _, _, err = kts(["config", "check", str(f)], capsys)
    assert "iceberg.mode" not in err
    assert not (tmp_path / "catalog.db").exists(), "a check creates nothing"
    # The sidecar's interpreter must import pyiceberg: here a python.path entry shadows it with a broken one.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pyiceberg.py").write_text("raise ImportError('no pyiceberg here')\n")
    interpreter = f"rsm.config.python.executable={sys.executable}\nrsm.config.python.path={shadow}\n"
    f.write_text(base + f"rsm.config.iceberg.mode.catalog.sqlite.path={tmp_path / 'catalog.db'}\n" + interpreter)
    _, _, err = kts(["config", "check", str(f)], capsys)
    assert "no pyiceberg here, which Iceberg mode (iceberg.mode.topics.regex) needs" in err
    assert "kafka-tiered-storage[iceberg]" in err
    f.write_text(base.replace("iceberg.mode.topics.regex=orders", "iceberg.mode.topics.regex=") + interpreter)
    _, _, err = kts(["config", "check", str(f)], capsys)
    assert "pyiceberg" not in err, "a plugin without Iceberg-mode topics does not need it"


def test_config_check_runs_the_interpreter_the_broker_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = broken_interpreter(tmp_path / "bin")
    base = "rsm.config.chunk.size=4194304\nrsm.config.storage.root=/var/lib/t\n"
    f = tmp_path / "server.properties"
    f.write_text(base + f"rsm.config.python.executable={broken}\n")
    rc, _, err = kts(["config", "check", str(f)], capsys)
    assert rc == 1 and f"{broken} cannot import rsm.jvm.sidecar: ModuleNotFoundError" in err
    f.write_text(base + f"rsm.config.python.executable={sys.executable}\n")
    rc, out, err = kts(["config", "check", str(f)], capsys)
    assert rc == 0 and "python.executable" not in err and "python.executable=" not in out
    # unset: the broker would run python3 from its PATH; when that one cannot run the sidecar, say which to use
    monkeypatch.setenv("PATH", f"{broken.parent}:{os.environ['PATH']}")
    f.write_text(base)
    rc, out, err = kts(["config", "check", str(f)], capsys)
    assert rc == 0 and f"  rsm.config.python.executable={sys.executable}\n" in out
    assert "python.executable is unset, so the sidecar would run python3" in out
    f.write_text(base + "rsm.config.jvm.transport=inprocess\n")  # in-process: no interpreter is started
    rc, out, err = kts(["config", "check", str(f)], capsys)
    assert rc == 0 and "python.executable" not in out + err


def test_config_check_connect_reaches_the_store(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rsm.cli.emulators import _s3_client

    server: StoreServer = request.getfixturevalue("s3_moto_server")
    prefix = f"op-{uuid.uuid4().hex}/"
    _s3_client(server.endpoint).put_object(Bucket=server.bucket, Key=prefix + "a/first", Body=b"1")
    lines = [f"rsm.config.chunk.size=4194304\nrsm.config.python.executable={sys.executable}"]
    lines += ["rsm.config.storage.backend.class=s3", f"rsm.config.key.prefix={prefix}"]
    lines += [f"rsm.config.storage.{k}={v}" for k, v in server.configs.items()]
    f = tmp_path / "server.properties"
    f.write_text("\n".join(lines) + "\n")
    rc, out, err = kts(["config", "check", "--connect", str(f)], capsys)
    assert rc == 0, err
    assert f"note: connected to S3 bucket '{server.bucket}' under key.prefix '{prefix}': first key " in out
    assert f"{prefix}a/first" in out
    f.write_text(f.read_text().replace(f"bucket.name={server.bucket}", "bucket.name=no-such-bucket"))
    rc, out, err = kts(["config", "check", "--connect", str(f)], capsys)
    assert rc == 1 and "--connect: cannot list S3 bucket 'no-such-bucket'" in err and "NoSuchBucket" in err
    assert kts(["config", "check", str(f)], capsys)[0] == 0  # without --connect nothing is reached
    f.write_text(f"rsm.config.chunk.size=1024\nrsm.config.storage.root={tmp_path / 'none'}\n")
    rc, out, err = kts(["config", "check", "--connect", str(f)], capsys)
    assert rc == 1 and f"storage.root {tmp_path / 'none'} does not exist" in err and not (tmp_path / "none").exists()
