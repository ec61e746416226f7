"""The configuration tables of the README, generated from the declarations (``kts config-docs``).

Each part declares its own keys: the core here in ``rsm.core.config``, each backend in its module (imported
only if its SDK extra is installed) and the JVM shim in ``rsm.jvm.config``.
"""

from __future__ import annotations

import importlib

from backends.configdef import ConfigDef
from rsm.core.config import CORE
from rsm.jvm.config import CONFIG_DEF as SHIM_CONFIG_DEF

# Modules that declare keys of their own (owner module, attribute, doc prefix, section title).
EXTERNAL_CONFIG_DEFS: list[tuple[str, str, str, str]] = [
    ("backends.filesystem", "CONFIG_DEF", "storage.", "Filesystem backend"),
    ("backends.s3", "CONFIG_DEF", "storage.", "S3 backend"),
    ("backends.gcs", "CONFIG_DEF", "storage.", "GCS backend"),
    ("backends.azure", "CONFIG_DEF", "storage.", "Azure Blob backend"),
    ("rsm.metrics.config", "CONFIG_DEF", "", "Metrics"),
]


def all_config_defs() -> list[tuple[str, str, ConfigDef]]:
    """(section title, doc prefix, ConfigDef) for every part that is installed."""
    out = [("Core", "", CORE)]
    for module_name, attr, prefix, title in EXTERNAL_CONFIG_DEFS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cdef = getattr(module, attr, None)
        if isinstance(cdef, ConfigDef):
            out.append((title, prefix, cdef))
    out.append(("JVM shim", "", SHIM_CONFIG_DEF))
    return out


def config_docs_markdown() -> str:
    parts = []
    for title, prefix, cdef in all_config_defs():
        parts.append(f"#### {title}\n\n{cdef.markdown_table(prefix)}\n")
    return "\n".join(parts)
