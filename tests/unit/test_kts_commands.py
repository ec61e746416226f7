"""The ``kts`` commands on real tiered data: the demo's partition, real key pairs, real objects on disk."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rsm._version import __version__
from rsm.cli.main import cli, main
from rsm.cli.properties import read_properties
from rsm.cli.settings import env_configs, load_configs
from rsm.core.known_keys import unknown_keys
from rsm.core.manager import RemoteStorageManager
from rsm.errors import ConfigException


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kts") / "demo"
    args = ["demo", "--dir", str(d), "--segments", "3", "--segment-mb", "0.5", "--chunk-size", "65536", "--no-spark"]
    assert main([*args, "--no-iceberg"]) == 0  # the classic partition only: Iceberg segments are tested elsewhere
    return d


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_help_on_every_command() -> None:
    def walk(cmd: click.Command, path: list[str]) -> list[list[str]]:
        found = [path]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                found += walk(sub, [*path, name])
        return found

    paths = walk(cli, [])
    assert {"demo", "ls", "inspect", "cat", "verify", "plugin-path", "kafka-server-start", "config-docs"} <= {
        p[0] for p in paths if p
    }
    assert ["keys", "generate"] in paths and ["keys", "rotate"] in paths and ["config", "check"] in paths
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage: " in result.output and "--help" in result.output


def test_version_matches_package_and_jar(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    from rsm.jvm.launcher import PLUGIN_JAR

    rc, out, _ = _run(["--version"], capsys)
    assert rc == 0 and out.strip() == f"kts {__version__}"
    assert version("kafka-tiered-storage") == __version__
    manifest = zipfile.ZipFile(PLUGIN_JAR).read("META-INF/MANIFEST.MF").decode()
    assert f"Implementation-Version: {__version__}" in manifest


def test_demo_leaves_a_config_every_command_reads(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = demo_dir / "server.properties"
    broker = read_properties(props)
    assert broker["remote.log.storage.manager.class.name"] == "io.kts.shim.PythonRemoteStorageManager"
    assert broker["rsm.config.encryption.enabled"] == "true" and broker["rsm.config.compression.enabled"] == "true"
    rc, out, _ = _run(["ls", "--config", str(props), "--json"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(rows) == 3
    assert [r["start_offset"] for r in rows] == sorted(r["start_offset"] for r in rows)
    assert all(r["key_id"] == "demo" and r["stored"] > 0 for r in rows)
    assert rows[0]["codec"] == "zstd" and rows[0]["stored"] < rows[0]["size"]
    assert rows[-1]["codec"] == "none"  # producer-compressed batches: the heuristic skipped zstd
    # idempotent: a second run gives the same objects and the same config file
    before = sorted(p.relative_to(demo_dir) for p in (demo_dir / "store").rglob("*") if p.is_file())
    text = props.read_text()
    assert (
        main(
            [
                "demo",
                "--dir",
                str(demo_dir),
                "--segments",
                "3",
                "--segment-mb",
                "0.5",
                "--chunk-size",
                "65536",
                "--no-spark",
                "--no-iceberg",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert sorted(p.relative_to(demo_dir) for p in (demo_dir / "store").rglob("*") if p.is_file()) == before
    assert props.read_text() == text


def test_demo_refuses_a_folder_it_did_not_make(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broker's config folder passed by mistake is left exactly as it was; a new or empty folder is fine."""
    etc = tmp_path / "etc-kafka"
    (etc / "store").mkdir(parents=True)
    (etc / "store" / "keep.me").write_text("broker data")
    (etc / "server.properties").write_text("broker.id=1\n")
    before = {p: p.read_bytes() for p in etc.rglob("*") if p.is_file()}
    args = ["--segments", "1", "--segment-mb", "0.2", "--chunk-size", "65536", "--no-spark", "--transport", "python"]
    rc, _, err = _run(["demo", "--dir", str(etc), *args], capsys)
    assert rc == 1 and "was not made by kts demo" in err and str(etc) in err and ".kts-demo" in err
    assert {p: p.read_bytes() for p in etc.rglob("*") if p.is_file()} == before
    afile = tmp_path / "a-file"
    afile.write_text("x")
    rc, _, err = _run(["demo", "--dir", str(afile), *args], capsys)
    assert rc != 0 and afile.read_text() == "x"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(["demo", "--dir", str(empty), *args], capsys)[0] == 0
    assert (empty / ".kts-demo").is_file() and (empty / "server.properties").is_file()
    assert _run(["demo", "--dir", str(empty), *args], capsys)[0] == 0  # its own folder: a re-run is fine


