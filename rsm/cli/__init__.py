"""The operator's tools: the ``kts`` command (entry point ``rsm.cli.main:main``), the demo, the generated
configuration docs and the ``.properties`` reader. The top layer: it may import every other package."""
