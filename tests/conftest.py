"""Shared fixtures (real Kafka segments, RSA key pairs on disk, configured managers) and the kinds of tests.

Tests live in folders by kind, and each test is marked with its folder's name: ``unit`` (no server, no JVM),
``integration`` (real storage servers, Spark, Prometheus), ``jvm`` (the shim and Java interop) and ``system``
(real brokers, container stacks, packaging). ``pytest -m "not system"`` is the quick loop. Helper modules live
in tests/support, which is put on ``sys.path`` here."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from Crypto.PublicKey import RSA
from hypothesis import settings

from rsm.kafka.segment_files import SegmentFiles
from rsm.kafka.writer import write_segment

SUPPORT = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT))
# Every Spark the tests start, in this process or a child, reads its JVM options from tests/support/spark-conf.
os.environ["SPARK_CONF_DIR"] = str(SUPPORT / "spark-conf")
KINDS = ("unit", "integration", "jvm", "system")

from session_servers import PLUGINS, modules_registering_again  # noqa: E402

# The servers' session fixtures, registered once: see tests/support/session_servers.py.
pytest_plugins = list(PLUGINS)

# The suite is a gate: the same examples on every run, so a red CI is a change's fault, not a new draw. Searching
# for new examples is a separate job: KTS_FUZZ_RANDOM=1 (and KTS_LONG_FUZZ=1 for many more examples).
settings.register_profile("gate", derandomize=True)
settings.register_profile("search", derandomize=False)
settings.load_profile(
    "search" if os.environ.get("KTS_FUZZ_RANDOM") == "1" or os.environ.get("KTS_LONG_FUZZ") == "1" else "gate"
)


@pytest.fixture(scope="session")
def segment_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., SegmentFiles]:
    """Real segments, written once per distinct argument set and shared by the session (they are read-only)."""
    cache: dict[tuple[Any, ...], SegmentFiles] = {}

    def make(**kwargs: Any) -> SegmentFiles:
        key = tuple(sorted(kwargs.items()))
        if key not in cache:
            cache[key] = write_segment(tmp_path_factory.mktemp("segment"), **kwargs)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def key_pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Two RSA-2048 key pairs as PEM files: id -> (public, private)."""
    out = tmp_path_factory.mktemp("keys")
    pairs = {}
    for key_id in ("kek1", "kek2"):
        key = RSA.generate(2048)
        pub, priv = out / f"{key_id}.pub.pem", out / f"{key_id}.priv.pem"
        pub.write_bytes(key.public_key().export_key())
        priv.write_bytes(key.export_key(pkcs=8))
        pairs[key_id] = (pub, priv)
    return pairs


@pytest.fixture
def make_manager(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Configured filesystem-backed managers over one store directory; all closed at teardown. ``chunk_buffers``:
    a ``ChunkBufferSupply`` the manager gets before ``configure()``, as from a transport."""
    from rsm import RemoteStorageManager

    managers: list[Any] = []

    def make(extra: dict[str, str] | None = None, chunk_buffers: Any = None, **configs: Any) -> Any:
        base = {
            "chunk.size": "65536",
            "storage.backend.class": "filesystem",
            "storage.root": str(tmp_path / "store"),
            "storage.fsync.enabled": "false",
        }
        base.update(
            {k.replace("_", "."): str(v).lower() if isinstance(v, bool) else str(v) for k, v in configs.items()}
        )
        base.update(extra or {})
        m = RemoteStorageManager()
        if chunk_buffers is not None:
            m.use_chunk_buffers(chunk_buffers)
        m.configure(base)
        managers.append(m)
        return m

    yield make
    for m in managers:
        m.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a run in which a server fixture would start more than once a session."""
    modules = {id(m): m for item in session.items if (m := getattr(item, "module", None)) is not None}
    if twice := modules_registering_again(modules.values()):
        raise pytest.UsageError(
            "a test module imports a session server fixture, which starts that server again for the module "
            "(import helpers from emulators.py or key_services.py, never a fixture: pytest finds it by name): "
            + "; ".join(twice)
        )


# A fixture of one of these scopes is shared by the tests of a file: they must run in the same worker.
SHARED_SCOPES = frozenset({"module", "class", "package"})


def _shares_fixtures(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope in SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the kind its folder names.

    In a parallel run (pytest-xdist, ``--dist loadgroup``), the tests of a file that shares a module or class
    fixture (a broker, a built wheel) form one group, which one worker runs; every other test goes to whichever
    worker is free. The costly kinds are handed out first: a broker test left for last would run alone while the
    other workers sit idle."""
    shared: set[Path] = set()
    for item in items:
        kind = Path(str(item.path)).parent.name
        if kind not in KINDS:
            raise pytest.UsageError(f"{item.path}: a test must live in one of tests/{{{','.join(KINDS)}}}")
        item.add_marker(getattr(pytest.mark, kind))
        if _shares_fixtures(item):
            shared.add(item.path)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for item in items:
            if item.path in shared:
                item.add_marker(pytest.mark.xdist_group(str(item.path.relative_to(Path(__file__).parent))))
        costly_first = {kind: rank for rank, kind in enumerate(reversed(KINDS))}
        items.sort(key=lambda item: costly_first[Path(str(item.path)).parent.name])
