"""The README is a front page that stays true: under 200 lines, its quick-start commands are the Makefile's, its
links resolve, and its S3 broker example works as pasted (every line a broker needs, and ``kts config check``
finds nothing to change once the example's host paths exist)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from rsm.cli.main import main
from rsm.cli.properties import read_properties

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# Pages other branches write; a link to them may exist before they do.
PENDING: set[str] = set()


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_a_front_page_under_200_lines_whose_quick_start_is_the_makefiles() -> None:
    assert len(README.splitlines()) < 200
    quick = blocks(section("Quick start (no cloud account needed)"), "bash")[0]
    assert [line.split()[:2] for line in quick.splitlines()] == [["make", "demo"], ["make", "test"]]
    makefile = (ROOT / "Makefile").read_text()
    assert "\ndemo: $(STAMP)\n\t$(BIN)/kts demo --dir ./kts-demo\n" in makefile
    assert re.search(r"\ntest: setup lint\n\t\$\(BIN\)/python -m pytest", makefile)


def test_every_link_resolves() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        # code blocks and code spans are never links
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", page.read_text(), flags=re.S))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if "://" in target:
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.exists() or str(resolved.relative_to(ROOT)) in PENDING, f"{page.name}: {target}"


def test_the_s3_example_works_as_pasted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = section("Run it on a broker: S3 with encryption")
    props_block = blocks(text, "properties")[0]  # the key-service variant follows it
    commands = [c for block in blocks(text, "bash") for c in block.replace("\\\n", " ").splitlines()]
    example = tmp_path / "example.properties"
    example.write_text(props_block)
    props = read_properties(example)
    assert len(props) == len(props_block.splitlines()), "one key per line, no comments that would become values"

    # every line a broker needs, on every broker
    assert props["remote.log.storage.system.enable"] == "true"
    assert props["remote.log.metadata.manager.listener.name"]
    assert props["remote.log.storage.manager.class.name"] == "io.kts.shim.PythonRemoteStorageManager"
    assert props["remote.log.storage.manager.class.path"].endswith("/site-packages/rsm/_jars/*")
    assert props["rsm.config.storage.backend.class"] == "s3" and props["rsm.config.encryption.enabled"] == "true"
    ring = props["rsm.config.encryption.key.pairs"].split(",")
    assert props["rsm.config.encryption.key.pair.id"] in ring
    for key_id in ring:
        for half in ("public", "private"):
            assert props[f"rsm.config.encryption.key.pairs.{key_id}.{half}.key.file"]
    topic = next(c for c in commands if "kafka-topics.sh" in c)
    assert "--config remote.storage.enable=true" in topic and "--config local.retention." in topic

    # the key pair as the README makes it, where the example expects it (here: under tmp_path)
    keygen = shlex.split(next(c for c in commands if " keys generate " in c))
    out = keygen[keygen.index("--out") + 1]
    assert main([*keygen[1:-1], str(tmp_path)]) == 0 and keygen[-2] == "--out"
    capsys.readouterr()
    venv = props["rsm.config.python.executable"].rsplit("/bin/", 1)[0]
    host = props_block.replace(out, str(tmp_path)).replace(f"{venv}/bin/python", sys.executable)
    server = tmp_path / "server.properties"
    server.write_text(host)
    check = next(c for c in commands if " config check " in c)
    assert shlex.split(check)[1:4] == ["config", "check", "--connect"]

    rc, report, err = main(["config", "check", str(server)]), *capsys.readouterr()
    assert rc == 0, err
    assert "ignored (0):" in report and "change these" not in report and "different from Aiven" not in report
    honoured = report.split("ignored (", 1)[0]
    assert all(f"  {key}\n" in honoured for key in props if key.startswith("rsm.config."))


def test_the_docs_claim_no_more_than_is_so() -> None:
    """Claims an operator relies on, as they hold: segments Aiven's plugin wrote carry no CRC-32C, and a sidecar
    can crash without the broker, but its memory still counts toward the broker's container limit."""
    pages = {p.name: " ".join(p.read_text().split()) for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    for name, text in pages.items():
        assert "Every chunk and index carries a CRC-32C" not in text, name
        assert "cannot take the broker down" not in text and "cannot take the broker\ndown" not in text, name
    assert "segments Aiven's plugin wrote have no CRC" in pages["README.md"]
    assert "jvm.sidecar.oom.score.adj" in pages["broker.md"] and "oom_score_adj" in pages["operations.md"]
    assert "container memory limit" in pages["operations.md"]
