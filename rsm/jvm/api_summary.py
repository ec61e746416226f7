"""Binary signatures of the Kafka API the shim is compiled against, in one small line format, so the shim's stubs
can be checked against every Kafka release without Kafka's jars or sources at hand.

A summary (``jvm-shim/kafka-api/<release>.txt``) has one line per member, each as the JVM links it: erased
parameter types and erased return type, by simple name (the few classes involved have no clashing names; a
type variable keeps its name, in both readers alike)::

    RemoteStorageManager.fetchIndex(RemoteLogSegmentMetadata,IndexType) InputStream
    LogSegmentData.<init>(Path,Path,Path,Optional,Path,ByteBuffer)
    IndexType.OFFSET enum

``from_sources`` writes one from a release's Java sources (``python -m rsm.jvm.api_summary`` on a Kafka git
checkout); ``from_javap`` reads the same lines from ``javap`` output of compiled classes (the stubs). A stub member
missing from a release's summary is a call that release's broker cannot link.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

STORAGE = "storage/api/src/main/java/org/apache/kafka/server/log/remote/storage/"
COMMON = "clients/src/main/java/org/apache/kafka/common/"
SOURCES = [
    STORAGE + "RemoteStorageManager.java",
    STORAGE + "RemoteLogSegmentMetadata.java",
    STORAGE + "RemoteLogMetadata.java",
    STORAGE + "RemoteLogSegmentId.java",
    STORAGE + "RemoteLogSegmentState.java",
    STORAGE + "LogSegmentData.java",
    STORAGE + "RemoteStorageException.java",
    STORAGE + "RemoteResourceNotFoundException.java",
    STORAGE + "RetriableRemoteStorageException.java",
    COMMON + "TopicIdPartition.java",
    COMMON + "TopicPartition.java",
    COMMON + "Uuid.java",
    COMMON + "Configurable.java",
]
"""The files declaring every Kafka class the shim or its stubs name (absent ones are skipped: newer classes)."""

_MODIFIERS = {"public", "protected", "private", "static", "final", "abstract", "default", "synchronized", "native"}


def erase(java_type: str) -> str:
    """``java.util.Optional<java.nio.file.Path>`` -> ``Optional``; ``Map.Entry<K, V>[]`` -> ``Entry[]``;
    ``final String`` -> ``String``; varargs become arrays."""
    t = java_type.strip()
    while "<" in t:
        t = re.sub(r"<[^<>]*>", "", t)
    t = t.replace("...", "[]")
    words = [w for w in t.split() if w not in ("final",)]
    t = words[-1] if words else t
    dims = t.count("[]")
    base = t.replace("[]", "").replace("$", ".").rsplit(".", 1)[-1]
    return base + "[]" * dims


def _split_params(params: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in params:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    # each parameter is "Type name"; drop the name
    return [erase(p.strip().rsplit(None, 1)[0]) for p in out]


def _strip(source: str) -> str:
    """Comments, string and char literals, and annotations out; what is left is declarations and code."""
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    source = re.sub(r"//[^\n]*", " ", source)
    source = re.sub(r'"(?:\\.|[^"\\])*"', '""', source)
    source = re.sub(r"'(?:\\.|[^'\\])'", "' '", source)
    return re.sub(r"@\w+(?:\.\w+)*(?:\s*\([^()]*\))?", " ", source)


_TYPE_DECL = re.compile(r"\b(class|interface|enum)\s+(\w+)")
_MEMBER = re.compile(
    r"^(?P<head>[\w\s.<>\[\],?&]*?)\b(?P<name>\w+)\s*\((?P<params>[^()]*)\)\s*(?:throws\s+[\w.,\s]+)?$"
)


def from_source(source: str) -> list[str]:
    """The public (and protected) members of the types one Java file declares, as summary lines."""
    text = _strip(source)
    lines: list[str] = []
    stack: list[tuple[str, str, int]] = []  # (type name, kind, brace depth of its body)
    depth = 0
    stmt_start = 0
    pending: tuple[str, str] | None = None
    enum_constants_open = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "{;}":
            stmt = " ".join(text[stmt_start:i].split())
            in_body = bool(stack) and depth == stack[-1][2]
            if ch == "{":
                m = _TYPE_DECL.search(stmt)
                if m and "(" not in stmt.split(m.group(0))[0] and (not stack or in_body):
                    head = stmt[: m.start()].split()
                    visible = "private" not in head
                    pending = (m.group(2), m.group(1) if visible else "private-" + m.group(1))
                elif in_body:
                    _member(stack[-1], stmt, lines)
                depth += 1
                if pending is not None:
                    stack.append((pending[0], pending[1], depth))
                    enum_constants_open = pending[1] == "enum"
                    pending = None
            elif ch == ";":
                if in_body:
                    if enum_constants_open:
                        _enum_constants(stack[-1], stmt, lines)
                        enum_constants_open = False
                    else:
                        _member(stack[-1], stmt, lines)
            else:
                if in_body and enum_constants_open:
                    _enum_constants(stack[-1], stmt, lines)
                    enum_constants_open = False
                if stack and depth == stack[-1][2]:
                    stack.pop()
                depth -= 1
            stmt_start = i + 1
        i += 1
    return lines


def _enum_constants(owner: tuple[str, str, int], stmt: str, lines: list[str]) -> None:
    name, kind, _ = owner
    if kind.startswith("private"):
        return
    body = stmt
    while "(" in body:  # constructor arguments, nested ones too: "A((byte) 0)"
        shorter = re.sub(r"\([^()]*\)", "", body)
        if shorter == body:
            break
        body = shorter
    for c in body.split(","):
        c = c.strip()
        if re.fullmatch(r"[A-Z_][A-Z0-9_]*", c):
            lines.append(f"{name}.{c} enum")


def _member(owner: tuple[str, str, int], stmt: str, lines: list[str]) -> None:
    name, kind, _ = owner
    if kind.startswith("private") or "(" not in stmt or "=" in stmt.split("(")[0]:
        return
    m = _MEMBER.match(stmt)
    if not m:
        return
    head = m.group("head").split()
    words = set(head)
    if "private" in words:
        return
    if kind != "interface" and not ({"public", "protected"} & words):
        return  # package-private members of a class are not API
    rest = [w for w in head if w not in _MODIFIERS]
    rest = [w for w in rest if not w.startswith("<")]  # a generic method's type parameters
    params = ",".join(_split_params(m.group("params")))
    member = m.group("name")
    if member == name and not rest:
        lines.append(f"{name}.<init>({params})")
    elif rest:
        lines.append(f"{name}.{member}({params}) {erase(' '.join(rest))}")


def from_javap(output: str) -> list[str]:
    """The same lines from ``javap -protected`` output (generic signatures are erased here)."""
    lines: list[str] = []
    owner = ""
    is_enum = False
    for raw in output.splitlines():
        line = raw.strip()
        m = re.match(r"^(?:[\w]+\s+)*(class|interface|enum)\s+([\w.$]+)", line)
        if m and line.endswith("{"):
            owner = erase(m.group(2))
            is_enum = m.group(1) == "enum" or " extends java.lang.Enum<" in line
            continue
        if not line.endswith(";") or not owner:
            continue
        decl = re.sub(r"\s+throws\s+[\w.$,\s]+;$", ";", line)[:-1]
        if "(" not in decl:
            words = decl.split()
            if is_enum and "static" in words and "final" in words and erase(words[-2]) == owner:
                lines.append(f"{owner}.{words[-1]} enum")
            continue
        before, params = decl.split("(", 1)
        params = params.rsplit(")", 1)[0]
        words = [w for w in re.sub(r"<[^()]*?>\s", " ", before + " ").split() if w not in _MODIFIERS]
        ps = ",".join(erase(p) for p in _split_top(params))
        member = erase(words[-1])
        if is_enum and member in ("values", "valueOf"):
            continue
        if len(words) == 1 and member == owner:
            lines.append(f"{owner}.<init>({ps})")
        else:
            lines.append(f"{owner}.{member}({ps}) {erase(' '.join(words[:-1]))}")
    return lines


def _split_top(params: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in params:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def javap_summary(classes_dir: Path) -> list[str]:
    """Summary lines of every compiled class under ``classes_dir`` (the stubs), via ``javap -protected``."""
    names = sorted(str(p.relative_to(classes_dir))[:-6].replace("/", ".") for p in classes_dir.rglob("*.class"))
    out = subprocess.run(
        ["javap", "-protected", "-cp", str(classes_dir), *names], capture_output=True, text=True, check=True
    ).stdout
    lines = set(from_javap(out))
    # javap lists the compiler's bridge methods too (Uuid implements Comparable<Uuid>: compareTo(Object) next to
    # compareTo(Uuid)); sources never declare them
    for ln in list(lines):
        head, _, params = ln.partition("(")
        if params.startswith("Object)") and any(
            o.startswith(head + "(") and not o.startswith(head + "(Object)") for o in lines
        ):
            lines.discard(ln)
    return sorted(lines)


def read_summary(path: Path) -> set[str]:
    return {ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def missing(stub_lines: Iterable[str], release: set[str]) -> list[str]:
    """Stub members a release does not have (the methods Object/Throwable/Enum give every class are not listed in
    sources, so only members of the summarised classes count)."""
    owners = {ln.split(".", 1)[0] for ln in release}
    return sorted(ln for ln in stub_lines if ln.split(".", 1)[0] in owners and ln not in release)


def summarize_release(git_dir: Path, ref: str) -> list[str]:
    lines: set[str] = set()
    for path in SOURCES:
        r = subprocess.run(["git", "-C", str(git_dir), "show", f"{ref}:{path}"], capture_output=True, text=True)
        if r.returncode == 0:
            lines.update(from_source(r.stdout))
    return sorted(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write jvm-shim/kafka-api/<name>.txt from a Kafka git checkout")
    parser.add_argument("git_dir", type=Path)
    parser.add_argument("ref", help="a tag or commit of apache/kafka")
    parser.add_argument("out", type=Path)
    parser.add_argument("--label", default="", help="what the ref is, for the file's header")
    parser.add_argument("--force", action="store_true", help="replace an existing summary")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.force:
        parser.error(f"{args.out} exists; pass --force to replace it")
    resolved = subprocess.run(
        ["git", "-C", str(args.git_dir), "rev-parse", "--verify", "--quiet", f"{args.ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if resolved.returncode != 0:
        parser.error(f"{args.ref!r} is not a commit of a git repository at {args.git_dir}")
    commit = resolved.stdout.strip()
    lines = summarize_release(args.git_dir, commit)
    if not lines:
        parser.error(f"{args.git_dir} at {args.ref} has none of the KIP-405 sources (is it apache/kafka?)")
    header = [
        f"# Kafka {args.label or args.ref}: apache/kafka {args.ref} ({commit})",
        "# Written by `python -m rsm.jvm.api_summary`; one line per public member, erased types, simple names.",
    ]
    args.out.write_text("\n".join(header + lines) + "\n")
    print(f"{args.out}: {len(lines)} members")
    return 0


if __name__ == "__main__":
    sys.exit(main())
