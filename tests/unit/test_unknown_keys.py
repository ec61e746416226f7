"""Unknown keys (issue 47): every key docs/configuration.md documents is accepted, with the backend it belongs to;
a key nothing reads (a misspelt key.prefix) fails `kts config check`, the plugin's configure() and the sidecar,
naming the closest known key, and nothing is written to the store."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jvm_testing as jt
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from backends.configdef import ConfigDef, ConfigKey
from rsm.core.aiven_keys import AIVEN_KEYS, PLUGIN
from rsm.core.known_keys import BROKER_SUPPLIED_KEYS, _name_pattern, known_key_names, refuse_unknown_keys, unknown_keys
from rsm.core.manager import RemoteStorageManager
from rsm.core.segment_format import plug_format
from rsm.errors import ConfigException
from rsm.jvm.config import CONFIG_DEF as SHIM
from rsm.jvm.config import unknown_shim_keys

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ("filesystem", "s3", "gcs", "azure")
KTS = str(Path(sys.executable).parent / "kts")


def documented_keys() -> list[str]:
    """Every key of docs/configuration.md: its generated table and the rsm.config.* rows of Aiven's table."""
    text = (REPO / "docs/configuration.md").read_text()
    ours = text.split("<!-- config-table:begin -->", 1)[1].split("<!-- config-table:end -->", 1)[0]
    aiven = text.split("<!-- aiven-table:begin -->", 1)[1]
    keys = re.findall(r"^\| `([^`]+)` \|", ours, re.M)
    keys += [k[len("rsm.config.") :] for k in re.findall(r"^\| `(rsm\.config\.[^`]+)` \|", aiven, re.M)]
    return keys


def _concrete(key: str) -> str:
    return key.replace("<id>", "k1").replace("<property>", "io-impl")


def _accepted(key: str) -> bool:
    """Does some backend's configuration accept ``key`` (with the shim's keys checked too)?"""
    return any(unknown_keys({"chunk.size": "1", "storage.backend.class": b, key: "1"}, SHIM) == [] for b in BACKENDS)


def test_every_documented_key_is_accepted() -> None:
    keys = documented_keys()
    assert len(keys) > 150 and "key.prefix" in keys and "jvm.sidecar.shared.memory.dir" in keys
    assert "iceberg.mode.topics.regex" in keys and "fetch.chunk.cache.size" in keys
    assert {"storage.s3.bucket.name", "storage.gcs.bucket.name", "storage.azure.container.name"} <= set(keys)
    refused = [k for k in keys if not _accepted(_concrete(k))]
    assert refused == []
    # and Aiven's keys we do not read (each has its own "use this instead" line) are no unknown keys either
    assert all(_accepted(_concrete(a.name)) for a in AIVEN_KEYS if a.where == PLUGIN)
    # what Kafka's RemoteLogManager adds to the plugin's map (node.id on 4.x: a real 4.4 broker refused to start)
    assert unknown_keys({"chunk.size": "1", "broker.id": "3", "node.id": "3", "cluster.id": "x"}) == []


def _all_known() -> list[str]:
    return sorted({n for b in BACKENDS for n in known_key_names(b)} | set(SHIM.keys))


_EXACT = [n for n in _all_known() if "<" not in n]
_PATTERNS = [_name_pattern(n) for n in _all_known() if "<" in n]


def _typo(name: str, where: int, op: int, letter: str) -> str:
    i = where % len(name)
    if op == 0:
        return name[:i] + name[i + 1 :]  # a letter left out
    if op == 1:
        return name[:i] + letter + name[i:]  # one too many
    if op == 2:
        return name[:i] + letter + name[i + 1 :]  # a wrong one
    return name[:i] + name[i + 1 : i + 2] + name[i : i + 1] + name[i + 2 :]  # two swapped


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_EXACT),
    st.integers(0, 200),
    st.integers(0, 3),
    st.sampled_from("abcdefghijklmnopqrstuvwxyz._"),
)
def test_a_typo_of_any_known_key_is_refused_with_a_close_known_key(name: str, where: int, op: int, letter: str) -> None:
    typo = _typo(name, where, op, letter)
    assume(typo not in _EXACT and not any(p.match(typo) for p in _PATTERNS) and typo not in BROKER_SUPPLIED_KEYS)
    assume(not any(typo == a.name for a in AIVEN_KEYS))
    backend = next((b for b in BACKENDS if name in known_key_names(b)), "filesystem")
    configs = {"chunk.size": "1", "storage.backend.class": backend, typo: "x"}
    found = unknown_keys(configs, SHIM)
    assert [u.key for u in found] == [typo]
    assert found[0].closest is not None  # one letter off a known key is always close enough to name it
    with pytest.raises(ConfigException, match=re.escape(f"rsm.config.{typo}:")):
        refuse_unknown_keys(configs, SHIM)


def test_the_misspelt_prefixes_name_key_prefix() -> None:
    for typo in ("key.prefx", "storage.key.prefix", "keyprefix", "key.prefix.", "key_prefix"):
        (found,) = unknown_keys({"chunk.size": "1", typo: "cluster-1/"})
        assert found.closest == "key.prefix", typo
        assert "rename it to rsm.config.key.prefix if that is what was meant, or remove it" in found.error()


