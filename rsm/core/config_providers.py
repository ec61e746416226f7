"""Kafka's config providers in a broker properties file, resolved as the broker resolves them.

A broker file may hold ``${provider:[path:]key}`` in any value, with the providers declared in the same file::

    config.providers=file,dir,env
    config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.dir.class=org.apache.kafka.common.config.provider.DirectoryConfigProvider
    config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.env.param.allowlist.pattern=^KTS_
    rsm.config.storage.aws.secret.access.key=${file:/etc/kafka/secrets/s3.properties:secret}
    rsm.config.storage.azure.account.key=${dir:/var/run/secrets/azure:account-key}
    rsm.config.storage.gcs.credentials.json=${env:GCS_CREDENTIALS}

``file`` reads a Java properties file and takes one key of it; ``dir`` takes the whole UTF-8 content of the
named file in a folder (a trailing newline included, as Kafka keeps it); ``env`` takes an environment
variable (no path; ``allowlist.pattern`` is a regular expression a variable's name must contain a match of).
``allowed.paths`` (comma-separated) limits the paths ``file`` and ``dir`` may read, as in Kafka 3.8+.

Where the broker would leave a variable it cannot resolve as it is (and start with a literal ``${...}`` as a
secret), this module raises ``ConfigException`` naming the key, the file and the variable: a provider not
declared, a class of a provider we cannot run here (a custom one), a missing file or key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import javaproperties

from rsm.errors import ConfigException

FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
PROVIDERS_KEY = "config.providers"

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}, each part as short as it can be.
VARIABLE = re.compile(r"\$\{(.*?):((.*?):)?(.*?)\}")


def has_variables(value: str) -> bool:
    return VARIABLE.search(value) is not None


class _Providers:
    """The providers a properties file declares (``config.providers`` and its ``.class``/``.param.`` keys)."""

    def __init__(self, props: Mapping[str, str], source: str, environ: Mapping[str, str]) -> None:
        self.source = source
        self.environ = environ
        self.names = [n.strip() for n in props.get(PROVIDERS_KEY, "").split(",") if n.strip()]
        self.classes = {n: props.get(f"{PROVIDERS_KEY}.{n}.class", "").strip() for n in self.names}
        self.params = {
            n: {
                k[len(f"{PROVIDERS_KEY}.{n}.param.") :]: v
                for k, v in props.items()
                if k.startswith(f"{PROVIDERS_KEY}.{n}.param.")
            }
            for n in self.names
        }
        self._files: dict[str, dict[str, str]] = {}

    def lookup(self, key: str, provider: str, path: str, name: str) -> str:
        where = f"{key} in {self.source}: ${{{provider}:{path + ':' if path else ''}{name}}}"
        if provider not in self.names:
            declared = ", ".join(self.names) or "none"
            raise ConfigException(
                f"{where} names config provider {provider!r}, which {PROVIDERS_KEY} does not declare (declared: "
                f"{declared}); add it to {PROVIDERS_KEY} with its {PROVIDERS_KEY}.{provider}.class, or put the value "
                f"in the file"
            )
        cls = self.classes[provider]
        if cls == FILE_PROVIDER:
            return self._from_file(where, provider, path, name)
        if cls == DIRECTORY_PROVIDER:
            return self._from_directory(where, provider, path, name)
        if cls == ENV_PROVIDER:
            return self._from_env(where, provider, path, name)
        if not cls:
            raise ConfigException(f"{where}: {PROVIDERS_KEY}.{provider}.class is not set")
        raise ConfigException(
            f"{where}: config provider {provider!r} is {cls}, which kts cannot run (it resolves Kafka's "
            f"FileConfigProvider, DirectoryConfigProvider and EnvVarConfigProvider); pass the value with --set "
            f"{key.removeprefix('rsm.config.')}=... or an RSM_CONFIG_ variable"
        )

    def _allowed(self, where: str, provider: str, path: str) -> Path:
        if not path:
            raise ConfigException(f"{where}: the {provider!r} provider needs a path")
        target = Path(os.path.normpath(os.path.abspath(path)))
        allowed = [a.strip() for a in self.params[provider].get("allowed.paths", "").split(",") if a.strip()]
        if allowed and not any(target.is_relative_to(os.path.normpath(a)) for a in allowed):
            raise ConfigException(
                f"{where}: {path} is outside {PROVIDERS_KEY}.{provider}.param.allowed.paths ({', '.join(allowed)})"
            )
        return target

    def _from_file(self, where: str, provider: str, path: str, name: str) -> str:
        target = self._allowed(where, provider, path)
        if path not in self._files:
            try:
                with open(target, encoding="utf-8") as f:  # Kafka reads it with a UTF-8 reader
                    self._files[path] = dict(javaproperties.load(f))
            except OSError as e:
                raise ConfigException(f"{where}: cannot read {path} ({e.strerror})") from None
        value = self._files[path].get(name)
        if value is None:
            raise ConfigException(f"{where}: {path} has no key {name!r}")
        return value

    def _from_directory(self, where: str, provider: str, path: str, name: str) -> str:
        target = self._allowed(where, provider, path)
        if not target.is_dir():
            raise ConfigException(f"{where}: {path} is not a directory")
        file = target / name
        if "/" in name or not file.is_file():
            raise ConfigException(f"{where}: {path} has no file {name!r}")
        try:
            return file.read_bytes().decode("utf-8", errors="replace")
        except OSError as e:
            raise ConfigException(f"{where}: cannot read {file} ({e.strerror})") from None

    def _from_env(self, where: str, provider: str, path: str, name: str) -> str:
        if path:
            raise ConfigException(f"{where}: the env provider takes no path; write ${{{provider}:{name}}}")
        pattern = self.params[provider].get("allowlist.pattern")
        if pattern is not None and not re.search(pattern, name):
            raise ConfigException(
                f"{where}: {name} does not match {PROVIDERS_KEY}.{provider}.param.allowlist.pattern ({pattern!r})"
            )
        value = self.environ.get(name)
        if value is None:
            raise ConfigException(f"{where}: environment variable {name} is not set")
        return value


def resolve_variables(
    props: Mapping[str, str],
    source: str,
    keys: Iterable[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``props`` with every ``${provider:[path:]key}`` in the values of ``keys`` (default: all) replaced, once
    (a replacement is not resolved again, as in Kafka). ``source`` names the file in errors."""
    providers = _Providers(props, source, os.environ if environ is None else environ)
    out = dict(props)
    for key in props if keys is None else keys:
        value = props.get(key)
        if value is None or not has_variables(value):
            continue
        out[key] = VARIABLE.sub(lambda m, k=key: providers.lookup(k, m.group(1), m.group(3) or "", m.group(4)), value)
    return out
