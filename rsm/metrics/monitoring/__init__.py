"""The Grafana dashboard and the Prometheus alert rules, shipped with the package as data beside this module.

- ``grafana-dashboard.json``: import it in Grafana (or provision it); it asks for a Prometheus data source.
- ``prometheus-alerts.yml``: list it under ``rule_files`` in prometheus.yml.
- ``prometheus-alerts.test.yml``: ``promtool test rules`` cases for those rules (series that fire, series
  that must not).
- ``prometheus-alerts-gc.yml`` and its ``prometheus-alerts-gc.test.yml``: the rules on ``kts gc --watch``'s own
  endpoint (drift between the store and the cluster's record, lost segments).

Both read the sidecar's endpoint (``metrics.prometheus.port``); docs/metrics.md says what each series means.
Where an installed package keeps them: ``python -c "import rsm.metrics.monitoring as m; print(m.DIRECTORY)"``.
"""

from __future__ import annotations

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
DASHBOARD = DIRECTORY / "grafana-dashboard.json"
ALERT_RULES = DIRECTORY / "prometheus-alerts.yml"
ALERT_RULE_TESTS = DIRECTORY / "prometheus-alerts.test.yml"
GC_ALERT_RULES = DIRECTORY / "prometheus-alerts-gc.yml"
GC_ALERT_RULE_TESTS = DIRECTORY / "prometheus-alerts-gc.test.yml"
