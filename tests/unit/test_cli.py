"""The operator CLI: the demo (the README's main job), key generation, the generated config docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsm.cli.config_docs import config_docs_markdown
from rsm.cli.main import main
from rsm.cli.properties import read_properties, rsm_configs
from rsm.core.config import CORE

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path / "demo"), "--size-mb", "6", "--chunk-size", "262144"]) == 0
    out = capsys.readouterr().out
    assert "demo OK" in out and "bytes identical" in out
    assert len(list((tmp_path / "demo" / "store").rglob("*.rsm-manifest"))) == 1


def test_keygen_writes_usable_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from encryption.keyring import RsaKeyPair

    assert main(["keygen", "--id", "k9", "--out", str(tmp_path), "--bits", "2048"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rsm.config.encryption.key.pairs.k9.public.key.file=")
    pair = RsaKeyPair.from_pem(
        "k9", (tmp_path / "k9-public.pem").read_bytes(), (tmp_path / "k9-private.pem").read_bytes()
    )
    assert pair.unwrap(pair.wrap(b"z" * 32)) == b"z" * 32


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
