"""The generated tables of docs/configuration.md (``kts config-docs``): every key, and every key of Aiven's plugin
with what it means here.

Each part declares its own keys: the core in ``rsm.core.config_keys``, each backend in its module (imported only if
its SDK extra is installed) and the JVM shim in ``rsm.jvm.config``; Aiven's keys are declared in
``rsm.core.aiven_keys``.
"""

from __future__ import annotations

import importlib

from backends.configdef import ConfigDef, ConfigKey
from rsm.core.aiven_keys import AIVEN_KEYS, SECTIONS, Support, counts
from rsm.core.config_keys import CORE
from rsm.jvm.config import CONFIG_DEF as SHIM_CONFIG_DEF

# Modules that declare keys of their own (owner module, attribute, doc prefix, section title).
EXTERNAL_CONFIG_DEFS: list[tuple[str, str, str, str]] = [
    ("backends.filesystem", "CONFIG_DEF", "storage.", "Filesystem backend"),
    ("backends.s3", "CONFIG_DEF", "storage.", "S3 backend"),
    ("backends.gcs", "CONFIG_DEF", "storage.", "GCS backend"),
    ("backends.azure", "CONFIG_DEF", "storage.", "Azure Blob backend"),
    ("rsm.metrics.config", "CONFIG_DEF", "", "Metrics"),
    ("rsm.iceberg.config_keys", "CONFIG_DEF", "", "Iceberg mode"),
    ("rsm.iceberg.values_config", "VALUES_CONFIG_DEF", "", "Iceberg mode: parsed values"),
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


def declared_key(name: str) -> ConfigKey | None:
    """Our declaration of a key as the plugin receives it (``storage.s3.bucket.name``), or None."""
    for _title, prefix, cdef in all_config_defs():
        if name.startswith(prefix) and name[len(prefix) :] in cdef.keys:
            return cdef.keys[name[len(prefix) :]]
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def aiven_docs_markdown() -> str:
    """One row per key of Aiven's configuration reference: its default, what it is here and our default."""
    n = counts()
    lines = [
        f"{len(AIVEN_KEYS)} keys: {n[Support.HONOURED]} honoured, {n[Support.DIFFERENT]} honoured differently, "
        f"{n[Support.UNSUPPORTED]} not supported.",
    ]
    for section in SECTIONS:
        lines += [
            "",
            f"#### {section}",
            "",
            "| Aiven key | Aiven default | here | default here | what differs, what to use instead |",
            "|---|---|---|---|---|",
        ]
        for key in (k for k in AIVEN_KEYS if k.section == section):
            ours = declared_key(key.name)
            default = "-" if ours is None else f"`{ours.doc_default()}`"
            lines.append(
                f"| `{key.where}{key.name}` | `{key.aiven_default}` | {key.support.value} | {default} | "
                f"{_cell(key.note)} |"
            )
    return "\n".join(lines)
