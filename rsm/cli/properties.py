"""Reading broker-style ``.properties`` files for the CLI, so operators reuse their server.properties."""

from __future__ import annotations

from pathlib import Path

BROKER_PREFIX = "rsm.config."


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse ``key=value`` / ``key: value`` lines (``#``/``!`` comments, ``\\`` continuations)."""
    props: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def rsm_configs(props: dict[str, str]) -> dict[str, str]:
    """The plugin's keys: from a broker file, the ``rsm.config.``-prefixed ones stripped, as Kafka does;
    from a plain plugin file (no prefixed key at all), every key."""
    if any(k.startswith(BROKER_PREFIX) for k in props):
        return {k[len(BROKER_PREFIX) :]: v for k, v in props.items() if k.startswith(BROKER_PREFIX)}
    return dict(props)
