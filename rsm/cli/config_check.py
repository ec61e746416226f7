"""``kts config check FILE``: is this broker file right for our plugin, and what does an Aiven user change?

Every problem in one run, not the first one: each invalid value (type, range, allowed values) of the core, the
chosen backend, the metrics and the JVM shim; the required keys of the chosen backend; the rules between keys;
key files that do not hold a usable pair; an interpreter (``python.executable``) that does not exist, is too old
or cannot import the package; every key nothing reads, with the closest known key (an error: the plugin's
``configure()`` refuses it too); every key of Aiven's that is honoured differently or not at all
(``rsm.core.aiven_keys``), with what to use instead. ``--connect`` also reaches the store and lists one key. The
check itself creates nothing.

An Aiven user keeps the ``rsm.config.*`` keys we share (same names, same storage back-ends, Aiven's class names
accepted); the plugin's two broker lines change: the class path and the class name.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from backends.configdef import ConfigDef, ConfigException
from backends.registry import resolve_backend_class
from rsm.cli.memory_budget import COPIER_THREADS_KEYS, READER_THREADS_KEY, memory_budget
from rsm.cli.properties import BROKER_PREFIX, read_broker_file
from rsm.cli.settings import StoreUnavailable, backend_short_name, open_store, probe_store, store_label
from rsm.core.aiven_keys import BROKER, PLUGIN, aiven_differences
from rsm.core.config import config_problems
from rsm.core.config_keys import AIVEN_UNBOUNDED
from rsm.core.known_keys import backend_config_def, unknown_keys
from rsm.errors import RemoteStorageException
from rsm.iceberg.config import IcebergConfig, mode_on
from rsm.iceberg.config_keys import CONFIG_DEF as ICEBERG_CONFIG_DEF

SHIM_CLASS = "io.kts.shim.PythonRemoteStorageManager"
AIVEN_CLASS = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
CLASS_NAME = "remote.log.storage.manager.class.name"
CLASS_PATH = "remote.log.storage.manager.class.path"
JAR_NAME = "kafka-tiered-storage-shim.jar"
INTERPRETER_TIMEOUT_S = 60.0

# What the sidecar's bootstrap needs of its interpreter (see SidecarProcess.BOOTSTRAP in the shim).
_INTERPRETER_PROBE = """\
import sys
if sys.path and sys.path[0] in ('', '.'): del sys.path[0]
if sys.version_info < (3, 11):
    print('is Python %d.%d.%d; kafka-tiered-storage needs 3.11+' % tuple(sys.version_info[:3])); sys.exit(3)
try:
    from rsm.jvm import sidecar
    from rsm._version import __version__
except BaseException as e:
    print('cannot import rsm.jvm.sidecar: %s: %s' % (type(e).__name__, e)); sys.exit(3)
if 'iceberg' in sys.argv[1:]:
    try:
        import pyarrow, pyiceberg
    except BaseException as e:
        print('cannot import %s, which Iceberg mode (iceberg.mode.topics.regex) needs: install '
              'kafka-tiered-storage[iceberg] in that environment' % (getattr(e, 'name', None) or e)); sys.exit(3)