def test_configure_refuses_a_misspelt_prefix_and_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    configs = {"chunk.size": "1024", "storage.root": str(store), "key.prefx": "cluster-1/", "compresion.enabled": "1"}
    with RemoteStorageManager() as manager, pytest.raises(ConfigException) as info:
        manager.configure(configs)
    text = str(info.value)
    assert "'key.prefx'" in text and "Did you mean 'key.prefix'?" in text
    assert "'compresion.enabled'" in text and "Did you mean 'compression.enabled'?" in text
    assert not store.exists()  # refused before the backend was made: no object under the default prefix
    fixed = {k: v for k, v in configs.items() if k not in ("key.prefx", "compresion.enabled")}
    with RemoteStorageManager() as manager:
        manager.configure({**fixed, "key.prefix": "cluster-1/", "compression.enabled": "true"})
    assert store.is_dir()


def test_the_shims_own_keys_are_checked_by_the_shim() -> None:
    assert unknown_shim_keys({k: "1" for k in SHIM.keys}) == []
    assert unknown_shim_keys({"chunk.size": "1", "key.prefx": "a"}) == []  # the plugin's configure() checks those
    (line,) = unknown_shim_keys({"jvm.sidecar.shared.memory.byte": "1"})
    assert line.startswith("rsm.config.jvm.sidecar.shared.memory.byte:")
    assert "Did you mean 'jvm.sidecar.shared.memory.bytes'?" in line
    # the plugin's own check lets them through for the shim to judge, unless given the shim's declarations
    assert unknown_keys({"chunk.size": "1", "jvm.sidecar.shared.memory.byte": "1"}) == []
    assert [u.key for u in unknown_keys({"chunk.size": "1", "python.exectuable": "x"}, SHIM)] == ["python.exectuable"]


def _check(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "server.properties"
    f.write_text(
        "remote.log.storage.system.enable=true\n"
        "remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager\n"
        f"rsm.config.python.executable={sys.executable}\n"
        "rsm.config.chunk.size=4194304\n"
        f"rsm.config.storage.root={tmp_path}\n" + extra
    )
    return subprocess.run([KTS, "config", "check", str(f)], capture_output=True, text=True, timeout=120)


def test_kts_config_check_fails_on_an_unknown_key_naming_the_closest(tmp_path: Path) -> None:
    done = _check(tmp_path, "rsm.config.key.prefx=cluster-1/\nrsm.config.jvm.sidecar.shared.memory.byte=0\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ERROR: rsm.config.key.prefx: " in done.stderr and "Did you mean 'key.prefix'?" in done.stderr
    assert "Did you mean 'jvm.sidecar.shared.memory.bytes'?" in done.stderr
    assert done.stdout.rstrip().endswith("2 error(s)")
    good = _check(tmp_path, "rsm.config.key.prefix=cluster-1/\nrsm.config.jvm.sidecar.shared.memory.bytes=0\n")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ignored (0):" in good.stdout


@pytest.mark.parametrize(
    "key, says",
    [
        ("key.prefx", "Did you mean 'key.prefix'?"),  # the plugin's configure() refuses it
        ("jvm.sidecar.kept.stream", "Did you mean 'jvm.sidecar.kept.streams'?"),  # the sidecar itself refuses it
    ],
)
def test_a_real_sidecar_refuses_an_unknown_key_at_start(tmp_path: Path, key: str, says: str) -> None:
    """What the broker's log shows at start: the shim's configure() fails with the sidecar's CONFIG-ERROR line."""
    cfg = jt.base_config(tmp_path / "store", **{key: "1"})
    p = subprocess.run(
        [sys.executable, "-m", "rsm.jvm.sidecar", "--socket", str(tmp_path / "s.sock")],
        input=jt.sidecar_config_payload(cfg),
        capture_output=True,
        timeout=60,
    )
    out = p.stdout.decode()
    assert p.returncode == 4, out
    assert out.startswith("CONFIG-ERROR ConfigException: ") and f"rsm.config.{key}: " in out and says in out
    assert not (tmp_path / "store").exists()


class _KeysOnlyPlugin:
    """A format plugin that reads one key of its own and is never built: enough to see which keys are known."""

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.config_defs = [ConfigDef().extend([ConfigKey(key, "string", "", "A key of the test format.")])]

    def parse_section(self, obj: object) -> object:
        return obj


def test_the_known_keys_are_those_of_the_formats_plugged_in_now() -> None:
    from rsm.formats.iceberg import ICEBERG

    iceberg_key = "iceberg.mode.topics.regex"
    assert iceberg_key in known_key_names()
    try:
        # Replacing a format forgets its keys; plugging the same one twice lists each key once.
        plug_format(_KeysOnlyPlugin(ICEBERG.kind, "test.format.key"))  # type: ignore[arg-type]
        plug_format(_KeysOnlyPlugin(ICEBERG.kind, "test.format.key"))  # type: ignore[arg-type]
        names = known_key_names()
        assert iceberg_key not in names
        assert names.count("test.format.key") == 1
        assert [u.key for u in unknown_keys({"chunk.size": "1", iceberg_key: "x", "test.format.key": "y"})] == [
            iceberg_key
        ]
    finally:
        plug_format(ICEBERG)
    assert iceberg_key in known_key_names() and "test.format.key" not in known_key_names()
