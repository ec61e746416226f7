"""The servers that run once per test session, and the check that they do.

emulators.py and key_services.py are pytest plugins (tests/conftest.py names them in ``pytest_plugins``), so
their fixtures are registered once, for the session. A test module that imports one of these fixtures gets it
registered again, for that module alone, and its "session" server starts again for each such module: test
modules import helpers from those files, never a fixture, and tests/conftest.py refuses a run that breaks this.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import ModuleType

PLUGINS = ("emulators", "key_services")
SESSION_SERVERS = (
    "s3_seaweedfs_server",
    "s3_moto_server",
    "gcs_fake_server",
    "azure_azurite_server",
    "local_kms",
    "openbao",
    "pkcs11_token",
)


def modules_registering_again(modules: Iterable[ModuleType], names: Iterable[str] = SESSION_SERVERS) -> list[str]:
    """``module: fixture`` for each server fixture of the plugins that a module holds itself (imported, under
    any name): pytest would register it again for that module and start its server again."""
    plugins = [sys.modules[name] for name in PLUGINS if name in sys.modules]
    fixtures = {id(getattr(p, n)): n for p in plugins for n in names if hasattr(p, n)}
    return sorted(
        f"{module.__name__}: {fixtures[id(value)]}"
        for module in modules
        for value in vars(module).values()
        if id(value) in fixtures
    )
