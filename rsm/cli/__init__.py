"""The operator's tools: the ``kts`` command (click and rich; entry point ``rsm.cli.main:main``) and its
commands: keys (generate, rotate; also as keygen and rewrap), browsing (ls, inspect, cat), scrubbing (verify),
gc, config checks, config-docs and metrics-docs, plugin-path, the demo and the broker launcher
(kafka-server-start); the one configuration source they share (``settings``), the ``.properties`` reader and
the local emulators of ``kts demo --backend``. The top layer: it may import every other package."""
