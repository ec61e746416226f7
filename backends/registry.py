"""Resolve ``storage.backend.class`` to a backend class.

Accepted forms: our short names, Aiven's Java class names for the same stores (so an Aiven broker config
keeps working), and ``package.module:ClassName`` for a user's own implementation of ``StorageBackend``.
"""

from __future__ import annotations

import importlib
from typing import Any

from backends.configdef import ConfigException

SHORT_NAMES: dict[str, str] = {
    "filesystem": "backends.filesystem:FileSystemBackend",
    "s3": "backends.s3:S3Backend",
    "gcs": "backends.gcs:GcsBackend",
    "azure": "backends.azure:AzureBlobBackend",
}

AIVEN_CLASS_NAMES: dict[str, str] = {
    "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage": "filesystem",
    "io.aiven.kafka.tieredstorage.storage.s3.S3Storage": "s3",
    "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage": "gcs",
    "io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage": "azure",
}

# The methods of ``backends.base.StorageBackend`` (a Protocol: checked by name, as a user's class need not inherit).
_REQUIRED_METHODS = ("configure", "upload", "fetch", "delete", "delete_many", "list", "close")

ALLOWED_DOC = "filesystem, s3, gcs, azure, Aiven's Java class names for these, or module:Class"


def resolve_backend_class(name: str) -> type[Any]:
    """Import and return the backend class named by ``name``; a ``ConfigException`` says what is allowed."""
    spec = name.strip()
    spec = SHORT_NAMES.get(AIVEN_CLASS_NAMES.get(spec, spec), spec)
    if ":" not in spec:
        raise ConfigException(f"Invalid value {name!r} for configuration storage.backend.class: expected {ALLOWED_DOC}")
    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigException(
            f"Invalid value {name!r} for configuration storage.backend.class: cannot import module "
            f"{module_name!r} ({e}); install the extra that provides it, e.g. pip install "
            f"'kafka-tiered-storage[all]'"
        ) from e
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigException(
            f"Invalid value {name!r} for configuration storage.backend.class: module {module_name!r} "
            f"has no class {class_name!r}"
        )
    # Checked before anything is called: 'os:system' must never run, 'builtins:dict' must not half-work.
    if not isinstance(cls, type):
        raise ConfigException(
            f"Invalid value {name!r} for configuration storage.backend.class: {class_name!r} in {module_name!r} "
            f"is a {type(cls).__name__}, not a class implementing StorageBackend"
        )
    missing = [m for m in _REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigException(
            f"Invalid value {name!r} for configuration storage.backend.class: class {class_name!r} does not "
            f"implement StorageBackend (missing {', '.join(missing)})"
        )
    return cls


def create_backend(name: str, storage_configs: dict[str, Any]) -> Any:
    """Instantiate and configure a backend with the ``storage.``-stripped keys."""
    backend = resolve_backend_class(name)()
    backend.configure(storage_configs)
    return backend
