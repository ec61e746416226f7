"""Kafka's config providers in a broker file (``${file:...}``, ``${dir:...}``, ``${env:...}``), resolved by every
``kts`` command as the broker resolves them, on real files and a real environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.cli.main import main
from rsm.cli.properties import read_broker_file, write_properties
from rsm.cli.settings import load_configs
from rsm.core.config_providers import DIRECTORY_PROVIDER, ENV_PROVIDER, FILE_PROVIDER, resolve_variables
from rsm.errors import ConfigException

PROVIDERS = {
    "config.providers": "file,dir,env",
    "config.providers.file.class": FILE_PROVIDER,
    "config.providers.dir.class": DIRECTORY_PROVIDER,
    "config.providers.env.class": ENV_PROVIDER,
}


def _secrets(tmp_path: Path) -> tuple[Path, Path]:
    props = tmp_path / "secrets" / "s3.properties"
    props.parent.mkdir()
    write_properties(props, {"access": "AKIAFILE", "secret": "s3cr=t:with\\escapes"})
    folder = tmp_path / "azure"
    folder.mkdir()
    (folder / "account-key").write_text("a2V5\n")
    (folder / "sub").mkdir()
    return props, folder


def test_every_provider_resolves_as_the_broker_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props, folder = _secrets(tmp_path)
    root = tmp_path / "store"
    root.mkdir()
    broker = tmp_path / "server.properties"
    write_properties(
        broker,
        {
            **PROVIDERS,
            "ssl.keystore.password": "${file:/only/on/the/broker:pw}",  # not the plugin's: left as written
            "rsm.config.chunk.size": "4194304",
            "rsm.config.storage.backend.class": "filesystem",
            "rsm.config.storage.root": "${env:KTS_TEST_ROOT}",
            "rsm.config.storage.s3.access.key.id": f"${{file:{props}:access}}",
            "rsm.config.storage.s3.secret.access.key": f"pre-${{file:{props}:secret}}-post",
            "rsm.config.storage.azure.account.key": f"${{dir:{folder}:account-key}}",
        },
    )
    env = {"KTS_TEST_ROOT": str(root)}
    configs = load_configs(str(broker), environ=env)
    assert configs["storage.root"] == str(root)
    assert configs["storage.s3.access.key.id"] == "AKIAFILE"
    assert configs["storage.s3.secret.access.key"] == "pre-s3cr=t:with\\escapes-post"
    assert configs["storage.azure.account.key"] == "a2V5\n"  # the file's bytes, newline kept, as Kafka does
    assert read_broker_file(broker, environ=env)["ssl.keystore.password"] == "${file:/only/on/the/broker:pw}"
    # a command end to end: the root comes from the environment
    os.environ["KTS_TEST_ROOT"] = str(root)
    try:
        assert main(["ls", "--config", str(broker)]) != 0  # an empty store: an error, but about the store itself
        err = capsys.readouterr().err
        assert "${env" not in err and "KTS_TEST_ROOT" not in err
    finally:
        del os.environ["KTS_TEST_ROOT"]


def test_errors_name_the_key_the_file_and_the_variable(tmp_path: Path) -> None:
    props, folder = _secrets(tmp_path)
    src = "/etc/kafka/server.properties"

    def fails(value: str, match: str, **extra: str) -> None:
        with pytest.raises(ConfigException, match=match) as e:
            resolve_variables({**PROVIDERS, **extra, "rsm.config.x": value}, src, environ={"SET": "1"})
        assert "rsm.config.x" in str(e.value) and src in str(e.value)

    fails("${vault:/p:k}", r"names config provider 'vault', which config.providers does not declare \(declared: file")
    fails(f"${{file:{props}:nokey}}", r"s3.properties has no key 'nokey'")
    fails(f"${{file:{tmp_path}/missing.properties:k}}", r"cannot read .*missing.properties")
    fails(f"${{dir:{folder}:nofile}}", r"has no file 'nofile'")
    fails(f"${{dir:{folder}:sub}}", r"has no file 'sub'")  # a folder is not a value
    fails(f"${{dir:{tmp_path}/nodir:k}}", r"is not a directory")
    fails("${env:UNSET_VARIABLE}", r"environment variable UNSET_VARIABLE is not set")
    fails("${env:/some/path:SET}", r"the env provider takes no path")
    fails(
        "${env:SET}",
        r"SET does not match .*allowlist.pattern \('\^KTS_'\)",
        **{"config.providers.env.param.allowlist.pattern": "^KTS_"},
    )
    fails(
        f"${{file:{props}:access}}",
        r"is outside config.providers.file.param.allowed.paths",
        **{"config.providers.file.param.allowed.paths": str(folder)},
    )
    fails(
        "${custom:k}",
        r"is com.example.Vault, which kts cannot run.*--set x=",
        **{"config.providers": "custom", "config.providers.custom.class": "com.example.Vault"},
    )
    # allowed: a path under allowed.paths, a variable matching the pattern (anywhere in its name, as Java's find)
    ok = resolve_variables(
        {
            **PROVIDERS,
            "config.providers.dir.param.allowed.paths": f"/nowhere,{folder}",
            "config.providers.env.param.allowlist.pattern": "KTS",
            "a": f"${{dir:{folder}:account-key}}",
            "b": "${env:MY_KTS_VAR}",
        },
        src,
        environ={"MY_KTS_VAR": "v"},
    )
    assert (ok["a"], ok["b"]) == ("a2V5\n", "v")


def test_kts_reports_an_unresolvable_variable_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broker = tmp_path / "server.properties"
    write_properties(
        broker, {**PROVIDERS, "rsm.config.chunk.size": "1024", "rsm.config.storage.root": "${env:KTS_NOT_SET_HERE}"}
    )
    assert main(["ls", "--config", str(broker)]) == 2
    err = capsys.readouterr().err
    assert "rsm.config.storage.root" in err and str(broker) in err and "KTS_NOT_SET_HERE is not set" in err
    assert main(["config", "check", str(broker)]) == 1
    assert "KTS_NOT_SET_HERE is not set" in capsys.readouterr().err


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(_text)
def test_a_value_without_variables_is_unchanged(value: str) -> None:
    if "${" in value:
        return
    assert resolve_variables({**PROVIDERS, "k": value}, "f")["k"] == value


@given(_text, _text, st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_an_env_variable_is_replaced_once_with_its_value_as_is(before: str, after: str, secret: str) -> None:
    if "${" in before + after or "}" in before or before.endswith("$"):
        return
    got = resolve_variables({**PROVIDERS, "k": f"{before}${{env:KTS_X}}{after}"}, "f", environ={"KTS_X": secret})
    assert got["k"] == f"{before}{secret}{after}"  # a value that looks like a variable is not resolved again
