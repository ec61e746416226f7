"""tests/conftest.py refuses a run in which a test module holds a session server fixture itself."""

from __future__ import annotations

from types import ModuleType

import emulators
import key_services
from session_servers import SESSION_SERVERS, modules_registering_again


def module(name: str, **names: object) -> ModuleType:
    out = ModuleType(name)
    vars(out).update(names)
    return out


def test_a_module_that_imports_a_server_fixture_is_named() -> None:
    importing = module("test_a", s3_moto_server=emulators.s3_moto_server, free_port=emulators.free_port)
    also = module("test_b", kms=key_services.local_kms)  # imported under another name: registered all the same
    clean = module("test_c", free_port=emulators.free_port, Server=key_services.Server)
    assert modules_registering_again([importing, also, clean]) == ["test_a: s3_moto_server", "test_b: local_kms"]


def test_every_server_fixture_is_a_plugin_fixture() -> None:
    defined = [name for name in SESSION_SERVERS if hasattr(emulators, name) or hasattr(key_services, name)]
    assert defined == list(SESSION_SERVERS)
