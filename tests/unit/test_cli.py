"""The operator CLI: the demo (the README's main job), key generation, the generated config docs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from rsm.cli.config_docs import config_docs_markdown
from rsm.cli.main import main
from rsm.cli.properties import read_properties, rsm_configs
from rsm.core.config_keys import CORE

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path / "demo"), "--size-mb", "6", "--chunk-size", "262144"]) == 0
    out = capsys.readouterr().out
    assert "demo OK" in out and "bytes identical" in out
    manifests = list((tmp_path / "demo" / "store").rglob("*.rsm-manifest"))
    assert sorted(m.parent.parent.name.split("-")[0] for m in manifests) == ["events"] * 3 + ["orders"]
    # the Iceberg topic: its table in the demo folder, queried, fetched back, verified
    assert "[6/7] Iceberg mode" in out and "iceberg            table kafka.events:" in out
    assert "0 damaged" in out.split("[6/7]")[1]
    assert list((tmp_path / "demo" / "iceberg" / "warehouse" / "kafka" / "events" / "data").rglob("*.parquet"))
    assert (tmp_path / "demo" / "iceberg" / "catalog.db").is_file()


def _small_demo(workdir: Path, *extra: str) -> list[str]:
    return ["demo", "--dir", str(workdir), "--segments", "1", "--segment-mb", "0.2", "--no-spark", *extra]


def test_demo_iceberg_part_counts_match_the_segments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The figures the demo prints for the Iceberg table are those decoded from the segment files; a re-run
    starts from a new catalog and prints the same."""
    from rsm.cli import demo_iceberg

    args = _small_demo(tmp_path / "demo", "--transport", "python")
    assert main(args) == 0
    first = capsys.readouterr().out
    segments = sorted((tmp_path / "demo" / "iceberg" / "segments").iterdir())
    assert len(segments) == demo_iceberg.PARTITIONS
    from rsm.kafka.log_scan import iter_batches

    for p, folder in enumerate(segments):
        [log] = folder.glob("*.log")
        records = sum(h.records_count for h, _ in iter_batches(log.read_bytes()) if not h.is_control)
        assert f"partition {p}: {records:>6,} records" in first
    assert "demo OK" in first
    # every kts command reads both topics through the demo's server.properties
    props = str(tmp_path / "demo" / "server.properties")
    assert main(["ls", "--config", props, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["topic"], r["kind"]) for r in rows) == [("events", "iceberg")] * 3 + [("orders", "classic")]
    assert main(["verify", "--config", props]) == 0
    assert "verified 4 segments" in capsys.readouterr().out
    assert main(args) == 0
    second = capsys.readouterr().out

    def timeless(out: str) -> list[str]:
        return [re.sub(r"\d+\.\d s\b", "", line) for line in out.splitlines()]

    assert timeless(second) == timeless(first)


def test_demo_without_the_iceberg_extra_runs_the_classic_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyiceberg", None)  # import pyiceberg raises ImportError
    assert main(_small_demo(tmp_path / "demo", "--transport", "python")) == 0
    out = capsys.readouterr().out
    says = "skipped: the iceberg extra is not installed (no pyiceberg): pip install 'kafka-tiered-storage[iceberg]'"
    assert says in out
    assert "bytes identical" in out and "demo OK" in out
    assert "iceberg.mode" not in (tmp_path / "demo" / "server.properties").read_text()
    assert not (tmp_path / "demo" / "iceberg").exists()


def test_a_failed_iceberg_check_is_no_demo_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts are checked against the segments: a reference that disagrees with the table fails the demo."""
    from rsm.cli import demo_iceberg

    expected = demo_iceberg._expected

    def one_more(segments: list[Any]) -> Any:
        exp = expected(segments)
        exp.records[1] += 1
        return exp

    monkeypatch.setattr(demo_iceberg, "_expected", one_more)
    assert main(_small_demo(tmp_path / "demo", "--transport", "python")) == 1
    out = capsys.readouterr().out
    assert "MISMATCH: the segments hold" in out and "demo OK" not in out


def test_keygen_writes_usable_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from encryption.keyring import RsaKeyPair

    assert main(["keygen", "--id", "k9", "--out", str(tmp_path), "--bits", "2048"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rsm.config.encryption.key.pairs.k9.public.key.file=")
    pair = RsaKeyPair.from_pem(
        "k9", (tmp_path / "k9-public.pem").read_bytes(), (tmp_path / "k9-private.pem").read_bytes()
    )
    assert pair.unwrap(pair.wrap(b"z" * 32)) == b"z" * 32
    # the formats the docs name: SubjectPublicKeyInfo and unencrypted PKCS#8, the private one readable by its owner
    assert (tmp_path / "k9-public.pem").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    assert (tmp_path / "k9-private.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert (tmp_path / "k9-private.pem").stat().st_mode & 0o777 == 0o600


def test_generated_tables_are_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = config_docs_markdown()
    for key in CORE.keys:
        assert f"`{key}`" in table
    assert "`storage.root`" in table  # backends' keys are documented with their storage. prefix
    assert table.strip() in (ROOT / "docs" / "configuration.md").read_text()
    assert main(["config-docs", "--check", str(ROOT / "docs" / "configuration.md")]) == 0
    assert main(["cli-docs", "--check", str(ROOT / "docs" / "cli.md")]) == 0
    # a stale copy fails the check and says how to regenerate it; --write brings it back
    stale = tmp_path / "cli.md"
    stale.write_text((ROOT / "docs" / "cli.md").read_text().replace("| `kts gc` |", "| `kts gc --old` |"))
    capsys.readouterr()
    assert main(["cli-docs", "--check", str(stale)]) == 1
    assert f"kts cli-docs --write {stale}" in capsys.readouterr().err
    assert main(["cli-docs", "--write", str(stale)]) == 0
    assert stale.read_text() == (ROOT / "docs" / "cli.md").read_text()


def test_the_cli_table_lists_every_visible_command() -> None:
    from rsm.cli.cli_docs import cli_docs_markdown
    from rsm.cli.main import cli

    table = cli_docs_markdown(cli)
    for usage in ("kts gc", "kts metrics-docs", "kts keys generate --id ID", "kts keys rotate", "kts ls [SCOPE]"):
        assert f"| `{usage}` |" in table
    assert "keygen" not in table and "rewrap" not in table  # the old names are hidden


def test_cli_reports_errors_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "bad.properties"
    props.write_text("rsm.config.chunk.size=zero\n")
    assert main(["rewrap", "--config", str(props)]) == 2
    err = capsys.readouterr().err
    assert "ConfigException" in err and "chunk.size" in err


def test_properties_parsing(tmp_path: Path) -> None:
    p = tmp_path / "server.properties"
    p.write_text(
        "# comment\nbroker.id=0\nrsm.config.chunk.size = 1024\nrsm.config.key.prefix: a/\n"
        "rsm.config.storage.root=/x/\\\n  y\n"
    )
    props = read_properties(p)
    assert rsm_configs(props) == {"chunk.size": "1024", "key.prefix": "a/", "storage.root": "/x/y"}