def test_cat_decodes_records_from_an_offset(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = str(demo_dir / "server.properties")
    _, out, _ = _run(["ls", "--config", props, "--json"], capsys)
    second = json.loads(out.splitlines()[1])
    start = second["start_offset"] + 10
    rc, out, _ = _run(
        ["cat", "--config", props, f"orders/0/{start}", "--from-offset", str(start), "--limit", "5", "--json"], capsys
    )
    records = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(records) == 5
    assert records[0]["offset"] >= start and [r["offset"] for r in records] == sorted(r["offset"] for r in records)
    assert all(r["key"].startswith("user-") and json.loads(r["value"])["ts"] for r in records)
    # the same segment by its id
    args = ["cat", "--config", props, second["segment_id"], "--from-offset", str(start), "--limit", "5", "--json"]
    rc, by_id, _ = _run(args, capsys)
    assert rc == 0 and by_id == out


def test_inspect_by_object_key(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = next((demo_dir / "store").rglob("*.rsm-manifest"))
    key = str(manifest.relative_to(demo_dir / "store"))
    rc, out, _ = _run(["inspect", "--config", str(demo_dir / "server.properties"), key], capsys)
    assert rc == 0
    assert "encryption key pair demo" in out and "crc32c per chunk and index" in out
    assert '"dataKey": "demo:<wrapped>"' in out  # the wrapped key is not printed


def test_segment_names_that_match_nothing_say_what_to_do(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = str(demo_dir / "server.properties")
    rc, _, err = _run(["inspect", "--config", props, "orders/0/99999999"], capsys)
    assert rc == 1 and "no tiered segment of orders-0 holds offset 99999999" in err and "kts ls orders/0" in err


def test_verify_lists_damaged_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "demo"
    assert (
        main(["demo", "--dir", str(d), "--segments", "2", "--segment-mb", "0.3", "--chunk-size", "65536", "--no-spark"])
        == 0
    )
    capsys.readouterr()
    props = str(d / "server.properties")
    assert _run(["verify", "--config", props], capsys)[0] == 0
    log_obj = sorted((d / "store").rglob("*.log"))[0]
    data = bytearray(log_obj.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit in one chunk
    log_obj.write_bytes(bytes(data))
    manifest = sorted((d / "store").rglob("*.rsm-manifest"))[1]
    manifest.write_bytes(b"{not json")
    rc, out, err = _run(["verify", "--config", props], capsys)
    assert rc == 1 and "2 damaged objects" in out
    damaged = [line for line in err.splitlines() if line.startswith("DAMAGED ")]
    assert len(damaged) == 2
    assert any(str(log_obj.relative_to(d / "store")) in line and "CorruptDataException" in line for line in damaged)
    assert any(str(manifest.relative_to(d / "store")) in line for line in damaged)


def test_keys_generate_refuses_sizes_oaep_sha3_512_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _run(["keys", "generate", "--id", "tiny", "--bits", "1024", "--out", str(tmp_path)], capsys)
    assert rc == 2 and "OAEP-SHA3-512" in err and "--bits" in err
    assert not list(tmp_path.iterdir())
    rc, out, _ = _run(["keys", "generate", "--id", "k2", "--bits", "2048", "--out", str(tmp_path)], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines == [
        f"rsm.config.encryption.key.pairs.k2.public.key.file={tmp_path / 'k2-public.pem'}",
        f"rsm.config.encryption.key.pairs.k2.private.key.file={tmp_path / 'k2-private.pem'}",
    ]
    assert (tmp_path / "k2-private.pem").stat().st_mode & 0o077 == 0


def test_keys_rotate_rewraps_resumably(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "demo"
    assert (
        main(
            [
                *("demo", "--dir", str(d), "--segments", "3", "--segment-mb", "0.3", "--chunk-size", "65536"),
                *("--no-spark", "--no-iceberg"),
            ]
        )
        == 0
    )
    assert main(["keys", "generate", "--id", "k2", "--bits", "2048", "--out", str(d / "keys")]) == 0
    capsys.readouterr()
    props = str(d / "server.properties")
    k2 = [
        "--set",
        "encryption.key.pairs=demo,k2",
        "--set",
        f"encryption.key.pairs.k2.public.key.file={d / 'keys' / 'k2-public.pem'}",
        "--set",
        f"encryption.key.pairs.k2.private.key.file={d / 'keys' / 'k2-private.pem'}",
    ]
    rc, out, _ = _run(["keys", "rotate", "--config", props, *k2, "--to", "k2", "--dry-run"], capsys)
    assert rc == 0 and "segments seen 3, would re-wrap 3 onto k2 (from: demo=3)" in out
    rc, out, _ = _run(["keys", "rotate", "--config", props, *k2, "--to", "k2", "--workers", "3"], capsys)
    assert rc == 0 and "re-wrapped 3 onto k2" in out and "failed 0" in out
    rc, out, _ = _run(["rewrap", "--config", props, *k2, "--to", "k2"], capsys)  # the old name, run again
    assert rc == 0 and "re-wrapped 0" in out and "already current 3" in out
    # the data is readable with k2 alone: the demo key pair can be retired
    only_k2 = [
        "--set",
        "encryption.key.pairs=k2",
        "--set",
        "encryption.key.pair.id=k2",
        *k2[2:],
    ]
    rc, out, _ = _run(["verify", "--config", props, *only_k2], capsys)
    assert rc == 0 and "0 damaged" in out
    _, out, _ = _run(["ls", "--config", props, *only_k2, "--json"], capsys)
    assert {json.loads(line)["key_id"] for line in out.splitlines()} == {"k2"}


def test_one_config_source_file_env_set(tmp_path: Path) -> None:
    broker = tmp_path / "server.properties"
    broker.write_text(
        "broker.id=0\nrsm.config.chunk.size 1024\nrsm.config.key.prefix=a\\:b/\nrsm.config.storage.root=/x\\u00e9\n"
    )
    assert load_configs(str(broker), environ={}) == {"chunk.size": "1024", "key.prefix": "a:b/", "storage.root": "/xé"}
    plugin = tmp_path / "plugin.properties"
    plugin.write_text("chunk.size=2048\n")
    env = {"KTS_CONFIG": str(plugin), "RSM_CONFIG_KEY_PREFIX": "env/", "RSM_CONFIG_STORAGE_BACKEND__X": "1"}
    assert env_configs(env) == {"key.prefix": "env/", "storage.backend_x": "1"}
    configs = load_configs(None, ("rsm.config.key.prefix=set/", "chunk.size=4096"), environ=env)
    assert configs == {"chunk.size": "4096", "key.prefix": "set/", "storage.backend_x": "1"}
    with pytest.raises(click.UsageError, match="no configuration"):
        load_configs(None, (), environ={})
    with pytest.raises(click.BadParameter, match="not key=value"):
        load_configs(None, ("chunk.size",), environ={})


def test_errors_name_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["ls", "--set", "chunk.size=0", "--set", f"storage.root={tmp_path}"], capsys)
    assert rc == 2 and "chunk.size" in err and err.count("\n") == 1


def test_unknown_keys_fail_configure_each_with_the_closest_known_key(tmp_path: Path) -> None:
    configs = {
        "chunk.size": "1024",
        "storage.root": str(tmp_path),
        "storage.key.prefix": "copied-from-aiven/",  # Aiven's README spelling
        "compresion.enabled": "true",
        "storage.s3.bucket.name": "b",
        "jvm.transport": "sidecar",  # the shim's own keys are known
        "broker.id": 3,  # Kafka's RemoteLogManager adds it to the plugin's map
        "encryption.key.pairs.old.public.key.file": "/k",  # dynamic keys match their pattern
    }
    with RemoteStorageManager() as manager, pytest.raises(ConfigException) as info:
        manager.configure(configs)
    assert str(info.value).split("; ") == [
        "rsm.config.storage.key.prefix: The configuration 'storage.key.prefix' was supplied but isn't a known "
        "config. Did you mean 'key.prefix'? The plugin would go on without it: rename it to rsm.config.key.prefix "
        "if that is what was meant, or remove it",
        "rsm.config.compresion.enabled: The configuration 'compresion.enabled' was supplied but isn't a known "
        "config. Did you mean 'compression.enabled'? The plugin would go on without it: rename it to "
        "rsm.config.compression.enabled if that is what was meant, or remove it",
        "rsm.config.storage.s3.bucket.name: The configuration 'storage.s3.bucket.name' was supplied but isn't a "
        "known config. It is a key of the s3 backend, not of the configured one. The plugin would go on without "
        "it: remove it, or set storage.backend.class=s3 if that is the store meant",
    ]
    assert [
        u.key for u in unknown_keys({"chunk.size": "1", "storage.backend.class": "s3", "storage.s3.region": "x"})
    ] == []


AIVEN_FILE = """\
remote.log.storage.system.enable=true
remote.log.storage.manager.class.path=/opt/tiered-storage/core/*:/opt/tiered-storage/s3/*
remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager
remote.log.metadata.manager.listener.name=PLAINTEXT
rsm.config.chunk.size=4194304
rsm.config.storage.backend.class=io.aiven.kafka.tieredstorage.storage.s3.S3Storage
rsm.config.storage.s3.bucket.name=tiered
rsm.config.storage.s3.region=us-east-1
rsm.config.storage.key.prefix=cluster-1/
rsm.config.compression.enabled=true
"""


def test_config_check_of_an_aiven_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsm.jvm.launcher import PLUGIN_JAR

    # the broker's python3 is one kafka-tiered-storage is installed in (else a third line names the interpreter)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    f = tmp_path / "server.properties"
    f.write_text(AIVEN_FILE)
    rc, out, err = _run(["config", "check", str(f)], capsys)
    assert rc == 1 and out.rstrip().endswith("1 error(s)"), err  # the misspelt prefix: configure() refuses it too
    assert err.startswith("ERROR: rsm.config.storage.key.prefix: ") and "Did you mean 'key.prefix'?" in err
    honoured = out.split("honoured (", 1)[1].split("ignored", 1)[0]
    assert "rsm.config.storage.s3.bucket.name" in honoured and "rsm.config.chunk.size" in honoured
    assert "ignored (1):\n  rsm.config.storage.key.prefix:" in out and "Did you mean 'key.prefix'?" in out
    changes = out.split("change these 2 line(s):\n", 1)[1].splitlines()[:2]
    assert changes == [
        "  remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager",
        f"  remote.log.storage.manager.class.path={PLUGIN_JAR.parent}/*",
    ]
    from rsm.cli.config_check import check_broker_properties

    ours = read_properties(f)
    ours["remote.log.storage.manager.class.name"] = "io.kts.shim.PythonRemoteStorageManager"
    ours["remote.log.storage.manager.class.path"] = "/opt/kafka/plugins/kafka-tiered-storage-old/*"
    assert check_broker_properties(ours).changes == [f"remote.log.storage.manager.class.path={PLUGIN_JAR.parent}/*"]
    ours["remote.log.storage.manager.class.path"] = f"/opt/other/*:{PLUGIN_JAR.parent}/*"
    assert check_broker_properties(ours).changes == []
    f.write_text(AIVEN_FILE.replace("chunk.size=4194304", "chunk.size=-1"))
    rc, out, err = _run(["config", "check", str(f)], capsys)
    assert rc == 1 and "chunk.size" in err


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"])
def test_demo_against_a_local_emulator_it_starts(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    d = tmp_path / "demo"
    assert (
        main(["demo", "--dir", str(d), "--backend", backend, "--segments", "2", "--segment-mb", "0.3", "--no-spark"])
        == 0
    )
    out = capsys.readouterr().out
    assert "bytes identical" in out and "no damage" in out and "demo OK" in out
    props = read_properties(d / "server.properties")
    assert props["rsm.config.storage.backend.class"] == backend
    assert not (d / "store").exists()  # the objects went to the emulator, not to a folder
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()]
    assert not [p for p in left if p.status() != psutil.STATUS_ZOMBIE], "the demo left its emulator running"


def test_demo_tiers_through_the_jvm_shim_when_java_is_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rsm.cli.jvm_tier import jvm_unavailable_reason

    assert jvm_unavailable_reason() is None  # CI has a JDK and the built shim
    # the Spark step is the same on both transports: tests/integration/test_spark.py runs it
    args = ["demo", "--segments", "2", "--segment-mb", "0.3", "--no-spark"]
    assert main([*args, "--dir", str(tmp_path / "jvm"), "--transport", "jvm"]) == 0
    out = capsys.readouterr().out
    assert "the shim io.kts.shim.PythonRemoteStorageManager in a JVM" in out and "demo OK" in out
    assert main([*args, "--dir", str(tmp_path / "py"), "--transport", "python"]) == 0
    out = capsys.readouterr().out
    assert "tiering through copyLogSegmentData in Python (--transport python)" in out
    # both paths store the same segments under the same keys (the data keys differ: they are random)
    jvm_keys = sorted(p.relative_to(tmp_path / "jvm") for p in (tmp_path / "jvm" / "store").rglob("*") if p.is_file())
    py_keys = sorted(p.relative_to(tmp_path / "py") for p in (tmp_path / "py" / "store").rglob("*") if p.is_file())
    assert jvm_keys == py_keys and len(jvm_keys) == 12  # .log, .indexes, manifest of orders; events have no .log
    assert sum(1 for k in jvm_keys if "/events-" in str(k)) == 6


def test_config_check_applies_the_encryption_rules_without_the_key_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "server.properties"
    f.write_text(
        "rsm.config.chunk.size=4194304\nrsm.config.storage.root=/var/lib/t\nrsm.config.encryption.enabled=true\n"
        "rsm.config.encryption.key.pair.id=k2\nrsm.config.encryption.key.pairs=k1\n"
        "rsm.config.encryption.key.pairs.k1.public.key.file=/nowhere/k1-public.pem\n"
    )
    rc, out, err = _run(["config", "check", str(f)], capsys)
    assert rc == 1 and "encryption.key.pair.id" in err and "one of encryption.key.pairs" in err
    assert "/nowhere/k1-public.pem does not exist on this host" in out