print('OK %s' % __version__)
"""


@dataclasses.dataclass
class CheckResult:
    honoured: list[str]
    ignored: list[str]  # one message per key nothing reads
    aiven: list[str]  # one message per Aiven key that is honoured differently or not at all
    changes: list[str]  # broker lines to change, as "key=value"
    errors: list[str]
    notes: list[str]
    warnings: list[str] = dataclasses.field(default_factory=list)
    memory: list[str] = dataclasses.field(default_factory=list)  # the memory budget's lines, when it can be made

    @property
    def ok(self) -> bool:
        return not self.errors


def _plugin_dir() -> str:
    from rsm.jvm.launcher import PLUGIN_JAR

    return str(PLUGIN_JAR.parent)


def _names_our_jar(class_path: str) -> bool:
    """True when an entry is a folder holding the shim jar here, or the installed/packaged jar folder by name
    (the broker's host may not be this one: rsm/_jars of a pip install, or the demo image's link)."""
    for entry in filter(None, (e.strip() for e in class_path.split(":"))):
        folder = entry.removesuffix("*").rstrip("/")
        if (Path(folder) / JAR_NAME).is_file() or folder.endswith(("/rsm/_jars", "/kafka-tiered-storage/jars")):
            return True
    return False


def _without_missing_key_files(configs: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """A key file missing on this host (it must exist on the broker) is noted; a stand-in keeps the other
    encryption rules checked."""
    checked = dict(configs)
    for key, path in configs.items():
        if key.startswith("encryption.key.pairs.") and key.endswith(".key.file") and not Path(str(path)).exists():
            notes.append(f"rsm.config.{key}: {path} does not exist on this host (it must on the broker)")
            del checked[key]
            checked[key[: -len(".file")]] = "(key file not on this host)"
    return checked


def _key_pairs(configs: Mapping[str, Any], errors: list[str]) -> None:
    """Each pair whose files are here must load: valid PEM, a modulus that can wrap a data key, matching halves."""
    from encryption.errors import KeyPairError
    from encryption.keyring import RsaKeyPair

    if str(configs.get("encryption.enabled", "false")).strip().lower() != "true":
        return
    for key_id in filter(None, (i.strip() for i in str(configs.get("encryption.key.pairs", "")).split(","))):
        pems: dict[str, bytes | None] = {}
        for half in ("public", "private"):
            base = f"encryption.key.pairs.{key_id}.{half}.key"
            path = configs.get(base + ".file")
            inline = configs.get(base)
            pems[half] = Path(str(path)).read_bytes() if path and Path(str(path)).is_file() else None
            if pems[half] is None and inline:
                pems[half] = str(inline).encode()
        if pems["public"] is None and pems["private"] is None:
            continue  # nothing here to load (reported above when the keys are missing altogether)
        try:
            RsaKeyPair.from_pem(key_id, pems["public"], pems["private"])
        except (KeyPairError, OSError) as e:
            errors.append(str(e))


def _storage_keys(configs: Mapping[str, Any], cdef: ConfigDef, errors: list[str]) -> dict[str, Any]:
    """The backend's keys with ``storage.`` stripped; each invalid value is reported and left out."""
    problems = cdef.parse_all(configs, "storage.")[1]
    errors += problems.values()
    return {k[len("storage.") :]: v for k, v in configs.items() if k.startswith("storage.") and k not in problems}


def _backend(configs: Mapping[str, Any], errors: list[str], notes: list[str]) -> None:
    """The chosen backend's values, required keys and the rules between its keys, without touching the store."""
    backend_class = str(configs.get("storage.backend.class") or "filesystem")
    try:
        cls = resolve_backend_class(backend_class)
    except ConfigException as e:
        errors.append(str(e))
        return
    cdef = backend_config_def(backend_class)
    short = backend_short_name(backend_class)
    if cdef is None or short is None:
        notes.append(f"storage.backend.class {backend_class}: a backend of your own; it checks its own keys")
        return
    storage = _storage_keys(configs, cdef, errors)
    if short == "filesystem":  # its configure() creates the root, so its one rule is checked here
        root = storage.get("root")
        if not root:
            errors.append(
                "Missing required configuration 'storage.root' for the filesystem backend: set it to the directory "
                "that should hold the tiered objects"
            )
        elif not Path(str(root)).is_dir():
            notes.append(f"rsm.config.storage.root: {root} does not exist on this host (the broker creates it)")
        return
    if short == "gcs" and not storage.get("gcs.credentials.json") and not storage.get("gcs.credentials.path"):
        # Application Default Credentials belong to the broker's host; looking them up here proves nothing.
        storage["gcs.credentials.default"] = "false"
        notes.append("GCS credentials: Application Default Credentials of the broker's host (not checked here)")
    backend = cls()
    try:
        backend.configure(storage)  # builds a client only: no request is sent
    except ConfigException as e:
        errors.append(str(e))
    finally:
        backend.close()


