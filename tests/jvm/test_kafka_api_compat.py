"""The shim links on every Kafka release we claim: each member of the stubs it is compiled against (read back
from the compiled stubs with ``javap``) exists, with the same erased signature, in each release's API summary
(``jvm-shim/kafka-api/<release>.txt``, written from that release's sources by ``python -m rsm.jvm.api_summary``
and committed, so this runs without Kafka's sources or jars)."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import jvm_testing as jt
import pytest

from rsm.jvm import api_summary

SUMMARIES = sorted((jt.SHIM_DIR / "kafka-api").glob("*.txt"))
CLAIMED = {"3.6.0", "3.7.0", "3.8.0", "3.9.0"}
needs_javap = pytest.mark.skipif(shutil.which("javap") is None, reason="needs a JDK (javap)")


def test_a_summary_for_every_claimed_release() -> None:
    assert {p.stem for p in SUMMARIES} >= CLAIMED


@pytest.fixture(scope="module")
def stub_members() -> list[str]:
    jt.ensure_built()
    return api_summary.javap_summary(jt.BUILD_DIR / "stubs")


@needs_javap
def test_the_stubs_are_what_the_shim_links_against(stub_members: list[str]) -> None:
    # the KIP-405 calls the shim implements and the metadata getters Wire.encodeMetadata reads
    for member in [
        "RemoteStorageManager.copyLogSegmentData(RemoteLogSegmentMetadata,LogSegmentData) Optional",
        "RemoteStorageManager.fetchLogSegment(RemoteLogSegmentMetadata,int) InputStream",
        "RemoteStorageManager.fetchLogSegment(RemoteLogSegmentMetadata,int,int) InputStream",
        "RemoteStorageManager.fetchIndex(RemoteLogSegmentMetadata,IndexType) InputStream",
        "RemoteStorageManager.deleteLogSegmentData(RemoteLogSegmentMetadata) void",
        "Configurable.configure(Map) void",
        "LogSegmentData.transactionIndex() Optional",
        "RemoteLogSegmentMetadata.customMetadata() Optional",
        "RemoteLogSegmentMetadata.segmentLeaderEpochs() NavigableMap",
        "RemoteLogMetadata.brokerId() int",
        "CustomMetadata.<init>(byte[])",
        "RemoteStorageException.<init>(String,Throwable)",
        "RemoteResourceNotFoundException.<init>(String)",
        "IndexType.LEADER_EPOCH enum",
    ]:
        assert member in stub_members, member
    # what only newer releases have is not in the stubs: the shim reaches it by reflection (Wire, KafkaErrors)
    assert not [m for m in stub_members if "TxnIdxEmpty" in m or m.startswith("RetriableRemoteStorageException")]


@needs_javap
@pytest.mark.parametrize("summary", SUMMARIES, ids=lambda p: p.stem)
def test_every_stub_member_exists_in_the_release(summary: Path, stub_members: list[str]) -> None:
    release = api_summary.read_summary(summary)
    assert api_summary.missing(stub_members, release) == []
    # every stub class is summarised, so none of its members escaped the comparison
    assert {m.split(".", 1)[0] for m in stub_members} <= {m.split(".", 1)[0] for m in release}


@pytest.mark.parametrize("summary", SUMMARIES, ids=lambda p: p.stem)
def test_the_newer_api_is_absent_from_the_releases_summarised(summary: Path) -> None:
    """Why the reflection is needed: none of these releases has either addition."""
    release = api_summary.read_summary(summary)
    assert not [m for m in release if "TxnIdxEmpty" in m or m.startswith("RetriableRemoteStorageException")]


JAVA = textwrap.dedent(
    """
    package p;
    import java.util.*;
    /** A doc comment with a method(int x) in it. */
    public interface Store extends Configurable {
        enum Kind { FAST, SLOW((byte) 1), }
        @Deprecated
        Optional<Map.Entry<String, List<Integer>>> get(final Map<String, ?> m, int... rest) throws java.io.IOException;
        default <T extends Comparable<T>> T pick(List<T> xs) { return xs.get(0); }
        class Impl {
            public Impl(String s) { this.s = s.replace("(", ")"); }
            Impl() { }
            private int hidden() { return 0; }
            public static String[] names(char c, String q) { return new String[] {"}"}; }
            private static class Hidden { public void no() { } }
        }
    }
    """
)


def test_the_source_reader_on_a_tricky_file() -> None:
    assert sorted(api_summary.from_source(JAVA)) == [
        "Impl.<init>(String)",
        "Impl.names(char,String) String[]",
        "Kind.FAST enum",
        "Kind.SLOW enum",
        "Store.get(Map,int[]) Optional",
        "Store.pick(List) T",  # type variables keep their names, in both readers alike
    ]


def test_the_javap_reader() -> None:
    out = textwrap.dedent(
        """
        Compiled from "Store.java"
        public interface p.Store extends p.Configurable {
          public abstract java.util.Optional<java.util.Map$Entry<java.lang.String, java.util.List<java.lang.Integer>>> \
        get(java.util.Map<java.lang.String, ?>, int...) throws java.io.IOException;
          public default <T extends java.lang.Comparable<T>> T pick(java.util.List<T>);
        }
        Compiled from "Store.java"
        public final class p.Store$Kind extends java.lang.Enum<p.Store$Kind> {
          public static final p.Store$Kind FAST;
          public static p.Store$Kind[] values();
          public static p.Store$Kind valueOf(java.lang.String);
        }
        """
    )
    assert sorted(api_summary.from_javap(out)) == [
        "Kind.FAST enum",
        "Store.get(Map,int[]) Optional",
        "Store.pick(List) T",
    ]


def _git(repo: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **env})


def test_the_summary_writer_refuses_what_it_cannot_summarise_and_keeps_what_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = tmp_path / "kafka"
    source = kafka / api_summary.STORAGE / "RemoteStorageException.java"
    source.parent.mkdir(parents=True)
    source.write_text(
        "package p;\npublic class RemoteStorageException extends Exception {\n"
        "    public RemoteStorageException(String message) { super(message); }\n}\n"
    )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "README").write_text("not kafka\n")
    for repo in (kafka, tmp_path / "other"):
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "x")
    out = tmp_path / "summary.txt"

    def refused(*argv: str) -> str:
        with pytest.raises(SystemExit) as stop:
            api_summary.main([*argv])
        assert stop.value.code == 2
        return capsys.readouterr().err

    assert "is not a commit of a git repository at" in refused(str(tmp_path / "nosuch"), "HEAD", str(out))
    assert "'v9.9' is not a commit" in refused(str(kafka), "v9.9", str(out))
    assert "has none of the KIP-405 sources" in refused(str(tmp_path / "other"), "HEAD", str(out))
    assert not out.exists()  # nothing written by a refused run

    assert api_summary.main([str(kafka), "HEAD", str(out)]) == 0
    assert "RemoteStorageException.<init>(String)" in out.read_text().splitlines()
    written = out.read_text()
    out.write_text(written + "# kept\n")
    assert "exists; pass --force" in refused(str(kafka), "HEAD", str(out))
    assert out.read_text().endswith("# kept\n")
    assert api_summary.main([str(kafka), "HEAD", str(out), "--force"]) == 0
    assert out.read_text() == written