def _other_parts(configs: Mapping[str, Any], errors: list[str]) -> None:
    from rsm.jvm.config import CONFIG_DEF as SHIM_CONFIG_DEF
    from rsm.metrics.config import CONFIG_DEF as METRICS_CONFIG_DEF

    for cdef in (METRICS_CONFIG_DEF, SHIM_CONFIG_DEF):
        errors += cdef.parse_all(configs)[1].values()
    iceberg = list(ICEBERG_CONFIG_DEF.parse_all(configs)[1].values())
    if not iceberg:  # each key is valid: what configure() checks across them (a catalog the mode needs)
        try:
            IcebergConfig.from_map(configs)
        except ConfigException as e:
            iceberg.append(str(e))
    errors += iceberg


def check_interpreter(executable: str, python_path: str = "", iceberg: bool = False) -> str | None:
    """None when ``executable`` can run the sidecar (Python 3.11+ that imports rsm.jvm.sidecar and, with
    ``iceberg``, pyiceberg and pyarrow), else why not."""
    found = shutil.which(executable)
    if found is None:
        where = "does not exist or is not executable" if os.sep in executable else "is not on this host's PATH"
        return f"{executable} {where}"
    env = dict(os.environ)
    if python_path:
        env["PYTHONPATH"] = python_path + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        done = subprocess.run(
            [found, "-c", _INTERPRETER_PROBE, *(["iceberg"] if iceberg else [])],
            capture_output=True,
            text=True,
            timeout=INTERPRETER_TIMEOUT_S,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{found} could not be run: {e}"
    answer = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode == 0 and answer.startswith("OK"):
        return None
    return f"{found} {answer or f'exited with code {done.returncode}: {done.stderr.strip()[-300:]}'}"


def _interpreter(configs: Mapping[str, Any], result: CheckResult) -> None:
    """The sidecar's interpreter: an explicit one must work; an unset one (python3 on the broker's PATH) that does
    not work here becomes a line to add, naming the interpreter this command runs in."""
    if str(configs.get("jvm.transport", "auto")).strip().lower() == "inprocess":
        return
    executable = str(configs.get("python.executable") or "").strip()
    problem = check_interpreter(executable or "python3", str(configs.get("python.path") or ""), mode_on(configs))
    if problem is None:
        return
    if executable:
        result.errors.append(
            f"rsm.config.python.executable: {problem}; the sidecar could not start. Point it at the python of the "
            f"environment kafka-tiered-storage is installed in"
        )
    else:
        result.changes.append(f"{BROKER_PREFIX}python.executable={sys.executable}")
        result.notes.append(f"python.executable is unset, so the sidecar would run python3: {problem}")


def _value_notes(configs: Mapping[str, Any], notes: list[str]) -> None:
    for key in ("fetch.chunk.cache.size", "fetch.indexes.cache.size", "fetch.manifest.cache.size"):
        if str(configs.get(key, "")).strip() == str(AIVEN_UNBOUNDED):
            notes.append(f"rsm.config.{key}=-1: unbounded, as in Aiven's plugin; the cache grows with what is read")


def check_broker_properties(props: dict[str, str]) -> CheckResult:
    """Everything a file can be checked for wherever it is read (see ``check_interpreter_here`` for the rest)."""
    from rsm.jvm.config import CONFIG_DEF as SHIM_CONFIG_DEF

    configs = {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    unknown = {u.key: u for u in unknown_keys(configs, SHIM_CONFIG_DEF)}
    differences = aiven_differences(configs, PLUGIN)
    different = {d.key for d in differences}
    result = CheckResult(
        honoured=sorted(BROKER_PREFIX + k for k in configs if k not in unknown and k not in different),
        ignored=[f"{BROKER_PREFIX}{u.key}: {u.message()}" for u in unknown.values()],
        aiven=[d.message() for d in differences],
        changes=[],
        errors=[u.error() for u in unknown.values()],  # the plugin's configure() refuses them too
        notes=[],
    )
    if props.get("remote.log.storage.system.enable", "false").strip().lower() != "true":
        result.notes.append("remote.log.storage.system.enable is not true: the broker tiers nothing")
    if props.get(CLASS_NAME) != SHIM_CLASS:
        result.changes.append(f"{CLASS_NAME}={SHIM_CLASS}")
        if props.get(CLASS_NAME) == AIVEN_CLASS:
            result.notes.append("this is an Aiven plugin file: the stored data stays readable both ways")
    if not _names_our_jar(props.get(CLASS_PATH, "")):
        result.changes.append(f"{CLASS_PATH}={_plugin_dir()}/*")
    result.notes += [d.message() for d in aiven_differences(props, BROKER) if d.key not in (CLASS_NAME, CLASS_PATH)]
    if not configs:
        result.errors.append("no rsm.config.* keys: the plugin would start without chunk.size")
        return result
    checked = _without_missing_key_files(configs, result.notes)
    result.errors += config_problems(checked)
    _key_pairs(configs, result.errors)
    _backend(configs, result.errors, result.notes)
    _other_parts(configs, result.errors)
    _value_notes(configs, result.notes)
    budget = memory_budget(configs, props)
    if budget is not None:
        result.memory = budget.lines()
        result.warnings += budget.warnings
    return result


def check_interpreter_here(props: dict[str, str], result: CheckResult) -> None:
    """The host-bound part of the check, which ``kts config check`` adds when it runs where the broker does: can
    the configured interpreter (or python3 on this PATH) start the sidecar?"""
    _interpreter({k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}, result)


def connect(props: dict[str, str]) -> str:
    """Reach the store the file names, as the plugin would (without its key pairs), and list one key."""
    configs = {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    with open_store(configs, keys=False) as manager:
        first = probe_store(manager)
        where = f"{store_label(manager.config)} under key.prefix {manager.config['key.prefix']!r}"
    return f"connected to {where}: " + (f"first key {first}" if first else "no object there yet")


def _reach_key_services(props: dict[str, str], result: CheckResult) -> None:
    """--connect: each key pair held by a key service must answer and hold its key (a probe is unwrapped)."""
    from rsm.core.key_services import key_pair_status

    configs = {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    try:
        statuses = key_pair_status(configs)
    except ConfigException:
        return  # already reported by the checks above
    for s in statuses:
        if s.answers is True:
            result.notes.append(f"key pair {s.key_id}: {s.provider} key {s.key} answers and holds the key")
        elif s.answers is False:
            result.errors.append(f"--connect: key pair {s.key_id}: {s.detail}")


@click.group("config")
def config_group() -> None:
    """Configuration checks (every key: kts config-docs, docs/configuration.md)."""


@config_group.command("check")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--connect", "reach", is_flag=True, help="also reach the store and list one key (creates nothing)")
def config_check_command(file: str, reach: bool) -> int:
    """Validate a broker's server.properties and report every problem at once: invalid values, missing keys of the
    backend, the interpreter, keys nothing reads, Aiven keys that differ here, and the lines to change."""
    try:
        props = read_broker_file(file, also=(READER_THREADS_KEY, *COPIER_THREADS_KEYS))
    except ConfigException as e:
        click.echo(f"ERROR: {e}", err=True)
        click.echo("1 error(s)")
        return 1
    result = check_broker_properties(props)
    check_interpreter_here(props, result)
    if reach:
        try:
            result.notes.append(connect(props))
        except (StoreUnavailable, ConfigException, RemoteStorageException) as e:
            result.errors.append(f"--connect: {e.format_message() if isinstance(e, click.ClickException) else e}")
        _reach_key_services(props, result)
    click.echo(f"honoured ({len(result.honoured)}):")
    for key in result.honoured:
        click.echo(f"  {key}")
    click.echo(f"ignored ({len(result.ignored)}):")
    for line in result.ignored:
        click.echo(f"  {line}")
    if result.aiven:
        click.echo(f"different from Aiven's plugin ({len(result.aiven)}):")
        for line in result.aiven:
            click.echo(f"  {line}")
    if result.changes:
        click.echo(f"change these {len(result.changes)} line(s):")
        for line in result.changes:
            click.echo(f"  {line}")
    if result.memory:
        threads = props.get(READER_THREADS_KEY, "unset: Kafka's default")
        click.echo(f"memory of the plugin at {READER_THREADS_KEY}={threads} (docs/operations.md):")
        for line in result.memory:
            click.echo(f"  {line}")
    for note in result.notes:
        click.echo(f"note: {note}")
    for warning in result.warnings:
        click.echo(f"WARNING: {warning}")
    for error in result.errors:
        click.echo(f"ERROR: {error}", err=True)
    click.echo("OK" if result.ok else f"{len(result.errors)} error(s)")
    return 0 if result.ok else 1
